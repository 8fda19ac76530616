-- Per-key claims with expiry, spread fairly over the live instances of a keyspace.
-- Each public function is a SECURITY DEFINER wrapper over an internal one that
-- takes the time to act at (p_now, NULL = the server's clock).
-- The wrappers are PL/pgSQL, not SQL: a SQL function with SET (search_path) is parsed
-- and planned again on every call, which cost more than the call's own work.
-- A claim is attached to its claimant's row in claim_instance (claim_key.attached) or
-- detached: its expiry is the instance row's expires_at while attached, else its own
-- (see claims_follow_instance). Every live claim of a live instance is attached once the
-- instance renewed or took, so a renewal writes the instance row and reads its keys.

CREATE OR REPLACE FUNCTION tenure._check_keys(p_function text, p_argument text, p_keys text[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_bad text;
BEGIN
    IF p_keys IS NULL OR cardinality(p_keys) = 0 THEN
        PERFORM tenure._invalid_argument(p_function, p_argument, 'must be a non-empty array of keys',
            quote_nullable(p_keys::text), format('Pass ARRAY[''service-1'', ...] as %s.', p_argument));
    ELSIF array_ndims(p_keys) > 1 THEN
        PERFORM tenure._invalid_argument(p_function, p_argument, 'must be a one-dimensional array of keys',
            quote_literal(left(p_keys::text, 100)), format('Pass ARRAY[''service-1'', ...] as %s.', p_argument));
    END IF;
    SELECT k INTO v_bad FROM unnest(p_keys) k WHERE tenure._blank(k) OR length(k) > 200 LIMIT 1;
    IF FOUND THEN
        PERFORM tenure._invalid_argument(p_function, p_argument, 'must hold non-empty keys of at most 200 characters',
            format('an element %s', quote_nullable(left(v_bad, 40))), 'Remove empty, NULL or over-long keys.');
    END IF;
END
$$;

-- Leave the attached claims of the instances p_instances (whose rows the caller locked)
-- with the expiry of their rows, and drop their caches of held claims: for rows that
-- lapsed, before anything extends them again. An instance waits for its own keys; any
-- other caller skips locked keys (a batch call may hold one and wait for a key the
-- caller holds), which stay attached to the lapsed row, as expired as the detached.
CREATE OR REPLACE FUNCTION tenure._claim_detach(p_keyspace text, p_instances uuid[], p_wait boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_wait THEN
        UPDATE tenure.claim_key AS k SET attached = false, expires_at = i.expires_at
          FROM tenure.claim_instance i
         WHERE i.keyspace = p_keyspace AND i.instance_id = ANY (p_instances)
           AND k.keyspace = p_keyspace AND k.claimant = i.instance_id AND k.attached;
    ELSE
        UPDATE tenure.claim_key AS k SET attached = false, expires_at = i.expires_at
          FROM tenure.claim_instance i
         WHERE i.keyspace = p_keyspace AND i.instance_id = ANY (p_instances)
           AND k.keyspace = p_keyspace AND k.claimant = i.instance_id
           AND k.key IN (SELECT l.key FROM tenure.claim_key l
                          WHERE l.keyspace = p_keyspace AND l.claimant = ANY (p_instances) AND l.attached
                            FOR NO KEY UPDATE SKIP LOCKED);
    END IF;
    UPDATE tenure.claim_instance SET held_until = NULL
     WHERE keyspace = p_keyspace AND instance_id = ANY (p_instances) AND held_until IS NOT NULL;
END
$$;

-- Raise the liveness of the caller in a keyspace and return the fair share there. The
-- upsert also locks the caller's row, so that two calls of one instance take turns
-- with its cache of held claims. The keys are counted by claim_keyspace, not here.
-- A row that lapsed leaves its claims expired first (a renewal extends live claims
-- only); live claims still detached are attached, so that every live claim of the
-- caller is attached from here on.
CREATE OR REPLACE FUNCTION tenure._claim_alive(p_keyspace text, p_instance uuid, p_expiry interval, p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM FROM tenure.claim_instance i
      WHERE i.keyspace = p_keyspace AND i.instance_id = p_instance AND i.expires_at < p_now
        FOR UPDATE;
    IF FOUND THEN
        PERFORM tenure._claim_detach(p_keyspace, ARRAY[p_instance], true);
    END IF;
    INSERT INTO tenure.claim_instance AS i (keyspace, instance_id, renewed_at, expires_at)
    VALUES (p_keyspace, p_instance, p_now, p_now + p_expiry)
    ON CONFLICT (keyspace, instance_id) DO UPDATE SET renewed_at = excluded.renewed_at, expires_at = excluded.expires_at;
    UPDATE tenure.claim_key AS k SET attached = true
     WHERE k.keyspace = p_keyspace AND k.claimant = p_instance AND NOT k.attached AND k.expires_at >= p_now;
    RETURN tenure._claim_share(p_keyspace, p_instance, p_now);
END
$$;

-- The fair share in a keyspace at p_now, the caller p_instance counted as live: its
-- registered keys / its live instances, rounded up.
CREATE OR REPLACE FUNCTION tenure._claim_share(p_keyspace text, p_instance uuid, p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql STABLE  -- not sql: a SQL function with SET is parsed and planned again on every call
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN ceil(coalesce((SELECT s.keys FROM tenure.claim_keyspace s WHERE s.keyspace = p_keyspace), 0)::numeric
                / greatest((SELECT count(*) FROM tenure.claim_instance i
                             WHERE i.keyspace = p_keyspace AND (i.expires_at >= p_now OR i.instance_id = p_instance)), 1)
           )::integer;
END
$$;

-- How many live claims the caller holds at p_now. Its cache in claim_instance answers
-- while it can vouch for p_now (held_at <= p_now <= held_until: no key the caller
-- claims has expired since it was counted, so no other instance can have taken one);
-- otherwise the caller's keys are counted and the cache refreshed. Call after
-- _claim_alive, which made the row and locked it.
CREATE OR REPLACE FUNCTION tenure._claim_held(p_keyspace text, p_instance uuid, p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_instance tenure.claim_instance;
    v_count integer;
    v_until timestamptz;
BEGIN
    SELECT * INTO v_instance FROM tenure.claim_instance WHERE keyspace = p_keyspace AND instance_id = p_instance;
    IF v_instance.held_at <= p_now AND p_now <= v_instance.held_until THEN
        RETURN v_instance.held_count;
    END IF;
    SELECT (count(*) FILTER (WHERE e.expires_at >= p_now))::integer, coalesce(min(e.expires_at), 'infinity')
      INTO v_count, v_until
      FROM tenure.claim_key k
     CROSS JOIN LATERAL (SELECT CASE WHEN k.attached THEN v_instance.expires_at ELSE k.expires_at END AS expires_at) e
     WHERE k.keyspace = p_keyspace AND k.claimant = p_instance;
    UPDATE tenure.claim_instance SET held_count = v_count, held_at = p_now, held_until = v_until
     WHERE keyspace = p_keyspace AND instance_id = p_instance;
    RETURN v_count;
END
$$;

CREATE OR REPLACE FUNCTION tenure._check_claimer(
    p_function text, p_keyspace text, p_instance uuid, p_expiry interval
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM tenure._check_name(p_function, 'p_keyspace', p_keyspace);
    PERFORM tenure._check_instance(p_function, 'p_instance', p_instance);
    PERFORM tenure._check_duration(p_function, 'p_expiry', p_expiry);
END
$$;

-- Register and retire ------------------------------------------------------------------

CREATE OR REPLACE FUNCTION tenure._claim_register(p_keyspace text, p_keys text[], p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_count integer;
BEGIN
    PERFORM tenure._check_name('claim_register', 'p_keyspace', p_keyspace);
    PERFORM tenure._check_count('claim_register', 'p_keys', 'keys', cardinality(p_keys), 10000);
    PERFORM tenure._check_keys('claim_register', 'p_keys', p_keys);
    PERFORM tenure._durable();
    INSERT INTO tenure.claim_key (keyspace, key, unclaimed_since, registered_at)
    SELECT DISTINCT p_keyspace, k, v_now, v_now
      FROM unnest(p_keys) k
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;

CREATE OR REPLACE FUNCTION tenure.claim_register(p_keyspace text, p_keys text[])
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._claim_register(p_keyspace, p_keys, NULL); END $$;

COMMENT ON FUNCTION tenure.claim_register(text, text[]) IS
$$Register the keys p_keys (a service_id, say) in keyspace p_keyspace, so that instances can claim them; keys already registered are left as they are.
Returns how many keys were new.
Errors: TN001 on an empty keyspace, an empty array, more than 10000 keys, or a NULL, empty or over-long key.$$;

CREATE OR REPLACE FUNCTION tenure.claim_retire(p_keyspace text, p_keys text[])
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_count integer;
BEGIN
    PERFORM tenure._check_name('claim_retire', 'p_keyspace', p_keyspace);
    PERFORM tenure._check_count('claim_retire', 'p_keys', 'keys', cardinality(p_keys), 10000);
    PERFORM tenure._check_keys('claim_retire', 'p_keys', p_keys);
    PERFORM tenure._durable();
    -- The holders' rows first, in the order renew and take lock (instance, then keys):
    -- the delete trigger clears their caches of held claims.
    PERFORM FROM tenure.claim_instance i
      WHERE i.keyspace = p_keyspace
        AND i.instance_id IN (SELECT k.claimant FROM tenure.claim_key k
                               WHERE k.keyspace = p_keyspace AND k.key = ANY (p_keys) AND k.claimant IS NOT NULL)
      ORDER BY i.instance_id
        FOR UPDATE;
    DELETE FROM tenure.claim_key WHERE keyspace = p_keyspace AND key = ANY (p_keys);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;

COMMENT ON FUNCTION tenure.claim_retire(text, text[]) IS
$$Retire the keys p_keys of keyspace p_keyspace: they can no longer be claimed, their claims end (a claimant learns it at its next renewal, which no longer returns them) and their claim history is deleted.
Returns how many keys were retired.
Errors: TN001 on an empty keyspace, an empty array, more than 10000 keys, or a NULL, empty or over-long key.$$;

-- Renew and take -----------------------------------------------------------------------

CREATE OR REPLACE FUNCTION tenure._claim_renew(p_keyspace text, p_instance uuid, p_expiry interval, p_now timestamptz)
RETURNS SETOF tenure.claim_grant
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_share integer;
    v_trusted boolean;
    v_count integer;
    v_keys text[];
    v_epochs bigint[];
    v_claimed timestamptz[];
    v_excess text[] := '{}'::text[];
    v_until timestamptz;
BEGIN
    PERFORM tenure._check_claimer('claim_renew', p_keyspace, p_instance, p_expiry);
    PERFORM tenure._durable();
    v_share := tenure._claim_alive(p_keyspace, p_instance, p_expiry, v_now);
    -- A cache that vouches for now: every key the caller claims is live, and they are
    -- held_count keys.
    SELECT coalesce(i.held_at <= v_now AND v_now <= i.held_until, false), i.held_count INTO v_trusted, v_count
      FROM tenure.claim_instance i WHERE i.keyspace = p_keyspace AND i.instance_id = p_instance;
    -- Every live claim of the caller is attached now, so the instance row, extended by
    -- _claim_alive, extended them: they are read, not written. No other call changes
    -- the claimant of an attached claim without the lock on the caller's row, which
    -- the caller holds now.
    IF v_trusted AND v_count <= v_share THEN
        RETURN QUERY
        SELECT k.key, k.epoch, v_now + p_expiry, 'renewed' FROM tenure.claim_key k
         WHERE k.keyspace = p_keyspace AND k.claimant = p_instance AND k.attached
         ORDER BY k.key;
        GET DIAGNOSTICS v_count = ROW_COUNT;
        UPDATE tenure.claim_instance
           SET held_count = v_count, held_at = v_now,
               held_until = CASE WHEN v_count > 0 THEN v_now + p_expiry ELSE 'infinity' END
         WHERE keyspace = p_keyspace AND instance_id = p_instance;
        RETURN;
    END IF;
    -- Otherwise the same claims, then the keys above the fair share are given up.
    SELECT coalesce(array_agg(k.key ORDER BY k.key), '{}'), array_agg(k.epoch ORDER BY k.key),
           array_agg(k.claimed_at ORDER BY k.key)
      INTO v_keys, v_epochs, v_claimed
      FROM tenure.claim_key k
     WHERE k.keyspace = p_keyspace AND k.claimant = p_instance AND k.attached;
    -- Above the fair share, give up the most recently claimed keys.
    IF cardinality(v_keys) > v_share THEN
        v_excess := ARRAY(SELECT u.key FROM unnest(v_keys, v_claimed) AS u(key, claimed_at)
                           ORDER BY u.claimed_at, u.key OFFSET v_share);
        UPDATE tenure.claim_key AS k
           SET claimant = NULL, attached = false, expires_at = NULL, claimed_at = NULL, unclaimed_since = v_now
         WHERE k.keyspace = p_keyspace AND k.key = ANY (v_excess);
    END IF;
    -- The cache: what the caller holds now, and the earliest expiry of any key it still
    -- claims. A trusted cache knew every such key was live, so all were just renewed;
    -- otherwise expired claims nobody took yet (detached) may remain, and they are
    -- looked up.
    v_until := CASE WHEN cardinality(v_keys) > cardinality(v_excess) THEN v_now + p_expiry ELSE 'infinity' END;
    IF NOT v_trusted THEN
        SELECT least(v_until, min(k.expires_at)) INTO v_until
          FROM tenure.claim_key k WHERE k.keyspace = p_keyspace AND k.claimant = p_instance AND NOT k.attached;
    END IF;
    UPDATE tenure.claim_instance
       SET held_count = cardinality(v_keys) - cardinality(v_excess), held_at = v_now, held_until = v_until
     WHERE keyspace = p_keyspace AND instance_id = p_instance;
    -- Ranked again rather than looked up in v_excess: no quadratic pass.
    RETURN QUERY
    SELECT u.key, u.epoch,
           CASE WHEN u.rank > v_share THEN NULL ELSE v_now + p_expiry END,
           CASE WHEN u.rank > v_share THEN 'released' ELSE 'renewed' END
      FROM (SELECT a.key, a.epoch, row_number() OVER (ORDER BY a.claimed_at, a.key) AS rank
              FROM unnest(v_keys, v_epochs, v_claimed) AS a(key, epoch, claimed_at)) u
     ORDER BY u.key;
END
$$;

CREATE OR REPLACE FUNCTION tenure.claim_renew(p_keyspace text, p_instance uuid, p_expiry interval)
RETURNS SETOF tenure.claim_grant
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN QUERY SELECT * FROM tenure._claim_renew(p_keyspace, p_instance, p_expiry, NULL); END $$;

COMMENT ON FUNCTION tenure.claim_renew(text, uuid, interval) IS
$$Renew, in one statement, every claim instance p_instance still holds in keyspace p_keyspace (by what the database records; the instance keeps no list), to now + p_expiry, and mark the instance live until then.
A holder above its fair share (registered keys / live instances, rounded up) gives up its most recently claimed keys beyond it, cleanly: they are returned with change = 'released', so the caller stops working on them.
Returns every key the caller held: change 'renewed' (with the new expiry) or 'released'. A key missing from the result is no longer the caller's.
Errors: TN001 on an empty keyspace, a NULL instance or a non-positive expiry.$$;

CREATE OR REPLACE FUNCTION tenure._claim_take(
    p_keyspace text, p_instance uuid, p_expiry interval, p_limit integer, p_now timestamptz
) RETURNS SETOF tenure.claim_grant
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_share integer;
    v_held integer;
    v_room integer;
    v_lapsed uuid[];
    v_keys text[];
    v_epochs bigint[];
    v_expiries timestamptz[];
    v_since timestamptz[];
    v_previous uuid[];
BEGIN
    PERFORM tenure._check_claimer('claim_take', p_keyspace, p_instance, p_expiry);
    IF p_limit IS NOT NULL AND p_limit < 1 THEN
        PERFORM tenure._invalid_argument('claim_take', 'p_limit', 'must be NULL (up to the fair share) or at least 1',
            p_limit::text, 'Pass NULL to take up to the fair share.');
    END IF;
    -- One taker per keyspace at a time; the others skip the step instead of waiting.
    IF NOT pg_try_advisory_xact_lock(hashtext('tenure.claim_take'), hashtext(p_keyspace)) THEN
        RETURN NEXT (NULL, NULL, NULL, 'busy')::tenure.claim_grant;
        RETURN;
    END IF;
    PERFORM tenure._durable();
    v_share := tenure._claim_alive(p_keyspace, p_instance, p_expiry, v_now);
    v_held := tenure._claim_held(p_keyspace, p_instance, v_now);
    v_room := v_share - v_held;
    v_room := least(v_room, coalesce(p_limit, v_room));
    -- Expired claims: the attached claims of instances whose rows lapsed are detached,
    -- with the rows locked (SKIP LOCKED: a locked row is an instance renewing itself), so
    -- that every expired claim is detached (the index claim_key_detached).
    v_lapsed := ARRAY(SELECT i.instance_id FROM tenure.claim_instance i
                       WHERE i.keyspace = p_keyspace AND i.expires_at < v_now
                         AND EXISTS (SELECT FROM tenure.claim_key k
                                      WHERE k.keyspace = p_keyspace AND k.claimant = i.instance_id AND k.attached)
                         FOR UPDATE SKIP LOCKED);
    IF cardinality(v_lapsed) > 0 THEN
        PERFORM tenure._claim_detach(p_keyspace, v_lapsed, false);
    END IF;
    -- Rows of instances gone for long, once no claim follows them.
    DELETE FROM tenure.claim_instance i
     WHERE i.keyspace = p_keyspace AND i.expires_at < v_now - 10 * p_expiry
       AND NOT EXISTS (SELECT FROM tenure.claim_key k
                        WHERE k.keyspace = p_keyspace AND k.claimant = i.instance_id AND k.attached);
    IF v_room < 1 THEN
        RETURN;  -- at its fair share: no key is looked at
    END IF;
    -- Free keys come from their own index (claim_key_free, in the order taken),
    -- expired ones from the detached claims. The rows are locked as they are chosen,
    -- skipping locked ones: a key whose holder is writing under claim_fence is skipped
    -- until that write committed. With expired claims the statement is planned for the
    -- time at hand (a generic plan would scan the keyspace).
    IF NOT EXISTS (SELECT FROM tenure.claim_key k
                    WHERE k.keyspace = p_keyspace AND k.claimant IS NOT NULL AND NOT k.attached
                      AND k.expires_at < v_now) THEN
        SELECT coalesce(array_agg(c.key), '{}'), array_agg(c.unclaimed_since)
          INTO v_keys, v_since
          FROM (SELECT k.key, k.unclaimed_since FROM tenure.claim_key k
                 WHERE k.keyspace = p_keyspace AND k.claimant IS NULL
                 ORDER BY k.unclaimed_since, k.key
                 LIMIT v_room
                   FOR UPDATE SKIP LOCKED) c;
    ELSE
        EXECUTE $q$
            SELECT coalesce(array_agg(c.key), '{}'), array_agg(c.since), array_agg(c.previous)
              FROM (SELECT k.key, coalesce(k.unclaimed_since, k.expires_at) AS since, k.claimant AS previous
                      FROM tenure.claim_key k
                     WHERE k.keyspace = $1
                       AND (k.claimant IS NULL OR (k.claimant IS NOT NULL AND NOT k.attached AND k.expires_at < $2))
                     ORDER BY coalesce(k.unclaimed_since, k.expires_at), k.key
                     LIMIT $3
                       FOR UPDATE SKIP LOCKED) c
        $q$ INTO v_keys, v_since, v_previous USING p_keyspace, v_now, v_room;
    END IF;
    -- Claim times are read after the row locks.
    WITH taken AS (
        UPDATE tenure.claim_key AS k
           SET claimant = p_instance, attached = true, epoch = k.epoch + 1, unclaimed_since = NULL,
               claimed_at = coalesce(p_now, clock_timestamp()),
               expires_at = v_now + p_expiry  -- the instance row's, which the claim follows
          FROM unnest(v_keys, v_since) AS c(key, since)
         WHERE k.keyspace = p_keyspace AND k.key = c.key
        RETURNING k.key, k.epoch, k.expires_at, k.claimed_at, c.since
    ), logged AS (
        INSERT INTO tenure.claim_log (keyspace, key, epoch, claimant, claimed_at, unclaimed_since)
        SELECT p_keyspace, t.key, t.epoch, p_instance, t.claimed_at, t.since FROM taken t
    )
    SELECT coalesce(array_agg(t.key ORDER BY t.key), '{}'), array_agg(t.epoch ORDER BY t.key),
           array_agg(t.expires_at ORDER BY t.key)
      INTO v_keys, v_epochs, v_expiries
      FROM taken t;
    IF cardinality(v_keys) > 0 THEN
        -- The caller's cache counts the new claims; the instances whose expired claims
        -- were taken over count them no more (their caches are dropped).
        UPDATE tenure.claim_instance
           SET held_count = v_held + cardinality(v_keys), held_at = v_now,
               held_until = least(held_until, v_now + p_expiry)
         WHERE keyspace = p_keyspace AND instance_id = p_instance;
        -- SKIP LOCKED: waiting here for an instance in its own renewal, which may wait
        -- for a key this take has locked, could deadlock; that renewal rewrites its
        -- cache anyway, from the keys it still holds.
        UPDATE tenure.claim_instance SET held_until = NULL
         WHERE (keyspace, instance_id) IN (SELECT i.keyspace, i.instance_id FROM tenure.claim_instance i
                                            WHERE i.keyspace = p_keyspace AND i.instance_id = ANY (v_previous)
                                              AND i.instance_id <> p_instance
                                              FOR UPDATE SKIP LOCKED);
    END IF;
    RETURN QUERY
    SELECT u.key, u.epoch, u.expires_at, 'taken' FROM unnest(v_keys, v_epochs, v_expiries) AS u(key, epoch, expires_at)
     ORDER BY u.key;
END
$$;

CREATE OR REPLACE FUNCTION tenure.claim_take(
    p_keyspace text, p_instance uuid, p_expiry interval, p_limit integer DEFAULT NULL
) RETURNS SETOF tenure.claim_grant
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN QUERY SELECT * FROM tenure._claim_take(p_keyspace, p_instance, p_expiry, p_limit, NULL); END $$;

COMMENT ON FUNCTION tenure.claim_take(text, uuid, interval, integer) IS
$$Claim, for instance p_instance, keys of keyspace p_keyspace that are unclaimed or whose claim expired, longest unclaimed first, until p_expiry from now: at most up to the caller's fair share (registered keys / live instances, rounded up) minus what it holds, and at most p_limit. Each key's epoch grows by one.
The caller is live until then, and so are the claims it already holds: claims follow their instance.
If another instance is taking in the same keyspace at this moment, the step is skipped instead of waiting: one row with change = 'busy' and no key.
Returns the keys taken (change = 'taken'); no row when there was nothing to take or no room.
Errors: TN001 on an empty keyspace, a NULL instance, a non-positive expiry or p_limit below 1.$$;

-- Renew and take in one call ----------------------------------------------------------------

-- One cycle in one statement and one transaction: claim_renew, then claim_take when the
-- caller has room below its fair share. An instance at its fair share whose cache of held
-- claims vouches for now (the steady state) pays one update of its instance row, which
-- its claims follow, and a read of its keys, and no take: a take would find no room.
CREATE OR REPLACE FUNCTION tenure._claim_cycle(
    p_keyspace text, p_instance uuid, p_expiry interval, p_limit integer, p_now timestamptz
) RETURNS SETOF tenure.claim_grant
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_share integer;
    v_stale boolean;
    v_held integer;
    v_fits boolean;
    v_count integer;
BEGIN
    -- The checks of claim_renew and claim_take, tested here in one expression: a call of
    -- each helper is a query of its own. The helpers raise the error.
    IF p_instance IS NULL OR p_expiry IS NULL OR p_expiry <= interval '0' OR p_expiry > interval '100 years'
       OR p_keyspace IS NULL OR length(p_keyspace) > 200 OR tenure._blank(p_keyspace) OR p_limit < 1 THEN
        PERFORM tenure._check_claimer('claim_cycle', p_keyspace, p_instance, p_expiry);
        IF p_limit < 1 THEN
            PERFORM tenure._invalid_argument('claim_cycle', 'p_limit', 'must be NULL (up to the fair share) or at least 1',
                p_limit::text, 'Pass NULL to take up to the fair share.');
        END IF;
    END IF;
    PERFORM tenure._durable();
    -- The fair share, counting the caller as live (as _claim_share does), and whether an
    -- instance row is old enough for a take to delete it.
    SELECT ceil(coalesce((SELECT s.keys FROM tenure.claim_keyspace s WHERE s.keyspace = p_keyspace), 0)::numeric
                / greatest(count(*) FILTER (WHERE i.expires_at >= v_now OR i.instance_id = p_instance), 1))::integer,
           coalesce(bool_or(i.expires_at < v_now - 10 * p_expiry), false)
      INTO v_share, v_stale
      FROM tenure.claim_instance i WHERE i.keyspace = p_keyspace;
    -- Live until now + p_expiry, locking the caller's row first (instance, then keys, as
    -- renew and take lock), if it has not lapsed. When its cache vouches for now and it
    -- holds no more than its share, every key it claims is live and attached, so extended
    -- with the row: the cache then holds until now + p_expiry (held_count is unchanged,
    -- and held_at stays, as the count held since). Otherwise the cache is cleared, and
    -- claim_renew's own pass sets it.
    UPDATE tenure.claim_instance AS i
       SET renewed_at = v_now, expires_at = v_now + p_expiry,
           held_until = CASE WHEN i.held_at <= v_now AND v_now <= i.held_until AND i.held_count <= v_share
                             THEN CASE WHEN i.held_count > 0 THEN v_now + p_expiry ELSE 'infinity' END END
     WHERE i.keyspace = p_keyspace AND i.instance_id = p_instance AND i.expires_at >= v_now
    RETURNING i.held_count, i.held_until IS NOT NULL INTO v_held, v_fits;
    IF NOT coalesce(v_fits, false) THEN
        -- A new or lapsed instance, an outdated cache or keys above the share: the two calls.
        RETURN QUERY SELECT * FROM tenure._claim_renew(p_keyspace, p_instance, p_expiry, v_now);
        RETURN QUERY SELECT * FROM tenure._claim_take(p_keyspace, p_instance, p_expiry, p_limit, p_now);
        RETURN;
    END IF;
    -- claim_renew's read (see there), in no particular order.
    RETURN QUERY
    SELECT k.key, k.epoch, v_now + p_expiry, 'renewed'::text FROM tenure.claim_key k
     WHERE k.keyspace = p_keyspace AND k.claimant = p_instance AND k.attached;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_count <> v_held THEN
        -- The cache was wrong (no write should leave it so): the next call recounts.
        UPDATE tenure.claim_instance SET held_until = NULL WHERE keyspace = p_keyspace AND instance_id = p_instance;
        v_held := least(v_held, v_count);
    END IF;
    IF v_share - v_held >= 1 THEN
        RETURN QUERY SELECT * FROM tenure._claim_take(p_keyspace, p_instance, p_expiry, p_limit, p_now);
    ELSIF v_stale THEN
        -- claim_take's clean-up of instances gone for long, which a take at the fair share
        -- skips here. SKIP LOCKED: a locked row is an instance renewing itself.
        DELETE FROM tenure.claim_instance
         WHERE (keyspace, instance_id) IN (SELECT i.keyspace, i.instance_id FROM tenure.claim_instance i
                                            WHERE i.keyspace = p_keyspace AND i.expires_at < v_now - 10 * p_expiry
                                              AND NOT EXISTS (SELECT FROM tenure.claim_key k
                                                               WHERE k.keyspace = p_keyspace
                                                                 AND k.claimant = i.instance_id AND k.attached)
                                              FOR UPDATE SKIP LOCKED);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION tenure.claim_cycle(
    p_keyspace text, p_instance uuid, p_expiry interval, p_limit integer DEFAULT NULL
) RETURNS SETOF tenure.claim_grant
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN QUERY SELECT * FROM tenure._claim_cycle(p_keyspace, p_instance, p_expiry, p_limit, NULL); END $$;

COMMENT ON FUNCTION tenure.claim_cycle(text, uuid, interval, integer) IS
$$One claim cycle in one call and one transaction: claim_renew, then claim_take (at most p_limit keys) when the caller has room below its fair share.
Returns what claim_renew returns (change 'renewed' or 'released'), in no particular order, then what claim_take returns ('taken', or one 'busy' row with no key when another instance was taking). An instance at its fair share does not take, and gets no 'busy' row.
Errors: TN001 on an empty keyspace, a NULL instance, a non-positive expiry or p_limit below 1.$$;

-- Release, check, fence ------------------------------------------------------------------

CREATE OR REPLACE FUNCTION tenure._claim_release(p_keyspace text, p_instance uuid, p_keys text[], p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_live_until timestamptz;
    v_count integer;
BEGIN
    PERFORM tenure._check_name('claim_release', 'p_keyspace', p_keyspace);
    PERFORM tenure._check_instance('claim_release', 'p_instance', p_instance);
    IF p_keys IS NOT NULL THEN
        PERFORM tenure._check_keys('claim_release', 'p_keys', p_keys);
    END IF;
    PERFORM tenure._durable();
    -- The caller's row first, in the order renew and take lock (instance, then keys).
    SELECT i.expires_at INTO v_live_until FROM tenure.claim_instance i
     WHERE i.keyspace = p_keyspace AND i.instance_id = p_instance FOR UPDATE;
    UPDATE tenure.claim_key AS k
       SET claimant = NULL, attached = false, expires_at = NULL, claimed_at = NULL, unclaimed_since = v_now
     WHERE k.keyspace = p_keyspace AND k.claimant = p_instance
       AND CASE WHEN k.attached THEN v_live_until ELSE k.expires_at END >= v_now
       AND (p_keys IS NULL OR k.key = ANY (p_keys));
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF p_keys IS NULL THEN
        -- Leaving altogether: the others' fair share grows at once.
        DELETE FROM tenure.claim_instance WHERE keyspace = p_keyspace AND instance_id = p_instance;
    ELSIF v_count > 0 THEN
        -- Its cache of held claims counted these: the next renew or take recounts.
        UPDATE tenure.claim_instance SET held_until = NULL WHERE keyspace = p_keyspace AND instance_id = p_instance;
    END IF;
    RETURN v_count;
END
$$;

CREATE OR REPLACE FUNCTION tenure.claim_release(p_keyspace text, p_instance uuid, p_keys text[] DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._claim_release(p_keyspace, p_instance, p_keys, NULL); END $$;

COMMENT ON FUNCTION tenure.claim_release(text, uuid, text[]) IS
$$Give back keys that instance p_instance holds in keyspace p_keyspace: the keys p_keys, or with NULL (clean shutdown) all of them, and then the instance also leaves the keyspace so the others' fair share grows at once.
Returns how many claims were released. Keys the caller does not hold are ignored.
Errors: TN001 on an empty keyspace, a NULL instance, or an empty array or bad key in p_keys.$$;

CREATE OR REPLACE FUNCTION tenure._claim_check(
    p_keyspace text, p_instance uuid, p_key text, p_epoch bigint, p_now timestamptz
) RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM tenure._check_name('claim_check', 'p_keyspace', p_keyspace);
    PERFORM tenure._check_instance('claim_check', 'p_instance', p_instance);
    PERFORM tenure._check_name('claim_check', 'p_key', p_key);
    IF p_epoch IS NULL OR p_epoch < 1 THEN
        PERFORM tenure._invalid_argument('claim_check', 'p_epoch', 'must be an epoch of at least 1',
            quote_nullable(p_epoch), 'Pass the epoch that claim_take returned for the key.');
    END IF;
    RETURN EXISTS (SELECT FROM tenure.claim_key k
                    WHERE k.keyspace = p_keyspace AND k.key = p_key AND k.claimant = p_instance AND k.epoch = p_epoch
                      AND CASE WHEN k.attached
                               THEN (SELECT i.expires_at FROM tenure.claim_instance i
                                      WHERE i.keyspace = p_keyspace AND i.instance_id = p_instance)
                               ELSE k.expires_at END >= coalesce(p_now, clock_timestamp()));
END
$$;

CREATE OR REPLACE FUNCTION tenure.claim_check(p_keyspace text, p_instance uuid, p_key text, p_epoch bigint)
RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._claim_check(p_keyspace, p_instance, p_key, p_epoch, NULL); END $$;

COMMENT ON FUNCTION tenure.claim_check(text, uuid, text, bigint) IS
$$True only if instance p_instance holds key p_key of keyspace p_keyspace in epoch p_epoch under a claim that has not expired: for a submitter to verify, right before it acts, that the key is still its own. False otherwise, including for an unknown key.
Errors: TN001 on NULL or empty arguments or an epoch below 1.$$;

CREATE OR REPLACE FUNCTION tenure._claim_fence(
    p_keyspace text, p_instance uuid, p_key text, p_epoch bigint, p_now timestamptz
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key tenure.claim_key;
    v_now timestamptz;
BEGIN
    PERFORM tenure._check_name('claim_fence', 'p_keyspace', p_keyspace);
    PERFORM tenure._check_instance('claim_fence', 'p_instance', p_instance);
    PERFORM tenure._check_name('claim_fence', 'p_key', p_key);
    IF p_epoch IS NULL OR p_epoch < 1 THEN
        PERFORM tenure._invalid_argument('claim_fence', 'p_epoch', 'must be an epoch of at least 1',
            quote_nullable(p_epoch), 'Pass the epoch that claim_take returned for the key.');
    END IF;
    -- The share lock keeps claim_take (SKIP LOCKED) off the key until the caller's
    -- transaction ends.
    PERFORM tenure._durable();  -- the fenced write commits as durably as the claim
    SELECT * INTO v_key FROM tenure.claim_key WHERE keyspace = p_keyspace AND key = p_key FOR KEY SHARE;
    IF v_key.attached THEN
        -- The claim's expiry is its instance row's (see claims_follow_instance).
        v_key.expires_at := coalesce((SELECT i.expires_at FROM tenure.claim_instance i
                                       WHERE i.keyspace = p_keyspace AND i.instance_id = v_key.claimant), '-infinity');
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
    IF v_key.claimant IS DISTINCT FROM p_instance OR v_key.epoch <> p_epoch OR v_key.expires_at < v_now
       OR v_key.key IS NULL THEN
        RAISE EXCEPTION 'tenure.claim_fence: instance % does not hold key % of % in epoch %',
                        p_instance, p_key, p_keyspace, p_epoch
            USING ERRCODE = 'TN103',
                  DETAIL = CASE
                      WHEN v_key.key IS NULL THEN format('Key %L is not registered in keyspace %L.', p_key, p_keyspace)
                      WHEN v_key.claimant IS NULL THEN format('The key is unclaimed since %s (epoch %s).',
                                                              v_key.unclaimed_since, v_key.epoch)
                      WHEN v_key.epoch <> p_epoch OR v_key.claimant <> p_instance THEN
                          format('The key is held by %s in epoch %s.', v_key.claimant, v_key.epoch)
                      ELSE format('The claim expired at %s (now %s).', v_key.expires_at, v_now)
                  END,
                  HINT = 'Stop working on this key and roll back: another instance may hold it now.';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION tenure.claim_fence(p_keyspace text, p_instance uuid, p_key text, p_epoch bigint)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN PERFORM tenure._claim_fence(p_keyspace, p_instance, p_key, p_epoch, NULL); END $$;

COMMENT ON FUNCTION tenure.claim_fence(text, uuid, text, bigint) IS
$$Fence an application write on a key: call it inside the transaction that makes the write; it raises TN103 (claim_lost) unless p_instance holds p_key of p_keyspace in epoch p_epoch under a claim that has not expired, and otherwise keeps any other instance from taking the key until that transaction ends.
Errors: TN001 on NULL or empty arguments or an epoch below 1; TN103 when the caller does not hold the key in that epoch.$$;

-- Retention of the claim log: claims that ended, oldest first, in bounded batches. A
-- claim ends when the key is next unclaimed: the next entry's unclaimed_since (the
-- release or expiry it followed), or for the key's last entry the release recorded in
-- claim_key. The entry of a claim still held (the key's epoch, claimant set) stays, and
-- so does every claim_key row: epochs keep growing from where they are.
CREATE OR REPLACE FUNCTION tenure._claim_prune(p_older_than interval, p_limit integer, p_now timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_cutoff timestamptz;
    v_count bigint;
BEGIN
    PERFORM tenure._check_prune('claim_prune', p_older_than, p_limit);
    v_cutoff := coalesce(p_now, clock_timestamp()) - p_older_than;
    PERFORM tenure._durable();
    -- A claim ends after it began: the candidates are found by claimed_at (index
    -- claim_log_claimed), oldest first.
    -- MATERIALIZED: the locking subquery runs once (see _heartbeat_prune).
    WITH doomed AS MATERIALIZED (
        SELECT e.keyspace, e.key, e.epoch FROM tenure.claim_log e
          JOIN tenure.claim_key k ON k.keyspace = e.keyspace AND k.key = e.key
         WHERE e.claimed_at < v_cutoff
           AND CASE WHEN e.epoch < k.epoch
                    THEN (SELECT n.unclaimed_since FROM tenure.claim_log n
                           WHERE n.keyspace = e.keyspace AND n.key = e.key AND n.epoch > e.epoch
                           ORDER BY n.epoch LIMIT 1) < v_cutoff
                    ELSE e.epoch = k.epoch AND k.claimant IS NULL AND k.unclaimed_since < v_cutoff END
         ORDER BY e.claimed_at
         LIMIT p_limit
           FOR UPDATE OF e SKIP LOCKED
    )
    DELETE FROM tenure.claim_log AS l USING doomed d
     WHERE (l.keyspace, l.key, l.epoch) = (d.keyspace, d.key, d.epoch);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;

CREATE OR REPLACE FUNCTION tenure.claim_prune(p_older_than interval, p_limit integer DEFAULT 10000)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._claim_prune(p_older_than, p_limit, NULL); END $$;

COMMENT ON FUNCTION tenure.claim_prune(interval, integer) IS
$$Retention: delete at most p_limit entries of tenure.claim_log whose claim ended more than p_older_than ago (the key passed on to a later claim, or was released), oldest first. The entry of a claim still held (live or expired, not yet passed on) is never deleted, nor any claim key: epochs keep growing from where they are. Call again while it returns p_limit.
Returns how many entries were deleted.
Errors: TN001 on a NULL, negative or over 100 years p_older_than, or p_limit outside 1 to 1000000.$$;

GRANT EXECUTE ON FUNCTION
    tenure.claim_register(text, text[]),
    tenure.claim_retire(text, text[]),
    tenure.claim_renew(text, uuid, interval),
    tenure.claim_take(text, uuid, interval, integer),
    tenure.claim_cycle(text, uuid, interval, integer),
    tenure.claim_release(text, uuid, text[]),
    tenure.claim_check(text, uuid, text, bigint),
    tenure.claim_fence(text, uuid, text, bigint),
    tenure.claim_prune(interval, integer)
TO tenure_worker;
