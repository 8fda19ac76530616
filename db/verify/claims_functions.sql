DO $$
DECLARE
    v_fn text;
BEGIN
    FOREACH v_fn IN ARRAY ARRAY[
        'tenure.claim_register(text, text[])',
        'tenure.claim_retire(text, text[])',
        'tenure.claim_renew(text, uuid, interval)',
        'tenure.claim_take(text, uuid, interval, integer)',
        'tenure.claim_release(text, uuid, text[])',
        'tenure.claim_check(text, uuid, text, bigint)',
        'tenure.claim_fence(text, uuid, text, bigint)'] LOOP
        IF NOT has_function_privilege('tenure_worker', v_fn, 'EXECUTE') THEN
            RAISE 'tenure_worker cannot execute %', v_fn;
        END IF;
    END LOOP;
END
$$;
