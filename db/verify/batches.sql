DO $$
BEGIN
    PERFORM keyspace, mode, implicit_deps FROM tenure.batch_queue WHERE false;
    PERFORM keyspace, key, mode, implicit_deps, next_seq, last_selected, ready, head_at FROM tenure.batch_key WHERE false;
    PERFORM id, keyspace, key, seq, payload, status, state_keys, depends_on, attempts, enqueued_at,
            submitted_at, resolved_at, submitter, claim_epoch, detail
       FROM tenure.batch WHERE false;
    PERFORM id, keyspace, key, seq, status, pruned_at FROM tenure.batch_tombstone WHERE false;
    PERFORM keyspace, key, mode, queued, pending, halted, oldest_waiting_age FROM tenure.batch_keys WHERE false;
    PERFORM keyspace, key, seq, id, status, payload_bytes, attempts, detail FROM tenure.batches WHERE false;
    IF has_table_privilege('tenure_worker', 'tenure.batch', 'SELECT') THEN
        RAISE 'tenure_worker must not touch tenure.batch directly';
    END IF;
END
$$;
