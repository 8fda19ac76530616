DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'tenure_owner' AND NOT rolcanlogin) THEN
        RAISE 'role tenure_owner is missing or can log in';
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'tenure_worker' AND NOT rolcanlogin) THEN
        RAISE 'role tenure_worker is missing or can log in';
    END IF;
    IF NOT has_database_privilege('tenure_owner', current_database(), 'CREATE') THEN
        RAISE 'tenure_owner cannot create in database %', current_database();
    END IF;
END
$$;
