BEGIN;

SET LOCAL ROLE tenure_owner;

\ir ../procedures/batches@v0.2.0.sql

COMMIT;
