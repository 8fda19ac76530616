-- Lease-based tasks: signatures, enqueue, acquire and the holder's writes by time travel,
-- backoff, eject, fence, requeue, purge, bad input and least privilege.
-- Instances: a = ...0a, b = ...0b, c = ...0c. Tasks: ...1xx enqueue, ...2xx acquire,
-- ...3xx holder writes (...3ff never exists), ...5xx server clock.
-- Times: enqueue at E = 2000-06-01, acquire at A = 2000-01-01, holder writes at
-- H = 2000-02-01 (all 00:00:00 UTC): each section's tasks are not due in an earlier
-- section's window, and tasks enqueued by the server clock are due in none of them.
BEGIN;
SELECT plan(242);

-- Runs _task_acquire and undoes it: which tasks would be leased, with no side effect.
CREATE FUNCTION pg_temp.acquire_dry_run(p_owner uuid, p_lease interval, p_kinds text[], p_now timestamptz)
RETURNS uuid[]
LANGUAGE plpgsql
AS $$
DECLARE
    v_ids uuid[];
BEGIN
    BEGIN
        v_ids := ARRAY(SELECT id FROM tenure._task_acquire(p_owner, p_lease, 10000, p_kinds, p_now) ORDER BY id);
        RAISE EXCEPTION 'dry run';
    EXCEPTION WHEN raise_exception THEN
        RETURN v_ids;
    END;
END
$$;

-- The table ----------------------------------------------------------------------
-- Vacuumed with its indexes, after 1% of its rows changed (task_vacuum): the dead entries
-- of leased tasks at the front of the due indexes are read by every lookup until then.
SELECT is((SELECT c.reloptions FROM pg_class c WHERE c.oid = 'tenure.task'::regclass),
    ARRAY['vacuum_index_cleanup=on', 'autovacuum_vacuum_scale_factor=0.01'],
    'tenure.task: VACUUM cleans its indexes, autovacuum runs after 1% of its rows changed');

-- Signatures -------------------------------------------------------------------
SELECT has_function('tenure', 'task_enqueue', ARRAY['text', 'jsonb', 'text', 'interval', 'uuid', 'text', 'integer', 'integer', 'text', 'uuid[]']);
SELECT function_returns('tenure', 'task_enqueue', ARRAY['text', 'jsonb', 'text', 'interval', 'uuid', 'text', 'integer', 'integer', 'text', 'uuid[]'],
    'setof tenure.task_enqueued');
SELECT has_function('tenure', 'task_enqueue_many', ARRAY['jsonb']);
SELECT function_returns('tenure', 'task_enqueue_many', ARRAY['jsonb'], 'setof tenure.task_enqueued');
SELECT has_function('tenure', 'task_acquire', ARRAY['uuid', 'interval', 'integer', 'text[]']);
SELECT function_returns('tenure', 'task_acquire', ARRAY['uuid', 'interval', 'integer', 'text[]'], 'setof tenure.task_lease');
SELECT has_function('tenure', 'task_extend', ARRAY['uuid', 'uuid', 'bigint', 'interval']);
SELECT function_returns('tenure', 'task_extend', ARRAY['uuid', 'uuid', 'bigint', 'interval'], 'timestamp with time zone');
SELECT has_function('tenure', 'task_update', ARRAY['uuid', 'uuid', 'bigint', 'text', 'jsonb', 'interval']);
SELECT function_returns('tenure', 'task_update', ARRAY['uuid', 'uuid', 'bigint', 'text', 'jsonb', 'interval'],
    'timestamp with time zone');
SELECT has_function('tenure', 'task_release', ARRAY['uuid', 'uuid', 'bigint', 'interval', 'text', 'jsonb']);
SELECT function_returns('tenure', 'task_release', ARRAY['uuid', 'uuid', 'bigint', 'interval', 'text', 'jsonb'],
    'timestamp with time zone');
SELECT has_function('tenure', 'task_complete', ARRAY['uuid', 'uuid', 'bigint', 'text', 'jsonb']);
SELECT function_returns('tenure', 'task_complete', ARRAY['uuid', 'uuid', 'bigint', 'text', 'jsonb'], 'timestamp with time zone');
SELECT has_function('tenure', 'task_fail', ARRAY['uuid', 'uuid', 'bigint', 'text', 'interval']);
SELECT function_returns('tenure', 'task_fail', ARRAY['uuid', 'uuid', 'bigint', 'text', 'interval'], 'timestamp with time zone');
SELECT has_function('tenure', 'task_fence', ARRAY['uuid', 'uuid', 'bigint']);
SELECT function_returns('tenure', 'task_fence', ARRAY['uuid', 'uuid', 'bigint'], 'void');
SELECT has_function('tenure', 'task_eject', ARRAY['uuid', 'uuid', 'interval']);
SELECT function_returns('tenure', 'task_eject', ARRAY['uuid', 'uuid', 'interval'], 'setof tenure.task_lease');
SELECT has_function('tenure', 'task_requeue', ARRAY['uuid', 'interval']);
SELECT function_returns('tenure', 'task_requeue', ARRAY['uuid', 'interval'], 'boolean');
SELECT has_function('tenure', 'task_purge', ARRAY['interval', 'boolean']);
SELECT function_returns('tenure', 'task_purge', ARRAY['interval', 'boolean'], 'bigint');
SELECT has_table('tenure', 'task', 'table task exists');
SELECT has_table('tenure', 'task_lease_log', 'table task_lease_log exists');
SELECT has_view('tenure', 'tasks', 'operator view tasks exists');
SELECT has_view('tenure', 'task_status', 'operator view task_status exists');
SELECT columns_are('tenure', 'tasks', ARRAY['id', 'kind', 'state', 'status', 'owner', 'epoch', 'data', 'attempts',
    'max_attempts', 'last_error', 'idempotency_key', 'created_at', 'last_change', 'last_action', 'next_action',
    'leased_at', 'finished_at', 'leased', 'due', 'priority', 'limit_key', 'after_left']);

-- Enqueue (E = 2000-06-01 00:00:00) ----------------------------------------------------
SELECT results_eq(
    $$SELECT id, kind, created FROM tenure.task_enqueue('defaults', p_id => '00000000-0000-0000-0000-000000000101')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000101'::uuid, 'defaults', true)$$,
    'task_enqueue creates a task and says so');
SELECT results_eq(
    $$SELECT state, status, data, owner, epoch, attempts, max_attempts, last_error, idempotency_key, leased_at,
             finished_at, next_action = created_at, created_at BETWEEN now() AND clock_timestamp()
        FROM tenure.task WHERE id = '00000000-0000-0000-0000-000000000101'$$,
    $$VALUES ('new', 'pending', '{}'::jsonb, NULL::uuid, 0::bigint, 0, 5, NULL::text, NULL::text, NULL::timestamptz,
              NULL::timestamptz, true, true)$$,
    'defaults: state new, data {}, pending, unowned, epoch 0, 5 attempts, due now by the server clock');
SELECT results_eq(
    $$SELECT * FROM tenure._task_enqueue('later', '{"x": 1}', 'fresh', '90 s', '00000000-0000-0000-0000-000000000102',
                                         NULL, 3, 0, NULL, NULL, '2000-06-01 00:00:00+00')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000102'::uuid, 'later', true, '2000-06-01 00:01:30+00'::timestamptz)$$,
    'a task enqueued with a delay is due after the delay');
SELECT results_eq(
    $$SELECT state, data, max_attempts, created_at, last_change, last_action, next_action
        FROM tenure.task WHERE id = '00000000-0000-0000-0000-000000000102'$$,
    $$VALUES ('fresh', '{"x": 1}'::jsonb, 3, '2000-06-01 00:00:00+00'::timestamptz, '2000-06-01 00:00:00+00'::timestamptz,
              '2000-06-01 00:00:00+00'::timestamptz, '2000-06-01 00:01:30+00'::timestamptz)$$,
    'the task keeps the given state, data and max_attempts, created at the given time');
SELECT results_eq(
    $$SELECT * FROM tenure._task_enqueue('other', '{"x": 2}', 'new', '0', '00000000-0000-0000-0000-000000000102',
                                         NULL, 5, 0, NULL, NULL, '2000-06-01 00:00:01+00')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000102'::uuid, 'later', false, '2000-06-01 00:01:30+00'::timestamptz)$$,
    'enqueueing a caller-given id again creates nothing and returns the existing task with created = false');
SELECT results_eq(
    $$SELECT count(*), min(kind), min(state), min(data::text) FROM tenure.task WHERE id = '00000000-0000-0000-0000-000000000102'$$,
    $$VALUES (1::bigint, 'later', 'fresh', '{"x": 1}')$$,
    'one row for that id, unchanged');
SELECT results_eq(
    $$SELECT kind, created, next_action FROM tenure._task_enqueue('keyed', '{"n": 1}', 'new', '0', NULL, 'order-42', 5, 0, NULL, NULL,
                                                               '2000-06-01 00:00:00+00')$$,
    $$VALUES ('keyed', true, '2000-06-01 00:00:00+00'::timestamptz)$$,
    'an enqueue with an idempotency key creates the task');
