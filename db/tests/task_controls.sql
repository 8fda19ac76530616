-- Task controls (issue 28): priorities, pause, concurrency limits per kind and per key
-- (keys served round-robin), the rate limit's sliding window and task_cycle's throttled
-- rows, cancel, run-after dependencies, task_kind_set's bad input, least privilege.
-- Time is moved by the internal functions' p_now; the races are in the isolation specs
-- task-limit-acquire, task-cancel-complete, task-cancel-extend, task-after-complete and
-- task-rate-capacity.
-- Instances: a = ...0a, b = ...0b, c = ...0c. Task n has id 00000000-0000-0000-0000-<n, 12
-- digits>; each section has its own kinds, its own numbers and its own month of 2002:
-- priorities 11xx (January), pause 12xx (February), max_running 13xx (March), per key
-- 14xx (April), rate 15xx (May), cancel 16xx (June), dependencies 17xx (July).
BEGIN;
SELECT plan(217);

CREATE FUNCTION pg_temp.u(p_n integer) RETURNS uuid
LANGUAGE sql IMMUTABLE AS $$ SELECT ('00000000-0000-0000-0000-' || lpad(p_n::text, 12, '0'))::uuid $$;

CREATE FUNCTION pg_temp.n(p_id uuid) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$ SELECT right(p_id::text, 12)::integer $$;

CREATE FUNCTION pg_temp.o(p_owner text) RETURNS uuid
LANGUAGE sql IMMUTABLE AS $$ SELECT ('00000000-0000-0000-0000-' || lpad(p_owner, 12, '0'))::uuid $$;

CREATE FUNCTION pg_temp.ids(p_n integer[]) RETURNS uuid[]
LANGUAGE sql IMMUTABLE AS $$ SELECT CASE WHEN p_n IS NOT NULL THEN ARRAY(SELECT pg_temp.u(x) FROM unnest(p_n) x) END $$;

-- Enqueue task p_n at p_at (the internal function, by name: the time is ours).
CREATE FUNCTION pg_temp.enq(
    p_n integer, p_kind text, p_at timestamptz, p_delay interval DEFAULT '0', p_priority integer DEFAULT 0,
    p_limit_key text DEFAULT NULL, p_after integer[] DEFAULT NULL, p_max_attempts integer DEFAULT 5
) RETURNS SETOF tenure.task_enqueued
LANGUAGE sql
AS $$ SELECT * FROM tenure._task_enqueue(p_kind => p_kind, p_data => '{}'::jsonb, p_state => 'new', p_delay => p_delay,
                                         p_id => pg_temp.u(p_n), p_idempotency_key => NULL::text,
                                         p_max_attempts => p_max_attempts, p_priority => p_priority,
                                         p_limit_key => p_limit_key, p_after => pg_temp.ids(p_after),
                                         p_now => p_at) $$;

-- The numbers of the tasks task_acquire leases to p_owner at p_at, in ascending order.
CREATE FUNCTION pg_temp.taken(p_owner text, p_limit integer, p_kinds text[], p_at timestamptz, p_lease interval DEFAULT '30 s')
RETURNS integer[]
LANGUAGE sql
AS $$ SELECT coalesce(array_agg(pg_temp.n(l.id) ORDER BY pg_temp.n(l.id)), '{}')
        FROM tenure._task_acquire(pg_temp.o(p_owner), p_lease, p_limit, p_kinds, p_at) l $$;

-- The same, undone: which tasks would be leased, with no side effect.
CREATE FUNCTION pg_temp.would_take(p_owner text, p_limit integer, p_kinds text[], p_at timestamptz)
RETURNS integer[]
LANGUAGE plpgsql
AS $$
DECLARE
    v_taken integer[];
BEGIN
    BEGIN
        v_taken := pg_temp.taken(p_owner, p_limit, p_kinds, p_at);
        RAISE EXCEPTION 'dry run';
    EXCEPTION WHEN raise_exception THEN
        RETURN v_taken;
    END;
END
$$;

CREATE FUNCTION pg_temp.cycle(p_owner text, p_limit integer, p_kinds text[], p_outcomes text, p_at timestamptz,
                              p_lease interval DEFAULT '30 s')
RETURNS SETOF tenure.task_cycled
LANGUAGE sql
AS $$ SELECT * FROM tenure._task_cycle(pg_temp.o(p_owner), p_lease, p_limit, p_kinds, p_outcomes::jsonb, NULL, p_at) $$;

CREATE FUNCTION pg_temp.complete(p_n integer, p_owner text, p_epoch integer, p_at timestamptz) RETURNS timestamptz
LANGUAGE sql
AS $$ SELECT tenure._task_complete(pg_temp.u(p_n), pg_temp.o(p_owner), p_epoch, 'done', NULL, p_at) $$;

CREATE FUNCTION pg_temp.fail(p_n integer, p_owner text, p_epoch integer, p_at timestamptz) RETURNS timestamptz
LANGUAGE sql
AS $$ SELECT tenure._task_fail(pg_temp.u(p_n), pg_temp.o(p_owner), p_epoch, 'boom', NULL, p_at) $$;

-- 'SQLSTATE: message / DETAIL' of the error that p_sql raises, or 'no error'.
CREATE FUNCTION pg_temp.error_of(p_sql text) RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_state text;
    v_message text;
    v_detail text;
BEGIN
    EXECUTE p_sql;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT, v_detail = PG_EXCEPTION_DETAIL;
    RETURN v_state || ': ' || v_message || ' / ' || coalesce(v_detail, '');
END
$$;

CREATE FUNCTION pg_temp.kind_rows() RETURNS text
LANGUAGE sql AS $$ SELECT coalesce(string_agg(k::text, ';' ORDER BY k.kind), '') FROM tenure.task_kind k $$;

CREATE FUNCTION pg_temp.status(p_n integer) RETURNS text
LANGUAGE sql AS $$ SELECT status FROM tenure.task WHERE id = pg_temp.u(p_n) $$;

-- Signatures ---------------------------------------------------------------------------
SELECT has_function('tenure', 'task_enqueue',
    ARRAY['text', 'jsonb', 'text', 'interval', 'uuid', 'text', 'integer', 'integer', 'text', 'uuid[]']);
SELECT hasnt_function('tenure', 'task_enqueue', ARRAY['text', 'jsonb', 'text', 'interval', 'uuid', 'text', 'integer'],
    'the task_enqueue of seven arguments is gone: a second overload would make short calls ambiguous');
SELECT lives_ok($$SELECT tenure.task_enqueue('sig-short')$$, 'task_enqueue(kind) still resolves to one function');
SELECT has_function('tenure', 'task_kind_set', ARRAY['text', 'boolean', 'integer', 'integer', 'integer', 'interval']);
SELECT function_returns('tenure', 'task_kind_set', ARRAY['text', 'boolean', 'integer', 'integer', 'integer', 'interval'],
    'setof tenure.task_kinds');
SELECT has_function('tenure', 'task_cancel', ARRAY['uuid']);
SELECT function_returns('tenure', 'task_cancel', ARRAY['uuid'], 'boolean');
SELECT has_function('tenure', 'task_set_priority', ARRAY['uuid', 'integer']);
SELECT function_returns('tenure', 'task_set_priority', ARRAY['uuid', 'integer'], 'boolean');
SELECT has_table('tenure', 'task_kind', 'table task_kind exists');
SELECT has_table('tenure', 'task_after', 'table task_after exists');
SELECT has_view('tenure', 'task_kinds', 'view task_kinds exists');
SELECT has_view('tenure', 'task_dependencies', 'view task_dependencies exists');
SELECT columns_are('tenure', 'task_kinds', ARRAY['kind', 'paused', 'max_running', 'max_running_per_key', 'rate',
    'rate_period', 'running', 'due', 'rate_used', 'changed_at']);
