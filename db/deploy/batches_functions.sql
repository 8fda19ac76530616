BEGIN;

SET LOCAL ROLE tenure_owner;

\ir ../procedures/batches.sql

COMMIT;
