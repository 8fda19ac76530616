-- task_cycle: a worker's round trip. Outcomes apply the transitions of the single-task
-- functions (checked on twin tasks), are fenced one by one (a refused outcome is
-- reported, the others apply), bad input changes nothing, and leases are granted as
-- task_acquire grants them.
-- Instances: a = ...0a, b = ...0b. Tasks ...7xx go through task_cycle, their twins ...8xx
-- through the single-task functions; ...9xx for refusals. Times: enqueue at
-- E = 2001-01-01, lease at L = E + 1 s, report at R = E + 6 s.
BEGIN;
SELECT plan(40);

CREATE FUNCTION pg_temp.cycle(p_limit integer, p_outcomes text, p_at text DEFAULT '2001-01-01 00:00:06+00')
RETURNS SETOF tenure.task_cycled
LANGUAGE sql
AS $$ SELECT * FROM tenure._task_cycle('00000000-0000-0000-0000-00000000000a', '30 s', p_limit, ARRAY['cyc'],
                                      p_outcomes::jsonb, NULL, p_at::timestamptz) $$;

-- Everything of a task but its id, to compare twins.
CREATE FUNCTION pg_temp.shape(p_id text)
RETURNS TABLE (status text, state text, data jsonb, owner uuid, epoch bigint, attempts integer, last_error text,
               next_action timestamptz, leased_at timestamptz, finished_at timestamptz, last_change timestamptz,
               last_action timestamptz)
LANGUAGE sql
AS $$ SELECT status, state, data, owner, epoch, attempts, last_error, next_action, leased_at, finished_at,
             last_change, last_action
        FROM tenure.task WHERE id = p_id::uuid $$;

SELECT has_function('tenure', 'task_cycle', ARRAY['uuid', 'interval', 'integer', 'text[]', 'jsonb', 'interval']);
SELECT function_returns('tenure', 'task_cycle', ARRAY['uuid', 'interval', 'integer', 'text[]', 'jsonb', 'interval'],
    'setof tenure.task_cycled');

-- Tasks 701-708 and their twins 801-808; 707 and 807 die at their first failure.
SELECT tenure._task_enqueue('cyc', '{"n": 1}', 'new', '0', format('00000000-0000-0000-0000-000000000%s', n)::uuid,
                            NULL, CASE WHEN n IN (707, 807) THEN 1 ELSE 5 END, 0, NULL, NULL, '2001-01-01 00:00:00+00')
  FROM generate_series(701, 708) n0, LATERAL (VALUES (n0), (n0 + 100)) v(n);

-- Leasing ---------------------------------------------------------------------------
SELECT is_empty($$SELECT * FROM pg_temp.cycle(0, '[]', '2001-01-01 00:00:01+00')$$,
    'limit 0 and no outcome: nothing happens');
SELECT results_eq(
    $$SELECT count(*)::int, min(outcome), max(outcome), min(epoch)::int, bool_and(refused IS NULL),
             bool_and(next_action = '2001-01-01 00:00:31+00'), bool_and(data = '{"n": 1}')
        FROM pg_temp.cycle(100, '[]', '2001-01-01 00:00:01+00')$$,
    $$VALUES (16, 'lease', 'lease', 1, true, true, true)$$,
    'a cycle with free slots leases due tasks like task_acquire: epoch 1, lease until now + p_lease, with their data');
SELECT results_eq(
    $$SELECT count(*)::int, bool_and(how = 'acquired' AND leased_at = '2001-01-01 00:00:01+00'
                                     AND owner = '00000000-0000-0000-0000-00000000000a')
        FROM tenure.task_lease_log WHERE task_id::text LIKE '00000000-0000-0000-0000-0000000007%'
                                     OR task_id::text LIKE '00000000-0000-0000-0000-0000000008%'$$,
    $$VALUES (16, true)$$,
    'each lease a cycle grants is in the lease log');