SELECT results_eq(
    $$SELECT id, created FROM tenure._task_enqueue('keyed', '{"n": 2}', 'new', '0', '00000000-0000-0000-0000-000000000103',
                                                 'order-42', 5, 0, NULL, NULL, '2000-06-01 00:00:01+00')$$,
    $$SELECT id, false FROM tenure.task WHERE idempotency_key = 'order-42'$$,
    'the same key again returns the existing task with created = false, whatever id is given');
SELECT results_eq(
    $$SELECT count(*), min(data::text) FROM tenure.task
       WHERE idempotency_key = 'order-42' OR id = '00000000-0000-0000-0000-000000000103'$$,
    $$VALUES (1::bigint, '{"n": 1}')$$,
    'one task for the key, its data unchanged');
SELECT results_eq(
    $$SELECT * FROM tenure._task_enqueue_many('[
        {"kind": "batch", "id": "00000000-0000-0000-0000-000000000113", "data": {"i": 1}},
        {"kind": "batch", "id": "00000000-0000-0000-0000-000000000111", "delay": "10 seconds"},
        {"kind": "ignored", "id": "00000000-0000-0000-0000-000000000102"},
        {"kind": "batch2", "id": "00000000-0000-0000-0000-000000000112", "state": "s", "max_attempts": 2}
      ]', '2000-06-01 00:00:00+00', 'task_enqueue_many')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000113'::uuid, 'batch', true, '2000-06-01 00:00:00+00'::timestamptz),
             ('00000000-0000-0000-0000-000000000111', 'batch', true, '2000-06-01 00:00:10+00'),
             ('00000000-0000-0000-0000-000000000102', 'later', false, '2000-06-01 00:01:30+00'),
             ('00000000-0000-0000-0000-000000000112', 'batch2', true, '2000-06-01 00:00:00+00')$$,
    'enqueue_many returns one row per input task in input order, created = false for an existing id');
SELECT results_eq(
    $$SELECT id, kind, state, data, max_attempts, next_action FROM tenure.task
       WHERE id IN ('00000000-0000-0000-0000-000000000111', '00000000-0000-0000-0000-000000000112',
                    '00000000-0000-0000-0000-000000000113') ORDER BY id$$,
    $$VALUES ('00000000-0000-0000-0000-000000000111'::uuid, 'batch', 'new', '{}'::jsonb, 5, '2000-06-01 00:00:10+00'::timestamptz),
             ('00000000-0000-0000-0000-000000000112', 'batch2', 's', '{}', 2, '2000-06-01 00:00:00+00'),
             ('00000000-0000-0000-0000-000000000113', 'batch', 'new', '{"i": 1}', 5, '2000-06-01 00:00:00+00')$$,
    'enqueue_many stores each task with its own keys and the defaults for the others');
SELECT results_eq(
    $$SELECT * FROM tenure._task_enqueue_many('[
        {"kind": "dup", "id": "00000000-0000-0000-0000-000000000121", "idempotency_key": "k-dup"},
        {"kind": "dup", "id": "00000000-0000-0000-0000-000000000122", "idempotency_key": "k-dup"}
      ]', '2000-06-01 00:00:00+00', 'task_enqueue_many')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000121'::uuid, 'dup', true, '2000-06-01 00:00:00+00'::timestamptz),
             ('00000000-0000-0000-0000-000000000121', 'dup', false, '2000-06-01 00:00:00+00')$$,
    'a key twice in one call: the first creates the task, the second names it with created = false');
SELECT is((SELECT count(*) FROM tenure.task WHERE kind = 'dup'), 1::bigint, 'a key twice in one call creates one task');
SELECT results_eq(
    $$SELECT * FROM tenure._task_enqueue_many('[
        {"kind": "dupid", "id": "00000000-0000-0000-0000-000000000123"},
        {"kind": "dupid", "id": "00000000-0000-0000-0000-000000000123"}
      ]', '2000-06-01 00:00:00+00', 'task_enqueue_many')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000123'::uuid, 'dupid', true, '2000-06-01 00:00:00+00'::timestamptz),
             ('00000000-0000-0000-0000-000000000123', 'dupid', false, '2000-06-01 00:00:00+00')$$,
    'an id twice in one call: only the first row says created = true');
SELECT is((SELECT count(*) FROM tenure.task WHERE kind = 'dupid'), 1::bigint, 'an id twice in one call creates one task');
SELECT results_eq(
    $$SELECT id, kind, created FROM tenure.task_enqueue_many('[{"kind": "pub", "id": "00000000-0000-0000-0000-000000000131"}]')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000131'::uuid, 'pub', true)$$,
    'the public task_enqueue_many enqueues');

-- Acquire (A = 2000-01-01 00:00:00) -----------------------------------------------------
DO $$
BEGIN
    PERFORM tenure._task_enqueue('acq', '{"n": 201}', 'new', '0', '00000000-0000-0000-0000-000000000201', NULL, 5, 0, NULL, NULL, '1999-12-31 23:59:50+00');
    PERFORM tenure._task_enqueue('acq', '{"n": 202}', 'new', '0', '00000000-0000-0000-0000-000000000202', NULL, 5, 0, NULL, NULL, '1999-12-31 23:59:55+00');
    PERFORM tenure._task_enqueue('acq', '{"n": 203}', 'new', '0', '00000000-0000-0000-0000-000000000203', NULL, 5, 0, NULL, NULL, '2000-01-01 00:00:00+00');
    PERFORM tenure._task_enqueue('acq', '{"n": 204}', 'new', '5 s', '00000000-0000-0000-0000-000000000204', NULL, 5, 0, NULL, NULL, '2000-01-01 00:00:00+00');
    PERFORM tenure._task_enqueue('other', '{"n": 205}', 'new', '0', '00000000-0000-0000-0000-000000000205', NULL, 5, 0, NULL, NULL, '1999-12-31 23:59:40+00');
END
$$;
SELECT results_eq(
    $$SELECT * FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000a', '30 s', 1, ARRAY['acq'], '2000-01-01 00:00:00+00')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000201'::uuid, 'acq', 'new', '{"n": 201}'::jsonb, 1::bigint, 0,
              '2000-01-01 00:00:30+00'::timestamptz)$$,
    'acquire leases the oldest due task of the kinds asked, no more than p_limit, in epoch 1 until now + lease');
SELECT results_eq(
    $$SELECT id, epoch, lease_until FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000b', '30 s', 10, ARRAY['acq'],
                                                            '2000-01-01 00:00:00+00') ORDER BY id$$,
    $$VALUES ('00000000-0000-0000-0000-000000000202'::uuid, 1::bigint, '2000-01-01 00:00:30+00'::timestamptz),
             ('00000000-0000-0000-0000-000000000203', 1, '2000-01-01 00:00:30+00')$$,
    'acquire takes only due tasks: not the leased one, not the one due later');
SELECT is_empty(
    $$SELECT * FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000c', '30 s', 10, ARRAY['acq'], '2000-01-01 00:00:04.999999+00')$$,
    'a task 1 microsecond before it is due is not acquired');
SELECT results_eq(
    $$SELECT id, epoch, lease_until FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000c', '30 s', 10, ARRAY['acq'],
                                                            '2000-01-01 00:00:05+00')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000204'::uuid, 1::bigint, '2000-01-01 00:00:35+00'::timestamptz)$$,
    'a task is acquired at exactly its due time');
SELECT is_empty(
    $$SELECT * FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000c', '30 s', 10, ARRAY['nope', 'none'], '2000-01-01 00:00:05+00')$$,
    'acquire skips tasks of other kinds');
SELECT results_eq(
    $$SELECT id, kind FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000c', '30 s', 10, NULL, '2000-01-01 00:00:05+00')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000205'::uuid, 'other')$$,
    'p_kinds NULL acquires any kind');
SELECT results_eq(
    $$SELECT id, owner, epoch, attempts, leased_at, next_action FROM tenure.task WHERE kind IN ('acq', 'other') ORDER BY id$$,
    $$VALUES ('00000000-0000-0000-0000-000000000201'::uuid, '00000000-0000-0000-0000-00000000000a'::uuid, 1::bigint, 0,
              '2000-01-01 00:00:00+00'::timestamptz, '2000-01-01 00:00:30+00'::timestamptz),
             ('00000000-0000-0000-0000-000000000202', '00000000-0000-0000-0000-00000000000b', 1, 0, '2000-01-01 00:00:00+00', '2000-01-01 00:00:30+00'),
             ('00000000-0000-0000-0000-000000000203', '00000000-0000-0000-0000-00000000000b', 1, 0, '2000-01-01 00:00:00+00', '2000-01-01 00:00:30+00'),
             ('00000000-0000-0000-0000-000000000204', '00000000-0000-0000-0000-00000000000c', 1, 0, '2000-01-01 00:00:05+00', '2000-01-01 00:00:35+00'),
             ('00000000-0000-0000-0000-000000000205', '00000000-0000-0000-0000-00000000000c', 1, 0, '2000-01-01 00:00:05+00', '2000-01-01 00:00:35+00')$$,
    'each leased task records its owner, epoch, when the lease began and when it ends');
SELECT is_empty(
    $$SELECT * FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000c', '30 s', 10, ARRAY['acq'], '2000-01-01 00:00:29+00')$$,
    'leased tasks are not acquired again while their leases run');
