DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'tenure.claim_key'::regclass AND attname = 'attached')
       OR to_regclass('tenure.claim_key_detached') IS NULL
       OR (SELECT count(*) FROM pg_trigger WHERE tgrelid = 'tenure.claim_instance'::regclass
            AND tgname IN ('claim_instance_deleted', 'claim_instance_truncated')) <> 2 THEN
        RAISE 'claims do not follow their instance: claim_key.attached, claim_key_detached or the claim_instance triggers are missing';
    END IF;
END
$$;
