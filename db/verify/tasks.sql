DO $$
BEGIN
    PERFORM id, kind, state, status, owner, epoch, data, attempts, max_attempts, last_error,
            idempotency_key, created_at, last_change, last_action, next_action, leased_at, finished_at
       FROM tenure.task WHERE false;
    PERFORM task_id, epoch, owner, leased_at, how FROM tenure.task_lease_log WHERE false;
    PERFORM id, leased, due FROM tenure.tasks WHERE false;
    PERFORM kind, state, status, tasks, leased, due, oldest_due_age FROM tenure.task_status WHERE false;
    IF has_table_privilege('tenure_worker', 'tenure.task', 'SELECT') THEN
        RAISE 'tenure_worker must not touch tenure.task directly';
    END IF;
END
$$;
