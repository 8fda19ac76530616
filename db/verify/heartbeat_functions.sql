DO $$
DECLARE
    v_public text[] := ARRAY[
        'tenure.update_heartbeat(uuid, text, interval, interval)',
        'tenure.get_primary(text)',
        'tenure.check_primary(uuid, text)',
        'tenure.heartbeat_resign(uuid, text)',
        'tenure.heartbeat_fence(uuid, text, bigint)'];
    v_fn text;
BEGIN
    FOREACH v_fn IN ARRAY v_public LOOP
        IF NOT has_function_privilege('tenure_worker', v_fn, 'EXECUTE') THEN
            RAISE 'tenure_worker cannot execute %', v_fn;
        END IF;
        IF NOT (SELECT prosecdef FROM pg_proc WHERE oid = v_fn::regprocedure) THEN
            RAISE '% is not SECURITY DEFINER', v_fn;
        END IF;
    END LOOP;
    IF has_function_privilege('public', 'tenure._update_heartbeat(uuid, text, interval, interval, timestamptz)', 'EXECUTE') THEN
        RAISE 'internal functions must not be executable by PUBLIC';
    END IF;
END
$$;
