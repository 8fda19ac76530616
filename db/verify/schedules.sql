DO $$
DECLARE
    v_public text[] := ARRAY[
        'tenure.cron_next(text, timestamptz, text)',
        'tenure.schedule_set(text, text, text, interval, text, jsonb, integer, text, integer)',
        'tenure.schedule_pause(text)',
        'tenure.schedule_resume(text)',
        'tenure.schedule_drop(text)',
        'tenure.schedule_run_now(text)',
        'tenure.schedule_tick()'];
    v_fn text;
BEGIN
    PERFORM name, kind, cron, every, timezone, data, max_attempts, catch_up, catch_up_limit, paused_at, next_slot,
            last_slot, last_task_id, created_at, updated_at
       FROM tenure.schedule WHERE false;
    PERFORM (NULL::tenure.schedule_info).next_slot, (NULL::tenure.schedule_slot).task_id;
    PERFORM name, paused, next_slot, last_slot, last_task_id, last_task_status, catch_up FROM tenure.schedules WHERE false;
    IF NOT EXISTS (SELECT FROM tenure.schedule_time_zone WHERE name = 'Europe/Zurich') THEN
        RAISE 'tenure.schedule_time_zone does not know Europe/Zurich';
    END IF;
    FOREACH v_fn IN ARRAY v_public LOOP
        IF NOT has_function_privilege('tenure_worker', v_fn, 'EXECUTE') THEN
            RAISE 'tenure_worker cannot execute %', v_fn;
        END IF;
        IF NOT (SELECT prosecdef FROM pg_proc WHERE oid = v_fn::regprocedure) THEN
            RAISE '% is not SECURITY DEFINER', v_fn;
        END IF;
    END LOOP;
    IF has_table_privilege('tenure_worker', 'tenure.schedule', 'SELECT')
       OR has_table_privilege('tenure_worker', 'tenure.schedule', 'UPDATE') THEN
        RAISE 'tenure_worker must not touch tenure.schedule directly';
    END IF;
END
$$;
