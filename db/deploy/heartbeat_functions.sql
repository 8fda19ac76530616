BEGIN;

SET LOCAL ROLE tenure_owner;

\ir ../procedures/heartbeat@v0.1.0.sql

COMMIT;