SELECT columns_are('tenure', 'task_dependencies', ARRAY['task_id', 'after_id', 'after_status']);
SELECT is(ARRAY(SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = 'tenure.tasks'::regclass AND a.attnum > 0
                 ORDER BY a.attnum DESC LIMIT 3),
    ARRAY['after_left', 'limit_key', 'priority'], 'view tasks ends with the new columns priority, limit_key, after_left');

-- Priorities (kind prio, P = 2002-01-01 00:00:00) -------------------------------------------
SELECT pg_temp.enq(1101, 'prio', '2001-12-31 23:59:30+00');
SELECT pg_temp.enq(1102, 'prio', '2001-12-31 23:59:50+00', p_priority => 5);
SELECT pg_temp.enq(1103, 'prio', '2001-12-31 23:59:40+00', p_priority => 5);
SELECT pg_temp.enq(1104, 'prio', '2001-12-31 23:59:20+00', p_priority => -1);
SELECT pg_temp.enq(1105, 'prio', '2002-01-01 00:00:00+00', '60 s', p_priority => 10);
SELECT results_eq(
    $$SELECT pg_temp.n(id), priority, limit_key, after_left, status FROM tenure.tasks WHERE kind = 'prio' ORDER BY id$$,
    $$VALUES (1101, 0, NULL::text, 0, 'pending'), (1102, 5, NULL, 0, 'pending'), (1103, 5, NULL, 0, 'pending'),
             (1104, -1, NULL, 0, 'pending'), (1105, 10, NULL, 0, 'pending')$$,
    'tasks shows each task''s priority; no limit key, no dependency left');
SELECT is(tenure.task_set_priority(pg_temp.u(1104), 7), true, 'task_set_priority of a pending task says true');
SELECT is((SELECT priority FROM tenure.task WHERE id = pg_temp.u(1104)), 7, '... and changes its priority');
SELECT is(pg_temp.taken('a', 1, ARRAY['prio'], '2002-01-01 00:00:00+00', '1 hour'), ARRAY[1104],
    'the highest priority is leased first, though others were due before it (and its priority was raised)');
SELECT is(pg_temp.taken('a', 1, ARRAY['prio'], '2002-01-01 00:00:00+00', '1 hour'), ARRAY[1103],
    'of two tasks of equal priority, the one due first...');
SELECT is(pg_temp.taken('a', 1, ARRAY['prio'], '2002-01-01 00:00:00+00', '1 hour'), ARRAY[1102], '... then the other');
SELECT is(pg_temp.taken('a', 5, ARRAY['prio'], '2002-01-01 00:00:00+00', '1 hour'), ARRAY[1101],
    'then the lower priority; a higher priority that is not due yet waits for its time');
SELECT is(pg_temp.taken('a', 5, ARRAY['prio'], '2002-01-01 00:01:00+00', '1 hour'), ARRAY[1105], 'it is leased once due');
SELECT is(tenure.task_set_priority(pg_temp.u(1101), 3), true, 'a leased task is pending: its priority can change');
SELECT pg_temp.complete(1104, 'a', 1, '2002-01-01 00:00:01+00');
SELECT is(tenure.task_set_priority(pg_temp.u(1104), 9), false, 'task_set_priority of a finished task says false...');
SELECT is((SELECT priority FROM tenure.task WHERE id = pg_temp.u(1104)), 7, '... and changes nothing');
SELECT throws_ok($$SELECT tenure.task_set_priority(pg_temp.u(1199), 1)$$, 'TN201', NULL,
    'task_set_priority of an unknown task: TN201');
SELECT throws_ok($$SELECT tenure.task_set_priority(NULL, 1)$$, 'TN001', NULL, 'task_set_priority without an id: TN001');
SELECT throws_ok($$SELECT tenure.task_set_priority(pg_temp.u(1101), NULL)$$, 'TN001', NULL,
    'task_set_priority without a priority: TN001');

-- Task ids are time-ordered (UUID version 7): 48 bits of Unix time in milliseconds first.
CREATE FUNCTION pg_temp.id_ms(p_id uuid) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT ('x' || lpad(replace(left(p_id::text, 13), '-', ''), 16, '0'))::bit(64)::bigint $$;
CREATE TEMP TABLE uuid7 AS SELECT e.id FROM tenure.task_enqueue('uuid7', '{}') e;
SELECT results_eq(
    $$SELECT substr(t.id::text, 15, 1), substr(t.id::text, 20, 1) IN ('8', '9', 'a', 'b'),
             abs(pg_temp.id_ms(t.id) - (extract(epoch FROM t.created_at) * 1000)::bigint) < 1000
        FROM uuid7 e JOIN tenure.task t ON t.id = e.id$$,
    $$VALUES ('7', true, true)$$,
    'an enqueued task''s id is a UUID version 7 (RFC 9562 variant) whose time is its created_at');
SELECT ok((SELECT array_agg(pg_temp.id_ms(i) ORDER BY g) = array_agg(pg_temp.id_ms(i) ORDER BY i)
             FROM (SELECT g, tenure._uuid_v7() AS i FROM generate_series(1, 3) g, LATERAL pg_sleep(0.002)) x),
    'ids made later sort later (a millisecond apart)');
SELECT is((SELECT count(DISTINCT e.id)::int FROM tenure.task_enqueue_many(
               (SELECT jsonb_agg(jsonb_build_object('kind', 'uuid7')) FROM generate_series(1, 1000))) e),
    1000, 'a thousand ids made in one call are distinct');

-- Leases that ran out (kind lapse, L = 2003-01-01 00:00:00) ---------------------------------
-- A leased task is in no due index: an acquisition first ends the leases of its kinds that
-- ran out, and then looks among the tasks not leased, by priority, then due time (a lapsed
-- task is due from the end of its lease).
SELECT is(ARRAY(SELECT c.relname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                 WHERE i.indrelid = 'tenure.task'::regclass
                   AND pg_get_expr(i.indpred, i.indrelid) LIKE '%leased_at IS NULL%' ORDER BY 1),
    ARRAY['task_due', 'task_key_due', 'task_kind_due'], 'the due indexes leave leased tasks out');
SELECT pg_temp.enq(1391, 'lapse', '2003-01-01 00:00:00+00', p_priority => 5);
SELECT pg_temp.enq(1392, 'lapse', '2003-01-01 00:00:00+00', '10 s');
SELECT pg_temp.enq(1393, 'lapse', '2003-01-01 00:00:00+00', '20 s', p_priority => 5);
SELECT pg_temp.enq(1394, 'lapse-other', '2003-01-01 00:00:00+00');
SELECT is(pg_temp.taken('a', 1, ARRAY['lapse'], '2003-01-01 00:00:00+00'), ARRAY[1391], 'a leases 1391 until L + 30 s');
SELECT is(pg_temp.taken('a', 1, ARRAY['lapse-other'], '2003-01-01 00:00:00+00'), ARRAY[1394], '... and 1394 of another kind');
SELECT is(pg_temp.taken('b', 1, ARRAY['lapse'], '2003-01-01 00:00:30.000001+00'), ARRAY[1393],
    'a microsecond after the lease ran out: of priority 5, the task due first (1393, at L + 20 s) before the lapsed one');
SELECT results_eq(
    $$SELECT pg_temp.n(id), owner, epoch, attempts, leased, due, next_action, last_error LIKE 'lease of % in epoch 1 ran out at %'
        FROM tenure.tasks WHERE id IN (pg_temp.u(1391), pg_temp.u(1394)) ORDER BY id$$,
    $$VALUES (1391, NULL::uuid, 1::bigint, 1, false, true, '2003-01-01 00:00:30+00'::timestamptz, true),
             (1394, pg_temp.o('a'), 1::bigint, 0, false, true, '2003-01-01 00:00:30+00'::timestamptz, NULL)$$,
    'that acquisition ended the lapsed lease of its kind (a failed attempt, due from the end of its lease), not the other kind''s');
