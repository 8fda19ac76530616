BEGIN;

DROP TYPE tenure.replica_holder;
DROP TYPE tenure.replica_grant;
DROP TABLE tenure.replica_term;
DROP TABLE tenure.replica_lock;

COMMIT;
