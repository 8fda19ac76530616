-- Argument checks shared by every public function. Each raises tenure's
-- invalid_argument (TN001) naming the function and the argument, so that bad input
-- fails before anything is changed.

-- At most p_max characters of p_text, and when it was longer, how long it was: an error
-- names what was wrong without repeating a huge input (a 10 MB kind) in its message,
-- its DETAIL and the server's log.
CREATE OR REPLACE FUNCTION tenure._excerpt(p_text text, p_max integer DEFAULT 200)
RETURNS text
-- SQL without SET, so it is inlined where it is called (internal).
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN length(p_text) > p_max
                THEN left(p_text, p_max) || format('... (%s characters in all)', length(p_text))
                ELSE p_text END
$$;

-- What is kept of a free text a client reports (a task's error, a batch's detail): its
-- first 64 kB of characters and its length. Cut, not refused: a refused task_fail would
-- leave the failure unrecorded and the lease held, for an exception's long text.
CREATE OR REPLACE FUNCTION tenure._kept_text(p_text text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT tenure._excerpt(p_text, 65536) $$;

CREATE OR REPLACE FUNCTION tenure._invalid_argument(
    p_function text, p_argument text, p_problem text, p_found text, p_hint text
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'tenure.%: % %', p_function, tenure._excerpt(p_argument), tenure._excerpt(p_problem, 300)
        USING ERRCODE = 'TN001',
              DETAIL = format('%s was %s.', tenure._excerpt(p_argument), coalesce(tenure._excerpt(p_found, 300), 'NULL')),
              HINT = tenure._excerpt(p_hint, 500) || ' Nothing was changed.';
END
$$;

-- At most p_max elements in one call (keys, tasks, batches): one call is one
-- transaction, which must stay short, and its input must fit in memory.
CREATE OR REPLACE FUNCTION tenure._check_count(
    p_function text, p_argument text, p_what text, p_count bigint, p_max integer
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_count > p_max THEN
        PERFORM tenure._invalid_argument(p_function, p_argument, format('must hold at most %s %s', p_max, p_what),
            format('%s %s', p_count, p_what), format('Pass them in several calls of at most %s.', p_max));
    END IF;
END
$$;

-- The largest data of a task, in bytes of its jsonb value: tenure.setting's
-- max_task_data (the schema owner may raise it), 1 MB without it.
CREATE OR REPLACE FUNCTION tenure._max_task_data()
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN coalesce((SELECT s.value FROM tenure.setting s WHERE s.name = 'max_task_data'), 1048576);
END
$$;

-- Whether data of p_size bytes (pg_column_size of a jsonb) is over the limit. Below
-- 64 kB, the least the setting may be, it does not look the setting up.
CREATE OR REPLACE FUNCTION tenure._data_too_large(p_size integer)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN p_size > 65536 AND p_size > tenure._max_task_data();
END
$$;

CREATE OR REPLACE FUNCTION tenure._check_data(p_function text, p_argument text, p_data jsonb)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF tenure._data_too_large(pg_column_size(p_data)) THEN
        PERFORM tenure._refuse_data(p_function, p_argument, pg_column_size(p_data));
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION tenure._refuse_data(p_function text, p_argument text, p_size integer)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM tenure._invalid_argument(p_function, p_argument,
        format('must be at most %s bytes of JSON', tenure._max_task_data()), format('%s bytes', p_size),
        'Keep large contents elsewhere (a table, an object store) and put their reference in the task''s data;'
        || ' the schema owner may raise the limit: UPDATE tenure.setting SET value = <bytes> WHERE name = ''max_task_data''.');
END
$$;

-- tenure's writes are only as real as their commit. A term granted and then lost in
-- a crash or a failover could be granted again to someone else, so every write
-- (the fences included: the application's fenced writes commit with them) waits for
-- what the cluster promises: synchronous_commit is raised from off or local to on,
-- which waits for the synchronous standbys when there are any; a stronger setting
-- (remote_write, remote_apply) is kept. It also makes sure the write happens on the
-- current primary and that grants of an earlier server were re-based (_follow_server).
--
-- The server's system identifier is read from its control file once per session and
-- remembered in the session's setting tenure.system_identifier: reading the file cost
-- about a third of this function, which every call of every function makes. A backend
-- serves one cluster all its life, so the identifier cannot change under a session (the
-- timeline can, and is read every time). A session that sets the setting itself only
-- misleads its own calls: they find no such generation and follow the server, which
-- reads the file, and the setting is read again.
CREATE OR REPLACE FUNCTION tenure._durable() RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_system text := current_setting('tenure.system_identifier', true);
BEGIN
    IF current_setting('synchronous_commit') IN ('off', 'local') THEN
        PERFORM set_config('synchronous_commit', 'on', true);
    END IF;
    IF v_system IS NULL OR v_system !~ '^-?[0-9]{1,19}$' THEN
        v_system := (SELECT c.system_identifier FROM pg_control_system() c)::text;
        PERFORM set_config('tenure.system_identifier', v_system, false);
    END IF;
    -- Every call of every function comes here: the common case (the primary of the last
    -- generation) is one statement, _follow_server's own test without its calls.
    IF pg_is_in_recovery() OR NOT EXISTS (
        SELECT FROM (SELECT g.timeline, g.system_identifier FROM tenure.server_generation g
                      ORDER BY g.generation DESC LIMIT 1) g
         WHERE g.timeline = tenure._server_timeline() AND g.system_identifier = v_system::bigint) THEN
        PERFORM set_config('tenure.system_identifier', '', false);  -- read again next time
        PERFORM tenure._follow_server(NULL);
    END IF;
END
$$;

-- A standby (or a primary that is being demoted) must not answer for tenure: its
-- data may be behind the primary's.
CREATE OR REPLACE FUNCTION tenure._on_primary() RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_is_in_recovery() THEN
        RAISE EXCEPTION 'tenure: this server is a standby in recovery, not the primary'
            USING ERRCODE = 'read_only_sql_transaction',
                  DETAIL = 'pg_is_in_recovery() is true: its data may be behind the primary''s and it cannot write.',
                  HINT = 'Connect tenure to the primary: list every node in the conninfo with'
                      || ' target_session_attrs=read-write, or go through a proxy that follows the primary.';
    END IF;
END
$$;

-- The first write on a server that is not the one of the last generation (a
-- failover promoted another timeline, or the database was restored elsewhere)
-- starts a new generation and re-bases every grant that may still be live: its
-- expiry becomes now + its own duration on the new server's clock. The old expiry
-- was read from another clock, so a live grant could otherwise expire early on a
-- clock that runs ahead; a holder steps down on its own within its duration of its
-- last renewal, so the re-based expiry is never earlier than that. Grants that had
-- run out more than their duration before (by the new clock) are left to expire.
-- Terms of the heartbeat keep their holder but not their number: the holder's next
-- renewal starts a new term (see _update_heartbeat).
CREATE OR REPLACE FUNCTION tenure._follow_server(p_now timestamptz) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_timeline integer;
    v_system   bigint;
    v_current  tenure.server_generation;
    v_now      timestamptz;
BEGIN
    PERFORM tenure._on_primary();
    v_timeline := tenure._server_timeline();
    v_system := (SELECT system_identifier FROM pg_control_system());
    SELECT * INTO v_current FROM tenure.server_generation ORDER BY generation DESC LIMIT 1;
    IF v_current.timeline = v_timeline AND v_current.system_identifier = v_system THEN
        RETURN;
    END IF;
    -- One transaction re-bases; the others wait for it and then find it done.
    LOCK TABLE tenure.server_generation IN SHARE ROW EXCLUSIVE MODE;
    SELECT * INTO v_current FROM tenure.server_generation ORDER BY generation DESC LIMIT 1;
    IF v_current.timeline = v_timeline AND v_current.system_identifier = v_system THEN
        RETURN;
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
    UPDATE tenure.heartbeat
       SET renewed_at = v_now
     WHERE instance_id IS NOT NULL AND v_now - renewed_at <= 2 * timeout;
    UPDATE tenure.task
       SET next_action = v_now + (next_action - last_action), last_action = v_now
     WHERE owner IS NOT NULL AND status = 'pending'
       AND next_action >= v_now - (next_action - last_action);
    UPDATE tenure.claim_key AS k
       SET expires_at = v_now + (i.expires_at - i.renewed_at)
      FROM tenure.claim_instance i
     WHERE i.keyspace = k.keyspace AND i.instance_id = k.claimant AND NOT k.attached  -- the attached follow i
       AND k.expires_at >= v_now - (i.expires_at - i.renewed_at);
    UPDATE tenure.claim_instance
       SET expires_at = v_now + (expires_at - renewed_at), renewed_at = v_now
     WHERE expires_at >= v_now - (expires_at - renewed_at);
    UPDATE tenure.claim_instance SET held_until = NULL WHERE held_until IS NOT NULL;  -- claims re-based: recount
    INSERT INTO tenure.server_generation (generation, timeline, system_identifier, started_at)
    VALUES (coalesce(v_current.generation, 0) + 1, v_timeline, v_system, v_now);
END
$$;

-- True for NULL, '' and text made only of whitespace of any kind (tabs, newlines,
-- no-break and other Unicode spaces), which no name, key or state may be.
CREATE OR REPLACE FUNCTION tenure._blank(p_value text)
RETURNS boolean
-- SQL without SET, so it is inlined where it is called (internal: only tenure's own
-- functions, which pin search_path, call it).
LANGUAGE sql IMMUTABLE
AS $$
    SELECT p_value IS NULL
        OR p_value ~ '^[[:space:]\u0085\u00a0\u1680\u180e\u2000-\u200b\u2028\u2029\u202f\u205f\u3000\ufeff]*$'
$$;

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

-- The arguments of every prune function (task_prune, heartbeat_prune, claim_prune,
-- batch_prune, replica_prune): an age of zero or more, and a batch size that keeps
-- one call's transaction short.
CREATE OR REPLACE FUNCTION tenure._check_prune(p_function text, p_older_than interval, p_limit integer)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_older_than IS NULL OR p_older_than < interval '0' THEN
        PERFORM tenure._invalid_argument(p_function, 'p_older_than', 'must be a non-negative interval',
            quote_nullable(p_older_than::text), 'Pass the retention age, such as ''7 days''.');
    ELSIF p_older_than > interval '100 years' THEN
        PERFORM tenure._invalid_argument(p_function, 'p_older_than', 'must be at most 100 years',
            quote_literal(p_older_than::text), 'Pass the retention age, such as ''7 days''.');
    END IF;
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 1000000 THEN
        PERFORM tenure._invalid_argument(p_function, 'p_limit', 'must be between 1 and 1000000',
            quote_nullable(p_limit), 'Pass how many entries one call may remove, such as 10000; call again while it returns that many.');
    END IF;
END
$$;
