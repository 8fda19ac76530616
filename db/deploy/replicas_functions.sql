BEGIN;

SET LOCAL ROLE tenure_owner;

\ir ../procedures/replicas.sql

COMMIT;
