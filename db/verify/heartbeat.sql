DO $$
BEGIN
    PERFORM utype, instance_id, term, renewed_at, timeout, heartbeat_interval
       FROM tenure.heartbeat WHERE false;
    PERFORM utype, term, instance_id, started_at, ended_at, end_reason
       FROM tenure.heartbeat_term WHERE false;
    PERFORM utype, instance_id, term, renewed_at, heartbeat_age, valid_until, live
       FROM tenure.heartbeat_status WHERE false;
    IF has_table_privilege('tenure_worker', 'tenure.heartbeat', 'SELECT')
       OR has_table_privilege('tenure_worker', 'tenure.heartbeat', 'UPDATE') THEN
        RAISE 'tenure_worker must not touch tenure.heartbeat directly';
    END IF;
END
$$;
