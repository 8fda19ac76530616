BEGIN;

DROP VIEW tenure.claim_instances;
DROP VIEW tenure.claims;
DROP TYPE tenure.claim_grant;
DROP TABLE tenure.claim_log;
DROP TABLE tenure.claim_instance;
DROP TABLE tenure.claim_key;

COMMIT;
