DO $$
DECLARE
    v_fn text;
BEGIN
    FOREACH v_fn IN ARRAY ARRAY[
        'tenure.batch_configure(text, text, boolean, text)',
        'tenure.batch_enqueue(text, text, bytea, text[], uuid[], uuid)',
        'tenure.batch_enqueue_many(text, jsonb)',
        'tenure.batch_select(text, uuid, integer, integer)',
        'tenure.batch_resolve(text, uuid, uuid, bigint, text, text)',
        'tenure.batch_resolve_many(text, uuid, jsonb)',
        'tenure.batch_skip(text, uuid)',
        'tenure.batch_retry(text, uuid)',
        'tenure.batch_pending(text, uuid)',
        'tenure.batch_check(text, uuid, text[], bigint[])'] LOOP
        IF NOT has_function_privilege('tenure_worker', v_fn, 'EXECUTE') THEN
            RAISE 'tenure_worker cannot execute %', v_fn;
        END IF;
    END LOOP;
END
$$;
