DO $$
DECLARE
    v_fn text;
BEGIN
    FOREACH v_fn IN ARRAY ARRAY[
        'tenure.task_enqueue_many(jsonb)',
        'tenure.task_acquire(uuid, interval, integer, text[])',
        'tenure.task_extend(uuid, uuid, bigint, interval)',
        'tenure.task_update(uuid, uuid, bigint, text, jsonb, interval)',
        'tenure.task_release(uuid, uuid, bigint, interval, text, jsonb)',
        'tenure.task_complete(uuid, uuid, bigint, text, jsonb)',
        'tenure.task_fail(uuid, uuid, bigint, text, interval)',
        'tenure.task_fence(uuid, uuid, bigint)',
        'tenure.task_eject(uuid, uuid, interval)',
        'tenure.task_requeue(uuid, interval)',
        'tenure.task_purge(interval, boolean)'] LOOP
        IF NOT has_function_privilege('tenure_worker', v_fn, 'EXECUTE') THEN
            RAISE 'tenure_worker cannot execute %', v_fn;
        END IF;
    END LOOP;
    -- task_enqueue gained arguments after v0.2.0 (the task controls): either signature.
    IF NOT EXISTS (SELECT FROM pg_proc p
                    WHERE p.oid::regprocedure::text LIKE 'tenure.task_enqueue(text,jsonb,text,interval,uuid,text,integer%'
                      AND has_function_privilege('tenure_worker', p.oid, 'EXECUTE')) THEN
        RAISE 'tenure_worker cannot execute tenure.task_enqueue';
    END IF;
END
$$;
