DO $$
BEGIN
    IF (SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'tenure') IS DISTINCT FROM 'tenure_owner' THEN
        RAISE 'schema tenure is missing or not owned by tenure_owner';
    END IF;
    IF NOT has_schema_privilege('tenure_worker', 'tenure', 'USAGE') THEN
        RAISE 'tenure_worker lacks USAGE on schema tenure';
    END IF;
    PERFORM 'tenure._invalid_argument(text, text, text, text, text)'::regprocedure,
            'tenure._check_name(text, text, text)'::regprocedure,
            'tenure._durable()'::regprocedure,
            'tenure._check_instance(text, text, uuid)'::regprocedure,
            'tenure._check_duration(text, text, interval)'::regprocedure;
END
$$;
