-- Failover rules: durability of every write (fences included), server generations,
-- and the re-basing of grants made on an earlier server. A failover is simulated by
-- recording the current generation under another timeline: the next write then
-- finds itself on a "new" server. Times: the real clock (the re-base reads it).
-- Instances: a = ...0a, b = ...0b.
BEGIN;
SELECT plan(35);

SELECT has_view('tenure', 'server_generations', 'operator view server_generations exists');
SELECT results_eq($$SELECT count(*)::int, bool_and(current) FROM tenure.server_generations$$,
    $$VALUES (1, true)$$, 'a fresh deploy has one generation, the current one');

-- Durability: every write, the fences included, waits for what the cluster promises --
SET LOCAL synchronous_commit = local;
SELECT lives_ok($$SELECT * FROM tenure.update_heartbeat('00000000-0000-0000-0000-00000000000a', 'dur', '30 s', '1 s')$$,
    'a heartbeat in a session with synchronous_commit = local');
SELECT is(current_setting('synchronous_commit'), 'on', 'local is raised to on: it would not wait for a synchronous standby');
SET LOCAL synchronous_commit = off;
SELECT lives_ok($$SELECT tenure.heartbeat_fence('00000000-0000-0000-0000-00000000000a', 'dur', 1)$$,
    'a fence in a session with synchronous_commit = off');
SELECT is(current_setting('synchronous_commit'), 'on', 'heartbeat_fence raises synchronous_commit: the fenced write is as durable as the term');
SET LOCAL synchronous_commit = off;
SELECT tenure.claim_register('dur', ARRAY['k']);
SET LOCAL synchronous_commit = off;
SELECT is(current_setting('synchronous_commit'), 'off', 'setting it off again in the same transaction');
SELECT throws_ok($$SELECT tenure.claim_fence('dur', '00000000-0000-0000-0000-00000000000a', 'k', 1)$$, 'TN103');
SET LOCAL synchronous_commit = off;
SELECT throws_ok($$SELECT tenure.task_fence(gen_random_uuid(), '00000000-0000-0000-0000-00000000000a', 1)$$, 'TN201');
SELECT is(current_setting('synchronous_commit'), 'off', 'a refused fence rolls its setting back with its subtransaction');
SET LOCAL synchronous_commit = off;
SAVEPOINT fences;
SELECT tenure.claim_take('dur', '00000000-0000-0000-0000-00000000000a', '30 s', 1);
SET LOCAL synchronous_commit = off;
SELECT lives_ok($$SELECT tenure.claim_fence('dur', '00000000-0000-0000-0000-00000000000a', 'k', 1)$$, 'claim_fence of a held key');
SELECT is(current_setting('synchronous_commit'), 'on', 'claim_fence raises synchronous_commit');
SET LOCAL synchronous_commit = remote_write;
SELECT lives_ok($$SELECT tenure.claim_fence('dur', '00000000-0000-0000-0000-00000000000a', 'k', 1)$$, 'claim_fence again');
SELECT is(current_setting('synchronous_commit'), 'remote_write', 'a stronger setting is kept');
ROLLBACK TO fences;
SET LOCAL synchronous_commit = on;

-- The system identifier is read once per session ----------------------------------------
SELECT is(current_setting('tenure.system_identifier', true), (SELECT system_identifier::text FROM pg_control_system()),
    'a session remembers the server''s system identifier after its first call');
SELECT set_config('tenure.system_identifier', '12345', false);  -- as if it had been another server's
SELECT lives_ok($$SELECT * FROM tenure.update_heartbeat('00000000-0000-0000-0000-00000000000a', 'dur', '30 s', '1 s')$$,
    'a session that remembers another identifier still writes');
SELECT results_eq($$SELECT count(*)::int, current_setting('tenure.system_identifier')
                      FROM tenure.server_generations$$,
    $$VALUES (1, '')$$, 'it started no generation (the server is the same) and forgot what it remembered');
SELECT * FROM tenure.update_heartbeat('00000000-0000-0000-0000-00000000000a', 'dur', '30 s', '1 s');
SELECT is(current_setting('tenure.system_identifier'), (SELECT system_identifier::text FROM pg_control_system()),
    'its next call remembers this server''s');

