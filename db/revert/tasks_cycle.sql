BEGIN;

DROP TYPE tenure._task_outcome;
DROP TYPE tenure.task_cycled;

COMMIT;