SELECT is(pg_temp.taken('b', 1, ARRAY['lapse'], '2003-01-01 00:00:30.000001+00'), ARRAY[1391],
    'the lapsed task next, before a lower priority due earlier');
SELECT results_eq(
    $$SELECT owner, epoch, attempts FROM tenure.task WHERE id = pg_temp.u(1391)$$,
    $$VALUES (pg_temp.o('b'), 2::bigint, 1)$$, 'leased in the next epoch, the lost lease counted as an attempt');
SELECT ok(pg_temp.would_take('c', 10000, NULL, '2003-01-01 00:00:30.000001+00') @> ARRAY[1392, 1394],
    'an acquisition of any kind ends every lapsed lease: the other kind''s task would be leased with the due one');
SELECT is(pg_temp.taken('c', 5, ARRAY['lapse', 'lapse-other'], '2003-01-01 00:00:30.000001+00'), ARRAY[1392, 1394],
    'so does one of several kinds');

SELECT pg_temp.enq(1111, 'prio2', '2002-01-01 00:00:00+00');
SELECT pg_temp.enq(1112, 'prio2', '2002-01-01 00:00:05+00', p_priority => 3);
SELECT results_eq(
    $$SELECT outcome, pg_temp.n(id) FROM pg_temp.cycle('b', 1, ARRAY['prio2'], '[]', '2002-01-01 00:00:06+00')$$,
    $$VALUES ('lease', 1112)$$,
    'task_cycle leases by priority too');
SELECT results_eq(
    $$SELECT pg_temp.n(id), created FROM tenure._task_enqueue_many(
        '[{"kind": "prio3", "id": "00000000-0000-0000-0000-000000001121", "priority": 2},
          {"kind": "prio3", "id": "00000000-0000-0000-0000-000000001122"}]', '2002-01-01 00:00:00+00', 'task_enqueue_many')$$,
    $$VALUES (1121, true), (1122, true)$$,
    'task_enqueue_many takes a priority');
SELECT results_eq(
    $$SELECT pg_temp.n(id), priority FROM tenure.task WHERE kind = 'prio3' ORDER BY id$$,
    $$VALUES (1121, 2), (1122, 0)$$,
    '... stored, 0 by default');
SELECT throws_ok(
    $$SELECT * FROM tenure.task_enqueue_many('[{"kind": "prio3", "priority": "high"}]')$$, 'TN001', NULL,
    'task_enqueue_many with a priority that is not a number: TN001');
SELECT throws_ok($$SELECT tenure.task_enqueue('prio3', p_priority => NULL)$$, 'TN001', NULL,
    'task_enqueue with a NULL priority: TN001');
SELECT is((SELECT count(*)::int FROM tenure.task WHERE kind = 'prio3'), 2, 'refused enqueues enqueue nothing');

-- Pause and resume (kinds paus and paus2, PA = 2002-02-01 00:00:00) -------------------------------
SELECT pg_temp.enq(n, 'paus', '2002-02-01 00:00:00+00'::timestamptz - (1214 - n) * interval '1 s') FROM generate_series(1201, 1203) n;
SELECT is(pg_temp.taken('a', 1, ARRAY['paus'], '2002-02-01 00:00:00+00'), ARRAY[1201], 'before the pause: leased');
SELECT results_eq(
    $$SELECT kind, paused, max_running, max_running_per_key, rate, rate_period FROM tenure.task_kind_set('paus', p_paused => true)$$,
    $$VALUES ('paus', true, NULL::integer, NULL::integer, NULL::integer, NULL::interval)$$,
    'task_kind_set pauses a kind and returns its settings');
SELECT results_eq($$SELECT paused FROM tenure.task_kinds WHERE kind = 'paus'$$, $$VALUES (true)$$,
    'task_kinds shows the paused kind');
SELECT is(pg_temp.taken('b', 10, ARRAY['paus'], '2002-02-01 00:00:01+00'), '{}', 'a paused kind leases nothing');
SELECT is_empty($$SELECT * FROM pg_temp.cycle('b', 10, ARRAY['paus'], '[]', '2002-02-01 00:00:01+00')$$,
    'not by task_cycle either, and a pause is no throttle');
SELECT lives_ok($$SELECT tenure._task_extend(pg_temp.u(1201), pg_temp.o('a'), 1, '30 s', '2002-02-01 00:00:02+00')$$,
    'a task leased before the pause runs on: its holder extends...');
SELECT lives_ok($$SELECT pg_temp.complete(1201, 'a', 1, '2002-02-01 00:00:03+00')$$, '... and completes it');
SELECT pg_temp.enq(1204, 'paus', '2002-02-01 00:00:00+00');
SELECT pg_temp.enq(1205, 'paus2', '2002-02-01 00:00:00+00');
SELECT is(pg_temp.taken('b', 10, ARRAY['paus', 'paus2'], '2002-02-01 00:00:04+00'), ARRAY[1205],
    'asked for several kinds, a worker gets the tasks of those not paused');
SELECT ok(NOT (1204 = ANY (pg_temp.would_take('b', 10000, NULL, '2002-02-01 00:00:04+00'))),
    'asked for any kind, it skips the paused kind');
SELECT lives_ok($$SELECT * FROM tenure.task_kind_set('paus', p_paused => false)$$, 'task_kind_set resumes a kind');
SELECT is_empty($$SELECT * FROM tenure.task_kinds WHERE kind = 'paus'$$,
    'a kind left without any setting disappears from task_kinds');
SELECT is(pg_temp.taken('b', 10, ARRAY['paus'], '2002-02-01 00:00:05+00'), ARRAY[1202, 1203, 1204],
    'a resumed kind leases again');

-- max_running (kind maxr, M = 2002-03-01 00:00:00) ---------------------------------------------
SELECT results_eq($$SELECT kind, paused, max_running FROM tenure.task_kind_set('maxr', p_max_running => 2)$$,
    $$VALUES ('maxr', false, 2)$$, 'task_kind_set sets a concurrency limit');
SELECT pg_temp.enq(n, 'maxr', '2002-03-01 00:00:00+00'::timestamptz - (1306 - n) * interval '10 s')
  FROM generate_series(1301, 1305) n;
SELECT is(pg_temp.taken('a', 10, ARRAY['maxr'], '2002-03-01 00:00:00+00'), ARRAY[1301, 1302],
    'a worker asking for 10 gets max_running (2), the oldest due');
SELECT is(pg_temp.taken('b', 10, ARRAY['maxr'], '2002-03-01 00:00:01+00'), '{}', 'another worker then gets none');
SELECT is_empty($$SELECT * FROM pg_temp.cycle('b', 10, ARRAY['maxr'], '[]', '2002-03-01 00:00:01+00')$$,
    'nor by task_cycle, and a concurrency limit is no throttle');
SELECT pg_temp.enq(1306, 'maxf', '2002-03-01 00:00:00.5+00');
SELECT is(pg_temp.taken('b', 1, ARRAY['maxr', 'maxf'], '2002-03-01 00:00:01+00'), ARRAY[1306],
    'a kind at its limit holds back no other kind, though its tasks are older');
SELECT pg_temp.complete(1301, 'a', 1, '2002-03-01 00:00:02+00');
SELECT is(pg_temp.taken('b', 10, ARRAY['maxr'], '2002-03-01 00:00:02+00'), ARRAY[1303],
    'a task that finishes frees its slot for one more');
SELECT results_eq(
    $$SELECT outcome, pg_temp.n(id) FROM pg_temp.cycle('a', 10, ARRAY['maxr'],
        '[{"id": "00000000-0000-0000-0000-000000001302", "epoch": 1, "outcome": "complete"}]', '2002-03-01 00:00:03+00')$$,
    $$VALUES ('complete', 1302), ('lease', 1304)$$,
    'task_cycle counts the slot its own outcome frees in the same call');
