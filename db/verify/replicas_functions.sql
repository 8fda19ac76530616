DO $$
DECLARE
    v_public text[] := ARRAY[
        'tenure.replica_lock_id(integer, text)',
        'tenure.replica_register(integer, text)',
        'tenure.replica_acquire(text, interval, integer, text)',
        'tenure.replica_guard(bigint, integer, text)',
        'tenure.replica_ping(text, bigint, interval, integer, text)',
        'tenure.replica_release(text, integer, text)',
        'tenure.replica_holder(integer, text)'];
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
    IF has_function_privilege('tenure_worker', 'tenure._replica_acquire(text, interval, integer, text, timestamptz)', 'EXECUTE') THEN
        RAISE 'internal functions must not be executable by tenure_worker';
    END IF;
    PERFORM scope, lock_id, pid, application_name, replica, epoch, since FROM tenure.replicas WHERE false;
END
$$;
