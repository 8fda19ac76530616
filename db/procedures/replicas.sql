-- Active/passive replicas: leadership bound to a database connection.
--
-- The active replica holds an exclusive session-level advisory lock on a dedicated
-- connection and makes its writes through that connection, each write transaction
-- starting with replica_guard. The lock uses the two-int form
-- pg_try_advisory_lock(1952804469, lock_id): the first key ('tenu' in ASCII) keeps
-- tenure's locks apart from an application's own advisory locks, and pg_locks shows
-- it as classid = 1952804469, objid = lock_id, objsubid = 2 (the bigint form shows
-- objsubid = 1, so the two forms never collide).
--
-- Each public function is a SECURITY DEFINER wrapper over an internal one that takes
-- the time to act at (p_now, NULL = the server's clock), in PL/pgSQL: a SQL function
-- with SET is parsed and planned again on every call.

-- The 30-bit lock id of (scope, counter): the first 32 bits of md5('scope/counter'),
-- truncated to 30 bits. md5 is the same on every server and in every language, so
-- any client can compute the id too.
CREATE OR REPLACE FUNCTION tenure._replica_lock_id(p_scope text, p_counter integer)
RETURNS integer
LANGUAGE sql IMMUTABLE STRICT
AS $$ SELECT ('x' || left(md5(p_scope || '/' || p_counter::text), 8))::bit(32)::integer & 1073741823 $$;

-- The backend holding the advisory lock of a lock id in this database, or NULL.
CREATE OR REPLACE FUNCTION tenure._replica_lock_pid(p_lock_id integer)
RETURNS integer
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT l.pid FROM pg_locks l
     WHERE l.locktype = 'advisory' AND l.granted AND l.mode = 'ExclusiveLock'
       AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
       AND l.classid = 1952804469::oid AND l.objid = p_lock_id::oid AND l.objsubid = 2
     LIMIT 1
$$;

CREATE OR REPLACE FUNCTION tenure._check_replica_lock(p_function text, p_counter integer, p_scope text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_counter IS NULL OR p_counter < 0 THEN
        PERFORM tenure._invalid_argument(p_function, 'p_counter', 'must be a non-negative integer',
            coalesce(p_counter::text, 'NULL'), 'Pass 0 for the one lock of a replicated service.');
    END IF;
    PERFORM tenure._check_name(p_function, 'p_scope', p_scope);
END
$$;

CREATE OR REPLACE FUNCTION tenure.replica_lock_id(p_counter integer DEFAULT 0, p_scope text DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM tenure._check_replica_lock('replica_lock_id', p_counter, coalesce(p_scope, current_database()));
    RETURN tenure._replica_lock_id(coalesce(p_scope, current_database()), p_counter);
END
$$;

COMMENT ON FUNCTION tenure.replica_lock_id(integer, text) IS
$$The 30-bit lock id of (p_scope, p_counter): the first 32 bits of md5(p_scope || '/' || p_counter) truncated to 30 bits. p_scope defaults to the database's name, so every replica configured alike computes the same id. Derivation only: nothing is registered.
Errors: TN001 on a negative counter or an empty scope.$$;

-- Register (scope, counter) -> lock id, or find it registered. Returns the row, locked.
CREATE OR REPLACE FUNCTION tenure._replica_register(
    p_function text, p_counter integer, p_scope text, p_now timestamptz
) RETURNS tenure.replica_lock
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_scope text := coalesce(p_scope, current_database());
    v_id    integer;
    v_row   tenure.replica_lock;
BEGIN
    PERFORM tenure._check_replica_lock(p_function, p_counter, v_scope);
    SELECT * INTO v_row FROM tenure.replica_lock WHERE scope = v_scope AND counter = p_counter FOR UPDATE;
    IF FOUND THEN
        RETURN v_row;
    END IF;
    v_id := tenure._replica_lock_id(v_scope, p_counter);
    INSERT INTO tenure.replica_lock AS r (scope, counter, lock_id, registered_at)
    VALUES (v_scope, p_counter, v_id, coalesce(p_now, clock_timestamp()))
    ON CONFLICT DO NOTHING
    RETURNING r.* INTO v_row;
    IF FOUND THEN
        RETURN v_row;
    END IF;
    SELECT * INTO v_row FROM tenure.replica_lock WHERE lock_id = v_id FOR UPDATE;
    IF v_row.scope = v_scope AND v_row.counter = p_counter THEN
        RETURN v_row;  -- a concurrent registration of the same pair
    END IF;
    RAISE EXCEPTION 'tenure.%: lock id % of scope % counter % is already registered for scope % counter %',
        p_function, v_id, quote_literal(v_scope), p_counter, quote_literal(v_row.scope), v_row.counter
        USING ERRCODE = 'TN002',
              DETAIL = format('Both pairs hash to the 30-bit lock id %s; two replicated services sharing'
                              || ' it would lock each other out.', v_id),
              HINT = 'Choose another p_scope or p_counter for one of them. Nothing was changed.';
END
$$;

CREATE OR REPLACE FUNCTION tenure.replica_register(p_counter integer DEFAULT 0, p_scope text DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN (tenure._replica_register('replica_register', p_counter, p_scope, NULL)).lock_id; END $$;

COMMENT ON FUNCTION tenure.replica_register(integer, text) IS
$$Register the replica lock (p_scope, p_counter) and return its lock id (replica_lock_id); registering it again returns the same id. replica_acquire registers implicitly.
Errors: TN001 on a negative counter or an empty scope; TN002 when another (scope, counter) already registered the same 30-bit id (a hash collision): choose another scope or counter.$$;

CREATE OR REPLACE FUNCTION tenure._replica_acquire(
    p_replica text, p_reserve interval, p_counter integer, p_scope text, p_now timestamptz
) RETURNS tenure.replica_grant
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_row  tenure.replica_lock;
    v_now  timestamptz;
    v_pid  integer;
    v_me   integer := pg_backend_pid();
BEGIN
    PERFORM tenure._check_name('replica_acquire', 'p_replica', p_replica);
    IF p_reserve IS NOT NULL THEN
        PERFORM tenure._check_duration('replica_acquire', 'p_reserve', p_reserve);
    END IF;
    -- The registry row is locked first: acquisitions of one lock are serialized, and
    -- the clock is read after the lock.
    v_row := tenure._replica_register('replica_acquire', p_counter, p_scope, p_now);
    v_now := coalesce(p_now, clock_timestamp());
    v_pid := tenure._replica_lock_pid(v_row.lock_id);

    IF v_pid = v_me THEN
        IF v_row.holder_pid = v_me AND v_row.replica = p_replica THEN
            RETURN (v_row.lock_id, true, v_row.epoch, v_row.replica, v_me, v_row.acquired_at, NULL::timestamptz);
        END IF;
        RAISE EXCEPTION 'tenure.replica_acquire: this session already holds lock % as replica %',
            v_row.lock_id, quote_nullable(v_row.replica)
            USING ERRCODE = 'TN001',
                  DETAIL = format('p_replica was %s.', quote_literal(p_replica)),
                  HINT = 'Use one lock session per replica. Nothing was changed.';
    END IF;
    IF v_pid IS NOT NULL THEN
        RETURN (v_row.lock_id, false, v_row.epoch, v_row.replica, v_pid,
                CASE WHEN v_row.holder_pid = v_pid THEN v_row.acquired_at END, NULL::timestamptz);
    END IF;
    IF v_row.reserved_until > v_now AND v_row.replica <> p_replica THEN
        -- Free, but its previous holder may still come back from a blip.
        RETURN (v_row.lock_id, false, v_row.epoch, v_row.replica, NULL::integer, NULL::timestamptz,
                v_row.reserved_until);
    END IF;
    IF NOT pg_try_advisory_lock(1952804469, v_row.lock_id) THEN
        -- Taken between the look at pg_locks and now, by a session outside this function.
        RETURN (v_row.lock_id, false, v_row.epoch, NULL::text, tenure._replica_lock_pid(v_row.lock_id),
                NULL::timestamptz, NULL::timestamptz);
    END IF;
    BEGIN
        PERFORM tenure._durable();
        UPDATE tenure.replica_lock AS r
           SET epoch = r.epoch + 1, replica = p_replica, holder_pid = v_me, acquired_at = v_now,
               renewed_at = v_now, reserved_until = v_now + p_reserve
         WHERE r.lock_id = v_row.lock_id
        RETURNING r.* INTO v_row;
        INSERT INTO tenure.replica_term (lock_id, epoch, replica, pid, acquired_at)
        VALUES (v_row.lock_id, v_row.epoch, p_replica, v_me, v_now);
    EXCEPTION WHEN OTHERS THEN
        -- The session lock outlives the rollback: give it back, or the session would hold
        -- an unregistered lock that refuses every other replica until it ends.
        PERFORM pg_advisory_unlock(1952804469, v_row.lock_id);
        RAISE;
    END;
    RETURN (v_row.lock_id, true, v_row.epoch, p_replica, v_me, v_now, v_row.reserved_until);
END
$$;

CREATE OR REPLACE FUNCTION tenure.replica_acquire(
    p_replica text, p_reserve interval DEFAULT NULL, p_counter integer DEFAULT 0, p_scope text DEFAULT NULL
) RETURNS SETOF tenure.replica_grant
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN QUERY SELECT * FROM tenure._replica_acquire(p_replica, p_reserve, p_counter, p_scope, NULL); END $$;

COMMENT ON FUNCTION tenure.replica_acquire(text, interval, integer, text) IS
$$Try to make the calling session the active replica p_replica of lock (p_scope, p_counter): take the exclusive session-level advisory lock (1952804469, lock id) without waiting. On success the epoch grows by one, the acquisition is logged with the server's time, and the lock stays reserved for p_replica until p_reserve after its last ping: while the lock is free but reserved, other replicas are refused, so a holder whose connection broke can reconnect and reclaim it.
Returns one row: acquired = true and the new epoch, or false with the current holder (replica, pid, since) or the reservation (reserved_until). Calling it again on the holding session returns the same epoch.
Errors: TN001 on an empty replica name, a non-positive reservation, or a session that already holds the lock as another replica; TN002 on a lock id collision (see replica_register).$$;

-- The lock registry row of the calling session's lock, or raise not-leader (TN101).
CREATE OR REPLACE FUNCTION tenure._replica_held(
    p_function text, p_epoch bigint, p_counter integer, p_scope text
) RETURNS tenure.replica_lock
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_scope text := coalesce(p_scope, current_database());
    v_row   tenure.replica_lock;
    v_pid   integer;
BEGIN
    PERFORM tenure._check_replica_lock(p_function, p_counter, v_scope);
    IF p_epoch < 1 THEN
        -- One rule for every fence: an epoch below 1 is a bad argument, not a lost lock.
        PERFORM tenure._invalid_argument(p_function, 'p_epoch', 'must be NULL or an epoch of at least 1',
            p_epoch::text, 'Pass the epoch that replica_acquire returned.');
    END IF;
    SELECT * INTO v_row FROM tenure.replica_lock WHERE scope = v_scope AND counter = p_counter;
    IF FOUND THEN
        v_pid := tenure._replica_lock_pid(v_row.lock_id);
    END IF;
    IF v_pid IS DISTINCT FROM pg_backend_pid() OR v_row.holder_pid IS DISTINCT FROM v_pid
       OR (p_epoch IS NOT NULL AND v_row.epoch IS DISTINCT FROM p_epoch) THEN
        RAISE EXCEPTION 'tenure.%: this session (pid %) is not the active replica of scope % counter %',
            p_function, pg_backend_pid(), quote_literal(v_scope), p_counter
            USING ERRCODE = 'TN101',
                  DETAIL = CASE
                      WHEN v_row.lock_id IS NULL THEN 'The lock is not registered: no replica ever acquired it.'
                      WHEN v_pid IS NULL THEN format('Nobody holds lock %s (epoch %s).', v_row.lock_id, v_row.epoch)
                      WHEN v_pid <> pg_backend_pid() THEN format('Lock %s is held by pid %s (replica %s, epoch %s).',
                          v_row.lock_id, v_pid, coalesce(v_row.replica, '?'), v_row.epoch)
                      ELSE format('The current epoch is %s, not %s.', v_row.epoch, p_epoch) END,
                  HINT = 'Only the active replica may write, through its lock connection; roll back.'
                      || ' A replica that lost the lock must become passive.';
    END IF;
    RETURN v_row;
END
$$;

CREATE OR REPLACE FUNCTION tenure.replica_guard(
    p_epoch bigint DEFAULT NULL, p_counter integer DEFAULT 0, p_scope text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- The guarded write commits as durably as a grant (synchronous_commit at least on).
AS $$ BEGIN PERFORM tenure._durable(); RETURN (tenure._replica_held('replica_guard', p_epoch, p_counter, p_scope)).epoch; END $$;

COMMENT ON FUNCTION tenure.replica_guard(bigint, integer, text) IS
$$The write guard: call it first in each non-idempotent write transaction of the active replica, on its lock connection. Raises TN101 (not leader) unless the calling session holds lock (p_scope, p_counter) now, and, when p_epoch is given, holds it in that epoch. Returns the epoch. A session keeps a session-level lock until it ends, so a transaction that passed the guard commits only while its replica is active.
Errors: TN101 when the session does not hold the lock (or the epoch differs); TN001 on an epoch below 1, a negative counter or an empty scope.$$;

CREATE OR REPLACE FUNCTION tenure._replica_ping(
    p_replica text, p_epoch bigint, p_reserve interval, p_counter integer, p_scope text, p_now timestamptz
) RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_row tenure.replica_lock;
    v_now timestamptz;
BEGIN
    PERFORM tenure._check_name('replica_ping', 'p_replica', p_replica);
    IF p_epoch IS NULL OR p_epoch < 1 THEN
        -- Unlike the guard's, the ping's epoch is required: it writes the reservation.
        PERFORM tenure._invalid_argument('replica_ping', 'p_epoch', 'must be an epoch of at least 1',
            quote_nullable(p_epoch), 'Pass the epoch that replica_acquire returned.');
    END IF;
    IF p_reserve IS NOT NULL THEN
        PERFORM tenure._check_duration('replica_ping', 'p_reserve', p_reserve);
    END IF;
    v_row := tenure._replica_held('replica_ping', p_epoch, p_counter, p_scope);
    IF v_row.replica IS DISTINCT FROM p_replica THEN
        PERFORM tenure._invalid_argument('replica_ping', 'p_replica', 'must be the replica holding the lock',
            quote_literal(p_replica), format('This session acquired it as %s.', quote_nullable(v_row.replica)));
    END IF;
    -- A ping confirms the epoch (a replica takes up an epoch it gave up only after one):
    -- it must commit as durably as the acquisition, whatever the session's own setting.
    -- With synchronous_commit off, an old primary thawed after a failover confirmed it
    -- at once, while a new primary's replica held the next epoch.
    PERFORM tenure._durable();
    v_now := coalesce(p_now, clock_timestamp());
    UPDATE tenure.replica_lock AS r
       SET renewed_at = v_now, reserved_until = v_now + p_reserve
     WHERE r.lock_id = v_row.lock_id;
    RETURN v_now;
END
$$;

CREATE OR REPLACE FUNCTION tenure.replica_ping(
    p_replica text, p_epoch bigint, p_reserve interval DEFAULT NULL, p_counter integer DEFAULT 0,
    p_scope text DEFAULT NULL
) RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._replica_ping(p_replica, p_epoch, p_reserve, p_counter, p_scope, NULL); END $$;

COMMENT ON FUNCTION tenure.replica_ping(text, bigint, interval, integer, text) IS
$$The active replica's ping on its lock connection, every interval: checks like replica_guard that the session holds the lock in p_epoch, records the server's time as the last ping and reserves the lock for p_replica until p_reserve after it (NULL: no reservation). Returns the server's time of the ping. The ping also keeps the lock session from ending by idle_session_timeout, which is what frees the lock of a frozen replica.
Errors: TN101 when the session does not hold the lock in that epoch; TN001 on bad arguments (a NULL epoch or one below 1 included) or another replica's name.$$;

CREATE OR REPLACE FUNCTION tenure._replica_release(p_replica text, p_counter integer, p_scope text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_row tenure.replica_lock;
BEGIN
    PERFORM tenure._check_name('replica_release', 'p_replica', p_replica);
    PERFORM tenure._check_replica_lock('replica_release', p_counter, coalesce(p_scope, current_database()));
    -- Never registers: a lock nobody registered is held by nobody through tenure.
    SELECT * INTO v_row FROM tenure.replica_lock
     WHERE scope = coalesce(p_scope, current_database()) AND counter = p_counter
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF tenure._replica_lock_pid(v_row.lock_id) IS DISTINCT FROM pg_backend_pid() THEN
        -- Not held here; a reservation of ours is given up all the same.
        UPDATE tenure.replica_lock AS r SET reserved_until = NULL
         WHERE r.lock_id = v_row.lock_id AND r.replica = p_replica;
        RETURN false;
    END IF;
    UPDATE tenure.replica_lock AS r SET reserved_until = NULL WHERE r.lock_id = v_row.lock_id;
    -- replica_acquire never takes it twice on one session: one unlock frees it.
    PERFORM pg_advisory_unlock(1952804469, v_row.lock_id);
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION tenure.replica_release(
    p_replica text, p_counter integer DEFAULT 0, p_scope text DEFAULT NULL
) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._replica_release(p_replica, p_counter, p_scope); END $$;

COMMENT ON FUNCTION tenure.replica_release(text, integer, text) IS
$$Step down on a clean stop: release the lock if the calling session holds it and drop p_replica's reservation, so a passive replica acquires the lock at its next try. Returns true if the session held the lock; false, registering nothing, for a lock that was never registered.
Errors: TN001 on bad arguments.$$;

CREATE OR REPLACE FUNCTION tenure._replica_holders(p_counter integer, p_scope text)
RETURNS SETOF tenure.replica_holder
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT r.scope, r.counter, r.lock_id, l.pid, a.application_name::text,
           CASE WHEN r.holder_pid = l.pid THEN r.replica END,
           CASE WHEN r.holder_pid = l.pid THEN r.epoch END,
           CASE WHEN r.holder_pid = l.pid THEN r.acquired_at END,
           CASE WHEN r.holder_pid = l.pid THEN r.renewed_at END,
           CASE WHEN l.pid IS NULL AND r.reserved_until > clock_timestamp() THEN r.reserved_until END
      FROM tenure.replica_lock r
      LEFT JOIN LATERAL (SELECT tenure._replica_lock_pid(r.lock_id) AS pid) l ON true
      LEFT JOIN pg_stat_activity a ON a.pid = l.pid
     WHERE (p_counter IS NULL OR r.counter = p_counter) AND (p_scope IS NULL OR r.scope = p_scope)
     ORDER BY r.scope, r.counter
$$;

CREATE OR REPLACE FUNCTION tenure.replica_holder(p_counter integer DEFAULT 0, p_scope text DEFAULT NULL)
RETURNS SETOF tenure.replica_holder
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM tenure._check_replica_lock('replica_holder', p_counter, coalesce(p_scope, current_database()));
    RETURN QUERY SELECT * FROM tenure._replica_holders(p_counter, coalesce(p_scope, current_database()));
END
$$;

COMMENT ON FUNCTION tenure.replica_holder(integer, text) IS
$$Who holds replica lock (p_scope, p_counter), so an operator can see the active replica: one row with the backend pid and application_name (pg_locks joined to pg_stat_activity), the replica name, epoch and since when (server clock, recorded by replica_acquire, shown only while the recorded pid is the one holding the lock) and the last ping; pid NULL when nobody holds it, with reserved_until while it is reserved for its previous holder. No row when the lock was never registered.
Errors: TN001 on a NULL or negative counter or an empty scope.$$;

-- The view spells the pg_locks join out: functions called in a view are checked
-- against the caller, who may not execute the internal ones.
CREATE OR REPLACE VIEW tenure.replicas AS
SELECT r.scope, r.counter, r.lock_id, l.pid, a.application_name,
       CASE WHEN r.holder_pid = l.pid THEN r.replica END AS replica,
       CASE WHEN r.holder_pid = l.pid THEN r.epoch END AS epoch,
       CASE WHEN r.holder_pid = l.pid THEN r.acquired_at END AS since,
       CASE WHEN r.holder_pid = l.pid THEN r.renewed_at END AS renewed_at,
       CASE WHEN l.pid IS NULL AND r.reserved_until > now() THEN r.reserved_until END AS reserved_until
  FROM tenure.replica_lock r
  LEFT JOIN pg_locks l
         ON l.locktype = 'advisory' AND l.granted AND l.mode = 'ExclusiveLock'
        AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
        AND l.classid = 1952804469::oid AND l.objid = r.lock_id::oid AND l.objsubid = 2
  LEFT JOIN pg_stat_activity a ON a.pid = l.pid;
COMMENT ON VIEW tenure.replicas IS
    'Operator view of every registered replica lock: holder pid, application name, replica, epoch, since when and last ping; reserved_until while a free lock waits for its previous holder.';
GRANT SELECT ON tenure.replicas TO tenure_worker;

-- Retention of replica terms: terms that ended (a later acquisition of the lock began),
-- oldest first, in bounded batches. The last term of each lock (its current or last
-- holder: epoch = replica_lock.epoch) stays, and so does every replica_lock row: epochs
-- keep growing from where they are.
CREATE OR REPLACE FUNCTION tenure._replica_prune(p_older_than interval, p_limit integer, p_now timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_cutoff timestamptz;
    v_count bigint;
BEGIN
    PERFORM tenure._check_prune('replica_prune', p_older_than, p_limit);
    v_cutoff := coalesce(p_now, clock_timestamp()) - p_older_than;
    PERFORM tenure._durable();
    -- A term ends when the next begins (or earlier): found by acquired_at, oldest first.
    -- MATERIALIZED: the locking subquery runs once (see _heartbeat_prune).
    WITH doomed AS MATERIALIZED (
        SELECT e.lock_id, e.epoch FROM tenure.replica_term e
          JOIN tenure.replica_lock l ON l.lock_id = e.lock_id
         WHERE e.acquired_at < v_cutoff AND e.epoch < l.epoch
           AND (SELECT n.acquired_at FROM tenure.replica_term n
                 WHERE n.lock_id = e.lock_id AND n.epoch > e.epoch
                 ORDER BY n.epoch LIMIT 1) < v_cutoff
         ORDER BY e.acquired_at
         LIMIT p_limit
           FOR UPDATE OF e SKIP LOCKED
    )
    DELETE FROM tenure.replica_term AS r USING doomed d
     WHERE (r.lock_id, r.epoch) = (d.lock_id, d.epoch);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;

CREATE OR REPLACE FUNCTION tenure.replica_prune(p_older_than interval, p_limit integer DEFAULT 10000)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._replica_prune(p_older_than, p_limit, NULL); END $$;

COMMENT ON FUNCTION tenure.replica_prune(interval, integer) IS
$$Retention: delete at most p_limit terms of tenure.replica_term that ended more than p_older_than ago (a later acquisition of the same lock began before then), oldest first. The last term of every lock (its current or last holder) is never deleted, nor any registered lock: epochs keep growing from where they are. Call again while it returns p_limit.
Returns how many terms were deleted.
Errors: TN001 on a NULL, negative or over 100 years p_older_than, or p_limit outside 1 to 1000000.$$;

GRANT EXECUTE ON FUNCTION
    tenure.replica_lock_id(integer, text),
    tenure.replica_register(integer, text),
    tenure.replica_acquire(text, interval, integer, text),
    tenure.replica_guard(bigint, integer, text),
    tenure.replica_ping(text, bigint, interval, integer, text),
    tenure.replica_release(text, integer, text),
    tenure.replica_holder(integer, text),
    tenure.replica_prune(interval, integer)
TO tenure_worker;
