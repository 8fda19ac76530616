BEGIN;

SET LOCAL ROLE tenure_owner;

DROP INDEX tenure.claim_log_claimed;
DROP INDEX tenure.heartbeat_term_ended;

COMMIT;