-- Outcomes apply the transitions of the single-task functions --------------------------
SELECT results_eq(
    $$SELECT id::text, outcome, refused, state, attempts, next_action FROM pg_temp.cycle(0, '[
        {"id": "00000000-0000-0000-0000-000000000701", "epoch": 1, "outcome": "complete"},
        {"id": "00000000-0000-0000-0000-000000000702", "epoch": 1, "outcome": "complete", "state": "sent", "data": {"r": 2}},
        {"id": "00000000-0000-0000-0000-000000000703", "epoch": 1, "outcome": "release"},
        {"id": "00000000-0000-0000-0000-000000000704", "epoch": 1, "outcome": "release", "delay": 60, "state": "wait", "data": {"w": 1}},
        {"id": "00000000-0000-0000-0000-000000000705", "epoch": 1, "outcome": "fail", "error": "boom"},
        {"id": "00000000-0000-0000-0000-000000000706", "epoch": 1, "outcome": "fail", "error": "boom", "retry_delay": 2.5},
        {"id": "00000000-0000-0000-0000-000000000707", "epoch": 1, "outcome": "fail", "error": "last", "retry_delay": null},
        {"id": "00000000-0000-0000-0000-000000000708", "epoch": 1, "outcome": "extend"}]')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000701', 'complete', NULL::text, 'done', 0, NULL::timestamptz),
             ('00000000-0000-0000-0000-000000000702', 'complete', NULL, 'sent', 0, NULL),
             ('00000000-0000-0000-0000-000000000703', 'release', NULL, 'new', 0, '2001-01-01 00:00:06+00'),
             ('00000000-0000-0000-0000-000000000704', 'release', NULL, 'wait', 0, '2001-01-01 00:01:06+00'),
             ('00000000-0000-0000-0000-000000000705', 'fail', NULL, 'new', 1, '2001-01-01 00:00:07+00'),
             ('00000000-0000-0000-0000-000000000706', 'fail', NULL, 'new', 1, '2001-01-01 00:00:08.5+00'),
             ('00000000-0000-0000-0000-000000000707', 'fail', NULL, 'new', 1, NULL),
             ('00000000-0000-0000-0000-000000000708', 'extend', NULL, 'new', 0, '2001-01-01 00:00:36+00')$$,
    'one row per outcome, in input order: applied, with the state, attempts and next action after it');
SELECT tenure._task_complete('00000000-0000-0000-0000-000000000801', '00000000-0000-0000-0000-00000000000a', 1, 'done', NULL, '2001-01-01 00:00:06+00');
SELECT tenure._task_complete('00000000-0000-0000-0000-000000000802', '00000000-0000-0000-0000-00000000000a', 1, 'sent', '{"r": 2}', '2001-01-01 00:00:06+00');
SELECT tenure._task_release('00000000-0000-0000-0000-000000000803', '00000000-0000-0000-0000-00000000000a', 1, '0', NULL, NULL, '2001-01-01 00:00:06+00');
SELECT tenure._task_release('00000000-0000-0000-0000-000000000804', '00000000-0000-0000-0000-00000000000a', 1, '60 s', 'wait', '{"w": 1}', '2001-01-01 00:00:06+00');
SELECT tenure._task_fail('00000000-0000-0000-0000-000000000805', '00000000-0000-0000-0000-00000000000a', 1, 'boom', NULL, '2001-01-01 00:00:06+00');
SELECT tenure._task_fail('00000000-0000-0000-0000-000000000806', '00000000-0000-0000-0000-00000000000a', 1, 'boom', '2.5 s', '2001-01-01 00:00:06+00');
SELECT tenure._task_fail('00000000-0000-0000-0000-000000000807', '00000000-0000-0000-0000-00000000000a', 1, 'last', NULL, '2001-01-01 00:00:06+00');
SELECT tenure._task_extend('00000000-0000-0000-0000-000000000808', '00000000-0000-0000-0000-00000000000a', 1, '30 s', '2001-01-01 00:00:06+00');
SELECT results_eq(
    format('SELECT * FROM pg_temp.shape(%L)', '00000000-0000-0000-0000-000000000' || n),
    format('SELECT * FROM pg_temp.shape(%L)', '00000000-0000-0000-0000-000000000' || (n + 100)),
    format('outcome %s leaves task %s as the single-task function leaves its twin %s: %s', n - 700, n, n + 100, what))
  FROM (VALUES (701, 'complete'), (702, 'complete with state and data'), (703, 'release now'),
               (704, 'release later in a new state with new data'), (705, 'fail with the default backoff'),
               (706, 'fail with a retry delay'), (707, 'fail past max_attempts: dead'), (708, 'extend')) v(n, what);
SELECT results_eq(
    $$SELECT status, finished_at FROM tenure.task WHERE id = '00000000-0000-0000-0000-000000000707'$$,
    $$VALUES ('dead', '2001-01-01 00:00:06+00'::timestamptz)$$,
    'a failure past max_attempts leaves the task dead, finished at the time of the call');

