-- Back to PostgreSQL's (or the server's) defaults for vacuuming tenure.task.
BEGIN;

SET LOCAL ROLE tenure_owner;

ALTER TABLE tenure.task RESET (vacuum_index_cleanup, autovacuum_vacuum_scale_factor);

COMMIT;
