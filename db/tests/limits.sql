-- Bounded inputs: a task's data (max_task_data in tenure.setting, 1 MB by default, only
-- the schema owner may change it), elements per call (claim_register, claim_retire,
-- task_enqueue_many, batch_enqueue_many: 10000), names (200 characters), each just
-- below and just above its limit; and no error repeats a huge input: its message,
-- DETAIL and HINT stay a few hundred characters whatever was passed.
BEGIN;
SELECT plan(60);

-- A jsonb object of exactly p_size bytes (pg_column_size): {"s": "xx...x"} is 17 bytes
-- plus the string.
CREATE FUNCTION pg_temp.data_of(p_size integer) RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('s', repeat('x', p_size - 17))
$$;

-- What an error left: SQLSTATE and the lengths of its message, DETAIL and HINT ('' if none).
CREATE FUNCTION pg_temp.error_of(p_sql text) RETURNS TABLE (state text, message integer, detail integer, hint integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_state text;
    v_message text;
    v_detail text;
    v_hint text;
BEGIN
    EXECUTE p_sql;
    RETURN QUERY SELECT ''::text, 0, 0, 0;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT, v_detail = PG_EXCEPTION_DETAIL,
                            v_hint = PG_EXCEPTION_HINT;
    RETURN QUERY SELECT v_state, length(v_message), length(v_detail), length(v_hint);
END
$$;

-- An error that names what was wrong in a few hundred characters.
CREATE FUNCTION pg_temp.bounded_error(p_sql text, p_what text) RETURNS text LANGUAGE sql AS $$
    SELECT ok(e.state = 'TN001' AND e.message <= 500 AND e.detail <= 400 AND e.hint <= 700,
              format('%s: TN001 with a short message, DETAIL and HINT (got %s, %s, %s, %s characters)',
                     p_what, e.state, e.message, e.detail, e.hint))
      FROM pg_temp.error_of(p_sql) e
$$;

-- The setting -----------------------------------------------------------------------
SELECT has_table('tenure', 'setting', 'tenure.setting exists');
SELECT is((SELECT value FROM tenure.setting WHERE name = 'max_task_data'), 1048576::bigint, 'max_task_data is 1 MB by default');
SELECT ok(NOT has_table_privilege('tenure_worker', 'tenure.setting', 'SELECT, UPDATE, INSERT, DELETE'),
          'tenure_worker cannot read or change tenure.setting');
SELECT throws_ok($$UPDATE tenure.setting SET value = 1000 WHERE name = 'max_task_data'$$, '23514', NULL,
                 'max_task_data is at least 64 kB');
SELECT is(pg_column_size(pg_temp.data_of(1048576)), 1048576, 'data_of makes data of the size asked');

-- A task's data ---------------------------------------------------------------------
SELECT lives_ok($$SELECT tenure.task_enqueue('lim', pg_temp.data_of(1048576))$$, 'task_enqueue: data of 1 MB is taken');
SELECT throws_ok($$SELECT tenure.task_enqueue('lim', pg_temp.data_of(1048577))$$, 'TN001',
                 'tenure.task_enqueue: p_data must be at most 1048576 bytes of JSON', 'task_enqueue: 1 MB + 1 byte is refused');
SELECT lives_ok($$SELECT tenure.task_enqueue_many(jsonb_build_array(jsonb_build_object('kind', 'lim', 'data', pg_temp.data_of(1048576))))$$,
                'task_enqueue_many: data of 1 MB is taken');
SELECT throws_ok($$SELECT tenure.task_enqueue_many(jsonb_build_array(jsonb_build_object('kind', 'lim'),
                                                                     jsonb_build_object('kind', 'lim', 'data', pg_temp.data_of(1048577))))$$,
                 'TN001', 'tenure.task_enqueue_many: the data of task 2 must be at most 1048576 bytes of JSON',
                 'task_enqueue_many: 1 MB + 1 byte is refused, naming the task');
SELECT lives_ok($$SELECT tenure.schedule_set('lim', 'lim', p_every => '1 minute', p_data => pg_temp.data_of(1048576))$$,
                'schedule_set: data of 1 MB is taken');
SELECT throws_ok($$SELECT tenure.schedule_set('lim', 'lim', p_every => '1 minute', p_data => pg_temp.data_of(1048577))$$,
                 'TN001', 'tenure.schedule_set: p_data must be at most 1048576 bytes of JSON', 'schedule_set: 1 MB + 1 byte is refused');
SELECT pg_temp.bounded_error($$SELECT tenure.task_enqueue('lim', pg_temp.data_of(10000000))$$, 'task_enqueue, 10 MB of data');

-- Writes under a lease: one task leased by ...0a.
DELETE FROM tenure.task WHERE kind = 'lim';
SELECT tenure.task_enqueue('lim', '{}', p_id => '00000000-0000-0000-0000-0000000000f1');
SELECT is((SELECT count(*) FROM tenure.task_acquire('00000000-0000-0000-0000-00000000000a', '1 hour', 1, ARRAY['lim'])),
          1::bigint, 'the task is leased');
SELECT lives_ok($$SELECT tenure.task_update('00000000-0000-0000-0000-0000000000f1', '00000000-0000-0000-0000-00000000000a', 1,
                                          NULL, pg_temp.data_of(1048576))$$, 'task_update: data of 1 MB is taken');
SELECT throws_ok($$SELECT tenure.task_update('00000000-0000-0000-0000-0000000000f1', '00000000-0000-0000-0000-00000000000a', 1,
                                           NULL, pg_temp.data_of(1048577))$$, 'TN001',
                 'tenure.task_update: p_data must be at most 1048576 bytes of JSON', 'task_update: 1 MB + 1 byte is refused');
SELECT throws_ok($$SELECT tenure.task_release('00000000-0000-0000-0000-0000000000f1', '00000000-0000-0000-0000-00000000000a', 1,
                                            '0', NULL, pg_temp.data_of(1048577))$$, 'TN001',
                 'tenure.task_release: p_data must be at most 1048576 bytes of JSON', 'task_release: 1 MB + 1 byte is refused');
SELECT throws_ok($$SELECT tenure.task_complete('00000000-0000-0000-0000-0000000000f1', '00000000-0000-0000-0000-00000000000a', 1,
                                             'done', pg_temp.data_of(1048577))$$, 'TN001',
                 'tenure.task_complete: p_data must be at most 1048576 bytes of JSON', 'task_complete: 1 MB + 1 byte is refused');
SELECT throws_ok($$SELECT tenure.task_cycle('00000000-0000-0000-0000-00000000000a', '1 hour', 0, NULL,
                      jsonb_build_array(jsonb_build_object('id', '00000000-0000-0000-0000-0000000000f1', 'epoch', 1,
                                                           'outcome', 'complete', 'data', pg_temp.data_of(1048577))))$$,
                 'TN001', 'tenure.task_cycle: the data of outcome 1 must be at most 1048576 bytes of JSON',
                 'task_cycle: 1 MB + 1 byte is refused');
SELECT ok((SELECT status = 'pending' AND data = pg_temp.data_of(1048576) FROM tenure.task
            WHERE id = '00000000-0000-0000-0000-0000000000f1'), 'the refused writes changed nothing');
SELECT lives_ok($$SELECT tenure.task_cycle('00000000-0000-0000-0000-00000000000a', '1 hour', 0, NULL,
                      jsonb_build_array(jsonb_build_object('id', '00000000-0000-0000-0000-0000000000f1', 'epoch', 1,
                                                           'outcome', 'complete', 'data', pg_temp.data_of(1048576))))$$,
                'task_cycle: data of 1 MB is taken');

-- The schema owner raises the limit.
UPDATE tenure.setting SET value = 2097152 WHERE name = 'max_task_data';
SELECT lives_ok($$SELECT tenure.task_enqueue('lim', pg_temp.data_of(2097152))$$, 'with max_task_data 2 MB, 2 MB are taken');
SELECT throws_ok($$SELECT tenure.task_enqueue('lim', pg_temp.data_of(2097153))$$, 'TN001',
                 'tenure.task_enqueue: p_data must be at most 2097152 bytes of JSON', 'with max_task_data 2 MB, 2 MB + 1 byte is refused');
UPDATE tenure.setting SET value = 65536 WHERE name = 'max_task_data';
SELECT throws_ok($$SELECT tenure.task_enqueue('lim', pg_temp.data_of(65537))$$, 'TN001',
                 'tenure.task_enqueue: p_data must be at most 65536 bytes of JSON', 'with max_task_data 64 kB, 64 kB + 1 byte is refused');
UPDATE tenure.setting SET value = 1048576 WHERE name = 'max_task_data';

-- Elements per call -----------------------------------------------------------------
SELECT is(tenure.claim_register('lim', ARRAY(SELECT 'k' || n FROM generate_series(1, 10000) n)), 10000,
          'claim_register: 10000 keys in one call are taken');
SELECT throws_ok($$SELECT tenure.claim_register('lim', ARRAY(SELECT 'k' || n FROM generate_series(1, 10001) n))$$, 'TN001',
                 'tenure.claim_register: p_keys must hold at most 10000 keys', 'claim_register: 10001 keys are refused');
SELECT is(tenure.claim_retire('lim', ARRAY(SELECT 'k' || n FROM generate_series(1, 10000) n)), 10000,
          'claim_retire: 10000 keys in one call are taken');
SELECT throws_ok($$SELECT tenure.claim_retire('lim', ARRAY(SELECT 'k' || n FROM generate_series(1, 10001) n))$$, 'TN001',
                 'tenure.claim_retire: p_keys must hold at most 10000 keys', 'claim_retire: 10001 keys are refused');
SELECT pg_temp.bounded_error($$SELECT tenure.claim_register('lim', ARRAY(SELECT 'k' || n FROM generate_series(1, 1000000) n))$$,
                             'claim_register, a million keys');
SELECT is((SELECT count(*) FROM tenure.task_enqueue_many(
              (SELECT jsonb_agg(jsonb_build_object('kind', 'lim-many')) FROM generate_series(1, 10000)))),
          10000::bigint, 'task_enqueue_many: 10000 tasks in one call are taken');
SELECT throws_ok($$SELECT tenure.task_enqueue_many((SELECT jsonb_agg(jsonb_build_object('kind', 'lim-many')) FROM generate_series(1, 10001)))$$,
                 'TN001', 'tenure.task_enqueue_many: p_tasks must hold at most 10000 tasks', 'task_enqueue_many: 10001 tasks are refused');
SELECT is((SELECT count(*) FROM tenure.batch_enqueue_many('lim',
              (SELECT jsonb_agg(jsonb_build_object('key', 'k' || n % 10, 'payload', '')) FROM generate_series(1, 10000) n))),
          10000::bigint, 'batch_enqueue_many: 10000 batches in one call are taken');
SELECT throws_ok($$SELECT tenure.batch_enqueue_many('lim',
                      (SELECT jsonb_agg(jsonb_build_object('key', 'k', 'payload', '')) FROM generate_series(1, 10001)))$$,
                 'TN001', 'tenure.batch_enqueue_many: p_batches must hold at most 10000 batches',
                 'batch_enqueue_many: 10001 batches are refused');

-- Names: 200 characters are taken, 201 refused ---------------------------------------
SELECT lives_ok(format($$SELECT tenure.task_enqueue(%L)$$, repeat('k', 200)), 'a kind of 200 characters is taken');
SELECT throws_ok(format($$SELECT tenure.task_enqueue(%L)$$, repeat('k', 201)), 'TN001', NULL, 'a kind of 201 characters is refused');
SELECT lives_ok(format($$SELECT tenure.task_enqueue('lim', p_state => %L)$$, repeat('s', 200)), 'a state of 200 characters is taken');
SELECT throws_ok(format($$SELECT tenure.task_enqueue('lim', p_state => %L)$$, repeat('s', 201)), 'TN001', NULL,
                 'a state of 201 characters is refused');
SELECT lives_ok(format($$SELECT tenure.claim_register(%L, ARRAY[%L])$$, repeat('s', 200), repeat('k', 200)),
                'a keyspace and a key of 200 characters are taken');
SELECT throws_ok(format($$SELECT tenure.claim_register(%L, ARRAY['k'])$$, repeat('s', 201)), 'TN001', NULL,
                 'a keyspace of 201 characters is refused');
SELECT throws_ok(format($$SELECT tenure.claim_register('lim', ARRAY[%L])$$, repeat('k', 201)), 'TN001', NULL,
                 'a key of 201 characters is refused');
SELECT lives_ok(format($$SELECT tenure.update_heartbeat('00000000-0000-0000-0000-00000000000a', %L, '3 s')$$, repeat('u', 200)),
                'a service type of 200 characters is taken');
SELECT throws_ok(format($$SELECT tenure.update_heartbeat('00000000-0000-0000-0000-00000000000a', %L, '3 s')$$, repeat('u', 201)),
                 'TN001', NULL, 'a service type of 201 characters is refused');
SELECT lives_ok(format($$SELECT tenure.schedule_set(%L, 'lim', p_every => '1 minute')$$, repeat('n', 200)),
                'a schedule name of 200 characters is taken');
SELECT throws_ok(format($$SELECT tenure.schedule_set(%L, 'lim', p_every => '1 minute')$$, repeat('n', 201)), 'TN001', NULL,
                 'a schedule name of 201 characters is refused');
SELECT lives_ok(format($$SELECT tenure.batch_enqueue(%L, %L, '\x00')$$, repeat('q', 200), repeat('k', 200)),
                'a batch queue and key of 200 characters are taken');
SELECT throws_ok(format($$SELECT tenure.batch_enqueue('lim', %L, '\x00')$$, repeat('k', 201)), 'TN001', NULL,
                 'a batch key of 201 characters is refused');

-- No error repeats a huge input ------------------------------------------------------
SELECT pg_temp.bounded_error(format($$SELECT tenure.task_enqueue(%L)$$, repeat('k', 10000000)), 'task_enqueue, a 10 MB kind');
SELECT pg_temp.bounded_error(format($$SELECT tenure.task_enqueue(%L)$$, repeat(' ', 10000000)), 'task_enqueue, a blank 10 MB kind');
SELECT pg_temp.bounded_error(format($$SELECT tenure.get_primary(%L)$$, repeat('u', 10000000)), 'get_primary, a 10 MB service type');
SELECT pg_temp.bounded_error(format($$SELECT tenure.claim_check(%L, '00000000-0000-0000-0000-00000000000a', 'k', 1)$$, repeat(' ', 10000000)), 'claim_check, a blank 10 MB keyspace');
SELECT pg_temp.bounded_error(format($$SELECT tenure.task_enqueue_many(jsonb_build_array(jsonb_build_object('kind', 'k', 'id', %L)))$$,
                                    repeat('f', 10000000)), 'task_enqueue_many, a 10 MB id (a type error)');
SELECT pg_temp.bounded_error(format($$SELECT tenure.batch_enqueue_many('lim', jsonb_build_array(jsonb_build_object('key', 'k', 'payload', %L)))$$,
                                    repeat('!', 10000000)), 'batch_enqueue_many, a 10 MB payload that is no base64');
SELECT pg_temp.bounded_error(format($$SELECT tenure.task_cycle('00000000-0000-0000-0000-00000000000a', '1 hour', 0, NULL,
                                    jsonb_build_array(jsonb_build_object('id', '00000000-0000-0000-0000-0000000000f1', 'epoch', 1,
                                                                         'outcome', 'extend', %L, 1)))$$, repeat('x', 10000000)),
                             'task_cycle, an outcome with a 10 MB key it does not take');
SELECT pg_temp.bounded_error(format($$SELECT tenure.schedule_set('lim', 'lim', %L)$$, repeat('*', 10000000)),
                             'schedule_set, a 10 MB cron expression');
SELECT pg_temp.bounded_error(format($$SELECT tenure.schedule_set('lim', 'lim', p_every => '1 minute', p_timezone => %L)$$,
                                    repeat('z', 10000000)), 'schedule_set, a 10 MB time zone');
SELECT pg_temp.bounded_error(format($$SELECT tenure.replica_register(1, %L)$$, repeat('r', 10000000)),
                             'replica_register, a 10 MB scope');

-- A task's error and a batch's detail are cut, not refused, to their first 65536
-- characters and their length: a failure is always recorded, and never huge.
SELECT tenure.task_enqueue('keep', '{}', 'new', '0', '00000000-0000-0000-0000-0000000000e1');
SELECT tenure.task_enqueue('keep', '{}', 'new', '0', '00000000-0000-0000-0000-0000000000e2');
SELECT tenure.task_enqueue('keep', '{}', 'new', '0', '00000000-0000-0000-0000-0000000000e3');
SELECT count(*) FROM tenure.task_acquire('00000000-0000-0000-0000-00000000000a', '1 hour', 3, ARRAY['keep']);
SELECT tenure.task_fail('00000000-0000-0000-0000-0000000000e1', '00000000-0000-0000-0000-00000000000a', 1, repeat('e', 10000000));
SELECT ok((SELECT last_error FROM tenure.task WHERE id = '00000000-0000-0000-0000-0000000000e1') =
          repeat('e', 65536) || '... (10000000 characters in all)', 'task_fail: a 10 MB error is kept as its first 64 kB and its length');
SELECT tenure.task_fail('00000000-0000-0000-0000-0000000000e2', '00000000-0000-0000-0000-00000000000a', 1, repeat('e', 65536));
SELECT ok((SELECT last_error FROM tenure.task WHERE id = '00000000-0000-0000-0000-0000000000e2') = repeat('e', 65536),
          'task_fail: an error of 65536 characters is kept whole');
SELECT count(*) FROM tenure.task_cycle('00000000-0000-0000-0000-00000000000a', '1 hour', 0, ARRAY['keep'],
    jsonb_build_array(jsonb_build_object('id', '00000000-0000-0000-0000-0000000000e3', 'epoch', 1, 'outcome', 'fail',
                                         'error', repeat('c', 65537))));
SELECT ok((SELECT last_error FROM tenure.task WHERE id = '00000000-0000-0000-0000-0000000000e3') =
          repeat('c', 65536) || '... (65537 characters in all)', 'task_cycle: a failure''s error is cut the same way');
SELECT count(*) FROM tenure.batch_enqueue('keep', 'k', 'p', p_id => '00000000-0000-0000-0000-0000000000b1');
SELECT count(*) FROM tenure.batch_enqueue('keep', 'k2', 'p', p_id => '00000000-0000-0000-0000-0000000000b2');
SELECT count(*) FROM tenure.claim_take('keep', '00000000-0000-0000-0000-00000000000a', '1 hour');
SELECT count(*) FROM tenure.batch_select('keep', '00000000-0000-0000-0000-00000000000a', 10, 2);
SELECT tenure.batch_resolve('keep', '00000000-0000-0000-0000-00000000000a', '00000000-0000-0000-0000-0000000000b1', 1,
                            'committed', repeat('d', 10000000));
SELECT ok((SELECT detail FROM tenure.batch WHERE id = '00000000-0000-0000-0000-0000000000b1') =
          repeat('d', 65536) || '... (10000000 characters in all)', 'batch_resolve: a 10 MB detail is cut the same way');
SELECT tenure.batch_resolve_many('keep', '00000000-0000-0000-0000-00000000000a',
    jsonb_build_array(jsonb_build_object('id', '00000000-0000-0000-0000-0000000000b2', 'epoch', 1, 'status', 'committed',
                                         'detail', repeat('m', 70000))));
SELECT ok((SELECT detail FROM tenure.batch WHERE id = '00000000-0000-0000-0000-0000000000b2') =
          repeat('m', 65536) || '... (70000 characters in all)', 'batch_resolve_many: a detail is cut the same way');

SELECT * FROM finish();
ROLLBACK;
