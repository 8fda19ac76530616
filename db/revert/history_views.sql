BEGIN;

DROP VIEW tenure.replica_terms;
DROP VIEW tenure.claim_grants;
DROP VIEW tenure.task_leases;
DROP VIEW tenure.heartbeat_terms;

COMMIT;