SELECT is(pg_temp.taken('c', 10, ARRAY['maxr'], '2002-03-01 00:00:40+00'), ARRAY[1303, 1305],
    'leases that ran out do not count: their tasks and the next due are leased up to the limit');
SELECT results_eq($$SELECT max_running FROM tenure.task_kind_set('maxr', p_max_running => 0)$$, $$VALUES (NULL::integer)$$,
    'max_running 0 removes the limit');
SELECT is(pg_temp.taken('c', 10, ARRAY['maxr'], '2002-03-01 00:00:41+00'), ARRAY[1304], 'and the kind leases freely');
SELECT is_empty($$SELECT * FROM tenure.task_kinds WHERE kind = 'maxr'$$, 'a kind without settings is not in task_kinds');

-- max_running_per_key, keys round-robin (kinds perk, perk2, perkn, K = 2002-04-01 00:00:00) -------------
SELECT lives_ok($$SELECT * FROM tenure.task_kind_set('perk', p_max_running_per_key => 2)$$, 'a limit per key');
SELECT pg_temp.enq(n, 'perk', '2002-04-01 00:00:00+00'::timestamptz + s * interval '1 s' , p_limit_key => k)
  FROM (VALUES (1401, 'A', -60), (1402, 'A', -50), (1403, 'A', -40), (1411, 'B', -30), (1412, 'B', -20),
               (1421, 'C', -10)) v(n, k, s);
SELECT results_eq($$SELECT limit_key FROM tenure.tasks WHERE id = pg_temp.u(1411)$$, $$VALUES ('B')$$,
    'tasks shows the limit key');
SELECT is(pg_temp.taken('a', 3, ARRAY['perk'], '2002-04-01 00:00:00+00'), ARRAY[1401, 1411, 1421],
    'keys are served round-robin: each key''s first task before any key''s second, older as it may be');
SELECT results_eq(
    $$SELECT pg_temp.n(id) FROM pg_temp.cycle('b', 10, ARRAY['perk'], '[]', '2002-04-01 00:00:01+00') ORDER BY id$$,
    $$VALUES (1402), (1412)$$,
    'then the seconds, by task_cycle too; a key at its limit (A, 2 leased) gets no third');
SELECT is(pg_temp.taken('c', 10, ARRAY['perk'], '2002-04-01 00:00:02+00'), '{}', 'every key with work is at its limit');
SELECT pg_temp.complete(1401, 'a', 1, '2002-04-01 00:00:03+00');
SELECT is(pg_temp.taken('c', 10, ARRAY['perk'], '2002-04-01 00:00:03+00'), ARRAY[1403],
    'a task of key A that finishes lets A''s next one run');
SELECT lives_ok($$SELECT * FROM tenure.task_kind_set('perk2', p_max_running => 2, p_max_running_per_key => 1)$$,
    'a limit per kind and per key');
SELECT pg_temp.enq(n, 'perk2', '2002-04-01 00:00:00+00'::timestamptz + s * interval '1 s' , p_limit_key => k)
  FROM (VALUES (1431, 'A', -60), (1432, 'A', -50), (1433, 'B', -40), (1434, 'B', -30), (1435, 'C', -20)) v(n, k, s);
SELECT is(pg_temp.taken('a', 10, ARRAY['perk2'], '2002-04-01 00:00:00+00'), ARRAY[1431, 1433],
    'both limits hold: two tasks in all, one per key, the oldest keys'' first tasks');
-- Across calls: one task per call, each done before the next call.
CREATE FUNCTION pg_temp.serve(p_kind text, p_at timestamptz) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_lease tenure.task_lease;
BEGIN
    SELECT * INTO v_lease FROM tenure._task_acquire(pg_temp.o('a'), '30 s', 1, ARRAY[p_kind], p_at);
    PERFORM tenure._task_complete(v_lease.id, pg_temp.o('a'), v_lease.epoch, 'done', NULL, p_at);
    RETURN pg_temp.n(v_lease.id);
END
$$;
SELECT lives_ok($$SELECT * FROM tenure.task_kind_set('perkt', p_max_running_per_key => 1)$$, 'a limit per key');
SELECT pg_temp.enq(n, 'perkt', '2002-04-01 00:00:00+00'::timestamptz + s * interval '1 s', p_limit_key => k)
  FROM (VALUES (1451, 'A', -60), (1452, 'A', -59), (1453, 'A', -58), (1461, 'B', -30), (1462, 'B', -29),
               (1463, 'B', -28)) v(n, k, s);
SELECT is(ARRAY(SELECT pg_temp.serve('perkt', '2002-04-01 00:00:00+00'::timestamptz + i * interval '1 s')
                  FROM generate_series(1, 6) i ORDER BY i),
    ARRAY[1451, 1461, 1452, 1462, 1453, 1463],
    'across calls too the keys take turns: key A''s tasks, all older, do not take every slot');
SELECT lives_ok($$SELECT * FROM tenure.task_kind_set('perkn', p_max_running_per_key => 1)$$, 'a limit per key...');
SELECT pg_temp.enq(n, 'perkn', '2002-04-01 00:00:00+00') FROM generate_series(1441, 1443) n;
SELECT is(pg_temp.taken('a', 10, ARRAY['perkn'], '2002-04-01 00:00:00+00'), ARRAY[1441, 1442, 1443],
    '... does not limit tasks without a key');

-- The rate limit (kind rate, R = 2002-05-01 00:00:00) -------------------------------------------------
SELECT results_eq(
    $$SELECT kind, rate, rate_period FROM tenure.task_kind_set('rate', p_rate => 2, p_rate_period => '10 s')$$,
    $$VALUES ('rate', 2, '10 s'::interval)$$,
    'task_kind_set sets a rate: 2 leases per 10 seconds');
SELECT pg_temp.enq(n, 'rate', '2002-05-01 00:00:00+00'::timestamptz - (1510 - n) * interval '1 s')
  FROM generate_series(1501, 1507) n;
SELECT is(pg_temp.taken('a', 1, ARRAY['rate'], '2002-05-01 00:00:00+00', '1 hour'), ARRAY[1501], 'a lease at R');
SELECT is(pg_temp.taken('b', 10, ARRAY['rate'], '2002-05-01 00:00:04+00', '1 hour'), ARRAY[1502],
    'another worker at R + 4 s gets one: the second of the window');
SELECT is(pg_temp.taken('c', 10, ARRAY['rate'], '2002-05-01 00:00:09.999999+00', '1 hour'), '{}',
    'the rate is used up until the lease at R leaves the window');
SELECT results_eq(
    $$SELECT outcome, id, epoch, kind, next_action FROM pg_temp.cycle('c', 5, ARRAY['rate'], '[]', '2002-05-01 00:00:09+00')$$,
    $$VALUES ('throttled', NULL::uuid, NULL::bigint, 'rate', '2002-05-01 00:00:10+00'::timestamptz)$$,
    'task_cycle reports the throttled kind, with when its rate lets the next lease through');
SELECT is(pg_temp.taken('c', 10, ARRAY['rate'], '2002-05-01 00:00:10+00', '1 hour'), ARRAY[1503],
    'at R + 10 s the window slid past the first lease: one more');
SELECT results_eq(
    $$SELECT outcome, kind, next_action FROM pg_temp.cycle('a', 5, ARRAY['rate'], '[]', '2002-05-01 00:00:11+00')$$,
    $$VALUES ('throttled', 'rate', '2002-05-01 00:00:14+00'::timestamptz)$$,
    'the next one then waits for the lease of R + 4 s to leave the window');