-- Fencing: each outcome on its own --------------------------------------------------------
SELECT tenure._task_enqueue('cyc', '{}', 'new', '0', format('00000000-0000-0000-0000-000000000%s', n)::uuid,
                            NULL, 5, 0, NULL, NULL, '2001-01-01 00:00:00+00')
  FROM generate_series(901, 903) n;
SELECT tenure._task_acquire('00000000-0000-0000-0000-00000000000a', '30 s', 3, ARRAY['cyc'], '2001-01-01 00:00:40+00');
SELECT tenure._task_eject('00000000-0000-0000-0000-000000000902', '00000000-0000-0000-0000-00000000000b', '30 s',
                          '2001-01-01 00:00:41+00');
SELECT results_eq(
    $$SELECT id::text, outcome, refused FROM pg_temp.cycle(0, '[
        {"id": "00000000-0000-0000-0000-000000000901", "epoch": 1, "outcome": "complete"},
        {"id": "00000000-0000-0000-0000-000000000902", "epoch": 1, "outcome": "complete"},
        {"id": "00000000-0000-0000-0000-0000000009ff", "epoch": 1, "outcome": "complete"},
        {"id": "00000000-0000-0000-0000-000000000903", "epoch": 2, "outcome": "extend"}]', '2001-01-01 00:00:42+00')$$,
    $$VALUES ('00000000-0000-0000-0000-000000000901', 'complete', NULL::text),
             ('00000000-0000-0000-0000-000000000902', 'complete',
              'lease lost: The task is in epoch 2, held by 00000000-0000-0000-0000-00000000000b.'),
             ('00000000-0000-0000-0000-0000000009ff', 'complete', 'no task 00000000-0000-0000-0000-0000000009ff'),
             ('00000000-0000-0000-0000-000000000903', 'extend',
              'lease lost: The task is in epoch 1, held by 00000000-0000-0000-0000-00000000000a.')$$,
    'outcomes under a lost lease or for an unknown task are refused with the reason; the others apply');
SELECT results_eq(
    $$SELECT id::text, status, owner::text, epoch::int FROM tenure.task
       WHERE id::text LIKE '00000000-0000-0000-0000-0000000009%' ORDER BY id$$,
    $$VALUES ('00000000-0000-0000-0000-000000000901', 'done', NULL::text, 1),
             ('00000000-0000-0000-0000-000000000902', 'pending', '00000000-0000-0000-0000-00000000000b', 2),
             ('00000000-0000-0000-0000-000000000903', 'pending', '00000000-0000-0000-0000-00000000000a', 1)$$,
    'a refused outcome changes nothing');
SELECT results_eq(
    $$SELECT outcome, refused FROM pg_temp.cycle(0,
        '[{"id": "00000000-0000-0000-0000-000000000903", "epoch": 1, "outcome": "complete"}]', '2001-01-01 00:01:10.000001+00')$$,
    $$VALUES ('complete', 'lease lost: The lease ran out at 2001-01-01 00:01:10+00 (now 2001-01-01 00:01:10.000001+00).')$$,
    'an outcome after the lease ran out is refused');
SELECT results_eq(
    $$SELECT outcome, refused IS NULL FROM pg_temp.cycle(1,
        '[{"id": "00000000-0000-0000-0000-000000000901", "epoch": 1, "outcome": "complete"}]', '2001-01-01 00:01:11+00')$$,
    $$VALUES ('complete', false), ('lease', true)$$,
    'a refused outcome does not keep the same call from leasing');
-- Bad input: TN001 naming what is wrong, nothing changed ----------------------------------
SELECT throws_ok($$SELECT * FROM pg_temp.cycle(0, '{}')$$, 'TN001',
    'tenure.task_cycle: p_outcomes must be a JSON array of outcomes', 'outcomes that are not an array');
SELECT throws_ok($$SELECT * FROM tenure.task_cycle('00000000-0000-0000-0000-00000000000a', '30 s', 0, NULL, NULL)$$,
    'TN001', 'tenure.task_cycle: p_outcomes must be a JSON array of outcomes', 'NULL outcomes');
