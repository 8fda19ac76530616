BEGIN;

SET LOCAL ROLE tenure_owner;

\ir ../procedures/claims@v0.1.0.sql

COMMIT;
