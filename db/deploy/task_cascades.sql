-- No foreign key references tenure.task: statement triggers delete what referred to
-- deleted tasks. PostgreSQL ran a foreign key's triggers for every row a lease or an
-- outcome updated, though no key changes there: the lease log's check on each new lease
-- row (an index lookup and a row lock through SPI, a fifth of a lease's server time),
-- and the two keys of tenure.task_after (about a tenth of a completion, on every task,
-- with dependencies or not). Their rows are written only by tenure's own functions,
-- with the tasks they name locked: the lease log in the statement that leases the task,
-- the dependencies after the tasks they run after were locked (shared) and found.
-- What the keys' ON DELETE CASCADE did, the triggers do: any DELETE of tasks
-- (retention, or an operator's) takes their lease log and dependencies with them, and
-- TRUNCATE of tenure.task empties both. Like a key's cascade, which runs as the owner of
-- the referencing table, they run as the schema's owner: a role that may delete tasks
-- needs no privilege on the tables they clean.
BEGIN;

SET LOCAL ROLE tenure_owner;

-- Every lock the change needs, first and in the order the fleet's calls take them (a
-- task before its lease log and dependencies): taken statement by statement, the
-- CREATE TRIGGER's lock on tenure.task was raised by the ALTER TABLEs, and a running
-- worker's call that had read tenure.task and went on to write it deadlocked with the
-- deploy (seen in the rolling upgrade test).
LOCK TABLE tenure.task, tenure.task_lease_log, tenure.task_after IN ACCESS EXCLUSIVE MODE;

CREATE FUNCTION tenure._task_deleted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM tenure.task_lease_log AS l USING deleted_tasks d WHERE l.task_id = d.id;
    DELETE FROM tenure.task_after AS a USING deleted_tasks d WHERE a.task_id = d.id;
    DELETE FROM tenure.task_after AS a USING deleted_tasks d WHERE a.after_id = d.id;
    RETURN NULL;
END
$$;

-- DELETE, not TRUNCATE: a TRUNCATE naming these tables too (the quick way, which the
-- bench takes) still has them open when this runs, and a TRUNCATE of them would fail.
CREATE FUNCTION tenure._task_truncated() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM tenure.task_lease_log;
    DELETE FROM tenure.task_after;
    RETURN NULL;
END
$$;

CREATE TRIGGER task_deleted AFTER DELETE ON tenure.task
    REFERENCING OLD TABLE AS deleted_tasks FOR EACH STATEMENT EXECUTE FUNCTION tenure._task_deleted();
CREATE TRIGGER task_truncated AFTER TRUNCATE ON tenure.task
    FOR EACH STATEMENT EXECUTE FUNCTION tenure._task_truncated();

ALTER TABLE tenure.task_lease_log DROP CONSTRAINT task_lease_log_task_id_fkey;
ALTER TABLE tenure.task_after DROP CONSTRAINT task_after_task_id_fkey, DROP CONSTRAINT task_after_after_id_fkey;

COMMENT ON TABLE tenure.task_lease_log IS
    'One row per lease ever granted: task, epoch, owner and the server time it began (read after the row lock, so after every write fenced by the previous epoch committed). Written only by the functions that lease; deleted with its task (trigger task_deleted, and task_truncated for TRUNCATE).';
COMMENT ON TABLE tenure.task_after IS
    'Run-after dependencies: task task_id becomes due only when task after_id (and every other it names) is done. Written only by the enqueue functions; deleted with either task (trigger task_deleted, and task_truncated for TRUNCATE).';

COMMIT;
