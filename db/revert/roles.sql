-- The roles are shared by every database of the cluster that has tenure: drop them
-- only when nothing else still depends on them.
BEGIN;

DO $$
DECLARE
    v_role text;
BEGIN
    EXECUTE format('REVOKE CREATE ON DATABASE %I FROM tenure_owner', current_database());
    FOREACH v_role IN ARRAY ARRAY['tenure_worker', 'tenure_owner'] LOOP
        BEGIN
            EXECUTE format('DROP ROLE IF EXISTS %I', v_role);
        EXCEPTION WHEN dependent_objects_still_exist THEN
            RAISE NOTICE 'role % kept: other databases of this cluster still use it', v_role;
        END;
    END LOOP;
END
$$;

COMMIT;
