-- Retention: task_prune, heartbeat_prune, claim_prune, batch_prune and replica_prune by
-- time travel through their internal functions. Live state is never touched (pending
-- tasks, current terms, held claims, unsettled batches and what they depend on, the
-- last term of a replica lock), ages and limits are respected, oldest first; the task
-- de-duplication window and the batch tombstones; bad input; least privilege.
-- Instances: a = ...0a, b = ...0b. Times: T = 2001-01-01 00:00:00 UTC.
BEGIN;
SELECT plan(120);

-- Signatures and privileges -------------------------------------------------------
SELECT has_function('tenure', f, ARRAY['interval', 'integer'])
  FROM unnest(ARRAY['task_prune', 'heartbeat_prune', 'claim_prune', 'batch_prune', 'replica_prune']) f;
SELECT function_returns('tenure', f, ARRAY['interval', 'integer'], 'bigint')
  FROM unnest(ARRAY['task_prune', 'heartbeat_prune', 'claim_prune', 'batch_prune', 'replica_prune']) f;
SELECT ok(has_function_privilege('tenure_worker', format('tenure.%s(interval, integer)', f), 'EXECUTE'),
          f || ' is executable by tenure_worker')
  FROM unnest(ARRAY['task_prune', 'heartbeat_prune', 'claim_prune', 'batch_prune', 'replica_prune']) f;
SELECT ok(NOT has_function_privilege('tenure_worker', format('tenure._%s(interval, integer, timestamptz)', f), 'EXECUTE'),
          '_' || f || ' (time travel) is not executable by tenure_worker')
  FROM unnest(ARRAY['task_prune', 'heartbeat_prune', 'claim_prune', 'batch_prune', 'replica_prune']) f;

-- Every prune below runs under the one plan these settings leave: a nested loop semi
-- join whose inner side, the subquery that locks LIMIT p_limit rows, is rescanned for
-- each outer row. A prune that locks its candidates in such a subquery deletes more
-- than p_limit under it (each rescan skips the rows already deleted and locks the next).
SET LOCAL enable_hashjoin = off;
SET LOCAL enable_mergejoin = off;
SET LOCAL enable_material = off;
SET LOCAL enable_hashagg = off;
SET LOCAL enable_sort = off;

-- Tasks ---------------------------------------------------------------------------
-- t1 done at T+1h (idempotency key r.k1), t2 dead at T+2h, t4 done at T+3h, each after a
-- lease; t3 pending since T with a lease that ran out long ago; t5 pending, never leased.
CREATE FUNCTION pg_temp.finish(p_id uuid, p_kind text, p_key text, p_max integer, p_dead boolean, p_at timestamptz)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_lease tenure.task_lease;
BEGIN
    PERFORM tenure._task_enqueue(p_kind, '{}', 'new', '0', p_id, p_key, p_max, 0, NULL, NULL, timestamptz '2001-01-01 00:00Z');
    SELECT * INTO v_lease FROM tenure._task_acquire('00000000-0000-0000-0000-00000000000a', '1 day', 1,
                                                    ARRAY[p_kind], timestamptz '2001-01-01 00:00Z');
    IF p_dead THEN
        PERFORM tenure._task_fail(p_id, '00000000-0000-0000-0000-00000000000a', v_lease.epoch, 'boom', NULL, p_at);
    ELSIF p_at IS NOT NULL THEN
        PERFORM tenure._task_complete(p_id, '00000000-0000-0000-0000-00000000000a', v_lease.epoch, 'done', NULL, p_at);
    END IF;
END $$;
SELECT pg_temp.finish('00000000-0000-0000-0000-000000000101', 'r.t1', 'r.k1', 5, false, '2001-01-01 01:00Z');
SELECT pg_temp.finish('00000000-0000-0000-0000-000000000102', 'r.t2', NULL, 1, true, '2001-01-01 02:00Z');
SELECT pg_temp.finish('00000000-0000-0000-0000-000000000103', 'r.t3', NULL, 5, false, NULL);
SELECT pg_temp.finish('00000000-0000-0000-0000-000000000104', 'r.t4', NULL, 5, false, '2001-01-01 03:00Z');
SELECT tenure._task_enqueue('r.t5', '{}', 'new', '0', '00000000-0000-0000-0000-000000000105', NULL, 5, 0, NULL, NULL,
                            '2001-01-01 00:00Z');
