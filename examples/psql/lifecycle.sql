-- tenure's whole life cycle from psql alone, no Python: elect, claim keys, run a task, queue batches.
-- Run it as a login role that is a member of tenure_worker, on a database where tenure is deployed:
--
--   psql -X -v ON_ERROR_STOP=1 -d mydb -f examples/psql/lifecycle.sql
--
-- Every step checks what it got and stops the script with an error when it is not what tenure promises.
-- A failed check, or any error, makes psql exit with 3 (ON_ERROR_STOP). The names are made unique per run,
-- so the script can run again on the same database.
\set ON_ERROR_STOP on
\set QUIET on
\pset tuples_only on
\pset format unaligned

-- Two helpers, in this session's temporary schema (any role may create those): a check that raises
-- when its condition is not true, and one that runs a statement and expects a given SQLSTATE from it.
CREATE FUNCTION pg_temp.check(p_ok boolean, p_what text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    IF p_ok IS NOT TRUE THEN
        RAISE EXCEPTION 'check failed: %', p_what;
    END IF;
    RETURN 'ok: ' || p_what;
END
$$;
CREATE FUNCTION pg_temp.expect_error(p_sql text, p_sqlstate text, p_what text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        EXECUTE p_sql;
    EXCEPTION WHEN OTHERS THEN
        IF SQLSTATE = p_sqlstate THEN
            RETURN format('ok: %s (%s: %s)', p_what, SQLSTATE, SQLERRM);
        END IF;
        RAISE EXCEPTION 'check failed: % (got % "%", expected %)', p_what, SQLSTATE, SQLERRM, p_sqlstate;
    END;
    RAISE EXCEPTION 'check failed: % (no error, expected %)', p_what, p_sqlstate;
END
$$;

-- Two instances, a and b, with a new id per process incarnation; names unique to this run.
SELECT gen_random_uuid() AS a, gen_random_uuid() AS b, 'example-' || substr(md5(random()::text), 1, 8) AS run
\gset
\set utype :run '-scheduler'
\set services :run '-services'
\set ledger :run '-ledger'

-- 1. Election: I = 1 s, T = 3 s. The first bid wins term 1; b's bid changes nothing.
SELECT pg_temp.check(instance_id = :'a' AND term = 1, 'a is elected primary in term 1')
  FROM tenure.update_heartbeat(:'a', :'utype', '3 s', '1 s');
SELECT pg_temp.check(instance_id = :'a' AND term = 1, 'b''s bid returns the live primary a')
  FROM tenure.update_heartbeat(:'b', :'utype', '3 s', '1 s');
SELECT pg_temp.check(instance_id = :'a', 'get_primary names a') FROM tenure.get_primary(:'utype');
SELECT pg_temp.check(tenure.check_primary(:'a', :'utype') AND NOT tenure.check_primary(:'b', :'utype'),
                     'check_primary: a yes, b no');

-- A write fenced by a's term commits.
BEGIN;
SELECT pg_temp.check(true, 'a fences a write with term 1') FROM tenure.heartbeat_fence(:'a', :'utype', 1);
COMMIT;

-- a resigns (clean shutdown); b takes over at once, in term 2. a's term 1 is now stale: TN101.
SELECT pg_temp.check(tenure.heartbeat_resign(:'a', :'utype'), 'a resigns');
SELECT pg_temp.check(instance_id = :'b' AND term = 2, 'b takes over in term 2')
  FROM tenure.update_heartbeat(:'b', :'utype', '3 s', '1 s');
SELECT pg_temp.expect_error(format('SELECT tenure.heartbeat_fence(%L, %L, 1)', :'a', :'utype'), 'TN101',
                            'a write fenced by the stale term 1 is refused');

-- 2. Claims: three keys; a alone is live, so its fair share is all three.
SELECT pg_temp.check(tenure.claim_register(:'services', '{s1,s2,s3}') = 3, 'three keys registered');
SELECT pg_temp.check(count(*) = 3 AND bool_and(change = 'taken' AND epoch = 1), 'a takes all three in epoch 1')
  FROM tenure.claim_take(:'services', :'a', '30 s');
BEGIN;
SELECT pg_temp.check(true, 'a fences a write on s1 with epoch 1') FROM tenure.claim_fence(:'services', :'a', 's1', 1);
COMMIT;
SELECT pg_temp.check(NOT tenure.claim_check(:'services', :'b', 's1', 1), 'b does not hold s1');
SELECT pg_temp.check(tenure.claim_release(:'services', :'a', '{s1}') = 1, 'a releases s1');
SELECT pg_temp.expect_error(format('SELECT tenure.claim_fence(%L, %L, %L, 1)', :'services', :'a', 's1'),
                            'TN103', 'a write on the released s1 is refused');
SELECT pg_temp.check(count(*) = 1 AND min(key) = 's1' AND min(epoch) = 2, 'b takes s1 in epoch 2')
  FROM tenure.claim_take(:'services', :'b', '30 s', 1);

-- 3. A task: enqueue (idempotent by key), lease, a step, complete; then the stale epoch is refused.
SELECT id AS task FROM tenure.task_enqueue(:'run', '{"to": "a@example.org"}', p_idempotency_key => :'run') \gset
SELECT pg_temp.check(id = :'task' AND NOT created, 'the same idempotency key enqueues nothing new')
  FROM tenure.task_enqueue(:'run', '{"to": "a@example.org"}', p_idempotency_key => :'run');
SELECT epoch AS task_epoch FROM tenure.task_acquire(:'a', '30 s', 1, ARRAY[:'run']) \gset
SELECT pg_temp.check(:task_epoch = 1, 'a leases the task in epoch 1');
SELECT pg_temp.check(tenure.task_update(:'task', :'a', 1, 'sending', '{"tries": 1}') IS NOT NULL,
                     'a moves the task to state sending');
SELECT pg_temp.check(tenure.task_complete(:'task', :'a', 1, 'sent') IS NOT NULL, 'a completes the task');
SELECT pg_temp.check(status = 'done' AND state = 'sent', 'the task is done in state sent')
  FROM tenure.tasks WHERE id = :'task';
SELECT pg_temp.expect_error(format('SELECT tenure.task_complete(%L, %L, 1)', :'task', :'a'), 'TN102',
                            'completing it again is refused: the lease is gone');

-- 4. Batches, serial by default: two for key k1, submitted in order by the holder of k1's claim.
SELECT id AS batch1 FROM tenure.batch_enqueue(:'ledger', 'k1', '\x01'::bytea) \gset
SELECT pg_temp.check(seq = 2 AND created, 'the second batch of k1 gets seq 2')
  FROM tenure.batch_enqueue(:'ledger', 'k1', '\x02'::bytea);
SELECT pg_temp.check(count(*) = 1 AND min(key) = 'k1', 'a takes the claim on k1')
  FROM tenure.claim_take(:'ledger', :'a', '30 s');
SELECT id AS selected, seq AS selected_seq, claim_epoch FROM tenure.batch_select(:'ledger', :'a', 10) \gset
SELECT pg_temp.check(:'selected' = :'batch1' AND :selected_seq = 1, 'serial: only batch 1 is selected');
SELECT pg_temp.check(count(*) = 0, 'nothing more until batch 1 is resolved')
  FROM tenure.batch_select(:'ledger', :'a', 10);
SELECT pg_temp.check(tenure.batch_resolve(:'ledger', :'a', :'batch1', :claim_epoch, 'committed') = 'committed',
                     'batch 1 resolved committed');
SELECT id AS batch2, seq AS selected_seq FROM tenure.batch_select(:'ledger', :'a', 10) \gset
SELECT pg_temp.check(:selected_seq = 2, 'then batch 2 is selected');
SELECT pg_temp.expect_error(
    format('SELECT tenure.batch_resolve(%L, %L, %L, %s, %L)', :'ledger', :'b', :'batch2', :claim_epoch, 'committed'),
    'TN103', 'b, which holds no claim on k1, cannot resolve batch 2');
SELECT pg_temp.check(tenure.batch_resolve(:'ledger', :'a', :'batch2', :claim_epoch, 'committed') = 'committed',
                     'batch 2 resolved committed');
SELECT pg_temp.expect_error(
    format('SELECT tenure.batch_resolve(%L, %L, %L, %s, %L)', :'ledger', :'a', :'batch2', :claim_epoch, 'invalid'),
    'TN301', 'a committed batch cannot be resolved again');
SELECT pg_temp.check(committed = 2 AND queued = 0 AND pending = 0, 'batch_keys: k1 has 2 committed, none waiting')
  FROM tenure.batch_keys WHERE keyspace = :'ledger' AND key = 'k1';

-- Clean up what this run holds.
SELECT pg_temp.check(tenure.heartbeat_resign(:'b', :'utype'), 'b resigns');
SELECT tenure.claim_release(:'services', :'a') + tenure.claim_release(:'services', :'b')
     + tenure.claim_release(:'ledger', :'a') AS released \gset
\echo 'lifecycle.sql: every check passed'
