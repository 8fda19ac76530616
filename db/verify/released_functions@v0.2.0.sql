-- The released functions are there and still executable by tenure_worker (the
-- checks of each area's own verify script cover the rest).
DO $$
BEGIN
    IF NOT has_function_privilege('tenure_worker', 'tenure.update_heartbeat(uuid, text, interval, interval)', 'EXECUTE')
       OR NOT has_function_privilege('tenure_worker', 'tenure.task_acquire(uuid, interval, integer, text[])', 'EXECUTE')
       OR NOT has_function_privilege('tenure_worker', 'tenure.claim_fence(text, uuid, text, bigint)', 'EXECUTE') THEN
        RAISE 'tenure_worker cannot execute the released functions';
    END IF;
END
$$;