SELECT is(
    pg_temp.acquire_dry_run('00000000-0000-0000-0000-00000000000c', '30 s', ARRAY['acq'], '2000-01-01 00:00:30+00'),
    '{}'::uuid[],
    'at exactly the end of a lease, when the holder may still write, the task is not acquired again');
SELECT results_eq(
    $$SELECT id, epoch, attempts, lease_until FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000c', '30 s', 10,
                                                                      ARRAY['acq'], '2000-01-01 00:00:30.000001+00') ORDER BY id$$,
    $$VALUES ('00000000-0000-0000-0000-000000000201'::uuid, 2::bigint, 1, '2000-01-01 00:01:00.000001+00'::timestamptz),
             ('00000000-0000-0000-0000-000000000202', 2, 1, '2000-01-01 00:01:00.000001+00'),
             ('00000000-0000-0000-0000-000000000203', 2, 1, '2000-01-01 00:01:00.000001+00')$$,
    '1 microsecond after a lease ran out the task is acquired again: next epoch, the lost lease counts as an attempt');
SELECT matches(
    (SELECT last_error FROM tenure.task WHERE id = '00000000-0000-0000-0000-000000000201'),
    '^lease of 00000000-0000-0000-0000-00000000000a in epoch 1 ran out',
    'last_error says whose lease ran out in which epoch');
SELECT results_eq(
    $$SELECT epoch, owner, leased_at, how FROM tenure.task_lease_log
       WHERE task_id = '00000000-0000-0000-0000-000000000201' ORDER BY epoch$$,
    $$VALUES (1::bigint, '00000000-0000-0000-0000-00000000000a'::uuid, '2000-01-01 00:00:00+00'::timestamptz, 'acquired'),
             (2, '00000000-0000-0000-0000-00000000000c', '2000-01-01 00:00:30.000001+00', 'acquired')$$,
    'the lease log has one row per epoch: who, from when, how');
SELECT results_eq(
    $$SELECT t.id, t.epoch, (SELECT array_agg(l.epoch ORDER BY l.epoch) FROM tenure.task_lease_log l WHERE l.task_id = t.id)
        FROM tenure.task t WHERE t.kind IN ('acq', 'other') ORDER BY t.id$$,
    $$VALUES ('00000000-0000-0000-0000-000000000201'::uuid, 2::bigint, '{1,2}'::bigint[]),
             ('00000000-0000-0000-0000-000000000202', 2, '{1,2}'),
             ('00000000-0000-0000-0000-000000000203', 2, '{1,2}'),
             ('00000000-0000-0000-0000-000000000204', 1, '{1}'),
             ('00000000-0000-0000-0000-000000000205', 1, '{1}')$$,
    'every epoch of every task is in the lease log, once');

-- Past max_attempts an expired task dies instead of being leased.
DO $$
BEGIN
    PERFORM tenure._task_enqueue('fragile', '{}', 'new', '0', '00000000-0000-0000-0000-000000000207', NULL, 2, 0, NULL, NULL, '2000-01-01 00:00:00+00');
    PERFORM tenure._task_enqueue('fragile', '{}', 'new', '20.000002 s', '00000000-0000-0000-0000-000000000208', NULL, 5, 0, NULL, NULL, '2000-01-01 00:00:00+00');
END
$$;
SELECT results_eq(
    $$SELECT id, epoch, attempts FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000a', '10 s', 1, ARRAY['fragile'],
                                                         '2000-01-01 00:00:00+00')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000207'::uuid, 1::bigint, 0)$$,
    'a task with max_attempts 2 is leased a first time');
SELECT results_eq(
    $$SELECT id, epoch, attempts FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000b', '10 s', 1, ARRAY['fragile'],
                                                         '2000-01-01 00:00:10.000001+00')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000207'::uuid, 2::bigint, 1)$$,
    'after its first lease ran out it is leased again with 1 attempt used');
SELECT results_eq(
    $$SELECT id, epoch, attempts FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000c', '10 s', 1, ARRAY['fragile'],
                                                         '2000-01-01 00:00:20.000002+00')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000208'::uuid, 1::bigint, 0)$$,
    'a task that dies in acquire does not use up p_limit: the next due task is leased');
SELECT results_eq(
    $$SELECT status, owner, epoch, attempts, next_action, leased_at, finished_at FROM tenure.task
       WHERE id = '00000000-0000-0000-0000-000000000207'$$,
    $$VALUES ('dead', NULL::uuid, 2::bigint, 2, NULL::timestamptz, NULL::timestamptz, '2000-01-01 00:00:20.000002+00'::timestamptz)$$,
    'after its second lease ran out it is dead, not leased: no owner, not due, finished');
SELECT matches(
    (SELECT last_error FROM tenure.task WHERE id = '00000000-0000-0000-0000-000000000207'),
    '^lease of 00000000-0000-0000-0000-00000000000b in epoch 2 ran out',
    'the dead task''s last_error says the last lease ran out');
SELECT results_eq(
    $$SELECT array_agg(epoch ORDER BY epoch) FROM tenure.task_lease_log WHERE task_id = '00000000-0000-0000-0000-000000000207'$$,
    $$VALUES ('{1,2}'::bigint[])$$,
    'dying grants no lease: the lease log has only the two epochs that were leased');

-- Holder writes (H = 2000-02-01 00:00:00) -------------------------------------------------
DO $$
BEGIN
    PERFORM tenure._task_enqueue('hold', '{"h": 1}', 'new', '0', '00000000-0000-0000-0000-000000000301', NULL, 5, 0, NULL, NULL, '2000-02-01 00:00:00+00');
    PERFORM tenure._task_enqueue('upd', '{"k": 1}', 'step1', '0', '00000000-0000-0000-0000-000000000302', NULL, 5, 0, NULL, NULL, '2000-02-01 00:00:00+00');
    PERFORM tenure._task_enqueue('cmp', '{}', 'new', '0', '00000000-0000-0000-0000-000000000303', NULL, 5, 0, NULL, NULL, '2000-02-01 00:00:00+00');
    PERFORM tenure._task_enqueue('rel', '{}', 'new', '0', '00000000-0000-0000-0000-000000000304', NULL, 5, 0, NULL, NULL, '2000-02-01 00:00:00+00');
    PERFORM tenure._task_enqueue('flaky', '{}', 'new', '0', '00000000-0000-0000-0000-000000000305', NULL, 5, 0, NULL, NULL, '2000-02-01 00:00:00+00');
    PERFORM tenure._task_enqueue('ej', '{"e": 1}', 'new', '0', '00000000-0000-0000-0000-000000000306', NULL, 5, 0, NULL, NULL, '2000-02-01 00:00:00+00');
    PERFORM tenure._task_enqueue('fen', '{}', 'new', '0', '00000000-0000-0000-0000-000000000307', NULL, 5, 0, NULL, NULL, '2000-02-01 00:00:00+00');
END
$$;
SELECT results_eq(
    $$SELECT id, epoch FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000b', '30 s', 1, ARRAY['hold'], '2000-02-01 00:00:00+00')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000301'::uuid, 1::bigint)$$,
    'b leases task 301 in epoch 1');
SELECT is(
    tenure._task_release('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000b', 1, '0', NULL, NULL,
                         '2000-02-01 00:00:01+00'),
    '2000-02-01 00:00:01+00'::timestamptz,
    'release without delay returns now: the task is due at once');
SELECT results_eq(
    $$SELECT owner, leased_at, status, epoch, attempts, next_action, last_change, last_action FROM tenure.task
       WHERE id = '00000000-0000-0000-0000-000000000301'$$,
    $$VALUES (NULL::uuid, NULL::timestamptz, 'pending', 1::bigint, 0, '2000-02-01 00:00:01+00'::timestamptz,
              '2000-02-01 00:00:00+00'::timestamptz, '2000-02-01 00:00:01+00'::timestamptz)$$,
    'a released task has no owner, keeps its epoch and attempts; last_change is untouched without new state or data');
SELECT results_eq(
    $$SELECT id, epoch, attempts, lease_until FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000a', '30 s', 1, ARRAY['hold'],
                                                                      '2000-02-01 00:00:02+00')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000301'::uuid, 2::bigint, 0, '2000-02-01 00:00:32+00'::timestamptz)$$,
    'a released task is leased again in the next epoch without counting an attempt');

-- Refused: wrong owner (b, 2), stale epoch (a, 1), the released lease (b, 1); unknown task.
CREATE TEMP TABLE hold_before AS SELECT * FROM tenure.task WHERE id = '00000000-0000-0000-0000-000000000301';
SELECT throws_ok(
    $$SELECT tenure._task_extend('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000b', 2, '30 s', '2000-02-01 00:00:03+00')$$,
    'TN102', 'tenure.task_extend: instance 00000000-0000-0000-0000-00000000000b no longer holds task 00000000-0000-0000-0000-000000000301 in epoch 2',
    'extend by a wrong owner is refused with lease_lost (TN102)');