SELECT is((SELECT array_agg(status ORDER BY id) FROM tenure.task WHERE kind LIKE 'r.t%'),
          ARRAY['done', 'dead', 'pending', 'done', 'pending'], 'tasks: the set-up has two done, one dead, two pending');
SELECT is((SELECT count(*) FROM tenure.task_lease_log WHERE task_id = '00000000-0000-0000-0000-000000000101'), 1::bigint,
          'tasks: t1 has a lease log row');

SELECT is(tenure._task_prune('1 day', 10000, '2001-01-02 00:59Z'), 0::bigint,
          'tasks: nothing finished more than the age ago, nothing pruned');
SELECT is((SELECT created FROM tenure._task_enqueue('r.t1', '{}', 'new', '0', NULL, 'r.k1', 5, 0, NULL, NULL, '2001-01-02 00:59Z')),
          false, 'tasks: within the window, the idempotency key still de-duplicates');
SELECT is(tenure._task_prune('1 day', 1, '2001-01-10 00:00Z'), 1::bigint, 'tasks: p_limit 1 prunes one task');
SELECT ok(NOT EXISTS (SELECT FROM tenure.task WHERE id = '00000000-0000-0000-0000-000000000101'),
          'tasks: the oldest finished task (t1) went first');
SELECT is((SELECT count(*) FROM tenure.task_lease_log WHERE task_id = '00000000-0000-0000-0000-000000000101'), 0::bigint,
          'tasks: its lease log went with it');
SELECT is(tenure._task_prune('0', 10000, '2001-01-10 00:00Z'), 2::bigint, 'tasks: the dead and the other done task go');
SELECT is((SELECT array_agg(id::text ORDER BY id) FROM tenure.task WHERE kind LIKE 'r.t%'),
          ARRAY['00000000-0000-0000-0000-000000000103', '00000000-0000-0000-0000-000000000105'],
          'tasks: pending tasks (leased or not, however old) are never pruned');
SELECT is((SELECT count(*) FROM tenure.task_lease_log WHERE task_id = '00000000-0000-0000-0000-000000000103'), 1::bigint,
          'tasks: a pending task keeps its lease log');
SELECT is(tenure._task_prune('0', 10000, '2001-01-10 00:00Z'), 0::bigint, 'tasks: nothing left to prune');
SELECT is((SELECT row(created, id <> '00000000-0000-0000-0000-000000000101')::text
             FROM tenure._task_enqueue('r.t1', '{}', 'new', '0', NULL, 'r.k1', 5, 0, NULL, NULL, '2001-01-10 00:00Z')),
          '(t,t)', 'tasks: after the window, the same idempotency key creates a new task (documented)');
SELECT is((SELECT created FROM tenure._task_enqueue('r.t1', '{}', 'new', '0', '00000000-0000-0000-0000-000000000102',
                                                     NULL, 5, 0, NULL, NULL, '2001-01-10 00:00Z')),
          true, 'tasks: and a pruned task id can be enqueued again (documented)');

-- Heartbeat -----------------------------------------------------------------------
-- r.hb: term 1 a at T (ends T+10s), term 2 b at T+1h (ends T+1h+10s), term 3 a at T+2h,
-- resigned at T+3h (ended, still current). r.hb2: term 1 a at T, never ended.
SELECT tenure._update_heartbeat('00000000-0000-0000-0000-00000000000a', 'r.hb', '10 s', '3 s', '2001-01-01 00:00Z');
SELECT tenure._update_heartbeat('00000000-0000-0000-0000-00000000000b', 'r.hb', '10 s', '3 s', '2001-01-01 01:00Z');
SELECT tenure._update_heartbeat('00000000-0000-0000-0000-00000000000a', 'r.hb', '10 s', '3 s', '2001-01-01 02:00Z');
SELECT tenure._heartbeat_resign('00000000-0000-0000-0000-00000000000a', 'r.hb', '2001-01-01 03:00Z');
SELECT tenure._update_heartbeat('00000000-0000-0000-0000-00000000000a', 'r.hb2', '10 s', '3 s', '2001-01-01 00:00Z');
SELECT is((SELECT array_agg(term ORDER BY term) FROM tenure.heartbeat_term WHERE utype = 'r.hb'), ARRAY[1, 2, 3]::bigint[],
          'heartbeat: three terms');
