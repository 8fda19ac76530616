DO $$
BEGIN
    PERFORM scope, counter, lock_id, epoch, replica, holder_pid, acquired_at, renewed_at, reserved_until,
            registered_at
       FROM tenure.replica_lock WHERE false;
    PERFORM lock_id, epoch, replica, pid, acquired_at FROM tenure.replica_term WHERE false;
    PERFORM (NULL::tenure.replica_grant).acquired, (NULL::tenure.replica_holder).application_name;
    IF has_table_privilege('tenure_worker', 'tenure.replica_lock', 'SELECT') THEN
        RAISE 'tenure_worker must not touch tenure.replica_lock directly';
    END IF;
END
$$;