SELECT throws_ok(
    $$SELECT tenure._task_extend('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 1, '30 s', '2000-02-01 00:00:03+00')$$,
    'TN102', NULL, 'extend with a stale epoch is refused');
SELECT throws_ok(
    $$SELECT tenure._task_extend('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000b', 1, '30 s', '2000-02-01 00:00:03+00')$$,
    'TN102', NULL, 'extend of a lease its holder released is refused');
SELECT throws_ok(
    $$SELECT tenure._task_update('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000b', 2, 'x', NULL, NULL, '2000-02-01 00:00:03+00')$$,
    'TN102', NULL, 'update by a wrong owner is refused');
SELECT throws_ok(
    $$SELECT tenure._task_update('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 1, 'x', NULL, NULL, '2000-02-01 00:00:03+00')$$,
    'TN102', NULL, 'update with a stale epoch is refused');
SELECT throws_ok(
    $$SELECT tenure._task_release('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000b', 2, '0', NULL, NULL, '2000-02-01 00:00:03+00')$$,
    'TN102', NULL, 'release by a wrong owner is refused');
SELECT throws_ok(
    $$SELECT tenure._task_release('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 1, '0', NULL, NULL, '2000-02-01 00:00:03+00')$$,
    'TN102', NULL, 'release with a stale epoch is refused');
SELECT throws_ok(
    $$SELECT tenure._task_complete('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000b', 2, 'done', NULL, '2000-02-01 00:00:03+00')$$,
    'TN102', NULL, 'complete by a wrong owner is refused');
SELECT throws_ok(
    $$SELECT tenure._task_complete('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 1, 'done', NULL, '2000-02-01 00:00:03+00')$$,
    'TN102', NULL, 'complete with a stale epoch is refused');
SELECT throws_ok(
    $$SELECT tenure._task_fail('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000b', 2, 'boom', NULL, '2000-02-01 00:00:03+00')$$,
    'TN102', NULL, 'fail by a wrong owner is refused');
SELECT throws_ok(
    $$SELECT tenure._task_fail('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 1, 'boom', NULL, '2000-02-01 00:00:03+00')$$,
    'TN102', NULL, 'fail with a stale epoch is refused');
SELECT throws_ok(
    $$SELECT tenure._task_fence('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000b', 2, '2000-02-01 00:00:03+00')$$,
    'TN102', NULL, 'fence for a wrong owner raises');
SELECT throws_ok(
    $$SELECT tenure._task_fence('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 1, '2000-02-01 00:00:03+00')$$,
    'TN102', NULL, 'fence with a stale epoch raises');
SELECT throws_ok(
    $$SELECT tenure._task_extend('00000000-0000-0000-0000-0000000003ff', '00000000-0000-0000-0000-00000000000a', 2, '30 s', '2000-02-01 00:00:03+00')$$,
    'TN201', 'tenure.task_extend: no task 00000000-0000-0000-0000-0000000003ff', 'extend of an unknown task raises TN201');
SELECT throws_ok(
    $$SELECT tenure._task_update('00000000-0000-0000-0000-0000000003ff', '00000000-0000-0000-0000-00000000000a', 2, 'x', NULL, NULL, '2000-02-01 00:00:03+00')$$,
    'TN201', NULL, 'update of an unknown task raises TN201');
SELECT throws_ok(
    $$SELECT tenure._task_release('00000000-0000-0000-0000-0000000003ff', '00000000-0000-0000-0000-00000000000a', 2, '0', NULL, NULL, '2000-02-01 00:00:03+00')$$,
    'TN201', NULL, 'release of an unknown task raises TN201');
SELECT throws_ok(
    $$SELECT tenure._task_complete('00000000-0000-0000-0000-0000000003ff', '00000000-0000-0000-0000-00000000000a', 2, 'done', NULL, '2000-02-01 00:00:03+00')$$,
    'TN201', NULL, 'complete of an unknown task raises TN201');
SELECT throws_ok(
    $$SELECT tenure._task_fail('00000000-0000-0000-0000-0000000003ff', '00000000-0000-0000-0000-00000000000a', 2, 'boom', NULL, '2000-02-01 00:00:03+00')$$,
    'TN201', NULL, 'fail of an unknown task raises TN201');
SELECT throws_ok(
    $$SELECT tenure._task_fence('00000000-0000-0000-0000-0000000003ff', '00000000-0000-0000-0000-00000000000a', 2, '2000-02-01 00:00:03+00')$$,
    'TN201', NULL, 'fence of an unknown task raises TN201');
SELECT results_eq(
    $$SELECT * FROM tenure.task WHERE id = '00000000-0000-0000-0000-000000000301'$$,
    $$SELECT * FROM hold_before$$,
    'refused holder writes changed nothing');

-- The end of the lease: exactly at next_action still the holder's, 1 microsecond later not.
SELECT is(
    tenure._task_extend('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 2, '30 s', '2000-02-01 00:00:32+00'),
    '2000-02-01 00:01:02+00'::timestamptz,
    'extend at exactly the end of the lease works and returns now + lease');
SELECT results_eq(
    $$SELECT owner, epoch, next_action, last_action, leased_at FROM tenure.task WHERE id = '00000000-0000-0000-0000-000000000301'$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000a'::uuid, 2::bigint, '2000-02-01 00:01:02+00'::timestamptz,
              '2000-02-01 00:00:32+00'::timestamptz, '2000-02-01 00:00:02+00'::timestamptz)$$,
    'extend moves next_action and last_action, keeps owner, epoch and leased_at');
SELECT lives_ok(
    $$SELECT tenure._task_fence('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 2, '2000-02-01 00:01:02+00')$$,
    'fence at exactly the end of the lease lets the holder write');
DROP TABLE hold_before;
CREATE TEMP TABLE hold_before AS SELECT * FROM tenure.task WHERE id = '00000000-0000-0000-0000-000000000301';
SELECT throws_ok(
    $$SELECT tenure._task_extend('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 2, '30 s', '2000-02-01 00:01:02.000001+00')$$,
    'TN102', NULL, 'extend 1 microsecond after the lease ran out is refused');
SELECT throws_ok(
    $$SELECT tenure._task_update('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 2, 'x', NULL, NULL, '2000-02-01 00:01:02.000001+00')$$,
    'TN102', NULL, 'update after the lease ran out is refused');
SELECT throws_ok(
    $$SELECT tenure._task_release('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 2, '0', NULL, NULL, '2000-02-01 00:01:02.000001+00')$$,
    'TN102', NULL, 'release after the lease ran out is refused');
SELECT throws_ok(
    $$SELECT tenure._task_complete('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 2, 'done', NULL, '2000-02-01 00:01:02.000001+00')$$,
    'TN102', NULL, 'complete after the lease ran out is refused');
SELECT throws_ok(
    $$SELECT tenure._task_fail('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 2, 'boom', NULL, '2000-02-01 00:01:02.000001+00')$$,
    'TN102', NULL, 'fail after the lease ran out is refused');
SELECT throws_ok(
    $$SELECT tenure._task_fence('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 2, '2000-02-01 00:01:02.000001+00')$$,
    'TN102', NULL, 'fence after the lease ran out raises');
SELECT results_eq(
    $$SELECT * FROM tenure.task WHERE id = '00000000-0000-0000-0000-000000000301'$$,
    $$SELECT * FROM hold_before$$,
    'writes refused after the lease ran out changed nothing');

-- Update.
SELECT results_eq(
    $$SELECT id, epoch, state, data FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000a', '30 s', 1, ARRAY['upd'], '2000-02-01 00:00:00+00')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000302'::uuid, 1::bigint, 'step1', '{"k": 1}'::jsonb)$$,
    'the lease carries the task''s state and data');
SELECT is(
    tenure._task_update('00000000-0000-0000-0000-000000000302', '00000000-0000-0000-0000-00000000000a', 1, 'step2', '{"k": 2}', NULL,
                        '2000-02-01 00:00:10+00'),
    '2000-02-01 00:00:30+00'::timestamptz,
    'update without p_lease returns the unchanged end of the lease');
SELECT results_eq(
    $$SELECT state, data, owner, last_change, last_action, next_action FROM tenure.task WHERE id = '00000000-0000-0000-0000-000000000302'$$,
    $$VALUES ('step2', '{"k": 2}'::jsonb, '00000000-0000-0000-0000-00000000000a'::uuid, '2000-02-01 00:00:10+00'::timestamptz,
              '2000-02-01 00:00:10+00'::timestamptz, '2000-02-01 00:00:30+00'::timestamptz)$$,
    'update stores the new state and data and keeps the lease');
SELECT is(
    tenure._task_update('00000000-0000-0000-0000-000000000302', '00000000-0000-0000-0000-00000000000a', 1, NULL, '{"k": 3}', '60 s',
                        '2000-02-01 00:00:20+00'),
    '2000-02-01 00:01:20+00'::timestamptz,
    'update with p_lease also extends the lease to now + p_lease');
SELECT results_eq(
    $$SELECT state, data FROM tenure.task WHERE id = '00000000-0000-0000-0000-000000000302'$$,
    $$VALUES ('step2', '{"k": 3}'::jsonb)$$,
    'update with only p_data keeps the state');
SELECT is(
    tenure._task_update('00000000-0000-0000-0000-000000000302', '00000000-0000-0000-0000-00000000000a', 1, 'step3', NULL, NULL,
                        '2000-02-01 00:01:20+00'),
    '2000-02-01 00:01:20+00'::timestamptz,
    'update at exactly the end of the lease works');

-- Complete.
SELECT results_eq(
    $$SELECT id, epoch FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000a', '30 s', 1, ARRAY['cmp'], '2000-02-01 00:00:00+00')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000303'::uuid, 1::bigint)$$,
    'a leases task 303');
SELECT is(
    tenure._task_complete('00000000-0000-0000-0000-000000000303', '00000000-0000-0000-0000-00000000000a', 1, 'sent', '{"r": 1}',
                          '2000-02-01 00:00:30+00'),
    '2000-02-01 00:00:30+00'::timestamptz,
    'complete at exactly the end of the lease works and returns the time it finished');
SELECT results_eq(
    $$SELECT status, state, data, owner, leased_at, next_action, finished_at, attempts FROM tenure.task
       WHERE id = '00000000-0000-0000-0000-000000000303'$$,
    $$VALUES ('done', 'sent', '{"r": 1}'::jsonb, NULL::uuid, NULL::timestamptz, NULL::timestamptz,
              '2000-02-01 00:00:30+00'::timestamptz, 0)$$,
    'a completed task is done in its final state and data, unowned, not due, finished');
SELECT results_eq(
    $$SELECT status, state, leased, due FROM tenure.tasks WHERE id = '00000000-0000-0000-0000-000000000303'$$,
    $$VALUES ('done', 'sent', false, false)$$,
    'the tasks view shows it done');
SELECT throws_ok(
    $$SELECT tenure._task_extend('00000000-0000-0000-0000-000000000303', '00000000-0000-0000-0000-00000000000a', 1, '30 s', '2000-02-01 00:00:20+00')$$,
    'TN102', NULL, 'once the task is done its former holder cannot extend');
SELECT throws_ok(
    $$SELECT tenure._task_complete('00000000-0000-0000-0000-000000000303', '00000000-0000-0000-0000-00000000000a', 1, 'sent', NULL, '2000-02-01 00:00:20+00')$$,
    'TN102', NULL, 'a second complete is refused');
SELECT is(tenure._task_requeue('00000000-0000-0000-0000-000000000303', '0', '2000-02-01 00:00:40+00'), false,
    'requeue of a done task returns false');
SELECT is((SELECT status FROM tenure.task WHERE id = '00000000-0000-0000-0000-000000000303'), 'done',
    'and leaves it done');

-- Release with a delay.
SELECT results_eq(
    $$SELECT id, epoch FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000a', '30 s', 1, ARRAY['rel'], '2000-02-01 00:00:00+00')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000304'::uuid, 1::bigint)$$,
    'a leases task 304');
SELECT is(
    tenure._task_release('00000000-0000-0000-0000-000000000304', '00000000-0000-0000-0000-00000000000a', 1, '5 min', 'waiting',
                         '{"w": 1}', '2000-02-01 00:00:10+00'),
    '2000-02-01 00:05:10+00'::timestamptz,
    'release with a delay returns now + delay');
SELECT results_eq(
    $$SELECT owner, status, state, data, attempts, epoch, next_action, last_change FROM tenure.task
       WHERE id = '00000000-0000-0000-0000-000000000304'$$,
    $$VALUES (NULL::uuid, 'pending', 'waiting', '{"w": 1}'::jsonb, 0, 1::bigint, '2000-02-01 00:05:10+00'::timestamptz,
              '2000-02-01 00:00:10+00'::timestamptz)$$,
    'released with a delay: unowned, new state and data, attempts kept, due after the delay');
SELECT is_empty(
    $$SELECT * FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000b', '30 s', 1, ARRAY['rel'], '2000-02-01 00:05:09.999999+00')$$,
    'a task released with a delay is not acquired before it is due');
SELECT results_eq(
    $$SELECT id, epoch, attempts, state FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000b', '30 s', 1, ARRAY['rel'],
                                                                '2000-02-01 00:05:10+00')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000304'::uuid, 2::bigint, 0, 'waiting')$$,
    'it is acquired when due, in the next epoch, with no attempt counted');

-- Fail: backoff 1 s, 2 s, 4 s, a custom delay, then dead at max_attempts (5).
SELECT results_eq(
    $$SELECT id, epoch, attempts FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000a', '30 s', 1, ARRAY['flaky'], '2000-02-01 00:00:00+00')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000305'::uuid, 1::bigint, 0)$$,
    'a leases task 305');
SELECT is(
    tenure._task_fail('00000000-0000-0000-0000-000000000305', '00000000-0000-0000-0000-00000000000a', 1, 'boom 1', NULL, '2000-02-01 00:00:10+00'),
    '2000-02-01 00:00:11+00'::timestamptz,
    'the first failure makes the task due again after 1 s');
SELECT results_eq(
    $$SELECT status, owner, leased_at, attempts, last_error, epoch, next_action FROM tenure.task WHERE id = '00000000-0000-0000-0000-000000000305'$$,
    $$VALUES ('pending', NULL::uuid, NULL::timestamptz, 1, 'boom 1', 1::bigint, '2000-02-01 00:00:11+00'::timestamptz)$$,
    'a failure is an attempt: unowned, attempts 1, the error kept');
SELECT results_eq(
    $$SELECT id, epoch, attempts FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000a', '30 s', 1, ARRAY['flaky'], '2000-02-01 00:00:11+00')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000305'::uuid, 2::bigint, 1)$$,
    'leased again when due, in epoch 2');
SELECT is(
    tenure._task_fail('00000000-0000-0000-0000-000000000305', '00000000-0000-0000-0000-00000000000a', 2, 'boom 2', NULL, '2000-02-01 00:00:12+00'),
    '2000-02-01 00:00:14+00'::timestamptz,
    'the second failure backs off 2 s');
SELECT results_eq(
    $$SELECT id, epoch, attempts FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000a', '30 s', 1, ARRAY['flaky'], '2000-02-01 00:00:14+00')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000305'::uuid, 3::bigint, 2)$$,
    'leased again in epoch 3');
SELECT is(
    tenure._task_fail('00000000-0000-0000-0000-000000000305', '00000000-0000-0000-0000-00000000000a', 3, 'boom 3', NULL, '2000-02-01 00:00:15+00'),
    '2000-02-01 00:00:19+00'::timestamptz,
    'the third failure backs off 4 s');
SELECT results_eq(
    $$SELECT id, epoch, attempts FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000a', '30 s', 1, ARRAY['flaky'], '2000-02-01 00:00:19+00')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000305'::uuid, 4::bigint, 3)$$,
    'leased again in epoch 4');
SELECT is(
    tenure._task_fail('00000000-0000-0000-0000-000000000305', '00000000-0000-0000-0000-00000000000a', 4, 'boom 4', '90 s', '2000-02-01 00:00:20+00'),
    '2000-02-01 00:01:50+00'::timestamptz,
    'a custom retry delay replaces the backoff');
SELECT results_eq(
    $$SELECT id, epoch, attempts FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000a', '30 s', 1, ARRAY['flaky'], '2000-02-01 00:01:50+00')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000305'::uuid, 5::bigint, 4)$$,
    'leased again in epoch 5 after the custom delay');
SELECT is(
    tenure._task_fail('00000000-0000-0000-0000-000000000305', '00000000-0000-0000-0000-00000000000a', 5, 'boom 5', NULL, '2000-02-01 00:01:51+00'),
    NULL::timestamptz,
    'the failure that reaches max_attempts returns NULL: the task is dead');
SELECT results_eq(
    $$SELECT status, owner, leased_at, attempts, next_action, finished_at, last_error FROM tenure.task
       WHERE id = '00000000-0000-0000-0000-000000000305'$$,
    $$VALUES ('dead', NULL::uuid, NULL::timestamptz, 5, NULL::timestamptz, '2000-02-01 00:01:51+00'::timestamptz, 'boom 5')$$,
    'a dead task: no next action, finished, the last error kept');
SELECT results_eq(
    $$SELECT status, leased, due FROM tenure.tasks WHERE id = '00000000-0000-0000-0000-000000000305'$$,
    $$VALUES ('dead', false, false)$$,
    'the tasks view shows it dead');
SELECT is_empty(
    $$SELECT * FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000b', '30 s', 10, ARRAY['flaky'], '2000-02-02 00:00:00+00')$$,
    'a dead task is never acquired');
SELECT is(tenure._task_requeue('00000000-0000-0000-0000-000000000305', '0', '2000-02-01 00:03:20+00'), true,
    'requeue of a dead task returns true');
SELECT results_eq(
    $$SELECT status, owner, attempts, next_action, finished_at, last_error, epoch FROM tenure.task
       WHERE id = '00000000-0000-0000-0000-000000000305'$$,
    $$VALUES ('pending', NULL::uuid, 0, '2000-02-01 00:03:20+00'::timestamptz, NULL::timestamptz, 'boom 5', 5::bigint)$$,
    'a requeued task is pending and due, with attempts 0 and its last error kept');
SELECT is(tenure._task_requeue('00000000-0000-0000-0000-000000000305', '1 hour', '2000-02-01 00:03:21+00'), false,
    'requeue of a pending task returns false');
SELECT is((SELECT next_action FROM tenure.task WHERE id = '00000000-0000-0000-0000-000000000305'),
    '2000-02-01 00:03:20+00'::timestamptz,
    'and changes nothing');
SELECT results_eq(
    $$SELECT id, epoch, attempts FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000b', '30 s', 1, ARRAY['flaky'], '2000-02-01 00:03:20+00')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000305'::uuid, 6::bigint, 0)$$,
    'the requeued task is leased in the next epoch');

-- Eject.
SELECT results_eq(
    $$SELECT id, epoch FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000a', '30 s', 1, ARRAY['ej'], '2000-02-01 00:00:00+00')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000306'::uuid, 1::bigint)$$,
    'a leases task 306');
SELECT results_eq(
    $$SELECT * FROM tenure._task_eject('00000000-0000-0000-0000-000000000306', '00000000-0000-0000-0000-00000000000b', '1 min', '2000-02-01 00:00:05+00')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000306'::uuid, 'ej', 'new', '{"e": 1}'::jsonb, 2::bigint, 0,
              '2000-02-01 00:01:05+00'::timestamptz)$$,
    'eject hands a leased task to another instance at once, in the next epoch, for p_lease');
SELECT results_eq(
    $$SELECT owner, epoch, leased_at, next_action, attempts FROM tenure.task WHERE id = '00000000-0000-0000-0000-000000000306'$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000b'::uuid, 2::bigint, '2000-02-01 00:00:05+00'::timestamptz,
              '2000-02-01 00:01:05+00'::timestamptz, 0)$$,
    'the ejecting instance owns the task; eject is not a failed attempt');
