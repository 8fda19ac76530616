BEGIN;

DROP VIEW tenure.heartbeat_status;
DROP TYPE tenure.primary_entry;
DROP TABLE tenure.heartbeat_term;
DROP TABLE tenure.heartbeat;

COMMIT;
