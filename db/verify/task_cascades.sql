DO $$
BEGIN
    IF (SELECT count(*) FROM pg_trigger WHERE tgrelid = 'tenure.task'::regclass
         AND tgname IN ('task_deleted', 'task_truncated')) <> 2 THEN
        RAISE 'the triggers deleting the lease log and dependencies with their tasks are missing';
    END IF;
    IF EXISTS (SELECT FROM pg_constraint WHERE confrelid = 'tenure.task'::regclass AND contype = 'f') THEN
        RAISE 'a foreign key references tenure.task (its triggers run for every row a lease or an outcome updates)';
    END IF;
END
$$;
