BEGIN;

SET LOCAL ROLE tenure_owner;

\ir ../procedures/tasks@v0.1.0.sql

COMMIT;