SELECT is(pg_temp.taken('b', 10, ARRAY['rate'], '2002-05-01 00:00:14+00', '1 hour'), ARRAY[1504], 'and gets through then');
CREATE TEMP TABLE cycled AS
SELECT outcome, pg_temp.n(id) AS n, kind, next_action
  FROM pg_temp.cycle('a', 5, ARRAY['rate'], '[]', '2002-05-01 00:01:00+00', '1 hour');
SELECT results_eq($$SELECT n, next_action FROM cycled WHERE outcome = 'lease' ORDER BY n$$,
    $$VALUES (1505, '2002-05-01 01:01:00+00'::timestamptz), (1506, '2002-05-01 01:01:00+00')$$,
    'a cycle with the window empty leases up to the rate');
SELECT results_eq($$SELECT kind, next_action FROM cycled WHERE outcome = 'throttled'$$,
    $$VALUES ('rate', '2002-05-01 00:01:10+00'::timestamptz)$$,
    '... and reports the task it held back throttled until the window has room');
SELECT is_empty(
    $$SELECT * FROM pg_temp.cycle('a', 5, ARRAY['rate'], '[]', '2002-05-01 00:01:10+00', '1 hour') WHERE outcome = 'throttled'$$,
    'a cycle that finds nothing held back reports no throttle');
SELECT lives_ok($$SELECT * FROM tenure.task_kind_set('ratew', p_rate => 1, p_rate_period => '10 s')$$, 'a rate of 1 per 10 s');
SELECT pg_temp.enq(n, 'ratew', '2002-05-02 00:00:00+00') FROM generate_series(1521, 1523) n;
SELECT is(cardinality(pg_temp.taken('a', 1, ARRAY['ratew'], '2002-05-02 00:00:00+00', '1 hour')), 1, 'one lease fills its window');
SELECT results_eq(
    $$SELECT outcome, kind, next_action FROM tenure._task_cycle(pg_temp.o('b'), '1 hour', 5, ARRAY['ratew'], '[]', '10 s',
                                                                '2002-05-02 00:00:01+00')$$,
    $$VALUES ('throttled', 'ratew', '2002-05-02 00:00:10+00'::timestamptz)$$,
    'a cycle that would wait (p_wait) reports its throttled kind once');
-- rate_used, running and due in task_kinds, by the server clock.
SELECT lives_ok($$SELECT * FROM tenure.task_kind_set('ratev', p_rate => 5, p_rate_period => '1 hour')$$, 'a rate per hour');
SELECT tenure._task_enqueue(p_kind => 'ratev', p_data => '{}'::jsonb, p_state => 'new', p_delay => '0', p_id => pg_temp.u(n),
                            p_idempotency_key => NULL::text, p_max_attempts => 5, p_priority => 0, p_limit_key => NULL::text,
                            p_after => NULL::uuid[], p_now => now() - interval '1 minute')
  FROM generate_series(1511, 1513) n;
SELECT is(cardinality(ARRAY(SELECT tenure._task_acquire(pg_temp.o('a'), '1 hour', 2, ARRAY['ratev'], now() - interval '30 s'))),
    2, 'two leases 30 s ago');
SELECT results_eq($$SELECT rate, rate_period, running::int, due::int, rate_used::int FROM tenure.task_kinds WHERE kind = 'ratev'$$,
    $$VALUES (5, '1 hour'::interval, 2, 1, 2)$$,
    'task_kinds counts leases running, tasks due and leases in the rate''s window');
SELECT lives_ok($$SELECT * FROM tenure.task_kind_set('ratev', p_max_running => 9, p_rate => 0)$$, 'rate 0 removes the rate');
SELECT results_eq($$SELECT rate, rate_used::int, max_running, running::int FROM tenure.task_kinds WHERE kind = 'ratev'$$,
    $$VALUES (NULL::integer, NULL::integer, 9, 2)$$, 'without a rate, rate_used is NULL');

-- Cancel (kinds canc, canm, C = 2002-06-01 00:00:00) ----------------------------------------------------
SELECT pg_temp.enq(n, 'canc', '2002-06-01 00:00:00+00'::timestamptz - (1610 - n) * interval '1 s',
                   p_max_attempts => CASE WHEN n = 1605 THEN 1 ELSE 5 END)
  FROM generate_series(1601, 1605) n;
SELECT is(tenure.task_cancel(pg_temp.u(1601)), true, 'task_cancel of a pending task says true');
SELECT results_eq($$SELECT status, owner, finished_at IS NOT NULL, next_action FROM tenure.tasks WHERE id = pg_temp.u(1601)$$,
    $$VALUES ('cancelled', NULL::uuid, true, NULL::timestamptz)$$, '... and the task is cancelled, finished');
SELECT is(pg_temp.taken('a', 2, ARRAY['canc'], '2002-06-01 00:00:00+00'), ARRAY[1602, 1603],
    'a cancelled task is never leased, though it was the oldest due');
SELECT is(tenure.task_cancel(pg_temp.u(1602)), true, 'task_cancel of a leased task says true');
SELECT results_eq($$SELECT status, owner FROM tenure.task WHERE id = pg_temp.u(1602)$$,
    $$VALUES ('cancelled', NULL::uuid)$$, '... and ends its lease');
SELECT matches(pg_temp.error_of(format('SELECT pg_temp.%s', call)), '^TN102: .*The task is cancelled',
    format('its holder''s %s is refused with TN102: the task is cancelled', what))
  FROM (VALUES ('complete(1602, ''a'', 1, ''2002-06-01 00:00:01+00'')', 'task_complete'),
               ('fail(1602, ''a'', 1, ''2002-06-01 00:00:01+00'')', 'task_fail')) v(call, what);
SELECT matches(pg_temp.error_of(call), '^TN102: .*The task is cancelled',
    format('its holder''s %s is refused with TN102: the task is cancelled', what))
  FROM (VALUES
    ($$SELECT tenure._task_extend(pg_temp.u(1602), pg_temp.o('a'), 1, '30 s', '2002-06-01 00:00:01+00')$$, 'task_extend'),
    ($$SELECT tenure._task_fence(pg_temp.u(1602), pg_temp.o('a'), 1, '2002-06-01 00:00:01+00')$$, 'task_fence'),
    ($$SELECT tenure._task_update(pg_temp.u(1602), pg_temp.o('a'), 1, 's', NULL, NULL, '2002-06-01 00:00:01+00')$$,
     'task_update'),
    ($$SELECT tenure._task_release(pg_temp.u(1602), pg_temp.o('a'), 1, '0', NULL, NULL, '2002-06-01 00:00:01+00')$$,
     'task_release'),
    ($$SELECT tenure.task_fence(pg_temp.u(1602), pg_temp.o('a'), 1)$$, 'task_fence by the server clock')) v(call, what);
SELECT results_eq(
    $$SELECT outcome, refused LIKE 'lease lost: %The task is cancelled%' FROM pg_temp.cycle('a', 0, ARRAY['canc'],
        '[{"id": "00000000-0000-0000-0000-000000001602", "epoch": 1, "outcome": "complete"}]', '2002-06-01 00:00:01+00')$$,
    $$VALUES ('complete', true)$$,
    'task_cycle refuses its outcome: the task is cancelled');
