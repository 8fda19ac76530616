BEGIN;

SET LOCAL ROLE tenure_owner;

\ir ../procedures/claims.sql

COMMIT;
