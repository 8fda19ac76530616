-- Argument checks shared by every public function. Each raises tenure's
-- invalid_argument (TN001) naming the function and the argument, so that bad input
-- fails before anything is changed.

CREATE OR REPLACE FUNCTION tenure._invalid_argument(
    p_function text, p_argument text, p_problem text, p_found text, p_hint text
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'tenure.%: % %', p_function, p_argument, p_problem
        USING ERRCODE = 'TN001',
              DETAIL = format('%s was %s.', p_argument, coalesce(p_found, 'NULL')),
              HINT = p_hint || ' Nothing was changed.';
END
$$;

-- tenure's writes must survive a server crash whatever the caller's session says:
-- a term granted, then lost in a crash, could be granted again to someone else.
-- Raise synchronous_commit from off to local for this transaction; never lower it.
CREATE OR REPLACE FUNCTION tenure._durable() RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'local', true);
    END IF;
END
$$;

-- True for NULL, '' and text made only of whitespace of any kind (tabs, newlines,
-- no-break and other Unicode spaces), which no name, key or state may be.
CREATE OR REPLACE FUNCTION tenure._blank(p_value text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT p_value IS NULL
          OR p_value ~ '^[[:space:]\u0085\u00a0\u1680\u180e\u2000-\u200b\u2028\u2029\u202f\u205f\u3000\ufeff]*$' $$;

CREATE OR REPLACE FUNCTION tenure._check_name(p_function text, p_argument text, p_value text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF tenure._blank(p_value) THEN
        PERFORM tenure._invalid_argument(p_function, p_argument, 'must be a non-empty name',
            quote_nullable(p_value), format('Pass a name such as ''scheduler'' as %s.', p_argument));
    ELSIF length(p_value) > 200 THEN
        PERFORM tenure._invalid_argument(p_function, p_argument, 'must be at most 200 characters',
            format('%s characters long', length(p_value)), 'Use a shorter name.');
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION tenure._check_instance(p_function text, p_argument text, p_value uuid)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_value IS NULL THEN
        PERFORM tenure._invalid_argument(p_function, p_argument, 'must not be NULL', NULL,
            'Pass the calling instance''s id, a uuid made new for every process incarnation.');
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION tenure._check_duration(p_function text, p_argument text, p_value interval)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_value IS NULL OR p_value <= interval '0' THEN
        PERFORM tenure._invalid_argument(p_function, p_argument, 'must be a positive interval',
            quote_nullable(p_value::text), format('Pass a duration such as ''3 seconds'' as %s.', p_argument));
    ELSIF p_value > interval '100 years' THEN
        -- Every duration is added to the server's time: beyond this it could leave timestamptz's range.
        PERFORM tenure._invalid_argument(p_function, p_argument, 'must be at most 100 years',
            quote_literal(p_value::text), format('Pass a duration such as ''3 seconds'' as %s.', p_argument));
    END IF;
END
$$;