SELECT is(pg_temp.status(1602), 'cancelled', 'the refused writes changed nothing');
SELECT pg_temp.complete(1603, 'a', 1, '2002-06-01 00:00:02+00');
SELECT is(tenure.task_cancel(pg_temp.u(1603)), false, 'task_cancel of a done task says false...');
SELECT is(pg_temp.status(1603), 'done', '... and leaves it done');
SELECT is(tenure.task_cancel(pg_temp.u(1601)), false, 'task_cancel of a cancelled task says false');
SELECT is(pg_temp.taken('a', 2, ARRAY['canc'], '2002-06-01 00:00:03+00'), ARRAY[1604, 1605], 'two more leased');
SELECT pg_temp.fail(1605, 'a', 1, '2002-06-01 00:00:04+00');
SELECT is(tenure.task_cancel(pg_temp.u(1605)), false, 'task_cancel of a dead task says false...');
SELECT is(pg_temp.status(1605), 'dead', '... and leaves it dead');
SELECT throws_ok($$SELECT tenure.task_cancel(pg_temp.u(1699))$$, 'TN201', NULL, 'task_cancel of an unknown task: TN201');
SELECT throws_ok($$SELECT tenure.task_cancel(NULL)$$, 'TN001', NULL, 'task_cancel without an id: TN001');
SELECT lives_ok($$SELECT * FROM tenure.task_kind_set('canm', p_max_running => 1)$$, 'a limit of 1');
SELECT pg_temp.enq(n, 'canm', '2002-06-01 00:00:00+00'::timestamptz + (n - 1611) * interval '1 s') FROM generate_series(1611, 1612) n;
SELECT is(pg_temp.taken('a', 5, ARRAY['canm'], '2002-06-01 00:00:10+00'), ARRAY[1611], 'one leased at the limit of 1');
SELECT is(pg_temp.taken('b', 5, ARRAY['canm'], '2002-06-01 00:00:11+00'), '{}', 'none more');
SELECT is(tenure.task_cancel(pg_temp.u(1611)), true, 'the leased one is cancelled...');
SELECT is(pg_temp.taken('b', 5, ARRAY['canm'], '2002-06-01 00:00:12+00'), ARRAY[1612], '... and its slot is free at once');

-- Dependencies (kinds dep, depf, depc, depx, depy, depm, D = 2002-07-01 00:00:00) -------------------------
SELECT pg_temp.enq(1701, 'dep', '2002-06-30 23:59:50+00');
SELECT pg_temp.enq(1702, 'dep', '2002-06-30 23:59:51+00');
SELECT results_eq($$SELECT pg_temp.n(id), created, next_action FROM pg_temp.enq(1703, 'dep', '2002-07-01 00:00:00+00', '60 s',
                                                                                 p_after => ARRAY[1701, 1702])$$,
    $$VALUES (1703, true, '2002-07-01 00:01:00+00'::timestamptz)$$, 'a task with dependencies is created');
SELECT results_eq($$SELECT status, after_left, next_action FROM tenure.tasks WHERE id = pg_temp.u(1703)$$,
    $$VALUES ('waiting', 2, '2002-07-01 00:01:00+00'::timestamptz)$$,
    '... waiting for its two dependencies, its next action the earliest it may become due');
SELECT pg_temp.enq(1704, 'dep', '2002-07-01 00:00:00+00', p_after => ARRAY[1701]);
SELECT results_eq($$SELECT pg_temp.n(task_id), pg_temp.n(after_id), after_status FROM tenure.task_dependencies
                    WHERE task_id IN (pg_temp.u(1703), pg_temp.u(1704)) ORDER BY 1, 2$$,
    $$VALUES (1703, 1701, 'pending'), (1703, 1702, 'pending'), (1704, 1701, 'pending')$$,
    'task_dependencies lists each dependency with its status');
SELECT is(pg_temp.taken('a', 10, ARRAY['dep'], '2002-07-01 00:00:01+00'), ARRAY[1701, 1702],
    'a waiting task is never leased, though its time has come');
SELECT pg_temp.complete(1701, 'a', 1, '2002-07-01 00:00:05+00');
SELECT results_eq($$SELECT pg_temp.n(id), status, after_left, next_action FROM tenure.tasks
                    WHERE id IN (pg_temp.u(1703), pg_temp.u(1704)) ORDER BY id$$,
    $$VALUES (1703, 'waiting', 1, '2002-07-01 00:01:00+00'::timestamptz), (1704, 'pending', 0, '2002-07-01 00:00:05+00')$$,
    'a dependency done: the task waiting only for it is due from that moment, the other waits for one more');
SELECT results_eq($$SELECT after_status FROM tenure.task_dependencies WHERE task_id = pg_temp.u(1703) ORDER BY after_id$$,
    $$VALUES ('done'), ('pending')$$, 'task_dependencies follows');
SELECT pg_temp.complete(1702, 'a', 1, '2002-07-01 00:00:10+00');
SELECT results_eq($$SELECT status, after_left, next_action FROM tenure.tasks WHERE id = pg_temp.u(1703)$$,
    $$VALUES ('pending', 0, '2002-07-01 00:01:00+00'::timestamptz)$$,
    'its last dependency done, a task is pending, due at its own time when that is later');
SELECT is(pg_temp.taken('b', 10, ARRAY['dep'], '2002-07-01 00:00:59+00'), ARRAY[1704], 'leased when due...');
SELECT is(pg_temp.taken('b', 10, ARRAY['dep'], '2002-07-01 00:01:00+00'), ARRAY[1703], '... each at its time');
SELECT results_eq($$SELECT created, next_action FROM pg_temp.enq(1705, 'dep', '2002-07-01 00:02:00+00', p_after => ARRAY[1701, 1702])$$,
    $$VALUES (true, '2002-07-01 00:02:00+00'::timestamptz)$$, 'a task whose dependencies are all done...');
SELECT results_eq($$SELECT status, after_left FROM tenure.tasks WHERE id = pg_temp.u(1705)$$, $$VALUES ('pending', 0)$$,
    '... is created pending');
SELECT pg_temp.enq(1706, 'dep', '2002-07-01 00:02:00+00', p_after => '{}');
SELECT is(pg_temp.status(1706), 'pending', 'an empty list of dependencies is none');
-- A chain: only the next link becomes due.
SELECT pg_temp.enq(1781, 'depy', '2002-07-01 00:00:00+00');
SELECT pg_temp.enq(1782, 'depy', '2002-07-01 00:00:00+00', p_after => ARRAY[1781]);
SELECT pg_temp.enq(1783, 'depy', '2002-07-01 00:00:00+00', p_after => ARRAY[1782]);
SELECT is(pg_temp.taken('a', 10, ARRAY['depy'], '2002-07-01 00:00:01+00'), ARRAY[1781], 'a chain: its head is leased');
SELECT results_eq(
    $$SELECT outcome, pg_temp.n(id) FROM pg_temp.cycle('a', 0, ARRAY['depy'],
        '[{"id": "00000000-0000-0000-0000-000000001781", "epoch": 1, "outcome": "complete"}]', '2002-07-01 00:00:02+00')$$,
    $$VALUES ('complete', 1781)$$,
    'the head completed by task_cycle...');
SELECT results_eq($$SELECT status, after_left, next_action FROM tenure.tasks WHERE id = pg_temp.u(1782)$$,
    $$VALUES ('pending', 0, '2002-07-01 00:00:02+00'::timestamptz)$$, '... the next link is due at once');
SELECT is(pg_temp.taken('a', 10, ARRAY['depy'], '2002-07-01 00:00:02+00'), ARRAY[1782], 'and leased');
SELECT results_eq($$SELECT status, after_left FROM tenure.tasks WHERE id = pg_temp.u(1783)$$, $$VALUES ('waiting', 1)$$,
    'the link after it still waits');
