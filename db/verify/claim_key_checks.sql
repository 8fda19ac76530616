DO $$
BEGIN
    IF (SELECT count(*) FROM pg_constraint
         WHERE conrelid = 'tenure.claim_key'::regclass AND contype = 'c' AND convalidated
           AND conname IN ('claim_key_keyspace_check', 'claim_key_key_check')
           AND pg_get_constraintdef(oid) LIKE '%!~~%btrim%') <> 2 THEN
        RAISE 'the blank-key checks of tenure.claim_key are not the ones of claim_key_checks';
    END IF;
END
$$;
