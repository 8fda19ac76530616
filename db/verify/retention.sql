DO $$
BEGIN
    IF to_regclass('tenure.heartbeat_term_ended') IS NULL OR to_regclass('tenure.claim_log_claimed') IS NULL THEN
        RAISE 'the retention indexes of heartbeat_term and claim_log are missing';
    END IF;
END
$$;