SELECT ok((SELECT ended_at IS NOT NULL FROM tenure.heartbeat_term WHERE utype = 'r.hb' AND term = 3),
          'heartbeat: the current term of r.hb ended (resigned)');

SELECT is(tenure._heartbeat_prune('1 day', 10000, '2001-01-01 03:00Z'), 0::bigint, 'heartbeat: nothing older than the age');
SELECT is(tenure._heartbeat_prune('1 hour', 10000, '2001-01-01 02:00Z'), 1::bigint,
          'heartbeat: the term that ended before now - age goes');
SELECT is((SELECT array_agg(term ORDER BY term) FROM tenure.heartbeat_term WHERE utype = 'r.hb'), ARRAY[2, 3]::bigint[],
          'heartbeat: term 1 was pruned, term 2 (ended after the cut-off) stays');
SELECT is(tenure._heartbeat_prune('0', 10000, '2001-01-10 00:00Z'), 1::bigint,
          'heartbeat: at age 0 only the ended term that is not current goes');
SELECT is((SELECT array_agg(utype || ':' || term ORDER BY utype) FROM tenure.heartbeat_term WHERE utype LIKE 'r.hb%'),
          ARRAY['r.hb:3', 'r.hb2:1'], 'heartbeat: the current terms stay, resigned or live');
SELECT is((SELECT array_agg(utype || ':' || term ORDER BY utype) FROM tenure.heartbeat WHERE utype LIKE 'r.hb%'),
          ARRAY['r.hb:3', 'r.hb2:1'], 'heartbeat: heartbeat entries are never deleted');
SELECT is((tenure._update_heartbeat('00000000-0000-0000-0000-00000000000b', 'r.hb', '10 s', '3 s', '2001-01-10 00:00Z')).term,
          4::bigint, 'heartbeat: the next term continues from the entry (terms only grow)');
-- the limit, oldest first: r.hbl gets terms 1..5, one an hour
SELECT tenure._update_heartbeat(CASE WHEN i % 2 = 0 THEN '00000000-0000-0000-0000-00000000000a'
                                     ELSE '00000000-0000-0000-0000-00000000000b' END::uuid,
                                'r.hbl', '10 s', '3 s', timestamptz '2001-01-01 00:00Z' + i * interval '1 hour')
  FROM generate_series(0, 4) i;
SELECT is(tenure._heartbeat_prune('0', 2, '2001-01-10 00:00Z'), 2::bigint, 'heartbeat: p_limit 2 prunes two terms');
SELECT is((SELECT array_agg(term ORDER BY term) FROM tenure.heartbeat_term WHERE utype = 'r.hbl'), ARRAY[3, 4, 5]::bigint[],
          'heartbeat: the two that ended first');

