-- Roles are global to the cluster and may already exist (another database of the
-- cluster, or a deployer without CREATEROLE whose administrator made them).
BEGIN;

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'tenure_owner') THEN
        CREATE ROLE tenure_owner NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'tenure_worker') THEN
        CREATE ROLE tenure_worker NOLOGIN;
    END IF;
    EXECUTE format('GRANT CREATE ON DATABASE %I TO tenure_owner', current_database());
END
$$;

COMMENT ON ROLE tenure_owner IS 'tenure: owns the schema tenure and every object in it; deploys run as this role';
COMMENT ON ROLE tenure_worker IS 'tenure: may execute the public functions of schema tenure and read its views, nothing else; grant it to application login roles';

COMMIT;
