-- The summary views behind `tenure status`: one row per claims keyspace and per batch
-- queue, by the server clock; and table_vacuum, how clean each table is. Instance a = ...0a.
BEGIN;
SELECT plan(12);

SELECT has_view('tenure', 'claim_keyspaces', 'summary view claim_keyspaces exists');
SELECT has_view('tenure', 'batch_queues', 'summary view batch_queues exists');

SELECT is(tenure.claim_register('st', ARRAY['k1', 'k2', 'k3']), 3, 'three keys in keyspace st');
SELECT is((SELECT count(*) FROM tenure.claim_take('st', '00000000-0000-0000-0000-00000000000a', '1 hour', 2)), 2::bigint,
    'instance a takes two of them');
SELECT results_eq(
    $$SELECT keys, claimed, unclaimed, live_instances FROM tenure.claim_keyspaces WHERE keyspace = 'st'$$,
    $$VALUES (3::bigint, 2::bigint, 1::bigint, 1::bigint)$$,
    'claim_keyspaces: 3 keys, 2 claimed, 1 unclaimed, 1 live instance');

SELECT is((SELECT count(*) FROM tenure.batch_enqueue_many('st', '[{"key": "k1", "payload": "eA=="},
        {"key": "k1", "payload": "eA=="}, {"key": "k2", "payload": "eA=="}]')), 3::bigint,
    'three batches: two of k1, one of k2');
SELECT is((SELECT count(*) FROM tenure.batch_select('st', '00000000-0000-0000-0000-00000000000a', 10)), 2::bigint,
    'serial: one batch of each key is selected');
SELECT results_eq(
    $$SELECT keys, queued, pending, unknown, invalid, committed, halted_keys, oldest_waiting_age IS NOT NULL
        FROM tenure.batch_queues WHERE keyspace = 'st'$$,
    $$VALUES (2::bigint, 1::bigint, 2::bigint, 0::bigint, 0::bigint, 0::bigint, '{}'::text[], true)$$,
    'batch_queues: 2 keys, 1 queued, 2 pending, nothing halted, an oldest waiting age');

-- table_vacuum: autovacuum's rule, from the table's options or the server's settings.
SELECT has_view('tenure', 'table_vacuum', 'view table_vacuum exists');
SELECT is((SELECT v.autovacuum_at FROM tenure.table_vacuum v WHERE v.table_name = 'task'),
          (SELECT (current_setting('autovacuum_vacuum_threshold')::float8 + 0.01 * greatest(c.reltuples, 0))::bigint
             FROM pg_class c WHERE c.oid = 'tenure.task'::regclass),
    'tenure.task: autovacuum after its threshold and 1% of its rows (its own scale factor)');
SELECT is((SELECT v.autovacuum_at FROM tenure.table_vacuum v WHERE v.table_name = 'task_lease_log'),
          (SELECT (current_setting('autovacuum_vacuum_threshold')::float8
                   + current_setting('autovacuum_vacuum_scale_factor')::float8 * greatest(c.reltuples, 0))::bigint
             FROM pg_class c WHERE c.oid = 'tenure.task_lease_log'::regclass),
    'a table without options: the server''s settings');
ALTER TABLE tenure.task_lease_log SET (autovacuum_enabled = off);
SELECT is((SELECT v.autovacuum_at IS NULL FROM tenure.table_vacuum v WHERE v.table_name = 'task_lease_log'), true,
    'autovacuum off for a table: no count at which it visits');

SELECT * FROM finish();
ROLLBACK;
