BEGIN;

SET LOCAL ROLE tenure_owner;

\ir ../procedures/replicas@v0.2.0.sql

COMMIT;
