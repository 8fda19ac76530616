DO $$
BEGIN
    PERFORM keyspace, key, claimant, epoch, expires_at, claimed_at, unclaimed_since, registered_at
       FROM tenure.claim_key WHERE false;
    PERFORM keyspace, instance_id, renewed_at, expires_at FROM tenure.claim_instance WHERE false;
    PERFORM keyspace, key, epoch, claimant, claimed_at, unclaimed_since FROM tenure.claim_log WHERE false;
    PERFORM keyspace, key, claimant, epoch, live, unclaimed_for FROM tenure.claims WHERE false;
    PERFORM keyspace, instance_id, live, keys_held, fair_share FROM tenure.claim_instances WHERE false;
    IF has_table_privilege('tenure_worker', 'tenure.claim_key', 'SELECT') THEN
        RAISE 'tenure_worker must not touch tenure.claim_key directly';
    END IF;
END
$$;