SELECT throws_ok(format('SELECT * FROM pg_temp.cycle(0, %L)', o), 'TN001', 'tenure.task_cycle: ' || message, what)
  FROM (VALUES
    ('[{"id": "00000000-0000-0000-0000-000000000708", "epoch": 2, "outcome": "extend"}, 7]',
     'outcome 2 must be a JSON object', 'an outcome that is not an object'),
    ('[{"id": "not-a-uuid", "epoch": 1, "outcome": "complete"}]', 'outcome 1 needs an id, a uuid as a string', 'a bad id'),
    ('[{"epoch": 1, "outcome": "complete"}]', 'outcome 1 needs an id, a uuid as a string', 'no id'),
    ('[{"id": "00000000-0000-0000-0000-000000000708", "epoch": 0, "outcome": "complete"}]',
     'outcome 1 needs an epoch, an integer of at least 1', 'epoch 0'),
    ('[{"id": "00000000-0000-0000-0000-000000000708", "epoch": 1.5, "outcome": "complete"}]',
     'outcome 1 needs an epoch, an integer of at least 1', 'a fractional epoch'),
    ('[{"id": "00000000-0000-0000-0000-000000000708", "epoch": 2, "outcome": "done"}]',
     'outcome 1 needs an outcome: complete, release, fail or extend', 'an unknown outcome'),
    ('[{"id": "00000000-0000-0000-0000-000000000708", "epoch": 2, "outcome": "complete", "error": "x"}]',
     'outcome 1 has keys that a complete outcome does not take: {"error": "x"} (it takes id, epoch, outcome, state, data)',
     'a key the outcome does not take'),
    ('[{"id": "00000000-0000-0000-0000-000000000708", "epoch": 2, "outcome": "complete", "state": " "}]',
     'outcome 1 has a state that is not a non-empty string of at most 200 characters', 'a blank state'),
    ('[{"id": "00000000-0000-0000-0000-000000000708", "epoch": 2, "outcome": "fail"}]',
     'outcome 1 needs an error, a non-empty string describing the failure', 'a failure without an error'),
    ('[{"id": "00000000-0000-0000-0000-000000000708", "epoch": 2, "outcome": "release", "delay": -1}]',
     'outcome 1 has a delay that is not a number of seconds from 0 to 100 years', 'a negative delay'),
    ('[{"id": "00000000-0000-0000-0000-000000000708", "epoch": 2, "outcome": "release", "delay": "1 minute"}]',
     'outcome 1 has a delay that is not a number of seconds from 0 to 100 years', 'a delay that is not a number'),
    ('[{"id": "00000000-0000-0000-0000-000000000708", "epoch": 2, "outcome": "extend"},
       {"id": "00000000-0000-0000-0000-000000000708", "epoch": 2, "outcome": "extend"}]',
     'outcome 2 names a task that an earlier outcome names', 'a task named twice')) v(o, message, what);
SELECT throws_ok($$SELECT * FROM tenure.task_cycle('00000000-0000-0000-0000-00000000000a', '30 s', -1, NULL, '[]')$$,
    'TN001', 'tenure.task_cycle: p_limit must be between 0 and 10000', 'a negative limit');
SELECT throws_ok($$SELECT * FROM tenure.task_cycle(NULL, '30 s', 1, NULL, '[]')$$,
    'TN001', NULL, 'no owner');
SELECT throws_ok($$SELECT * FROM tenure.task_cycle('00000000-0000-0000-0000-00000000000a', '30 s', 1, '{}', '[]')$$,
    'TN001', NULL, 'an empty list of kinds');
SELECT throws_ok($$SELECT * FROM pg_temp.cycle(0, '[
        {"id": "00000000-0000-0000-0000-000000000708", "epoch": 1, "outcome": "complete"},
        {"id": "00000000-0000-0000-0000-000000000708", "epoch": 1, "outcome": "oops"}]')$$,
    'TN001', NULL, 'a request with a good outcome and a bad one');
SELECT results_eq(
    $$SELECT status, next_action FROM tenure.task WHERE id = '00000000-0000-0000-0000-000000000708'$$,
    $$VALUES ('pending', '2001-01-01 00:00:36+00'::timestamptz)$$,
    'a refused request changes nothing, not even its good outcomes');

-- Least privilege ---------------------------------------------------------------------------
SET LOCAL ROLE tenure_worker;
SELECT lives_ok($$SELECT * FROM tenure.task_cycle('00000000-0000-0000-0000-00000000000a', '30 s', 0, NULL, '[]')$$,
    'tenure_worker may call task_cycle');
SELECT throws_ok(
    $$SELECT * FROM tenure._task_cycle('00000000-0000-0000-0000-00000000000a', '30 s', 0, NULL, '[]', NULL, now())$$,
    '42501', NULL, 'tenure_worker cannot call the time-travel function');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