SELECT is(tenure.task_set_priority(pg_temp.u(1783), 2), true, 'task_set_priority of a waiting task says true...');
SELECT is((SELECT priority FROM tenure.task WHERE id = pg_temp.u(1783)), 2, '... and changes its priority');
-- A dead dependency kills its dependents, cascading.
SELECT pg_temp.enq(1711, 'depf', '2002-07-01 00:00:00+00', p_max_attempts => 1);
SELECT pg_temp.enq(1712, 'depf', '2002-07-01 00:00:00+00', p_after => ARRAY[1711]);
SELECT pg_temp.enq(1713, 'depf', '2002-07-01 00:00:00+00', p_after => ARRAY[1712]);
SELECT pg_temp.enq(1714, 'depf', '2002-07-01 00:00:00+00', p_after => ARRAY[1705, 1711]);
SELECT is(pg_temp.taken('a', 10, ARRAY['depf'], '2002-07-01 00:00:01+00'), ARRAY[1711], 'only the head is leased');
SELECT pg_temp.fail(1711, 'a', 1, '2002-07-01 00:00:02+00');
SELECT results_eq(
    $$SELECT pg_temp.n(id), status, finished_at, next_action, owner FROM tenure.task
       WHERE id IN (pg_temp.u(1712), pg_temp.u(1713), pg_temp.u(1714)) ORDER BY id$$,
    $$VALUES (1712, 'dead', '2002-07-01 00:00:02+00'::timestamptz, NULL::timestamptz, NULL::uuid),
             (1713, 'dead', '2002-07-01 00:00:02+00', NULL, NULL),
             (1714, 'dead', '2002-07-01 00:00:02+00', NULL, NULL)$$,
    'its dependency dead, a task is dead too, and so are the tasks after it');
SELECT ok((SELECT last_error LIKE '%' || pg_temp.u(1711) || '%' FROM tenure.task WHERE id = pg_temp.u(1712)),
    'last_error names the dead dependency');
SELECT ok((SELECT last_error LIKE '%' || pg_temp.u(1712) || '%' OR last_error LIKE '%' || pg_temp.u(1711) || '%'
             FROM tenure.task WHERE id = pg_temp.u(1713)),
    'a task killed by the cascade says which dependency died');
SELECT results_eq($$SELECT created, next_action FROM pg_temp.enq(1715, 'depf', '2002-07-01 00:00:03+00', p_after => ARRAY[1711])$$,
    $$VALUES (true, NULL::timestamptz)$$, 'a task enqueued after a dead task is created, due never...');
SELECT results_eq($$SELECT status, last_error LIKE '%' || pg_temp.u(1711) || '%' FROM tenure.task WHERE id = pg_temp.u(1715)$$,
    $$VALUES ('dead', true)$$, '... for it is dead, saying which dependency died');
-- A cancelled dependency, too.
SELECT pg_temp.enq(1721, 'depc', '2002-07-01 00:00:00+00');
SELECT pg_temp.enq(1722, 'depc', '2002-07-01 00:00:00+00', p_after => ARRAY[1721]);
SELECT pg_temp.enq(1723, 'depc', '2002-07-01 00:00:00+00', p_after => ARRAY[1722]);
SELECT is(tenure.task_cancel(pg_temp.u(1723)), true, 'a waiting task can be cancelled');
SELECT is(pg_temp.status(1723), 'cancelled', '... and is cancelled');
SELECT pg_temp.enq(1724, 'depc', '2002-07-01 00:00:00+00', p_after => ARRAY[1722]);
SELECT is(tenure.task_cancel(pg_temp.u(1721)), true, 'cancelling the head of a chain...');
SELECT results_eq(
    $$SELECT pg_temp.n(id), status, last_error ~ (pg_temp.u(1721) || '|' || pg_temp.u(1722)) FROM tenure.task
       WHERE id IN (pg_temp.u(1722), pg_temp.u(1724)) ORDER BY id$$,
    $$VALUES (1722, 'dead', true), (1724, 'dead', true)$$,
    '... kills its dependents, cascading, saying which dependency died');
SELECT is(pg_temp.status(1723), 'cancelled', 'a cancelled dependent stays cancelled');
SELECT pg_temp.enq(1725, 'depc', '2002-07-01 00:00:00+00', p_after => ARRAY[1721]);
SELECT is(pg_temp.status(1725), 'dead', 'a task enqueued after a cancelled task is created dead');
-- Dying by a lease that ran out (in task_acquire) and by task_cycle's fail kills dependents as well.
SELECT pg_temp.enq(1731, 'depx', '2002-07-01 00:00:00+00', p_max_attempts => 1);
SELECT pg_temp.enq(1732, 'depx', '2002-07-01 00:00:00+00', p_after => ARRAY[1731]);
SELECT is(pg_temp.taken('a', 10, ARRAY['depx'], '2002-07-01 00:00:00+00'), ARRAY[1731], 'leased, its holder then vanishes');
SELECT is(pg_temp.taken('b', 10, ARRAY['depx'], '2002-07-01 00:01:00+00'), '{}',
    'its lease ran out past max_attempts: it dies in task_acquire');
SELECT results_eq($$SELECT pg_temp.n(id), status FROM tenure.task WHERE id IN (pg_temp.u(1731), pg_temp.u(1732)) ORDER BY id$$,
    $$VALUES (1731, 'dead'), (1732, 'dead')$$, '... and kills its dependent');
SELECT pg_temp.enq(1741, 'depz', '2002-07-01 00:00:00+00', p_max_attempts => 1);
SELECT pg_temp.enq(1742, 'depz', '2002-07-01 00:00:00+00', p_after => ARRAY[1741]);
SELECT is(pg_temp.taken('a', 10, ARRAY['depz'], '2002-07-01 00:00:00+00'), ARRAY[1741], 'leased');
SELECT results_eq(
    $$SELECT outcome, refused FROM pg_temp.cycle('a', 0, ARRAY['depz'],
        '[{"id": "00000000-0000-0000-0000-000000001741", "epoch": 1, "outcome": "fail", "error": "x"}]', '2002-07-01 00:00:01+00')$$,
    $$VALUES ('fail', NULL::text)$$, 'failed for good by task_cycle...');
SELECT is(pg_temp.status(1742), 'dead', '... it kills its dependent');
-- Refused: unknown ids, itself, later in the array; nothing enqueued.
SELECT throws_ok($$SELECT * FROM pg_temp.enq(1761, 'depr', '2002-07-01 00:00:00+00', p_after => ARRAY[1799])$$,
    'TN001', NULL, 'a dependency on an unknown task: TN001');
SELECT throws_ok($$SELECT * FROM pg_temp.enq(1762, 'depr', '2002-07-01 00:00:00+00', p_after => ARRAY[1701, 1762])$$,
    'TN001', NULL, 'a task after itself: TN001');
SELECT throws_ok($$SELECT * FROM tenure.task_enqueue('depr', p_after => ARRAY[NULL::uuid])$$,
    'TN001', NULL, 'a NULL dependency: TN001');
