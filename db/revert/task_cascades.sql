-- Back to foreign keys with ON DELETE CASCADE. The triggers left no row whose task is
-- gone, but a key could not be added over one: drop any first.
BEGIN;

SET LOCAL ROLE tenure_owner;

-- Every lock the change needs, first and in the order the fleet's calls take them (a
-- task before its lease log and dependencies): taken statement by statement, a
-- running worker's call holding one of these tables and asking for another could
-- deadlock with the revert, as with the deploy.
LOCK TABLE tenure.task, tenure.task_lease_log, tenure.task_after IN ACCESS EXCLUSIVE MODE;

DROP TRIGGER task_truncated ON tenure.task;
DROP TRIGGER task_deleted ON tenure.task;
DROP FUNCTION tenure._task_truncated();
DROP FUNCTION tenure._task_deleted();

DELETE FROM tenure.task_lease_log AS l WHERE NOT EXISTS (SELECT FROM tenure.task t WHERE t.id = l.task_id);
DELETE FROM tenure.task_after AS a
 WHERE NOT EXISTS (SELECT FROM tenure.task t WHERE t.id = a.task_id)
    OR NOT EXISTS (SELECT FROM tenure.task t WHERE t.id = a.after_id);
ALTER TABLE tenure.task_lease_log
    ADD CONSTRAINT task_lease_log_task_id_fkey FOREIGN KEY (task_id) REFERENCES tenure.task (id) ON DELETE CASCADE;
ALTER TABLE tenure.task_after
    ADD CONSTRAINT task_after_task_id_fkey FOREIGN KEY (task_id) REFERENCES tenure.task (id) ON DELETE CASCADE,
    ADD CONSTRAINT task_after_after_id_fkey FOREIGN KEY (after_id) REFERENCES tenure.task (id) ON DELETE CASCADE;

COMMENT ON TABLE tenure.task_lease_log IS
    'One row per lease ever granted: task, epoch, owner and the server time it began (read after the row lock, so after every write fenced by the previous epoch committed).';
COMMENT ON TABLE tenure.task_after IS
    'Run-after dependencies: task task_id becomes due only when task after_id (and every other it names) is done.';

COMMIT;