-- Claims --------------------------------------------------------------------------
-- r.c k1..k3: a takes all at T (1 min), b takes all at T+1h (a's expired at T+1min),
-- b (for a day) at T+1h (a's expired at T+1min), b releases k1 at T+2h; b's claims of k2,
-- k3 are the current ones (they expire at T+1d+1h, and are not passed on before T+10d).
SELECT tenure._claim_register('r.c', ARRAY['k1', 'k2', 'k3'], '2001-01-01 00:00Z');
SELECT is((SELECT count(*) FROM tenure._claim_take('r.c', '00000000-0000-0000-0000-00000000000a', '1 min', 10,
                                                    '2001-01-01 00:00Z')), 3::bigint, 'claims: a takes three keys');
SELECT is((SELECT count(*) FROM tenure._claim_take('r.c', '00000000-0000-0000-0000-00000000000b', '1 day', 10,
                                                    '2001-01-01 01:00Z')), 3::bigint, 'claims: b takes them over an hour later');
SELECT is(tenure._claim_release('r.c', '00000000-0000-0000-0000-00000000000b', ARRAY['k1'], '2001-01-01 02:00Z'), 1,
          'claims: b releases k1');
SELECT is((SELECT count(*) FROM tenure.claim_log WHERE keyspace = 'r.c'), 6::bigint, 'claims: six log entries');

SELECT is(tenure._claim_prune('1 day', 10000, '2001-01-02 00:00Z'), 0::bigint, 'claims: nothing ended before now - age');
SELECT is(tenure._claim_prune('1 hour', 1, '2001-01-01 02:00Z'), 1::bigint, 'claims: p_limit 1 prunes one entry');
SELECT is(tenure._claim_prune('1 hour', 10000, '2001-01-01 02:00Z'), 2::bigint,
          'claims: then a''s other two (ended at T+1min, before the cut-off T+1h)');
SELECT is((SELECT array_agg(key || ':' || epoch ORDER BY key) FROM tenure.claim_log WHERE keyspace = 'r.c'),
          ARRAY['k1:2', 'k2:2', 'k3:2'], 'claims: b''s entries stay (released after the cut-off, or held)');
SELECT is(tenure._claim_prune('0', 10000, '2001-01-10 00:00Z'), 1::bigint, 'claims: at age 0 only the released claim goes');
SELECT is((SELECT array_agg(key || ':' || epoch ORDER BY key) FROM tenure.claim_log WHERE keyspace = 'r.c'),
          ARRAY['k2:2', 'k3:2'], 'claims: the entries of claims still held (though expired) stay');
SELECT is((SELECT array_agg(key || ':' || epoch ORDER BY key) FROM tenure.claim_key WHERE keyspace = 'r.c'),
          ARRAY['k1:2', 'k2:2', 'k3:2'], 'claims: claim keys are never deleted, epochs kept');
SELECT is((SELECT array_agg(key || ':' || epoch ORDER BY key)
             FROM tenure._claim_take('r.c', '00000000-0000-0000-0000-00000000000a', '1 min', 10, '2001-01-10 00:00Z')),
          ARRAY['k1:3', 'k2:3', 'k3:3'], 'claims: the next claims continue the epochs');
SELECT is(tenure._claim_prune('8 days', 10000, '2001-01-10 00:00Z'), 0::bigint,
          'claims: b''s claims of k2, k3 ended when they expired (T+1d+1h), after the cut-off T+2d');
SELECT is(tenure._claim_prune('0', 10000, '2001-01-10 00:00Z'), 2::bigint,
          'claims: once passed on, the claims held before go');
SELECT is((SELECT array_agg(key || ':' || epoch ORDER BY key) FROM tenure.claim_log WHERE keyspace = 'r.c'),
          ARRAY['k1:3', 'k2:3', 'k3:3'], 'claims: the current claims'' entries stay');

-- Batches -------------------------------------------------------------------------
-- Queue r.b, key A: c1, c2 committed and s1 skipped at T+1h, i1 invalid at T+1h, p1
-- pending, q1 queued and depending on c2; d1 queued, depending on nothing.
SELECT is((SELECT count(*) FROM tenure._batch_enqueue_many('r.b', jsonb_build_array(
    jsonb_build_object('key', 'A', 'payload', 'YQ==', 'id', '00000000-0000-0000-0000-0000000003c1'),
    jsonb_build_object('key', 'A', 'payload', 'YQ==', 'id', '00000000-0000-0000-0000-0000000003c2'),
    jsonb_build_object('key', 'A', 'payload', 'YQ==', 'id', '00000000-0000-0000-0000-0000000003a1'),
    jsonb_build_object('key', 'A', 'payload', 'YQ==', 'id', '00000000-0000-0000-0000-0000000003b1'),
    jsonb_build_object('key', 'A', 'payload', 'YQ==', 'id', '00000000-0000-0000-0000-0000000003d1'),
    jsonb_build_object('key', 'A', 'payload', 'YQ==', 'id', '00000000-0000-0000-0000-0000000003e1',
                       'depends_on', jsonb_build_array('00000000-0000-0000-0000-0000000003c2'))),
    '2001-01-01 00:00Z', 'batch_enqueue_many') WHERE created), 6::bigint, 'batches: six enqueued');
UPDATE tenure.batch SET status = 'committed', resolved_at = '2001-01-01 01:00Z'
 WHERE id IN ('00000000-0000-0000-0000-0000000003c1', '00000000-0000-0000-0000-0000000003c2');
UPDATE tenure.batch SET status = 'skipped', resolved_at = '2001-01-01 01:00Z'
 WHERE id = '00000000-0000-0000-0000-0000000003a1';
UPDATE tenure.batch SET status = 'invalid', resolved_at = '2001-01-01 01:00Z'
 WHERE id = '00000000-0000-0000-0000-0000000003b1';
UPDATE tenure.batch SET status = 'pending', submitted_at = '2001-01-01 00:30Z'
 WHERE id = '00000000-0000-0000-0000-0000000003d1';

SELECT is(tenure._batch_prune('1 day', 10000, '2001-01-02 00:00Z'), 0::bigint, 'batches: nothing resolved before now - age');
SELECT is(tenure._batch_prune('1 hour', 1, '2001-01-10 00:00Z'), 1::bigint, 'batches: p_limit 1 prunes one batch');
SELECT is(tenure._batch_prune('1 hour', 10000, '2001-01-10 00:00Z'), 1::bigint, 'batches: then the other one');
SELECT is((SELECT array_agg(right(id::text, 3) || ':' || status ORDER BY id) FROM tenure.batch WHERE keyspace = 'r.b'),
          ARRAY['3b1:invalid', '3c2:committed', '3d1:pending', '3e1:queued'],
          'batches: committed c1 and skipped s1 went; c2 stays while queued q1 depends on it; invalid, pending, queued stay');
SELECT is((SELECT array_agg(right(id::text, 3) || ':' || key || ':' || seq || ':' || status ORDER BY id)
             FROM tenure.batch_tombstone WHERE keyspace = 'r.b'),
          ARRAY['3a1:A:3:skipped', '3c1:A:1:committed'], 'batches: each pruned batch left a tombstone');
SELECT is((SELECT row(created, key, seq)::text FROM tenure._batch_enqueue_many('r.b',
              '[{"key": "B", "payload": "Yg==", "id": "00000000-0000-0000-0000-0000000003c1"}]', '2001-01-10 00:00Z',
              'batch_enqueue_many')),
          '(f,A,1)', 'batches: a pruned id enqueued again is the existing batch (created false, its key and seq)');
SELECT ok(NOT EXISTS (SELECT FROM tenure.batch WHERE id = '00000000-0000-0000-0000-0000000003c1'),
          'batches: and nothing was created');
SELECT is((SELECT count(*) FROM tenure._batch_enqueue_many('r.b',
              '[{"key": "A", "payload": "Yg==", "id": "00000000-0000-0000-0000-0000000003f1",
                 "depends_on": ["00000000-0000-0000-0000-0000000003c1"]}]', '2001-01-10 00:00Z', 'batch_enqueue_many')
             WHERE created), 1::bigint, 'batches: f1 enqueued, depending on a pruned batch');
SELECT is((SELECT b.status FROM tenure.batch b WHERE b.id = '00000000-0000-0000-0000-0000000003f1'), 'queued',
          'batches: a dependency on a pruned committed batch is accepted and satisfied');
SELECT is((SELECT count(*) FROM tenure._batch_enqueue_many('r.b',
              '[{"key": "A", "payload": "Yg==", "id": "00000000-0000-0000-0000-0000000003f2",
                 "depends_on": ["00000000-0000-0000-0000-0000000003a1"]}]', '2001-01-10 00:00Z', 'batch_enqueue_many')
             WHERE created), 1::bigint, 'batches: f2 enqueued, depending on a pruned batch');
