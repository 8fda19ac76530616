BEGIN;

SET LOCAL ROLE tenure_owner;

\ir ../procedures/tasks.sql

COMMIT;
