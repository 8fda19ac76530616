DO $$
BEGIN
    PERFORM keyspace, keys, claimed, unclaimed, longest_unclaimed, live_instances FROM tenure.claim_keyspaces WHERE false;
    PERFORM keyspace, keys, queued, pending, unknown, invalid, committed, halted_keys, oldest_waiting_age
       FROM tenure.batch_queues WHERE false;
END
$$;
