BEGIN;

DROP VIEW tenure.task_status;
DROP VIEW tenure.tasks;
DROP TYPE tenure._task_input;
DROP TYPE tenure.task_enqueued;
DROP TYPE tenure.task_lease;
DROP TABLE tenure.task_lease_log;
DROP TABLE tenure.task;

COMMIT;