SELECT is((SELECT row(b.status, b.detail)::text FROM tenure.batch b WHERE b.id = '00000000-0000-0000-0000-0000000003f2'),
          '(invalid,"dependency 00000000-0000-0000-0000-0000000003a1 is skipped")',
          'batches: a dependency on a pruned skipped batch dooms the new batch, as before pruning');
SELECT throws_ok($$SELECT * FROM tenure._batch_enqueue_many('r.b2',
              '[{"key": "A", "payload": "Yg==", "id": "00000000-0000-0000-0000-0000000003c1"}]', '2001-01-10 00:00Z',
              'batch_enqueue_many')$$, 'TN001', 'tenure.batch_enqueue_many: batch 1 has the id of a batch of another queue',
          'batches: a pruned id is still refused in another queue');
-- selection counts the pruned dependency as committed: f1 is eligible once the key lets it
SELECT is((SELECT count(*) FROM tenure.batch b
            WHERE b.id = '00000000-0000-0000-0000-0000000003f1'
              AND NOT EXISTS (SELECT FROM unnest(b.depends_on) d JOIN tenure.batch x ON x.id = d
                               WHERE x.status <> 'committed')), 1::bigint,
          'batches: no unsettled dependency stands before f1');
-- tombstones go after the age again
SELECT is(tenure._batch_prune('1 hour', 10000, '2001-01-10 01:00Z'), 0::bigint,
          'batches: tombstones of exactly the age stay, and nothing else is prunable');
