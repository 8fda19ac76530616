BEGIN;

DROP TABLE tenure.task_waiter;
DROP TYPE tenure._task_outcome;
DROP INDEX tenure.task_idempotency_key;
ALTER TABLE tenure.task ADD CONSTRAINT task_idempotency_key_key UNIQUE (idempotency_key);
DROP TYPE tenure.task_cycled;

COMMIT;
