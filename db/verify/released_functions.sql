-- The released functions are there and still executable by tenure_worker (the
-- checks of each area's own verify script cover the rest).
DO $$
BEGIN
    IF NOT has_function_privilege('tenure_worker', 'tenure.update_heartbeat(uuid, text, interval, interval)', 'EXECUTE')
       OR NOT has_function_privilege('tenure_worker', 'tenure.task_acquire(uuid, interval, integer, text[])', 'EXECUTE')
       OR NOT has_function_privilege('tenure_worker', 'tenure.claim_fence(text, uuid, text, bigint)', 'EXECUTE')
       OR NOT has_function_privilege('tenure_worker', 'tenure.batch_enqueue_many(text, jsonb)', 'EXECUTE')
       OR NOT has_function_privilege('tenure_worker', 'tenure.replica_acquire(text, interval, integer, text)', 'EXECUTE')
       OR NOT has_function_privilege('tenure_worker', 'tenure.schedule_tick()', 'EXECUTE')
       OR NOT has_function_privilege('tenure_worker', 'tenure.task_cancel(uuid)', 'EXECUTE')
       OR NOT has_function_privilege('tenure_worker', 'tenure.task_kind_set(text, boolean, integer, integer, integer, interval)', 'EXECUTE') THEN
        RAISE 'tenure_worker cannot execute the released functions';
    END IF;
END
$$;