SELECT is((SELECT count(*) FROM tenure.batch_tombstone WHERE keyspace = 'r.b'), 2::bigint, 'batches: both tombstones kept');
SELECT is(tenure._batch_prune('1 hour', 10000, '2001-01-10 01:00:01Z'), 0::bigint,
          'batches: a second later the tombstones go (not counted as batches)');
SELECT is((SELECT count(*) FROM tenure.batch_tombstone WHERE keyspace = 'r.b'), 0::bigint, 'batches: no tombstone left');
SELECT throws_ok($$SELECT * FROM tenure._batch_enqueue_many('r.b',
              '[{"key": "A", "payload": "Yg==", "depends_on": ["00000000-0000-0000-0000-0000000003a1"]}]',
              '2001-01-10 02:00Z', 'batch_enqueue_many')$$, 'TN001',
          'tenure.batch_enqueue_many: batch 1 depends on a batch that does not exist in this queue',
          'batches: after its tombstone is gone, a dependency on it is unknown (documented)');
-- once q1 is settled, c2 is no longer needed
UPDATE tenure.batch SET status = 'committed', resolved_at = '2001-01-01 02:00Z'
 WHERE id = '00000000-0000-0000-0000-0000000003e1';
SELECT is(tenure._batch_prune('1 hour', 10000, '2001-01-10 02:00Z'), 2::bigint,
          'batches: c2 goes once its dependent q1 committed, with q1');
SELECT is((SELECT array_agg(right(id::text, 3) ORDER BY id) FROM tenure.batch WHERE keyspace = 'r.b'),
          ARRAY['3b1', '3d1', '3f1', '3f2'], 'batches: the invalid batches, the pending and the queued one stay');
SELECT is((SELECT next_seq FROM tenure.batch_key WHERE keyspace = 'r.b' AND key = 'A'), 9::bigint,
          'batches: per-key sequence numbers go on from where they were');

-- Replicas ------------------------------------------------------------------------
-- Lock 7001 with terms 1 at T, 2 at T+1h, 3 at T+2h (current); lock 7002 with terms 1..4, one an hour.
INSERT INTO tenure.replica_lock (scope, counter, lock_id, epoch, replica, holder_pid, acquired_at, renewed_at, registered_at)
VALUES ('r.rep', 0, 7001, 3, 'x', 1, '2001-01-01 02:00Z', '2001-01-01 02:00Z', '2001-01-01 00:00Z'),
       ('r.rep', 1, 7002, 4, 'y', 2, '2001-01-01 03:00Z', '2001-01-01 03:00Z', '2001-01-01 00:00Z');
INSERT INTO tenure.replica_term (lock_id, epoch, replica, pid, acquired_at)
SELECT 7001, e, 'x', 1, timestamptz '2001-01-01 00:00Z' + (e - 1) * interval '1 hour' FROM generate_series(1, 3) e
UNION ALL
SELECT 7002, e, 'y', 2, timestamptz '2001-01-01 00:00Z' + (e - 1) * interval '1 hour' FROM generate_series(1, 4) e;

SELECT is(tenure._replica_prune('1 day', 10000, '2001-01-02 00:00Z'), 0::bigint, 'replicas: nothing ended before now - age');
SELECT is(tenure._replica_prune('0', 1, '2001-01-01 01:30Z'), 1::bigint, 'replicas: p_limit 1 prunes one term');
SELECT is(tenure._replica_prune('0', 10000, '2001-01-01 01:30Z'), 1::bigint,
          'replicas: then the other term that ended before the cut-off');
