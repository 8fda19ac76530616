BEGIN;

DROP VIEW tenure.batch_queues;
DROP VIEW tenure.claim_keyspaces;

COMMIT;