-- A term is never carried across a failover -------------------------------------------
SELECT tenure.heartbeat_resign('00000000-0000-0000-0000-00000000000a', 'dur');
SELECT results_eq(
    $$SELECT instance_id, term FROM tenure.update_heartbeat('00000000-0000-0000-0000-00000000000a', 'sched', '30 s', '1 s')$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000a'::uuid, 1::bigint)$$, 'a is primary of sched in term 1');
-- As if the new server's clock ran 29 s ahead: the entry is 1 s from expiring.
UPDATE tenure.heartbeat SET renewed_at = clock_timestamp() - interval '29 s' WHERE utype = 'sched';
-- An entry another 40 s older stands for a primary long dead.
SELECT tenure.update_heartbeat('00000000-0000-0000-0000-00000000000b', 'dead', '10 s', '1 s');
UPDATE tenure.heartbeat SET renewed_at = clock_timestamp() - interval '40 s' WHERE utype = 'dead';
UPDATE tenure.server_generation SET timeline = timeline + 100;  -- the "old" server

SELECT results_eq(
    $$SELECT instance_id, term FROM tenure.update_heartbeat('00000000-0000-0000-0000-00000000000b', 'sched', '30 s', '1 s')$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000a'::uuid, 1::bigint)$$,
    'on the new server, a bid finds the entry re-based: a is still primary, b is not elected early');
SELECT results_eq($$SELECT count(*)::int FROM tenure.server_generations$$, $$VALUES (2)$$,
    'the first write on the new server started generation 2');
SELECT ok((SELECT valid_until > clock_timestamp() + interval '29 s' FROM tenure.get_primary('sched')),
    'the live entry got its whole T on the new clock');
SELECT ok(NOT EXISTS (SELECT FROM tenure.get_primary('dead')),
    'an entry that had run out more than T before is not revived');
SELECT throws_ok($$SELECT tenure.heartbeat_fence('00000000-0000-0000-0000-00000000000a', 'sched', 1)$$,
    'TN101', NULL, 'a fence with the term of the old server is refused');
SELECT results_eq(
    $$SELECT instance_id, term FROM tenure.update_heartbeat('00000000-0000-0000-0000-00000000000a', 'sched', '30 s', '1 s')$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000a'::uuid, 2::bigint)$$,
    'the holder''s first renewal on the new server starts term 2');
SELECT results_eq(
    $$SELECT term, end_reason, generation FROM tenure.heartbeat_term WHERE utype = 'sched' ORDER BY term$$,
    $$VALUES (1::bigint, 'failover'::text, 1::bigint), (2, NULL, 2)$$,
    'term 1 ended by the failover; term 2 belongs to generation 2');
SELECT lives_ok($$SELECT tenure.heartbeat_fence('00000000-0000-0000-0000-00000000000a', 'sched', 2)$$,
    'the new term fences writes');
SELECT results_eq(
    $$SELECT instance_id, term FROM tenure.update_heartbeat('00000000-0000-0000-0000-00000000000a', 'sched', '30 s', '1 s')$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000a'::uuid, 2::bigint)$$,
    'later renewals on the same server keep term 2');

-- Task leases and claims keep their epoch and get their whole duration on the new clock --
SELECT tenure.task_enqueue('fo', p_id => '00000000-0000-0000-0000-0000000000f1');
SELECT tenure.task_enqueue('fo', p_id => '00000000-0000-0000-0000-0000000000f2');
SELECT is((SELECT count(*)::int FROM tenure.task_acquire('00000000-0000-0000-0000-00000000000a', '30 s', 2, ARRAY['fo'])),
    2, 'a leases both tasks for 30 s');
-- f1 as if the new clock ran 29 s ahead; f2's lease had run out 100 s before.
UPDATE tenure.task SET last_action = clock_timestamp() - interval '29 s', next_action = clock_timestamp() + interval '1 s'
 WHERE id = '00000000-0000-0000-0000-0000000000f1';
UPDATE tenure.task SET last_action = clock_timestamp() - interval '130 s', next_action = clock_timestamp() - interval '100 s'
 WHERE id = '00000000-0000-0000-0000-0000000000f2';
SELECT tenure.claim_take('dur', '00000000-0000-0000-0000-00000000000a', '30 s', 1);
UPDATE tenure.claim_instance SET renewed_at = clock_timestamp() - interval '29 s', expires_at = clock_timestamp() + interval '1 s'
 WHERE keyspace = 'dur';
-- A live claim detached from its instance row (as claims from before claims_follow_instance
-- are) keeps its own expiry, and is re-based on its own.
SELECT tenure.claim_register('dur2', ARRAY['d']);
SELECT tenure.claim_take('dur2', '00000000-0000-0000-0000-00000000000b', '30 s', 1);
UPDATE tenure.claim_key SET attached = false, expires_at = clock_timestamp() + interval '1 s' WHERE keyspace = 'dur2';
UPDATE tenure.claim_instance SET renewed_at = clock_timestamp() - interval '29 s', expires_at = clock_timestamp() + interval '1 s'
 WHERE keyspace = 'dur2';
UPDATE tenure.server_generation SET timeline = timeline + 100 WHERE generation = 2;

SELECT results_eq(
    $$SELECT id FROM tenure.task_acquire('00000000-0000-0000-0000-00000000000b', '30 s', 5, ARRAY['fo'])$$,
    $$VALUES ('00000000-0000-0000-0000-0000000000f2'::uuid)$$,
    'on the new server b gets only the task whose lease had long run out: the live lease was re-based');
SELECT ok((SELECT next_action > clock_timestamp() + interval '29 s' AND epoch = 1 AND owner = '00000000-0000-0000-0000-00000000000a'
             FROM tenure.task WHERE id = '00000000-0000-0000-0000-0000000000f1'),
    'the live lease keeps its owner and epoch and got its whole 30 s on the new clock');
SELECT lives_ok($$SELECT tenure.task_fence('00000000-0000-0000-0000-0000000000f1', '00000000-0000-0000-0000-00000000000a', 1)$$,
    'a task lease keeps fencing across the failover: with synchronous commits it was not lost');
SELECT ok((SELECT expires_at > clock_timestamp() + interval '29 s' FROM tenure.claims WHERE keyspace = 'dur'),
    'the live claim got its whole expiry on the new clock');
SELECT ok((SELECT NOT attached AND expires_at > clock_timestamp() + interval '29 s' FROM tenure.claim_key WHERE keyspace = 'dur2'),
    'a live detached claim got its whole expiry on the new clock too, on its own row');
SELECT results_eq($$SELECT generation FROM tenure.task_lease_log WHERE task_id = '00000000-0000-0000-0000-0000000000f2' ORDER BY epoch$$,
    $$VALUES (2::bigint), (3::bigint)$$, 'the lease log names the generation of each lease');

SELECT * FROM finish();
ROLLBACK;