SELECT results_eq(
    $$SELECT epoch, owner, leased_at, how FROM tenure.task_lease_log WHERE task_id = '00000000-0000-0000-0000-000000000306' ORDER BY epoch$$,
    $$VALUES (1::bigint, '00000000-0000-0000-0000-00000000000a'::uuid, '2000-02-01 00:00:00+00'::timestamptz, 'acquired'),
             (2, '00000000-0000-0000-0000-00000000000b', '2000-02-01 00:00:05+00', 'ejected')$$,
    'the lease log records the ejection');
SELECT throws_ok(
    $$SELECT tenure._task_extend('00000000-0000-0000-0000-000000000306', '00000000-0000-0000-0000-00000000000a', 1, '30 s', '2000-02-01 00:00:06+00')$$,
    'TN102', NULL, 'after an eject the old owner cannot extend');
SELECT throws_ok(
    $$SELECT tenure._task_update('00000000-0000-0000-0000-000000000306', '00000000-0000-0000-0000-00000000000a', 1, 'x', NULL, NULL, '2000-02-01 00:00:06+00')$$,
    'TN102', NULL, 'after an eject the old owner cannot update');
SELECT throws_ok(
    $$SELECT tenure._task_complete('00000000-0000-0000-0000-000000000306', '00000000-0000-0000-0000-00000000000a', 1, 'done', NULL, '2000-02-01 00:00:06+00')$$,
    'TN102', NULL, 'after an eject the old owner cannot complete');