SELECT throws_ok(format($$SELECT * FROM tenure.task_enqueue_many('[
        {"kind": "depr", "id": "%s"},
        {"kind": "depr", "id": "%s", "after": ["%s"]},
        {"kind": "depr", "id": "%s"}]')$$, pg_temp.u(1763), pg_temp.u(1764), pg_temp.u(1765), pg_temp.u(1765)),
    'TN001', NULL, 'task_enqueue_many: a dependency on a later task of the array: TN001');
SELECT throws_ok(format($$SELECT * FROM tenure.task_enqueue_many('[{"kind": "depr", "id": "%s", "after": ["%s"]}]')$$,
                        pg_temp.u(1766), pg_temp.u(1766)),
    'TN001', NULL, 'task_enqueue_many: a task after itself: TN001');
SELECT throws_ok(format($$SELECT * FROM tenure.task_enqueue_many('[{"kind": "depr"}, {"kind": "depr", "after": ["%s"]}]')$$,
                        pg_temp.u(1799)),
    'TN001', NULL, 'task_enqueue_many: a dependency on an unknown task: TN001');
SELECT throws_ok($$SELECT * FROM tenure.task_enqueue_many('[{"kind": "depr", "after": "00000000-0000-0000-0000-000000001701"}]')$$,
    'TN001', NULL, 'task_enqueue_many: after that is not an array: TN001');
SELECT throws_ok($$SELECT * FROM tenure.task_enqueue_many('[{"kind": "depr", "after": ["not a uuid"]}]')$$,
    'TN001', NULL, 'task_enqueue_many: after holding something else than uuids: TN001');
SELECT throws_ok($$SELECT * FROM tenure.task_enqueue_many('[{"kind": "depr", "limit_key": 7}]')$$,
    'TN001', NULL, 'task_enqueue_many: a limit_key that is not a string: TN001');
SELECT is((SELECT count(*)::int FROM tenure.task WHERE kind = 'depr'), 0, 'refused enqueues enqueue nothing...');
SELECT is((SELECT count(*)::int FROM tenure.task_after WHERE task_id::text LIKE '%00000000176_'), 0,
    '... and record no dependency');
-- task_enqueue_many: after a task earlier in the same array.
SELECT results_eq(
    format($$SELECT pg_temp.n(id), created FROM tenure._task_enqueue_many('[
        {"kind": "depm", "id": "%s"},
        {"kind": "depm", "id": "%s", "after": ["%s", "%s"], "priority": 4, "limit_key": "L"}]', '2002-07-01 00:00:00+00',
        'task_enqueue_many')$$, pg_temp.u(1771), pg_temp.u(1772), pg_temp.u(1771), pg_temp.u(1701)),
    $$VALUES (1771, true), (1772, true)$$,
    'task_enqueue_many: a task after an earlier one of the same array (and an existing one)');
SELECT results_eq($$SELECT status, after_left, priority, limit_key FROM tenure.tasks WHERE id = pg_temp.u(1772)$$,
    $$VALUES ('waiting', 1, 4, 'L')$$, '... waits for the one not done, with its priority and limit key');
SELECT is(pg_temp.taken('a', 10, ARRAY['depm'], '2002-07-01 00:00:01+00'), ARRAY[1771], 'only the first is leased');
SELECT pg_temp.complete(1771, 'a', 1, '2002-07-01 00:00:02+00');
SELECT is(pg_temp.taken('a', 10, ARRAY['depm'], '2002-07-01 00:00:02+00'), ARRAY[1772], 'then the second');

-- task_kind_set: bad input changes nothing; 0 removes a limit --------------------------------------------
SELECT lives_ok($$SELECT * FROM tenure.task_kind_set('ksb', p_max_running => 3, p_rate => 5, p_rate_period => '1 minute')$$,
    'a kind with a concurrency limit and a rate');
CREATE TEMP TABLE kinds_before AS SELECT pg_temp.kind_rows() AS rows;
SELECT throws_ok(format('SELECT * FROM tenure.task_kind_set(%s)', args), 'TN001', NULL, 'task_kind_set refuses ' || what)
  FROM (VALUES
    ('NULL, p_paused => true', 'a NULL kind'),
    ($$'', p_paused => true$$, 'an empty kind'),
    ($$E' \t\n', p_paused => true$$, 'a blank kind'),
    ($$'ksb', p_max_running => -1$$, 'a negative max_running'),
    ($$'ksb', p_max_running_per_key => -1$$, 'a negative max_running_per_key'),
    ($$'ksb', p_rate => -1$$, 'a negative rate'),
    ($$'ksb', p_max_running => 1000001$$, 'max_running over 1,000,000'),
    ($$'ksb', p_max_running_per_key => 1000001$$, 'max_running_per_key over 1,000,000'),
    ($$'ksb', p_rate => 100001$$, 'a rate over 100,000'),
    ($$'ksb', p_rate_period => '0'$$, 'a zero period'),
    ($$'ksb', p_rate_period => '-1 second'$$, 'a negative period'),
    ($$'ksb', p_rate_period => '1 day 1 second'$$, 'a period over a day'),
    ($$'ksb', p_rate_period => '1 month'$$, 'a period of a month'),
    ($$'ksb', p_rate => 5, p_rate_period => '0'$$, 'a rate with a zero period'),
    ($$'ksc', p_rate => 5$$, 'a rate without any period'),
    ($$'ksb', p_max_running => 2, p_rate => -1$$, 'a good value with a bad one')) v(args, what);
SELECT is(pg_temp.kind_rows(), (SELECT rows FROM kinds_before), 'refused calls changed no setting');
SELECT is_empty($$SELECT * FROM tenure.task_kinds WHERE kind = 'ksc'$$, 'and created no kind');
SELECT results_eq(
    $$SELECT max_running, max_running_per_key, rate, rate_period
        FROM tenure.task_kind_set('ksb', p_max_running => 1000000, p_max_running_per_key => 1000000, p_rate => 100000,
                                  p_rate_period => '1 day')$$,
    $$VALUES (1000000, 1000000, 100000, '1 day'::interval)$$, 'the largest values are allowed');
SELECT results_eq($$SELECT paused, max_running, rate, rate_period FROM tenure.task_kind_set('ksb', p_paused => true)$$,
    $$VALUES (true, 1000000, 100000, '1 day'::interval)$$, 'NULL leaves a setting as it is');
SELECT results_eq($$SELECT rate, rate_period FROM tenure.task_kind_set('ksb', p_rate => 7)$$,
    $$VALUES (7, '1 day'::interval)$$, 'a new rate keeps the period set before');
SELECT results_eq(
    $$SELECT paused, max_running, max_running_per_key, rate
        FROM tenure.task_kind_set('ksb', p_paused => false, p_max_running => 0, p_max_running_per_key => 0)$$,
    $$VALUES (false, NULL::integer, NULL::integer, 7)$$, '0 removes a concurrency limit');
SELECT lives_ok($$SELECT * FROM tenure.task_kind_set('ksb', p_rate => 0)$$, '0 removes the rate');
SELECT is_empty($$SELECT * FROM tenure.task_kinds WHERE kind = 'ksb'$$,
    'a kind with no setting left disappears from task_kinds');
SELECT is_empty($$SELECT * FROM tenure.task_kind WHERE kind = 'ksb'$$, '... and from its table');
SELECT lives_ok($$SELECT * FROM tenure.task_kind_set('ksd', p_max_running => 0)$$,
    'removing a limit from a kind without settings is allowed...');
SELECT is_empty($$SELECT * FROM tenure.task_kinds WHERE kind = 'ksd'$$, '... and creates nothing');

-- Least privilege ------------------------------------------------------------------------------------
SELECT pg_temp.enq(1791, 'priv', '2002-07-01 00:00:00+00');
SET LOCAL ROLE tenure_worker;
SELECT lives_ok($$SELECT * FROM tenure.task_kind_set('priv', p_max_running => 1)$$, 'tenure_worker may call task_kind_set');
SELECT lives_ok($$SELECT tenure.task_set_priority('00000000-0000-0000-0000-000000001791', 2)$$,
    'tenure_worker may call task_set_priority');
SELECT lives_ok($$SELECT tenure.task_cancel('00000000-0000-0000-0000-000000001791')$$, 'tenure_worker may call task_cancel');
SELECT lives_ok($$SELECT * FROM tenure.task_kinds, tenure.task_dependencies$$,
    'tenure_worker may read task_kinds and task_dependencies');
SELECT throws_ok($$SELECT * FROM tenure.task_kind$$, '42501', NULL, 'but not the table task_kind');
RESET ROLE;

-- Retention: cancelled tasks go like done ones ------------------------------------------------------
SELECT cmp_ok(tenure._task_purge('0', false, clock_timestamp() + interval '1 day'), '>', 0::bigint,
    'task_purge of done tasks');
SELECT is((SELECT count(*)::int FROM tenure.task WHERE status = 'cancelled'), 0, 'purges cancelled ones too');
SELECT ok((SELECT count(*) > 0 FROM tenure.task WHERE status = 'dead'), 'but not dead ones without p_include_dead');

SELECT * FROM finish();
ROLLBACK;
