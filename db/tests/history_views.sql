-- The history views (heartbeat_terms, task_leases, claim_grants, replica_terms): each
-- shows its history table's rows, and tenure_worker may read them but not the tables.
-- Instances: a = ...0a, b = ...0b.
BEGIN;
SELECT plan(13);

SELECT has_view('tenure', 'heartbeat_terms', 'view heartbeat_terms exists');
SELECT has_view('tenure', 'task_leases', 'view task_leases exists');
SELECT has_view('tenure', 'claim_grants', 'view claim_grants exists');
SELECT has_view('tenure', 'replica_terms', 'view replica_terms exists');

SELECT is((SELECT term FROM tenure.update_heartbeat('00000000-0000-0000-0000-00000000000a', 'hv', '10 s')), 1::bigint,
    'a becomes primary of hv in term 1');
SELECT results_eq(
    $$SELECT term, instance_id, ended_at IS NULL, end_reason FROM tenure.heartbeat_terms WHERE utype = 'hv'$$,
    $$VALUES (1::bigint, '00000000-0000-0000-0000-00000000000a'::uuid, true, NULL::text)$$,
    'heartbeat_terms: term 1 of a, not ended');

SELECT lives_ok($$SELECT tenure.task_enqueue('hv-kind', p_id => '00000000-0000-0000-0000-0000000000f1')$$,
    'a task is enqueued');
SELECT is((SELECT count(*) FROM tenure.task_acquire('00000000-0000-0000-0000-00000000000b', '1 min', 1, ARRAY['hv-kind'])),
    1::bigint, 'b acquires it');
SELECT results_eq(
    $$SELECT task_id, kind, epoch, owner, how FROM tenure.task_leases WHERE kind = 'hv-kind'$$,
    $$VALUES ('00000000-0000-0000-0000-0000000000f1'::uuid, 'hv-kind', 1::bigint,
              '00000000-0000-0000-0000-00000000000b'::uuid, 'acquired')$$,
    'task_leases: the lease of epoch 1 to b, acquired');

SELECT is(tenure.claim_register('hv', ARRAY['k1']), 1, 'one key in keyspace hv');
SELECT is((SELECT count(*) FROM tenure.claim_take('hv', '00000000-0000-0000-0000-00000000000a', '1 hour', 1)), 1::bigint,
    'a takes it');
SELECT results_eq(
    $$SELECT key, epoch, claimant FROM tenure.claim_grants WHERE keyspace = 'hv'$$,
    $$VALUES ('k1', 1::bigint, '00000000-0000-0000-0000-00000000000a'::uuid)$$,
    'claim_grants: k1 to a in epoch 1');

SELECT ok(
    has_table_privilege('tenure_worker', 'tenure.heartbeat_terms', 'SELECT')
    AND has_table_privilege('tenure_worker', 'tenure.task_leases', 'SELECT')
    AND has_table_privilege('tenure_worker', 'tenure.claim_grants', 'SELECT')
    AND has_table_privilege('tenure_worker', 'tenure.replica_terms', 'SELECT')
    AND NOT has_table_privilege('tenure_worker', 'tenure.heartbeat_term', 'SELECT')
    AND NOT has_table_privilege('tenure_worker', 'tenure.task_lease_log', 'SELECT')
    AND NOT has_table_privilege('tenure_worker', 'tenure.claim_log', 'SELECT')
    AND NOT has_table_privilege('tenure_worker', 'tenure.replica_term', 'SELECT'),
    'tenure_worker reads the history views, not the history tables');

SELECT * FROM finish();
ROLLBACK;
