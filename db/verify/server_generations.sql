DO $$
BEGIN
    IF tenure._current_generation() IS NULL THEN
        RAISE 'tenure.server_generation has no generation';
    END IF;
    PERFORM generation FROM tenure.heartbeat LIMIT 0;
    PERFORM generation FROM tenure.heartbeat_term LIMIT 0;
    PERFORM generation FROM tenure.task_lease_log LIMIT 0;
    PERFORM generation FROM tenure.claim_log LIMIT 0;
END
$$;