SELECT is(
    tenure._task_complete('00000000-0000-0000-0000-000000000306', '00000000-0000-0000-0000-00000000000b', 2, 'done', NULL, '2000-02-01 00:00:07+00'),
    '2000-02-01 00:00:07+00'::timestamptz,
    'the new owner completes the task');
SELECT is_empty(
    $$SELECT * FROM tenure._task_eject('00000000-0000-0000-0000-000000000306', '00000000-0000-0000-0000-00000000000c', '1 min', '2000-02-01 00:00:08+00')$$,
    'eject of a done task returns no row');
SELECT results_eq(
    $$SELECT status, owner, epoch FROM tenure.task WHERE id = '00000000-0000-0000-0000-000000000306'$$,
    $$VALUES ('done', NULL::uuid, 2::bigint)$$,
    'and leaves it done');
SELECT throws_ok(
    $$SELECT * FROM tenure._task_eject('00000000-0000-0000-0000-0000000003ff', '00000000-0000-0000-0000-00000000000c', '1 min', '2000-02-01 00:00:08+00')$$,
    'TN201', NULL, 'eject of an unknown task raises TN201');

-- Fence.
SELECT results_eq(
    $$SELECT id, epoch FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000a', '30 s', 1, ARRAY['fen'], '2000-02-01 00:00:00+00')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000307'::uuid, 1::bigint)$$,
    'a leases task 307');
SELECT lives_ok(
    $$SELECT tenure._task_fence('00000000-0000-0000-0000-000000000307', '00000000-0000-0000-0000-00000000000a', 1, '2000-02-01 00:00:10+00')$$,
    'the fence lets the holder write');
SELECT lives_ok(
    $$SELECT tenure._task_fence('00000000-0000-0000-0000-000000000307', '00000000-0000-0000-0000-00000000000a', 1, '2000-02-01 00:00:30+00')$$,
    'the fence lets the holder write at exactly the end of its lease');
SELECT throws_ok(
    $$SELECT tenure._task_fence('00000000-0000-0000-0000-000000000307', '00000000-0000-0000-0000-00000000000a', 1, '2000-02-01 00:00:30.000001+00')$$,
    'TN102', NULL, 'the fence refuses a holder whose lease ran out, before anyone took over');
SELECT results_eq(
    $$SELECT id, epoch, attempts FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000b', '30 s', 1, ARRAY['fen'], '2000-02-01 00:00:31+00')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000307'::uuid, 2::bigint, 1)$$,
    'b takes the expired task over in epoch 2');
SELECT throws_ok(
    $$SELECT tenure._task_fence('00000000-0000-0000-0000-000000000307', '00000000-0000-0000-0000-00000000000a', 1, '2000-02-01 00:00:32+00')$$,
    'TN102', 'tenure.task_fence: instance 00000000-0000-0000-0000-00000000000a no longer holds task 00000000-0000-0000-0000-000000000307 in epoch 1',
    'the fence refuses the overtaken holder with its stale epoch');
SELECT throws_ok(
    $$SELECT tenure._task_fence('00000000-0000-0000-0000-000000000307', '00000000-0000-0000-0000-00000000000a', 2, '2000-02-01 00:00:32+00')$$,
    'TN102', NULL, 'the fence refuses the current epoch for another owner');
SELECT lives_ok(
    $$SELECT tenure._task_fence('00000000-0000-0000-0000-000000000307', '00000000-0000-0000-0000-00000000000b', 2, '2000-02-01 00:00:32+00')$$,
    'the fence lets the new holder write');

-- Purge: done tasks 306 (finished H+7 s) and 303 (H+30 s); dead task 207 (2000-01-01).
SELECT is(tenure._task_purge('1 hour', false, '2000-02-01 01:00:20+00'), 1::bigint,
    'purge deletes the done tasks that finished longer ago than p_older_than');
SELECT results_eq(
    $$SELECT id FROM tenure.task WHERE id IN ('00000000-0000-0000-0000-000000000303', '00000000-0000-0000-0000-000000000306')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000303'::uuid)$$,
    'the older one is gone, the younger one kept');
SELECT is_empty(
    $$SELECT * FROM tenure.task_lease_log WHERE task_id = '00000000-0000-0000-0000-000000000306'$$,
    'the purged task''s lease log is gone with it');
SELECT is(tenure._task_purge('1 hour', false, '2000-02-01 01:00:30+00'), 0::bigint,
    'a task that finished exactly p_older_than ago is kept');
SELECT is(tenure._task_purge('1 hour', false, '2000-02-01 01:00:30.000001+00'), 1::bigint,
    'and purged once it is older');
SELECT is(tenure._task_purge('1 hour', false, '2000-02-02 00:00:00+00'), 0::bigint,
    'dead tasks are kept without p_include_dead');
SELECT is((SELECT status FROM tenure.task WHERE id = '00000000-0000-0000-0000-000000000207'), 'dead',
    'the dead task is still there');
SELECT is(tenure._task_purge('1 hour', true, '2000-02-02 00:00:00+00'), 1::bigint,
    'with p_include_dead old dead tasks are purged too');
SELECT is_empty(
    $$SELECT * FROM tenure.task WHERE id = '00000000-0000-0000-0000-000000000207'
      UNION ALL SELECT * FROM tenure.task WHERE status <> 'pending' AND finished_at < '2000-02-02 00:00:00+00'$$,
    'no finished task older than the cut-off is left');
SELECT results_eq(
    $$SELECT count(*) FROM tenure.task WHERE status = 'pending' AND kind IN ('acq', 'hold', 'flaky')$$,
    $$VALUES (6::bigint)$$,
    'purge never touches pending tasks');

-- Durability does not depend on the caller's session ---------------------------------------
SET LOCAL synchronous_commit = off;
SELECT lives_ok($$SELECT * FROM tenure.task_enqueue('durable', p_id => '00000000-0000-0000-0000-000000000502')$$,
    'an enqueue in a session with synchronous_commit = off');
SELECT is(current_setting('synchronous_commit'), 'on',
    'tenure raised synchronous_commit to on for the transaction that enqueued');
SET LOCAL synchronous_commit = on;

