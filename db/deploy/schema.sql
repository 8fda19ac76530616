BEGIN;

CREATE SCHEMA tenure AUTHORIZATION tenure_owner;
COMMENT ON SCHEMA tenure IS 'tenure: leader election, claims, leases and queues decided by PostgreSQL alone';
GRANT USAGE ON SCHEMA tenure TO tenure_worker;

SET LOCAL ROLE tenure_owner;

-- Functions are executable by PUBLIC by default: tenure's are not. (A per-schema
-- default cannot revoke the global one, hence no IN SCHEMA.)
ALTER DEFAULT PRIVILEGES FOR ROLE tenure_owner REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;

\ir ../procedures/errors@v0.1.0.sql

COMMIT;
