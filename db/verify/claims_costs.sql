DO $$
BEGIN
    PERFORM keyspace, keys FROM tenure.claim_keyspace WHERE false;
    PERFORM held_count, held_at, held_until FROM tenure.claim_instance WHERE false;
    IF to_regclass('tenure.claim_key_free') IS NULL THEN
        RAISE 'index tenure.claim_key_free is missing';
    END IF;
    IF (SELECT count(*) FROM pg_trigger WHERE tgrelid = 'tenure.claim_key'::regclass
         AND tgname IN ('claim_key_inserted', 'claim_key_deleted', 'claim_key_truncated')) <> 3 THEN
        RAISE 'the key-count triggers of tenure.claim_key are missing';
    END IF;
    IF EXISTS (SELECT FROM tenure.claim_key k GROUP BY k.keyspace
                HAVING count(*) IS DISTINCT FROM (SELECT s.keys FROM tenure.claim_keyspace s WHERE s.keyspace = k.keyspace)) THEN
        RAISE 'tenure.claim_keyspace does not count the keys of tenure.claim_key';
    END IF;
    IF has_table_privilege('tenure_worker', 'tenure.claim_keyspace', 'SELECT') THEN
        RAISE 'tenure_worker must not touch tenure.claim_keyspace directly';
    END IF;
END
$$;