-- Bad input raises tenure's SQLSTATEs and changes nothing ------------------------------------
CREATE TEMP TABLE tasks_before AS SELECT * FROM tenure.task;
CREATE TEMP TABLE lease_log_before AS SELECT * FROM tenure.task_lease_log;
SELECT throws_ok($$SELECT * FROM tenure.task_enqueue(NULL)$$,
    'TN001', 'tenure.task_enqueue: the task needs a non-empty kind', 'enqueue refuses a NULL kind');
SELECT throws_ok($$SELECT * FROM tenure.task_enqueue('')$$, 'TN001', NULL, 'enqueue refuses an empty kind');
SELECT throws_ok($$SELECT * FROM tenure.task_enqueue('   ')$$, 'TN001', NULL, 'enqueue refuses a blank kind');
SELECT throws_ok($$SELECT * FROM tenure.task_enqueue(repeat('k', 201))$$, 'TN001', NULL, 'enqueue refuses an over-long kind');
SELECT throws_ok($$SELECT * FROM tenure.task_enqueue('x', p_delay => '-1 s')$$,
    'TN001', 'tenure.task_enqueue: the task needs a non-negative delay', 'enqueue refuses a negative delay');
SELECT throws_ok($$SELECT * FROM tenure.task_enqueue('x', p_state => '')$$, 'TN001', NULL, 'enqueue refuses an empty state');
SELECT throws_ok($$SELECT * FROM tenure.task_enqueue('x', p_max_attempts => 0)$$, 'TN001', NULL, 'enqueue refuses max_attempts 0');
SELECT throws_ok($$SELECT * FROM tenure.task_enqueue('x', p_idempotency_key => '')$$, 'TN001', NULL,
    'enqueue refuses an empty idempotency key');
SELECT throws_ok($$SELECT * FROM tenure.task_enqueue_many('{"kind": "x"}')$$,
    'TN001', 'tenure.task_enqueue_many: p_tasks must be a JSON array of task objects', 'enqueue_many refuses a non-array');
SELECT throws_ok($$SELECT * FROM tenure.task_enqueue_many(NULL)$$, 'TN001', NULL, 'enqueue_many refuses NULL');
SELECT throws_ok($$SELECT * FROM tenure.task_enqueue_many('[{"kind": "ok"}, "email"]')$$,
    'TN001', 'tenure.task_enqueue_many: task 2 must be a JSON object', 'enqueue_many refuses an element that is not an object');
SELECT throws_ok($$SELECT * FROM tenure.task_enqueue_many('[{"kind": "ok"}, {"data": {"a": 1}}]')$$,
    'TN001', 'tenure.task_enqueue_many: task 2 needs a non-empty kind', 'enqueue_many refuses a task without kind');
SELECT throws_ok($$SELECT * FROM tenure.task_enqueue_many('[{"kind": "ok"}, {"kind": "x", "delay": "-5 seconds"}]')$$,
    'TN001', 'tenure.task_enqueue_many: task 2 needs a non-negative delay', 'enqueue_many refuses a negative delay');
SELECT throws_ok($$SELECT * FROM tenure.task_enqueue_many('[{"kind": "ok"}, {"kind": "x", "id": "not-a-uuid"}]')$$,
    'TN001', 'tenure.task_enqueue_many: p_tasks has a value of the wrong type', 'enqueue_many refuses a bad uuid');
SELECT throws_ok($$SELECT * FROM tenure.task_enqueue_many('[{"kind": "ok"}, {"kind": "x", "delay": "soon"}]')$$,
    'TN001', NULL, 'enqueue_many refuses a delay that is no interval');
SELECT throws_ok($$SELECT * FROM tenure.task_enqueue_many('[{"kind": "ok"}, {"kind": "x", "max_attempts": "many"}]')$$,
    'TN001', NULL, 'enqueue_many refuses a max_attempts that is no integer');
SELECT throws_ok($$SELECT * FROM tenure.task_acquire(NULL, '30 s')$$,
    'TN001', 'tenure.task_acquire: p_owner must not be NULL', 'acquire refuses a NULL owner');
SELECT throws_ok($$SELECT * FROM tenure.task_acquire('00000000-0000-0000-0000-00000000000a', '0 s')$$,
    'TN001', 'tenure.task_acquire: p_lease must be a positive interval', 'acquire refuses a zero lease');
SELECT throws_ok($$SELECT * FROM tenure.task_acquire('00000000-0000-0000-0000-00000000000a', '-1 s')$$,
    'TN001', NULL, 'acquire refuses a negative lease');
SELECT throws_ok($$SELECT * FROM tenure.task_acquire('00000000-0000-0000-0000-00000000000a', NULL)$$,
    'TN001', NULL, 'acquire refuses a NULL lease');
SELECT throws_ok($$SELECT * FROM tenure.task_acquire('00000000-0000-0000-0000-00000000000a', '30 s', 0)$$,
    'TN001', 'tenure.task_acquire: p_limit must be between 1 and 10000', 'acquire refuses p_limit 0');
SELECT throws_ok($$SELECT * FROM tenure.task_acquire('00000000-0000-0000-0000-00000000000a', '30 s', 10001)$$,
    'TN001', NULL, 'acquire refuses p_limit over 10000');
SELECT throws_ok($$SELECT * FROM tenure.task_acquire('00000000-0000-0000-0000-00000000000a', '30 s', NULL)$$,
    'TN001', NULL, 'acquire refuses a NULL p_limit');
SELECT throws_ok($$SELECT * FROM tenure.task_acquire('00000000-0000-0000-0000-00000000000a', '30 s', 1, '{}')$$,
    'TN001', NULL, 'acquire refuses an empty p_kinds');
SELECT throws_ok($$SELECT * FROM tenure.task_acquire('00000000-0000-0000-0000-00000000000a', '30 s', 1, ARRAY[NULL]::text[])$$,
    'TN001', NULL, 'acquire refuses a NULL kind in p_kinds');
SELECT throws_ok($$SELECT tenure.task_extend(NULL, '00000000-0000-0000-0000-00000000000a', 2, '30 s')$$,
    'TN001', 'tenure.task_extend: p_id must not be NULL', 'extend refuses a NULL id');
SELECT throws_ok($$SELECT tenure.task_extend('00000000-0000-0000-0000-000000000301', NULL, 2, '30 s')$$,
    'TN001', NULL, 'extend refuses a NULL owner');
