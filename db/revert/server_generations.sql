BEGIN;

SET LOCAL ROLE tenure_owner;

ALTER TABLE tenure.claim_log DROP COLUMN generation;
ALTER TABLE tenure.task_lease_log DROP COLUMN generation;
ALTER TABLE tenure.heartbeat_term DROP CONSTRAINT heartbeat_term_end_reason_check;
UPDATE tenure.heartbeat_term SET end_reason = 'expired' WHERE end_reason = 'failover';
ALTER TABLE tenure.heartbeat_term ADD CONSTRAINT heartbeat_term_end_reason_check
    CHECK (end_reason IN ('expired', 'resigned'));
ALTER TABLE tenure.heartbeat_term DROP COLUMN generation;
ALTER TABLE tenure.heartbeat DROP COLUMN generation;
DROP VIEW tenure.server_generations;
DROP FUNCTION tenure._current_generation();
DROP FUNCTION tenure._server_timeline();
DROP TABLE tenure.server_generation;

COMMIT;
