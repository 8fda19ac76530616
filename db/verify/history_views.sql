DO $$
BEGIN
    PERFORM utype, term, instance_id, started_at, ended_at, end_reason FROM tenure.heartbeat_terms WHERE false;
    PERFORM task_id, kind, epoch, owner, leased_at, how FROM tenure.task_leases WHERE false;
    PERFORM keyspace, key, epoch, claimant, claimed_at, unclaimed_since FROM tenure.claim_grants WHERE false;
    PERFORM scope, counter, lock_id, epoch, replica, pid, acquired_at FROM tenure.replica_terms WHERE false;
    IF NOT has_table_privilege('tenure_worker', 'tenure.heartbeat_terms', 'SELECT')
       OR NOT has_table_privilege('tenure_worker', 'tenure.task_leases', 'SELECT')
       OR NOT has_table_privilege('tenure_worker', 'tenure.claim_grants', 'SELECT')
       OR NOT has_table_privilege('tenure_worker', 'tenure.replica_terms', 'SELECT') THEN
        RAISE EXCEPTION 'tenure_worker may not read the history views';
    END IF;
END
$$;