SELECT throws_ok($$SELECT tenure.task_extend('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 0, '30 s')$$,
    'TN001', NULL, 'extend refuses epoch 0');
SELECT throws_ok($$SELECT tenure.task_extend('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', NULL, '30 s')$$,
    'TN001', NULL, 'extend refuses a NULL epoch');
SELECT throws_ok($$SELECT tenure.task_extend('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 2, '0 s')$$,
    'TN001', NULL, 'extend refuses a zero lease');
SELECT throws_ok($$SELECT tenure.task_update('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 2, NULL)$$,
    'TN001', NULL, 'update refuses p_state and p_data both NULL');
SELECT throws_ok($$SELECT tenure.task_update('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 2, '')$$,
    'TN001', NULL, 'update refuses an empty state');
SELECT throws_ok($$SELECT tenure.task_update('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 2, 'x', NULL, '0 s')$$,
    'TN001', NULL, 'update refuses a zero lease');
SELECT throws_ok($$SELECT tenure.task_release('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 2, '-1 s')$$,
    'TN001', NULL, 'release refuses a negative delay');
SELECT throws_ok($$SELECT tenure.task_release('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 2, NULL)$$,
    'TN001', NULL, 'release refuses a NULL delay');
SELECT throws_ok($$SELECT tenure.task_complete('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 2, '')$$,
    'TN001', NULL, 'complete refuses an empty state');
SELECT throws_ok($$SELECT tenure.task_complete('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 2, NULL)$$,
    'TN001', NULL, 'complete refuses a NULL state');
SELECT throws_ok($$SELECT tenure.task_fail('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 2, '')$$,
    'TN001', NULL, 'fail refuses an empty error');
SELECT throws_ok($$SELECT tenure.task_fail('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 2, 'x', '-1 s')$$,
    'TN001', NULL, 'fail refuses a negative retry delay');
SELECT throws_ok($$SELECT tenure.task_fence(NULL, '00000000-0000-0000-0000-00000000000a', 2)$$,
    'TN001', NULL, 'fence refuses a NULL id');
SELECT throws_ok($$SELECT tenure.task_fence('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', 0)$$,
    'TN001', NULL, 'fence refuses epoch 0');
SELECT throws_ok($$SELECT * FROM tenure.task_eject(NULL, '00000000-0000-0000-0000-00000000000a', '30 s')$$,
    'TN001', NULL, 'eject refuses a NULL id');
SELECT throws_ok($$SELECT * FROM tenure.task_eject('00000000-0000-0000-0000-000000000301', NULL, '30 s')$$,
    'TN001', NULL, 'eject refuses a NULL owner');
SELECT throws_ok($$SELECT * FROM tenure.task_eject('00000000-0000-0000-0000-000000000301', '00000000-0000-0000-0000-00000000000a', '0 s')$$,
    'TN001', NULL, 'eject refuses a zero lease');
SELECT throws_ok($$SELECT * FROM tenure.task_eject('00000000-0000-0000-0000-0000000003ff', '00000000-0000-0000-0000-00000000000a', '30 s')$$,
    'TN201', NULL, 'eject of an unknown task raises TN201');
SELECT throws_ok($$SELECT tenure.task_requeue(NULL)$$, 'TN001', NULL, 'requeue refuses a NULL id');
SELECT throws_ok($$SELECT tenure.task_requeue('00000000-0000-0000-0000-000000000305', '-1 s')$$,
    'TN001', NULL, 'requeue refuses a negative delay');
SELECT throws_ok($$SELECT tenure.task_requeue('00000000-0000-0000-0000-0000000003ff')$$,
    'TN201', NULL, 'requeue of an unknown task raises TN201');
SELECT throws_ok($$SELECT tenure.task_purge(NULL)$$, 'TN001', NULL, 'purge refuses a NULL age');
SELECT throws_ok($$SELECT tenure.task_purge('-1 day')$$, 'TN001', NULL, 'purge refuses a negative age');
SELECT throws_ok($$SELECT tenure.task_purge('1 day', NULL)$$, 'TN001', NULL, 'purge refuses a NULL p_include_dead');
SELECT results_eq($$SELECT * FROM tenure.task ORDER BY id$$, $$SELECT * FROM tasks_before ORDER BY id$$,
    'refused calls changed no task');
SELECT results_eq($$SELECT * FROM tenure.task_lease_log ORDER BY task_id, epoch$$,
    $$SELECT * FROM lease_log_before ORDER BY task_id, epoch$$, 'refused calls changed no lease');
SELECT is_empty($$SELECT * FROM tenure.task WHERE kind IN ('ok', 'x')$$,
    'a batch with one bad task enqueued none of its good ones');

-- Least privilege: the worker role calls functions and reads the views, nothing else ----------
SET LOCAL ROLE tenure_worker;
SELECT results_eq(
    $$SELECT id, created FROM tenure.task_enqueue('worker', p_id => '00000000-0000-0000-0000-000000000501')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000501'::uuid, true)$$,
    'tenure_worker can call task_enqueue');
SELECT results_eq(
    $$SELECT id, epoch, attempts, lease_until > now() + interval '29 s'
        FROM tenure.task_acquire('00000000-0000-0000-0000-00000000000c', '30 s', 1, ARRAY['worker'])$$,
    $$VALUES ('00000000-0000-0000-0000-000000000501'::uuid, 1::bigint, 0, true)$$,
    'tenure_worker can call task_acquire, which leases by the server clock');
SELECT results_eq(
    $$SELECT status, owner, epoch, leased, due FROM tenure.tasks WHERE id = '00000000-0000-0000-0000-000000000501'$$,
    $$VALUES ('pending', '00000000-0000-0000-0000-00000000000c'::uuid, 1::bigint, true, false)$$,
    'tenure_worker can read tenure.tasks: the task is leased, not due');
SELECT ok(
    tenure.task_extend('00000000-0000-0000-0000-000000000501', '00000000-0000-0000-0000-00000000000c', 1, '1 min')
        BETWEEN now() + interval '1 min' AND clock_timestamp() + interval '1 min',
    'task_extend extends by the server clock');
SELECT lives_ok(
    $$SELECT tenure.task_fence('00000000-0000-0000-0000-000000000501', '00000000-0000-0000-0000-00000000000c', 1)$$,
    'task_fence lets the live holder write');
SELECT lives_ok(
    $$SELECT tenure.task_complete('00000000-0000-0000-0000-000000000501', '00000000-0000-0000-0000-00000000000c', 1)$$,
    'task_complete by the holder');
SELECT results_eq(
    $$SELECT status, state FROM tenure.tasks WHERE id = '00000000-0000-0000-0000-000000000501'$$,
    $$VALUES ('done', 'done')$$,
    'task_complete''s default final state is done');
SELECT lives_ok($$SELECT * FROM tenure.task_status$$, 'tenure_worker can read tenure.task_status');
SELECT throws_ok($$SELECT * FROM tenure.task$$, '42501', NULL, 'tenure_worker cannot read the task table');
SELECT throws_ok($$SELECT * FROM tenure.task_lease_log$$, '42501', NULL, 'tenure_worker cannot read the lease log');
SELECT throws_ok(
    $$SELECT * FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000c', '30 s', 1, NULL, now())$$,
    '42501', NULL, 'tenure_worker cannot call the time-travel function');
RESET ROLE;

-- What refers to a task goes with it ------------------------------------------------
-- No foreign key references tenure.task (its triggers ran for every leased and finished
-- row); statement triggers delete a task's lease log and dependencies with it, whoever
-- deletes it.
SELECT is((SELECT count(*) FROM pg_constraint WHERE confrelid = 'tenure.task'::regclass AND contype = 'f'), 0::bigint,
    'no foreign key references tenure.task');
DO $$
BEGIN
    PERFORM tenure.task_enqueue('logdel', p_id => '00000000-0000-0000-0000-000000000901');
    PERFORM tenure.task_enqueue('logdel', p_id => '00000000-0000-0000-0000-000000000902');
    PERFORM tenure.task_acquire('00000000-0000-0000-0000-00000000000d', '30 s', 2, ARRAY['logdel']);
    PERFORM tenure.task_enqueue('logdel', p_id => '00000000-0000-0000-0000-000000000904',
                                p_after => ARRAY['00000000-0000-0000-0000-000000000901',
                                                 '00000000-0000-0000-0000-000000000902']::uuid[]);
    PERFORM tenure.task_enqueue('logdel', p_id => '00000000-0000-0000-0000-000000000905',
                                p_after => ARRAY['00000000-0000-0000-0000-000000000902']::uuid[]);
END
$$;
DELETE FROM tenure.task WHERE id IN ('00000000-0000-0000-0000-000000000901', '00000000-0000-0000-0000-000000000905');
SELECT is((SELECT array_agg(task_id) FROM tenure.task_lease_log
            WHERE task_id IN ('00000000-0000-0000-0000-000000000901', '00000000-0000-0000-0000-000000000902')),
    ARRAY['00000000-0000-0000-0000-000000000902']::uuid[],
    'a task deleted by hand takes its lease log with it, and only its own');
SELECT results_eq(
    $$SELECT task_id, after_id FROM tenure.task_after WHERE task_id::text LIKE '00000000-0000-0000-0000-00000000090_'$$,
    $$VALUES ('00000000-0000-0000-0000-000000000904'::uuid, '00000000-0000-0000-0000-000000000902'::uuid)$$,
    'deleted tasks take the dependencies naming them with them, as the dependent or the dependency');
-- The triggers run as the schema's owner, as a key's cascade ran: deleting tasks needs no
-- privilege on the tables they clean.
CREATE ROLE tenure_test_deleter;
GRANT USAGE ON SCHEMA tenure TO tenure_test_deleter;
GRANT SELECT, DELETE ON tenure.task TO tenure_test_deleter;
SET ROLE tenure_test_deleter;
SELECT lives_ok($$DELETE FROM tenure.task WHERE id = '00000000-0000-0000-0000-000000000902'$$,
    'a role that may delete tasks (and nothing else) deletes one with its lease log and dependencies');
RESET ROLE;
SELECT is((SELECT count(*) FROM tenure.task_lease_log WHERE task_id = '00000000-0000-0000-0000-000000000902')
          + (SELECT count(*) FROM tenure.task_after WHERE after_id = '00000000-0000-0000-0000-000000000902'), 0::bigint,
    'its lease log and the dependencies on it went with it');
SELECT lives_ok($$TRUNCATE tenure.task, tenure.task_lease_log, tenure.task_after CASCADE$$,
    'the tasks and what refers to them can be truncated together');
DO $$
BEGIN
    PERFORM tenure.task_enqueue('logdel', p_id => '00000000-0000-0000-0000-000000000903');
    PERFORM tenure.task_acquire('00000000-0000-0000-0000-00000000000d', '30 s', 1, ARRAY['logdel']);
    PERFORM tenure.task_enqueue('logdel', p_after => ARRAY['00000000-0000-0000-0000-000000000903']::uuid[]);
END
$$;
SELECT lives_ok($$TRUNCATE tenure.task$$, 'tenure.task can be truncated alone');
SELECT is((SELECT count(*) FROM tenure.task_lease_log) + (SELECT count(*) FROM tenure.task_after), 0::bigint,
    'truncating the tasks empties the lease log and the dependencies');

-- Cost -------------------------------------------------------------------------
-- The input check is inlined where it is called: a SQL function that is not (a subquery
-- in its body) is parsed and planned again in every transaction that enqueues.
CREATE FUNCTION pg_temp.plan_text(p_query text) RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_line text;
    v_plan text := '';
BEGIN
    FOR v_line IN EXECUTE 'EXPLAIN (VERBOSE, COSTS OFF) ' || p_query LOOP
        v_plan := v_plan || v_line || E'\n';
    END LOOP;
    RETURN v_plan;
END
$$;
SELECT unalike(pg_temp.plan_text($$SELECT tenure._task_input_problem(i) FROM unnest(ARRAY[]::tenure._task_input[]) i$$),
    '%_task_input_problem%', '_task_input_problem is inlined into the query that calls it');

SELECT * FROM finish();
ROLLBACK;