SELECT is((SELECT array_agg(lock_id || ':' || epoch ORDER BY lock_id, epoch) FROM tenure.replica_term
            WHERE lock_id IN (7001, 7002)),
          ARRAY['7001:2', '7001:3', '7002:2', '7002:3', '7002:4'], 'replicas: the terms 1 went, oldest first');
SELECT is(tenure._replica_prune('0', 10000, '2001-01-10 00:00Z'), 3::bigint, 'replicas: at age 0 every ended term goes');
SELECT is((SELECT array_agg(lock_id || ':' || epoch ORDER BY lock_id) FROM tenure.replica_term WHERE lock_id IN (7001, 7002)),
          ARRAY['7001:3', '7002:4'], 'replicas: the current holder''s term of each lock stays');
SELECT is((SELECT array_agg(lock_id || ':' || epoch ORDER BY lock_id) FROM tenure.replica_lock WHERE lock_id IN (7001, 7002)),
          ARRAY['7001:3', '7002:4'], 'replicas: the lock registry is never deleted, epochs kept');

-- Bad input: TN001, nothing changed -----------------------------------------------
CREATE TEMP TABLE before_bad AS
SELECT (SELECT count(*) FROM tenure.task) + (SELECT count(*) FROM tenure.heartbeat_term)
       + (SELECT count(*) FROM tenure.claim_log) + (SELECT count(*) FROM tenure.batch)
       + (SELECT count(*) FROM tenure.batch_tombstone) + (SELECT count(*) FROM tenure.replica_term) AS n;
-- make everything prunable, so that a bad call that went ahead would show
UPDATE tenure.batch SET status = 'committed', resolved_at = '2001-01-01 00:00Z';
GRANT SELECT ON before_bad TO tenure_worker;
SET LOCAL ROLE tenure_worker;
SELECT throws_ok(format('SELECT tenure.%s(NULL, 10)', f), 'TN001',
                 format('tenure.%s: p_older_than must be a non-negative interval', f), f || ': a NULL age is refused')
  FROM unnest(ARRAY['task_prune', 'heartbeat_prune', 'claim_prune', 'batch_prune', 'replica_prune']) f;
SELECT throws_ok(format('SELECT tenure.%s(''-1 second'', 10)', f), 'TN001',
                 format('tenure.%s: p_older_than must be a non-negative interval', f), f || ': a negative age is refused')
  FROM unnest(ARRAY['task_prune', 'heartbeat_prune', 'claim_prune', 'batch_prune', 'replica_prune']) f;
SELECT throws_ok(format('SELECT tenure.%s(''0'', %s)', f, l), 'TN001',
                 format('tenure.%s: p_limit must be between 1 and 1000000', f), format('%s: p_limit %s is refused', f, l))
  FROM unnest(ARRAY['task_prune', 'heartbeat_prune', 'claim_prune', 'batch_prune', 'replica_prune']) f,
       unnest(ARRAY['NULL', '0', '1000001']) l;
SELECT throws_ok(format('SELECT tenure.%s(''100000000 years'')', f), 'TN001',
                 format('tenure.%s: p_older_than must be at most 100 years', f), f || ': an age beyond 100 years is refused')
  FROM unnest(ARRAY['task_prune', 'heartbeat_prune', 'claim_prune', 'batch_prune', 'replica_prune']) f;
-- the worker may prune; '100 years' finds nothing by the server clock
SELECT is(tenure.task_prune('100 years') + tenure.heartbeat_prune('100 years') + tenure.claim_prune('100 years')
          + tenure.batch_prune('100 years') + tenure.replica_prune('100 years', 5), 0::bigint,
          'tenure_worker may call every prune function');
RESET ROLE;
SELECT is((SELECT count(*) FROM tenure.task) + (SELECT count(*) FROM tenure.heartbeat_term)
          + (SELECT count(*) FROM tenure.claim_log) + (SELECT count(*) FROM tenure.batch)
          + (SELECT count(*) FROM tenure.batch_tombstone) + (SELECT count(*) FROM tenure.replica_term),
          (SELECT n FROM before_bad), 'bad input changed nothing');

SELECT * FROM finish();
ROLLBACK;
