BEGIN;

SET LOCAL ROLE tenure_owner;

\ir ../procedures/heartbeat.sql

COMMIT;
