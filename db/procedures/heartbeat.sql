-- Heartbeat leader election (HPC Pack's SQL-based model, with fencing terms).
--
-- Each public function is a thin SECURITY DEFINER wrapper over an internal one that
-- takes the time to act at (p_now), so that tests can travel in time; the wrappers are
-- PL/pgSQL, as a SQL function with SET is parsed and planned again on every call. Internal
-- functions are not executable by tenure_worker. In update_heartbeat and the fence,
-- a NULL p_now means the server's clock read *after* the entry is locked.

CREATE OR REPLACE FUNCTION tenure._as_primary_entry(p_entry tenure.heartbeat)
RETURNS tenure.primary_entry
LANGUAGE sql IMMUTABLE
AS $$ SELECT p_entry.utype, p_entry.instance_id, p_entry.term, p_entry.renewed_at,
             p_entry.renewed_at + p_entry.timeout $$;

CREATE OR REPLACE FUNCTION tenure._update_heartbeat(
    p_instance_id uuid, p_utype text, p_timeout interval, p_interval interval, p_now timestamptz
) RETURNS tenure.primary_entry
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_entry      tenure.heartbeat;
    v_now        timestamptz;
    v_generation bigint;
BEGIN
    IF p_instance_id IS NULL OR tenure._blank(p_utype) OR length(p_utype) > 200
       OR p_timeout IS NULL OR p_timeout <= interval '0' OR p_timeout > interval '100 years'
       OR (p_interval IS NOT NULL AND CASE WHEN p_interval <= interval '0' OR p_interval > interval '100 years'
                                           THEN true ELSE p_timeout <= 2 * p_interval END) THEN
        PERFORM tenure._check_instance('update_heartbeat', 'p_instance_id', p_instance_id);
        PERFORM tenure._check_name('update_heartbeat', 'p_utype', p_utype);
        PERFORM tenure._check_duration('update_heartbeat', 'p_timeout', p_timeout);
        IF p_interval IS NOT NULL THEN
            PERFORM tenure._check_duration('update_heartbeat', 'p_interval', p_interval);
        END IF;
        RAISE EXCEPTION 'tenure.update_heartbeat: p_timeout must be longer than twice p_interval'
            USING ERRCODE = 'TN002',
                  DETAIL = format('p_timeout was %s and p_interval %s, and %s is not more than %s.',
                                  p_timeout, p_interval, p_timeout, 2 * p_interval),
                  HINT = 'Choose T > 2I (T = 3I is a good start): a primary renews every I and steps'
                      || ' down when no renewal succeeded for T - I, which must leave room for more than'
                      || ' one renewal. Nothing was changed.';
    END IF;

    PERFORM tenure._durable();
    v_generation := tenure._current_generation();

    -- The live primary renews in one statement. Reading the clock before the row
    -- lock is safe here: it can only make the renewal look older than it is.
    v_now := coalesce(p_now, clock_timestamp());
    UPDATE tenure.heartbeat AS h
       SET renewed_at = v_now, timeout = p_timeout, heartbeat_interval = p_interval
     WHERE h.utype = p_utype AND h.instance_id = p_instance_id AND v_now - h.renewed_at <= h.timeout
       AND h.generation = v_generation
    RETURNING h.* INTO v_entry;
    IF FOUND THEN
        RETURN tenure._as_primary_entry(v_entry);
    END IF;

    -- Another live primary: the bid is discarded without taking any lock.
    SELECT * INTO v_entry FROM tenure.heartbeat WHERE utype = p_utype;
    IF FOUND AND v_entry.instance_id IS DISTINCT FROM p_instance_id AND v_entry.instance_id IS NOT NULL
       AND v_now - v_entry.renewed_at <= v_entry.timeout THEN
        RETURN tenure._as_primary_entry(v_entry);
    END IF;

    -- Lock the entry before reading the clock: a transaction fenced by
    -- heartbeat_fence holds a share lock on it, so it has committed before a
    -- takeover reads the time that starts the new term.
    SELECT * INTO v_entry FROM tenure.heartbeat WHERE utype = p_utype FOR UPDATE;
    IF NOT FOUND THEN
        v_now := coalesce(p_now, clock_timestamp());
        INSERT INTO tenure.heartbeat AS h (utype, instance_id, term, renewed_at, timeout, heartbeat_interval,
                                           generation)
        VALUES (p_utype, p_instance_id, 1, v_now, p_timeout, p_interval, v_generation)
        ON CONFLICT (utype) DO NOTHING
        RETURNING h.* INTO v_entry;
        IF FOUND THEN
            INSERT INTO tenure.heartbeat_term (utype, term, instance_id, started_at, generation)
            VALUES (p_utype, 1, p_instance_id, v_now, v_generation);
            RETURN tenure._as_primary_entry(v_entry);
        END IF;
        -- A concurrent first bid created the entry: judge ours against it.
        SELECT * INTO STRICT v_entry FROM tenure.heartbeat WHERE utype = p_utype FOR UPDATE;
    END IF;
    v_now := coalesce(p_now, clock_timestamp());

    IF v_entry.instance_id = p_instance_id AND v_now - v_entry.renewed_at <= v_entry.timeout
       AND v_entry.generation = v_generation THEN
        -- The live primary renews.
        UPDATE tenure.heartbeat AS h
           SET renewed_at = v_now, timeout = p_timeout, heartbeat_interval = p_interval
         WHERE h.utype = p_utype
        RETURNING h.* INTO v_entry;
    ELSIF v_entry.instance_id IS NULL OR v_now - v_entry.renewed_at > v_entry.timeout
          OR v_entry.instance_id = p_instance_id THEN
        -- Vacant or expired (even if it was our own), or our own term of an earlier
        -- server generation (a failover happened since it was granted; a term is
        -- never carried from one server to the next): a new term begins.
        UPDATE tenure.heartbeat_term AS t
           SET ended_at = CASE WHEN v_now - v_entry.renewed_at > v_entry.timeout
                               THEN v_entry.renewed_at + v_entry.timeout ELSE v_now END,
               end_reason = CASE WHEN v_entry.instance_id IS NULL OR v_now - v_entry.renewed_at > v_entry.timeout
                                 THEN 'expired' ELSE 'failover' END
         WHERE t.utype = p_utype AND t.term = v_entry.term AND t.ended_at IS NULL;
        UPDATE tenure.heartbeat AS h
           SET instance_id = p_instance_id, term = h.term + 1, renewed_at = v_now,
               timeout = p_timeout, heartbeat_interval = p_interval, generation = v_generation
         WHERE h.utype = p_utype
        RETURNING h.* INTO v_entry;
        INSERT INTO tenure.heartbeat_term (utype, term, instance_id, started_at, generation)
        VALUES (p_utype, v_entry.term, p_instance_id, v_now, v_generation);
    END IF;
    -- Otherwise another instance is live: the bid is discarded and the caller
    -- learns who is primary.
    RETURN tenure._as_primary_entry(v_entry);
END
$$;

CREATE OR REPLACE FUNCTION tenure.update_heartbeat(
    p_instance_id uuid, p_utype text, p_timeout interval, p_interval interval DEFAULT NULL
) RETURNS SETOF tenure.primary_entry
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN QUERY SELECT * FROM tenure._update_heartbeat(p_instance_id, p_utype, p_timeout, p_interval, NULL); END $$;

COMMENT ON FUNCTION tenure.update_heartbeat(uuid, text, interval, interval) IS
$$Send a heartbeat for instance p_instance_id as a candidate for primary of service type p_utype, with timeout T = p_timeout (and, optionally, its heartbeat interval I = p_interval, which must satisfy T > 2I).
The live primary renews its entry with the server's time. Anyone else takes the entry over only when it is vacant or (server time - last heartbeat) > the holder's T; the term then grows by one. Of two concurrent bids exactly one wins; the other is discarded.
After a failover (a new server generation, see tenure.server_generation) the live holder keeps the entry but its first renewal starts a new term: no term is carried from one server to the next. The heartbeat commits with synchronous_commit raised to at least on.
Returns one row: who is primary now and in which term, so the caller knows without a second round trip whether it won.
Errors: TN001 on a NULL instance, an empty type or a non-positive duration; TN002 when T <= 2I; 25006 on a standby.$$;

CREATE OR REPLACE FUNCTION tenure._get_primary(p_utype text, p_now timestamptz)
RETURNS SETOF tenure.primary_entry
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM tenure._check_name('get_primary', 'p_utype', p_utype);
    PERFORM tenure._on_primary();
    RETURN QUERY
        SELECT e.*
          FROM tenure.heartbeat h, LATERAL tenure._as_primary_entry(h) e
         WHERE h.utype = p_utype
           AND h.instance_id IS NOT NULL
           AND p_now - h.renewed_at <= h.timeout;
END
$$;

CREATE OR REPLACE FUNCTION tenure.get_primary(p_utype text)
RETURNS SETOF tenure.primary_entry
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN QUERY SELECT * FROM tenure._get_primary(p_utype, clock_timestamp()); END $$;

COMMENT ON FUNCTION tenure.get_primary(text) IS
$$The live primary of service type p_utype: one row (instance, term, last heartbeat, valid until) if (server time - last heartbeat) <= T, no row if the entry is missing, vacant or expired.
Errors: TN001 on a NULL or empty type.$$;

CREATE OR REPLACE FUNCTION tenure._check_primary(p_instance_id uuid, p_utype text, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM tenure._check_instance('check_primary', 'p_instance_id', p_instance_id);
    RETURN EXISTS (SELECT FROM tenure._get_primary(p_utype, p_now) p WHERE p.instance_id = p_instance_id);
END
$$;

CREATE OR REPLACE FUNCTION tenure.check_primary(p_instance_id uuid, p_utype text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._check_primary(p_instance_id, p_utype, clock_timestamp()); END $$;

COMMENT ON FUNCTION tenure.check_primary(uuid, text) IS
$$True only if instance p_instance_id is the live primary of service type p_utype now, by the server's clock; false otherwise, including for an unknown type.
Errors: TN001 on a NULL instance or an empty type.$$;

CREATE OR REPLACE FUNCTION tenure._heartbeat_resign(p_instance_id uuid, p_utype text, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_entry tenure.heartbeat;
    v_now   timestamptz;
    v_live  boolean;
BEGIN
    PERFORM tenure._check_instance('heartbeat_resign', 'p_instance_id', p_instance_id);
    PERFORM tenure._check_name('heartbeat_resign', 'p_utype', p_utype);
    PERFORM tenure._durable();

    SELECT * INTO v_entry FROM tenure.heartbeat
     WHERE utype = p_utype AND instance_id = p_instance_id
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
    v_live := v_now - v_entry.renewed_at <= v_entry.timeout;

    UPDATE tenure.heartbeat_term AS t
       SET ended_at = CASE WHEN v_live THEN v_now ELSE v_entry.renewed_at + v_entry.timeout END,
           end_reason = CASE WHEN v_live THEN 'resigned' ELSE 'expired' END
     WHERE t.utype = p_utype AND t.term = v_entry.term AND t.ended_at IS NULL;
    UPDATE tenure.heartbeat AS h
       SET instance_id = NULL, renewed_at = v_now
     WHERE h.utype = p_utype;
    RETURN v_live;
END
$$;

CREATE OR REPLACE FUNCTION tenure.heartbeat_resign(p_instance_id uuid, p_utype text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._heartbeat_resign(p_instance_id, p_utype, NULL); END $$;

COMMENT ON FUNCTION tenure.heartbeat_resign(uuid, text) IS
$$Instance p_instance_id gives up being primary of p_utype at once (clean shutdown), so the next bid takes over without waiting for T.
Returns true if it was the live primary and resigned, false if it was not (nothing changes then, except that an expired entry of its own is vacated).
Errors: TN001 on a NULL instance or an empty type.$$;

CREATE OR REPLACE FUNCTION tenure._heartbeat_fence(p_instance_id uuid, p_utype text, p_term bigint, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_entry tenure.heartbeat;
    v_now   timestamptz;
BEGIN
    PERFORM tenure._check_instance('heartbeat_fence', 'p_instance_id', p_instance_id);
    PERFORM tenure._check_name('heartbeat_fence', 'p_utype', p_utype);
    IF p_term IS NULL OR p_term < 1 THEN
        PERFORM tenure._invalid_argument('heartbeat_fence', 'p_term', 'must be a term of at least 1',
            quote_nullable(p_term), 'Pass the term that update_heartbeat returned when this instance was elected.');
    END IF;

    -- The fenced write commits as durably as a grant: it waits for the synchronous
    -- standbys too, or a failover could keep the term and lose the write.
    PERFORM tenure._durable();
    -- The share lock holds off any takeover until the caller's transaction ends,
    -- so the write it fences cannot commit after another term began.
    SELECT * INTO v_entry FROM tenure.heartbeat WHERE utype = p_utype FOR KEY SHARE;
    v_now := coalesce(p_now, clock_timestamp());
    IF v_entry.instance_id IS DISTINCT FROM p_instance_id
       OR v_entry.term IS DISTINCT FROM p_term
       OR v_now - v_entry.renewed_at > v_entry.timeout
       OR v_entry.generation <> tenure._current_generation() THEN
        RAISE EXCEPTION 'tenure.heartbeat_fence: instance % is not the primary of % in term %',
                        p_instance_id, p_utype, p_term
            USING ERRCODE = 'TN101',
                  DETAIL = CASE
                      WHEN v_entry.utype IS NULL THEN format('Service type %L has no entry.', p_utype)
                      WHEN v_entry.instance_id IS NULL THEN
                          format('The entry of %L is vacant (term %s resigned).', p_utype, v_entry.term)
                      ELSE format('The entry of %L holds instance %s in term %s, last heartbeat %s, %s.',
                                  p_utype, v_entry.instance_id, v_entry.term, v_entry.renewed_at,
                                  CASE WHEN v_now - v_entry.renewed_at > v_entry.timeout THEN 'expired'
                                       WHEN v_entry.generation <> tenure._current_generation()
                                       THEN 'granted before a failover (its next renewal starts a new term)'
                                       ELSE 'live' END)
                  END,
                  HINT = 'Stop acting as primary and roll back: a write by a primary that lost its term'
                      || ' is refused so that it can never overwrite its successor''s work.';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION tenure.heartbeat_fence(p_instance_id uuid, p_utype text, p_term bigint)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN PERFORM tenure._heartbeat_fence(p_instance_id, p_utype, p_term, NULL); END $$;

COMMENT ON FUNCTION tenure.heartbeat_fence(uuid, text, bigint) IS
$$Fence an application write: call it inside the transaction that makes the write; it raises TN101 (not_primary) unless p_instance_id is the live primary of p_utype in term p_term, and otherwise holds off any takeover until that transaction ends. A primary that hung and lost its term can therefore never write. A term granted before a failover is refused until the holder renewed (and so got a new term), and the fenced transaction commits as durably as a grant (synchronous_commit at least on).
Errors: TN001 on a NULL instance, an empty type or a term below 1; TN101 when the instance is not the live primary in that term.$$;

-- Retention of the term history: ended terms, oldest first, in bounded batches. The
-- current term of each type stays (heartbeat_status shows when it started), and so
-- does every tenure.heartbeat row: terms only grow, whatever the history keeps.
CREATE OR REPLACE FUNCTION tenure._heartbeat_prune(p_older_than interval, p_limit integer, p_now timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_count bigint;
BEGIN
    PERFORM tenure._check_prune('heartbeat_prune', p_older_than, p_limit);
    PERFORM tenure._durable();
    -- A term that is not current is never current again (the entry's term only grows).
    -- The locking subquery runs once, MATERIALIZED: as a semi join's inner side it could be
    -- rescanned per row, each rescan skipping the rows already deleted and locking more,
    -- so more than p_limit went (seen with empty statistics after a vacuum).
    WITH doomed AS MATERIALIZED (
        SELECT e.utype, e.term FROM tenure.heartbeat_term e
         WHERE e.ended_at IS NOT NULL AND e.ended_at < v_now - p_older_than
           AND e.term < (SELECT h.term FROM tenure.heartbeat h WHERE h.utype = e.utype)
         ORDER BY e.ended_at
         LIMIT p_limit
           FOR UPDATE OF e SKIP LOCKED
    )
    DELETE FROM tenure.heartbeat_term AS t USING doomed d
     WHERE (t.utype, t.term) = (d.utype, d.term);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;

CREATE OR REPLACE FUNCTION tenure.heartbeat_prune(p_older_than interval, p_limit integer DEFAULT 10000)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._heartbeat_prune(p_older_than, p_limit, NULL); END $$;

COMMENT ON FUNCTION tenure.heartbeat_prune(interval, integer) IS
$$Retention: delete at most p_limit terms of tenure.heartbeat_term that ended more than p_older_than ago, oldest first. The current term of every service type is never deleted, nor any heartbeat entry: terms keep growing from where they are. Call again while it returns p_limit.
Returns how many terms were deleted.
Errors: TN001 on a NULL, negative or over 100 years p_older_than, or p_limit outside 1 to 1000000.$$;

GRANT EXECUTE ON FUNCTION
    tenure.update_heartbeat(uuid, text, interval, interval),
    tenure.get_primary(text),
    tenure.check_primary(uuid, text),
    tenure.heartbeat_resign(uuid, text),
    tenure.heartbeat_fence(uuid, text, bigint),
    tenure.heartbeat_prune(interval, integer)
TO tenure_worker;
