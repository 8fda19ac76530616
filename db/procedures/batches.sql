-- The submission queue: batches per key, submitted in per-key order, fairly across
-- keys, by the instance that holds the claim on the key. Each public function is a
-- SECURITY DEFINER wrapper over an internal one that takes the time to act at
-- (p_now, NULL = the server's clock), in PL/pgSQL: a SQL function with SET is parsed
-- and planned again on every call.

-- A key that takes batches: registered for claims and in batch_key.
CREATE OR REPLACE FUNCTION tenure._batch_key(p_keyspace text, p_key text, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO tenure.claim_key (keyspace, key, unclaimed_since, registered_at)
    VALUES (p_keyspace, p_key, p_now, p_now)
    ON CONFLICT DO NOTHING;
    INSERT INTO tenure.batch_key (keyspace, key) VALUES (p_keyspace, p_key) ON CONFLICT DO NOTHING;
END
$$;

-- The selection summary of keys p_keys (batch_key.ready, head_at) from their batches, and
-- last_selected = p_now for the keys in p_served, one microsecond later for each next one:
-- a selection's keys keep the order they were served in, so the least recently served
-- come first again however a selection's size divides the keys (with one timestamp, ties
-- went by head_at, and the same keys won every split). The caller holds the rows of p_keys
-- locked (FOR NO KEY UPDATE, taken in an earlier statement), so this statement's snapshot sees
-- every committed change to their batches and no other writer can recompute them meanwhile.
-- Every change that can make a key selectable (a batch enqueued, resolved, retried or
-- skipped, a mode changed) goes through here; a change that can only make it less
-- selectable (a dependency doomed it) may leave ready stale, and the next selection that
-- considers the key corrects it.
CREATE OR REPLACE FUNCTION tenure._batch_refresh(
    p_keyspace text, p_keys text[], p_served text[], p_now timestamptz
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF cardinality(p_keys) = 0 THEN
        RETURN;  -- a resolution that cannot make its key more selectable
    END IF;
    UPDATE tenure.batch_key AS k
       SET ready = s.ready, head_at = s.head_at,
           last_selected = coalesce(p_now + (s.served_as - 1) * interval '1 microsecond', k.last_selected)
      FROM (SELECT x.key, array_position(p_served, x.key) AS served_as, h.enqueued_at AS head_at,
                   h.enqueued_at IS NOT NULL
                   AND NOT (coalesce(x.implicit_deps, q.implicit_deps, true) AND u.has_invalid)
                   AND NOT (coalesce(x.mode, q.mode, 'serial') = 'serial' AND u.has_pending) AS ready
              FROM (SELECT DISTINCT v.key FROM unnest(p_keys) AS v(key)) v
              JOIN tenure.batch_key x ON x.keyspace = p_keyspace AND x.key = v.key
              LEFT JOIN tenure.batch_queue q ON q.keyspace = p_keyspace
              -- per key, from the index batch_unsettled (batches in flight or halting: few)
              CROSS JOIN LATERAL (SELECT coalesce(bool_or(b.status = 'invalid'), false) AS has_invalid,
                                         coalesce(bool_or(b.status = 'pending'), false) AS has_pending
                                    FROM tenure.batch b
                                   WHERE b.keyspace = p_keyspace AND b.key = x.key
                                     AND b.status IN ('pending', 'unknown', 'invalid')) u
              LEFT JOIN LATERAL (SELECT b.enqueued_at FROM tenure.batch b
                                  WHERE b.keyspace = p_keyspace AND b.key = x.key
                                    AND b.status NOT IN ('committed', 'skipped')  -- as the index batch_open
                                    AND b.status IN ('queued', 'unknown')
                                  ORDER BY b.seq LIMIT 1) h ON true) s
     WHERE k.keyspace = p_keyspace AND k.key = s.key
       AND (s.served_as IS NOT NULL OR (k.ready, k.head_at) IS DISTINCT FROM (s.ready, s.head_at));
END
$$;

-- Locks the batch_key rows of keys p_keys, in key order (as every writer does, so that
-- two of them never wait for each other in a cycle), in mode p_mode:
-- - 'no key update' (enqueue, selection, a resolution that can make its key selectable,
--   repairs): they wait for each other, so each recomputes a key's summary from what the
--   others committed;
-- - 'update' (batch_configure): waits also for the 'key share' locks below, since a mode
--   change decides which resolutions must recompute a summary;
-- - 'key share' (every resolution): keeps the key's mode from changing until the
--   resolution commits, without waiting for selections.
-- (plan_cache_mode: one plan for every call; a custom plan per call cost more to plan than to run)
CREATE OR REPLACE FUNCTION tenure._batch_lock_keys(p_keyspace text, p_keys text[], p_mode text DEFAULT 'no key update')
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    IF p_mode = 'no key update' THEN
        PERFORM 1
           FROM (SELECT DISTINCT u.key FROM unnest(p_keys) AS u(key)) u
           JOIN tenure.batch_key k ON k.keyspace = p_keyspace AND k.key = u.key
          ORDER BY k.key
            FOR NO KEY UPDATE OF k;
    ELSIF p_mode = 'key share' THEN
        PERFORM 1
           FROM (SELECT DISTINCT u.key FROM unnest(p_keys) AS u(key)) u
           JOIN tenure.batch_key k ON k.keyspace = p_keyspace AND k.key = u.key
          ORDER BY k.key
            FOR KEY SHARE OF k;
    ELSE
        PERFORM 1
           FROM (SELECT DISTINCT u.key FROM unnest(p_keys) AS u(key)) u
           JOIN tenure.batch_key k ON k.keyspace = p_keyspace AND k.key = u.key
          ORDER BY k.key
            FOR UPDATE OF k;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION tenure._batch_missing(p_function text, p_keyspace text, p_id uuid)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'tenure.%: no batch % in queue %', p_function, p_id, p_keyspace
        USING ERRCODE = 'TN201', DETAIL = 'It may never have existed, or belong to another queue.',
              HINT = 'Check the id; nothing was changed.';
END
$$;

CREATE OR REPLACE FUNCTION tenure._batch_configure(
    p_keyspace text, p_mode text, p_implicit_deps boolean, p_key text, p_now timestamptz
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_keys text[];
BEGIN
    PERFORM tenure._check_name('batch_configure', 'p_keyspace', p_keyspace);
    IF p_mode IS NULL OR p_mode NOT IN ('unconstrained', 'serial', 'parallel') THEN
        PERFORM tenure._invalid_argument('batch_configure', 'p_mode', 'must be unconstrained, serial or parallel',
            quote_nullable(p_mode), 'unconstrained: the external system keeps order and what it gets; serial: '
            || 'one batch of a key at a time; parallel: later batches may overtake when their state keys differ.');
    END IF;
    IF p_implicit_deps IS NULL THEN
        PERFORM tenure._invalid_argument('batch_configure', 'p_implicit_deps', 'must not be NULL', NULL,
            'Pass true to halt a key at an invalid batch until an operator skips or retries it.');
    END IF;
    PERFORM tenure._durable();
    IF p_key IS NULL THEN
        -- The keys' summaries depend on the queue's mode: every key is looked at again
        -- (a rare operator call; it waits for selections in progress).
        SELECT coalesce(array_agg(k.key), '{}') INTO v_keys FROM tenure.batch_key k WHERE k.keyspace = p_keyspace;
        PERFORM tenure._batch_lock_keys(p_keyspace, v_keys, 'update');
        INSERT INTO tenure.batch_queue (keyspace, mode, implicit_deps) VALUES (p_keyspace, p_mode, p_implicit_deps)
        ON CONFLICT (keyspace) DO UPDATE SET mode = excluded.mode, implicit_deps = excluded.implicit_deps;
    ELSE
        PERFORM tenure._check_name('batch_configure', 'p_key', p_key);
        PERFORM tenure._batch_key(p_keyspace, p_key, coalesce(p_now, clock_timestamp()));
        v_keys := ARRAY[p_key];
        PERFORM tenure._batch_lock_keys(p_keyspace, v_keys, 'update');
        UPDATE tenure.batch_key SET mode = p_mode, implicit_deps = p_implicit_deps
         WHERE keyspace = p_keyspace AND key = p_key;
    END IF;
    PERFORM tenure._batch_refresh(p_keyspace, v_keys, '{}', NULL);
END
$$;

CREATE OR REPLACE FUNCTION tenure.batch_configure(
    p_keyspace text, p_mode text, p_implicit_deps boolean DEFAULT true, p_key text DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN PERFORM tenure._batch_configure(p_keyspace, p_mode, p_implicit_deps, p_key, NULL); END $$;

COMMENT ON FUNCTION tenure.batch_configure(text, text, boolean, text) IS
$$Set the submission mode of queue p_keyspace, or with p_key of that one key (which overrides the queue's): 'unconstrained' (the external system keeps order and persists: every queued batch in order), 'serial' (the next batch of a key only once the previous one is committed) or 'parallel' (a later batch may go before an earlier uncommitted one only if their state keys do not overlap). With p_implicit_deps an invalid batch halts its key until an operator skips or retries it.
Errors: TN001 on an empty keyspace or key, an unknown mode or a NULL p_implicit_deps.$$;

-- Enqueue -------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION tenure._batch_enqueue_many(p_keyspace text, p_batches jsonb, p_now timestamptz, p_function text)
RETURNS SETOF tenure.batch_enqueued
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_input tenure._batch_input[];
    v_bad record;
    v_field record;
    v_created uuid[];
BEGIN
    PERFORM tenure._check_name(p_function, 'p_keyspace', p_keyspace);
    IF p_batches IS NULL OR jsonb_typeof(p_batches) <> 'array' THEN
        PERFORM tenure._invalid_argument(p_function, 'p_batches', 'must be a JSON array of batch objects',
            quote_nullable(left(p_batches::text, 100)),
            'Pass [{"key": "A", "payload": "<base64>"}, ...]; optional: state_keys, depends_on, id.');
    END IF;
    PERFORM tenure._check_count(p_function, 'p_batches', 'batches', jsonb_array_length(p_batches), 10000);
    -- Each field must have its JSON type: an object is no key, [["a"]] no list of state keys.
    SELECT e.ord, f.key INTO v_field
      FROM jsonb_array_elements(p_batches) WITH ORDINALITY AS e(batch, ord),
           LATERAL jsonb_each(CASE jsonb_typeof(e.batch) WHEN 'object' THEN e.batch ELSE '{}' END) AS f(key, value)
     WHERE jsonb_typeof(f.value) <> 'null'
       AND CASE WHEN f.key IN ('key', 'payload', 'id') THEN jsonb_typeof(f.value) <> 'string'
                WHEN f.key IN ('state_keys', 'depends_on') THEN
                    jsonb_typeof(f.value) <> 'array'
                    OR EXISTS (SELECT FROM jsonb_array_elements(f.value) x(v) WHERE jsonb_typeof(x.v) <> 'string')
                ELSE false END
     ORDER BY e.ord, f.key
     LIMIT 1;
    IF FOUND THEN
        PERFORM tenure._invalid_argument(p_function, format('batch %s', v_field.ord),
            format('has a %s that is not a JSON %s', v_field.key,
                   CASE WHEN v_field.key IN ('state_keys', 'depends_on') THEN 'array of strings' ELSE 'string' END),
            'see the batch at that position',
            'key, payload (base64) and id are strings; state_keys and depends_on arrays of strings.');
    END IF;
    BEGIN
        SELECT array_agg((e.ord, coalesce(r.id, gen_random_uuid()), r.key, decode(r.payload, 'base64'),
                          coalesce(r.state_keys, '{}'), coalesce(r.depends_on, '{}'),
                          jsonb_typeof(e.batch) = 'object')::tenure._batch_input ORDER BY e.ord)
          INTO v_input
          FROM jsonb_array_elements(p_batches) WITH ORDINALITY AS e(batch, ord),
               LATERAL jsonb_to_record(CASE jsonb_typeof(e.batch) WHEN 'object' THEN e.batch ELSE '{}' END)
                   AS r(key text, payload text, state_keys text[], depends_on uuid[], id uuid);
    EXCEPTION WHEN invalid_text_representation OR invalid_parameter_value OR datatype_mismatch
                   OR invalid_binary_representation THEN
        PERFORM tenure._invalid_argument(p_function, 'p_batches', 'has a value of the wrong type', SQLERRM,
            'payload must be base64 text, state_keys an array of strings, depends_on an array of uuids, id a uuid.');
    END;
    SELECT i.ord, CASE WHEN NOT i.is_object THEN 'must be a JSON object'
                       WHEN i.key IS NULL OR i.key ~ '^[[:space:]\u0085\u00a0\u1680\u180e\u2000-\u200b\u2028\u2029\u202f\u205f\u3000\ufeff]*$' OR length(i.key) > 200
                           THEN 'needs a key of 1 to 200 characters, not only whitespace'
                       WHEN i.payload IS NULL THEN 'needs a payload'
                       WHEN array_position(i.state_keys, NULL) IS NOT NULL
                            OR EXISTS (SELECT FROM unnest(i.state_keys) sk WHERE sk ~ '^[[:space:]\u0085\u00a0\u1680\u180e\u2000-\u200b\u2028\u2029\u202f\u205f\u3000\ufeff]*$') THEN 'has an empty state key'
                       WHEN array_position(i.depends_on, NULL) IS NOT NULL THEN 'has a NULL dependency'
                       WHEN EXISTS (SELECT FROM tenure.batch b WHERE b.id = i.id AND b.keyspace <> p_keyspace)
                            OR EXISTS (SELECT FROM tenure.batch_tombstone t WHERE t.id = i.id AND t.keyspace <> p_keyspace)
                           THEN 'has the id of a batch of another queue'
                       ELSE 'depends on a batch that does not exist in this queue' END AS problem
      INTO v_bad
      FROM unnest(v_input) i
     WHERE NOT i.is_object OR i.key IS NULL OR i.key ~ '^[[:space:]\u0085\u00a0\u1680\u180e\u2000-\u200b\u2028\u2029\u202f\u205f\u3000\ufeff]*$' OR length(i.key) > 200 OR i.payload IS NULL
        OR array_position(i.state_keys, NULL) IS NOT NULL
        OR EXISTS (SELECT FROM unnest(i.state_keys) sk WHERE sk ~ '^[[:space:]\u0085\u00a0\u1680\u180e\u2000-\u200b\u2028\u2029\u202f\u205f\u3000\ufeff]*$')
        OR array_position(i.depends_on, NULL) IS NOT NULL
        OR EXISTS (SELECT FROM tenure.batch b WHERE b.id = i.id AND b.keyspace <> p_keyspace)
        OR EXISTS (SELECT FROM tenure.batch_tombstone t WHERE t.id = i.id AND t.keyspace <> p_keyspace)
        OR EXISTS (SELECT FROM unnest(i.depends_on) d
                    WHERE NOT EXISTS (SELECT FROM tenure.batch b WHERE b.id = d AND b.keyspace = p_keyspace)
                      -- pruned by batch_prune: known while its tombstone is kept
                      AND NOT EXISTS (SELECT FROM tenure.batch_tombstone t WHERE t.id = d AND t.keyspace = p_keyspace)
                      AND NOT EXISTS (SELECT FROM unnest(v_input) j WHERE j.id = d AND j.ord < i.ord))
     ORDER BY i.ord
     LIMIT 1;
    IF FOUND THEN
        PERFORM tenure._invalid_argument(p_function, format('batch %s', v_bad.ord), v_bad.problem,
            'see the batch at that position', 'Fix that batch; nothing was enqueued.');
    END IF;
    PERFORM tenure._durable();

    -- Per-key sequence numbers are handed out under the lock of each key's row, in
    -- key order, so concurrent producers cannot interleave numbers out of commit order.
    PERFORM tenure._batch_key(p_keyspace, k.key, v_now) FROM (SELECT DISTINCT i.key FROM unnest(v_input) i) k;
    PERFORM tenure._batch_lock_keys(p_keyspace, ARRAY(SELECT i.key FROM unnest(v_input) i));

    WITH fresh AS (
        -- new ids only (a pruned batch's id is not new while its tombstone is kept), each
        -- once (its first occurrence), numbered in input order per key
        SELECT f.*, row_number() OVER (PARTITION BY f.key ORDER BY f.ord) AS rank
          FROM (SELECT DISTINCT ON (i.id) i.*
                  FROM unnest(v_input) i
                 WHERE NOT EXISTS (SELECT FROM tenure.batch b WHERE b.id = i.id)
                   AND NOT EXISTS (SELECT FROM tenure.batch_tombstone t WHERE t.id = i.id)
                 ORDER BY i.id, i.ord) f
    ), numbered AS (
        SELECT f.*, k.next_seq + f.rank - 1 AS seq,
               -- a dependency that is already invalid (or skipped, pruned or not) dooms the batch at once
               coalesce((SELECT format('dependency %s is %s', b.id, b.status) FROM tenure.batch b
                          WHERE b.id = ANY (f.depends_on) AND b.status IN ('invalid', 'skipped') LIMIT 1),
                        (SELECT format('dependency %s is %s', t.id, t.status) FROM tenure.batch_tombstone t
                          WHERE t.id = ANY (f.depends_on) AND t.status = 'skipped' LIMIT 1)) AS doomed
          FROM fresh f
          JOIN tenure.batch_key k ON k.keyspace = p_keyspace AND k.key = f.key
    ), bumped AS (
        UPDATE tenure.batch_key k
           SET next_seq = k.next_seq + c.n
          FROM (SELECT n.key, count(*) AS n FROM numbered n GROUP BY n.key) c
         WHERE k.keyspace = p_keyspace AND k.key = c.key
        RETURNING k.key
    ), inserted AS (
        INSERT INTO tenure.batch AS b (id, keyspace, key, seq, payload, status, state_keys, depends_on, enqueued_at,
                                       resolved_at, detail)
        SELECT n.id, p_keyspace, n.key, n.seq, n.payload,
               CASE WHEN n.doomed IS NULL THEN 'queued' ELSE 'invalid' END,
               n.state_keys, n.depends_on, v_now, CASE WHEN n.doomed IS NOT NULL THEN v_now END, n.doomed
          FROM numbered n
         ORDER BY n.ord
        ON CONFLICT DO NOTHING
        RETURNING b.id
    )
    SELECT coalesce(array_agg(x.id), '{}') INTO v_created FROM inserted x, (SELECT count(*) FROM bumped) force_bump;
    -- A key that had nothing waiting has now (writes only when its summary changes).
    PERFORM tenure._batch_refresh(p_keyspace, ARRAY(SELECT DISTINCT i.key FROM unnest(v_input) i), '{}', NULL);
    PERFORM pg_notify('tenure_batch', p_keyspace);

    -- A pruned batch answers from its tombstone (one snapshot: batch_prune moves a batch
    -- to its tombstone in one transaction).
    RETURN QUERY
    SELECT b.id, b.key, b.seq,
           b.id = ANY (v_created) AND i.ord = min(i.ord) OVER (PARTITION BY i.id)
      FROM unnest(v_input) i
      JOIN (SELECT x.id, x.key, x.seq FROM tenure.batch x WHERE x.id = ANY (ARRAY(SELECT j.id FROM unnest(v_input) j))
            UNION ALL
            SELECT t.id, t.key, t.seq FROM tenure.batch_tombstone t
             WHERE t.id = ANY (ARRAY(SELECT j.id FROM unnest(v_input) j))) b ON b.id = i.id
     ORDER BY i.ord;
END
$$;

CREATE OR REPLACE FUNCTION tenure.batch_enqueue_many(p_keyspace text, p_batches jsonb)
RETURNS SETOF tenure.batch_enqueued
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN QUERY SELECT * FROM tenure._batch_enqueue_many(p_keyspace, p_batches, NULL, 'batch_enqueue_many'); END $$;

COMMENT ON FUNCTION tenure.batch_enqueue_many(text, jsonb) IS
$$Enqueue many batches into queue p_keyspace in one transaction: p_batches is a JSON array of objects with key (required), payload (base64, required), state_keys (strings, for parallel mode), depends_on (batch ids that must be committed first) and id (a uuid chosen by the caller, for idempotency).
Each batch gets the next number of its key's sequence, in input order; keys are registered for claims on first use. A batch whose dependency is already invalid is enqueued as invalid. Announced with NOTIFY tenure_batch, payload = keyspace.
Returns one row per batch in input order, created = false for an id that existed.
Errors: TN001 on more than 10000 batches, or naming the first bad batch (no key, no or bad payload, an empty state key, a dependency that does not exist); nothing is enqueued then.$$;

CREATE OR REPLACE FUNCTION tenure.batch_enqueue(
    p_keyspace text, p_key text, p_payload bytea, p_state_keys text[] DEFAULT '{}', p_depends_on uuid[] DEFAULT '{}',
    p_id uuid DEFAULT NULL
) RETURNS SETOF tenure.batch_enqueued
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- The arguments of one batch are named in its errors; the rest is batch_enqueue_many's.
    PERFORM tenure._check_name('batch_enqueue', 'p_keyspace', p_keyspace);
    PERFORM tenure._check_name('batch_enqueue', 'p_key', p_key);
    IF p_payload IS NULL THEN
        PERFORM tenure._invalid_argument('batch_enqueue', 'p_payload', 'must not be NULL', NULL,
            'Pass what to submit, as bytea (it may be empty).');
    END IF;
    IF (CASE WHEN array_ndims(p_state_keys) > 1 THEN true ELSE array_position(p_state_keys, NULL) IS NOT NULL END) THEN
        PERFORM tenure._invalid_argument('batch_enqueue', 'p_state_keys',
            'must be a one-dimensional array of non-empty state keys', quote_literal(left(p_state_keys::text, 100)),
            'Pass ARRAY[''price'', ...], or ''{}'' for none.');
    END IF;
    IF (CASE WHEN array_ndims(p_depends_on) > 1 THEN true ELSE array_position(p_depends_on, NULL) IS NOT NULL END) THEN
        PERFORM tenure._invalid_argument('batch_enqueue', 'p_depends_on',
            'must be a one-dimensional array of batch ids', quote_literal(left(p_depends_on::text, 100)),
            'Pass ARRAY[<batch id>, ...], or ''{}'' for none.');
    END IF;
    RETURN QUERY
    SELECT * FROM tenure._batch_enqueue_many(
        p_keyspace,
        jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
            'key', p_key, 'payload', encode(p_payload, 'base64'), 'state_keys', p_state_keys,
            'depends_on', p_depends_on, 'id', p_id))),
        NULL, 'batch_enqueue');
END
$$;

COMMENT ON FUNCTION tenure.batch_enqueue(text, text, bytea, text[], uuid[], uuid) IS
$$Enqueue one batch with payload p_payload for key p_key of queue p_keyspace, after every batch enqueued for that key before it; optional state keys (parallel mode), dependencies and caller-chosen id (idempotent).
Returns the batch id, key and per-key sequence number.
Errors: TN001 on an empty keyspace or key, a NULL payload, an empty state key or a dependency that does not exist.$$;

-- Selection ---------------------------------------------------------------------------

-- One plan for every call (plan_cache_mode): the selection statement's custom plans cost
-- more to make than to run (0.6 ms of planning per call with 4 keys: its generic plan
-- looked dearer, since it cannot see how few keys the call drives), and its statements
-- read few rows by index whatever the arguments. No JIT: a plan's cost estimate (it
-- cannot see how few batches per key LIMIT takes) may pass jit_above_cost, and
-- compiling took 60 ms for a statement that runs in 0.3 ms.
CREATE OR REPLACE FUNCTION tenure._batch_select(
    p_keyspace text, p_instance uuid, p_limit integer, p_depth integer, p_now timestamptz
) RETURNS SETOF tenure.batch_grant
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_want bigint := 2 * p_limit::bigint + 16;  -- bigint: computed before p_limit is checked
    v_scan bigint := 8 * (2 * p_limit::bigint + 16);
    v_scanned bigint;
    v_keys text[];
    v_grants tenure.batch_grant[];
    v_open text[];
    v_served text[];
    v_live_until timestamptz;
BEGIN
    PERFORM tenure._check_name('batch_select', 'p_keyspace', p_keyspace);
    PERFORM tenure._check_instance('batch_select', 'p_instance', p_instance);
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 10000 THEN
        PERFORM tenure._invalid_argument('batch_select', 'p_limit', 'must be between 1 and 10000',
            quote_nullable(p_limit), 'Ask for one batch per free submitter.');
    END IF;
    IF p_depth IS NULL OR p_depth NOT BETWEEN 1 AND 1000 THEN
        PERFORM tenure._invalid_argument('batch_select', 'p_depth', 'must be between 1 and 1000',
            quote_nullable(p_depth), 'Pass 1 for one round (the oldest eligible batch of every key) or k rounds.');
    END IF;
    PERFORM tenure._durable();
    -- the caller's claims that follow its instance row expire with it (claims_follow_instance)
    v_live_until := (SELECT i.expires_at FROM tenure.claim_instance i
                      WHERE i.keyspace = p_keyspace AND i.instance_id = p_instance);
    -- The keys this call considers: held keys that are ready (a batch waits and the key is
    -- not plainly blocked: halted, or serial with a batch in flight), least recently served
    -- first, then oldest waiting; a few more than p_limit of them. They are read from the
    -- index batch_key_ready in that order, so a call reads about the keys it returns, not
    -- every key: first the queue's ready keys in order, keeping the caller's, for at most
    -- v_scan of them; if other instances' keys crowd those out, the caller's own keys
    -- (the index claim_key_claimant) instead.
    -- (claimant IS NOT DISTINCT FROM: p_instance is not NULL, and the claim is read by its
    -- primary key, one row per key, whatever the planner thinks of claim_key_claimant)
    SELECT coalesce(array_agg(w.key ORDER BY w.last_selected NULLS FIRST, w.head_at, w.key), '{}') INTO v_keys
      FROM (SELECT w.key, w.last_selected, w.head_at
              FROM (SELECT k.key, k.last_selected, k.head_at
                      FROM tenure.batch_key k
                     WHERE k.keyspace = p_keyspace AND k.ready
                     ORDER BY k.last_selected NULLS FIRST, k.head_at, k.key
                     LIMIT v_scan) w
             -- a scalar subquery, not EXISTS: a join could read every claim of the keyspace
             WHERE (SELECT c.claimant FROM tenure.claim_key c
                     WHERE c.keyspace = p_keyspace AND c.key = w.key
                       AND CASE WHEN c.attached THEN v_live_until ELSE c.expires_at END >= v_now) = p_instance
             ORDER BY w.last_selected NULLS FIRST, w.head_at, w.key
             LIMIT v_want) w;
    IF cardinality(v_keys) < v_want THEN
        -- fewer than wanted: were all ready keys read, or did other instances' crowd them out?
        SELECT count(*) INTO v_scanned
          FROM (SELECT FROM tenure.batch_key k WHERE k.keyspace = p_keyspace AND k.ready LIMIT v_scan) k;
    END IF;
    IF cardinality(v_keys) < v_want AND v_scanned >= v_scan THEN
        SELECT coalesce(array_agg(x.key), '{}') INTO v_keys
          FROM (SELECT k.key
                  FROM tenure.claim_key c
                  JOIN tenure.batch_key k ON k.keyspace = c.keyspace AND k.key = c.key
                 WHERE c.keyspace = p_keyspace AND c.claimant = p_instance AND k.ready
                   AND CASE WHEN c.attached THEN v_live_until ELSE c.expires_at END >= v_now
                 ORDER BY k.last_selected NULLS FIRST, k.head_at, k.key
                 LIMIT v_want) x;
    END IF;
    -- Serialize with enqueues, resolutions and other selections of the same keys.
    PERFORM tenure._batch_lock_keys(p_keyspace, v_keys);

    WITH held AS (
        SELECT c.key, c.epoch, k.last_selected, coalesce(k.mode, q.mode, 'serial') AS mode,
               coalesce(k.implicit_deps, q.implicit_deps, true) AS implicit_deps,
               u.invalid > 0 AS has_invalid,
               -- the first batches of a key that can make its first p_depth rounds: every unsettled
               -- one plus p_depth queued ones; parallel mode looks further ahead, past batches whose
               -- state keys overlap earlier ones
               u.unsettled + CASE coalesce(k.mode, q.mode, 'serial') WHEN 'parallel' THEN greatest(p_depth, 64)
                                                                    ELSE p_depth END AS window_size
          -- driven by the keys of this call, each row by its primary key (LIMIT 1: never a
          -- scan of the queue's keys, whatever the planner estimates)
          FROM unnest(v_keys) AS v(key)
          CROSS JOIN LATERAL (SELECT c.key, c.epoch FROM tenure.claim_key c
                               WHERE c.keyspace = p_keyspace AND c.key = v.key
                                 AND c.claimant IS NOT DISTINCT FROM p_instance
                                 AND CASE WHEN c.attached THEN v_live_until ELSE c.expires_at END >= v_now
                               LIMIT 1) c
          CROSS JOIN LATERAL (SELECT k.last_selected, k.mode, k.implicit_deps FROM tenure.batch_key k
                               WHERE k.keyspace = p_keyspace AND k.key = v.key
                               LIMIT 1) k
          LEFT JOIN tenure.batch_queue q ON q.keyspace = p_keyspace
          CROSS JOIN LATERAL (SELECT count(*) AS unsettled, count(*) FILTER (WHERE x.status = 'invalid') AS invalid
                                FROM tenure.batch x
                               WHERE x.keyspace = p_keyspace AND x.key = v.key
                                 AND x.status IN ('pending', 'unknown', 'invalid')) u
    ), open AS (
        SELECT b.id, b.key, b.seq, b.status, b.state_keys, b.depends_on, b.enqueued_at, b.claim_epoch,
               h.epoch, h.last_selected, h.mode, h.implicit_deps, h.has_invalid,
               -- waiting for an explicit dependency that is not committed yet
               (b.status IN ('queued', 'unknown') AND cardinality(b.depends_on) > 0
                AND EXISTS (SELECT FROM unnest(b.depends_on) d JOIN tenure.batch x ON x.id = d
                             WHERE x.status <> 'committed')) AS waiting
          FROM held h
          CROSS JOIN LATERAL (SELECT * FROM tenure.batch b
                               WHERE b.keyspace = p_keyspace AND b.key = h.key
                                 AND b.status NOT IN ('committed', 'skipped')  -- as the index batch_open
                               ORDER BY b.seq
                               LIMIT h.window_size) b
    ), marked AS (
        -- What stands before each batch of its key, in one pass per key (window functions,
        -- not a scan of the key per batch: a key may have thousands of batches waiting).
        SELECT o.*,
               coalesce(bool_or(o.status = 'unknown') OVER earlier, false) AS unknown_before,
               coalesce(bool_or(o.waiting) OVER earlier, false) AS waiting_before,
               coalesce(bool_or(o.status = 'pending' AND o.claim_epoch IS DISTINCT FROM o.epoch) OVER earlier,
                        false) AS in_doubt_before,
               coalesce(bool_or(o.status <> 'invalid') OVER earlier, false) AS open_before,
               coalesce(bool_or(o.status <> 'invalid' AND cardinality(o.state_keys) = 0) OVER earlier,
                        false) AS blanket_before
          FROM open o
        WINDOW earlier AS (PARTITION BY o.key ORDER BY o.seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
    ), candidates AS (
        SELECT m.*
          FROM marked m
         WHERE m.status IN ('queued', 'unknown')
           -- an invalid batch halts its key when dependencies are implicit
           AND NOT (m.implicit_deps AND m.has_invalid)
           -- a batch the external system lost goes again before any later one
           AND NOT m.unknown_before
           -- a batch waiting for an explicit dependency holds back every later batch of its key,
           -- in every mode: per-key order comes first
           AND NOT m.waiting_before
           -- a batch a previous holder selected is in doubt (submitted or not?) until the
           -- monitor learns its fate: nothing later of its key overtakes it meanwhile
           AND NOT m.in_doubt_before
           -- serial: every earlier batch is committed (or invalid without implicit dependencies)
           AND (m.mode <> 'serial' OR NOT m.open_before)
           -- parallel: no earlier uncommitted batch without state keys, and none at all before
           -- a batch without state keys
           AND (m.mode <> 'parallel' OR NOT m.blanket_before AND (cardinality(m.state_keys) > 0 OR NOT m.open_before))
    ), first_use AS (
        -- parallel: the first uncommitted batch of each key to use each state key
        SELECT o.key, sk.state_key, min(o.seq) AS seq
          FROM open o CROSS JOIN LATERAL unnest(o.state_keys) AS sk(state_key)
         WHERE o.mode = 'parallel' AND o.status <> 'invalid'
         GROUP BY o.key, sk.state_key
    ), overlapping AS (
        -- parallel: a batch one of whose state keys an earlier uncommitted batch uses
        SELECT DISTINCT c.id
          FROM candidates c CROSS JOIN LATERAL unnest(c.state_keys) AS sk(state_key)
          JOIN first_use f ON f.key = c.key AND f.state_key = sk.state_key
         WHERE c.mode = 'parallel' AND f.seq < c.seq
    ), eligible AS (
        SELECT c.*, row_number() OVER (PARTITION BY c.key ORDER BY c.seq) AS round,
               min(c.enqueued_at) OVER (PARTITION BY c.key) AS key_age
          FROM candidates c
         -- explicit dependencies must be committed
         WHERE (cardinality(c.depends_on) = 0
                OR NOT EXISTS (SELECT FROM unnest(c.depends_on) d JOIN tenure.batch x ON x.id = d
                                WHERE x.status <> 'committed'))
           AND c.id NOT IN (SELECT o.id FROM overlapping o)
    ), chosen AS (
        -- Round by round; within a round, keys least recently served first (so that under
        -- a flood every key gets its turn before any gets a second), then oldest waiting.
        SELECT e.id, e.key, e.epoch, e.round
          FROM eligible e
         WHERE e.round <= p_depth
         ORDER BY e.round, e.last_selected NULLS FIRST, e.key_age, e.key
         LIMIT p_limit
    ), submitted AS (
        UPDATE tenure.batch AS b
           SET status = 'pending', attempts = b.attempts + 1, submitted_at = v_now, submitter = p_instance,
               claim_epoch = c.epoch
          FROM chosen c
         WHERE b.id = c.id
        RETURNING b.id, b.key, b.seq, b.payload, b.state_keys, b.attempts, b.claim_epoch, c.round
    )
    SELECT coalesce(array_agg((s.id, s.key, s.seq, s.payload, s.state_keys, s.attempts, s.claim_epoch,
                               s.round::integer)::tenure.batch_grant
                              ORDER BY s.round, e.last_selected NULLS FIRST, e.key_age, s.key), '{}'),
           (SELECT coalesce(array_agg(DISTINCT x.key), '{}') FROM eligible x)
      INTO v_grants, v_open
      FROM submitted s
      JOIN eligible e ON e.id = s.id;
    -- The chosen keys were served now and get their summary from what they have now; so do
    -- the keys looked at that had nothing eligible (their summary may be stale: a key that
    -- turned out blocked leaves the walk until a change frees it). The others are unchanged.
    v_served := ARRAY(SELECT g.key FROM unnest(v_grants) WITH ORDINALITY AS g
                       GROUP BY g.key ORDER BY min(g.ordinality));
    PERFORM tenure._batch_refresh(p_keyspace, v_served || ARRAY(SELECT unnest(v_keys) EXCEPT SELECT unnest(v_open)),
                                  v_served, v_now);
    RETURN QUERY SELECT * FROM unnest(v_grants);
END
$$;

CREATE OR REPLACE FUNCTION tenure.batch_select(
    p_keyspace text, p_instance uuid, p_limit integer, p_depth integer DEFAULT 1
) RETURNS SETOF tenure.batch_grant
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN QUERY SELECT * FROM tenure._batch_select(p_keyspace, p_instance, p_limit, p_depth, NULL); END $$;

COMMENT ON FUNCTION tenure.batch_select(text, uuid, integer, integer) IS
$$Select up to p_limit (the pool asks for prefetch, 4 by default, per submitter) eligible batches of the keys of queue p_keyspace that instance p_instance holds claims on, and mark them pending (submitted) under the claim's epoch. Never a batch of a key the caller does not hold.
With p_depth = 1 (one round): the oldest eligible batch of every key; keys least recently served first, then keys whose oldest waiting batch is oldest, so that under a flood of one key every other key gets its turn in each round. The keys a call serves are marked served a microsecond apart, in the order served, so later calls take them in turn. With p_depth = k (multi-round): up to k eligible batches per key, interleaved round by round.
Eligible, by the key's mode: unconstrained, every queued batch in order; serial, the next batch only once every earlier one is committed; parallel, a batch whose state keys overlap no earlier uncommitted batch (no state keys overlaps everything), looking at most 64 (or p_depth) waiting batches ahead per key. A call considers at most 2 p_limit + 16 keys: those without a batch in flight (serial) or an invalid batch (implicit dependencies), least recently served first. Always: a batch marked unknown goes again before any later batch of its key, and so does one left pending by a previous holder of the key until its fate is known; explicit dependencies must be committed, and a batch waiting for one holds back every later batch of its key; with implicit dependencies an invalid batch halts its key.
Errors: TN001 on an empty keyspace, a NULL instance, p_limit outside 1..10000 or p_depth outside 1..1000.$$;

-- Resolution by the monitor, and operator repairs ----------------------------------------

-- One resolution; the caller holds the lock of the batch's key and refreshes its summary.
-- With p_attempt, the resolution is about that attempt of the batch, and is refused once
-- the batch was selected again: the external system was asked about an earlier
-- submission, and an 'unknown' from then would send a batch applied since once more.
CREATE OR REPLACE FUNCTION tenure._batch_resolve_one(
    p_keyspace text, p_instance uuid, p_id uuid, p_epoch bigint, p_status text, p_detail text, p_now timestamptz,
    p_attempt integer DEFAULT NULL
) RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_batch tenure.batch;
BEGIN
    PERFORM tenure._check_name('batch_resolve', 'p_keyspace', p_keyspace);
    PERFORM tenure._check_instance('batch_resolve', 'p_instance', p_instance);
    IF p_id IS NULL THEN
        PERFORM tenure._invalid_argument('batch_resolve', 'p_id', 'must not be NULL', NULL, 'Pass the batch id.');
    END IF;
    IF p_status IS NULL OR p_status NOT IN ('committed', 'invalid', 'unknown') THEN
        PERFORM tenure._invalid_argument('batch_resolve', 'p_status', 'must be committed, invalid or unknown',
            quote_nullable(p_status), 'Report what the external system says of the batch.');
    END IF;
    SELECT * INTO v_batch FROM tenure.batch WHERE id = p_id AND keyspace = p_keyspace FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM tenure._batch_missing('batch_resolve', p_keyspace, p_id);
    END IF;
    IF v_batch.attempts <> p_attempt THEN
        RAISE EXCEPTION 'tenure.batch_resolve: batch % was selected again (attempt %) since attempt %', p_id,
                        v_batch.attempts, p_attempt
            USING ERRCODE = 'TN301',
                  DETAIL = format('Batch %s of key %L (seq %s) is %s in attempt %s; the resolution is about attempt %s.',
                                  p_id, v_batch.key, v_batch.seq, v_batch.status, v_batch.attempts, p_attempt),
                  HINT = 'Ask the external system about the batch as batch_pending returns it now.';
    END IF;
    -- Only the holder of the key's claim may resolve its batches.
    PERFORM tenure._claim_fence(p_keyspace, p_instance, v_batch.key, p_epoch, p_now);
    IF v_batch.status NOT IN ('pending', 'unknown') THEN
        RAISE EXCEPTION 'tenure.batch_resolve: batch % is %, not pending or unknown', p_id, v_batch.status
            USING ERRCODE = 'TN301',
                  DETAIL = format('Batch %s of key %L (seq %s) was resolved as %s at %s.', p_id, v_batch.key,
                                  v_batch.seq, v_batch.status, v_batch.resolved_at),
                  HINT = 'A resolved batch stays resolved; only pending or unknown batches can be resolved.';
    END IF;
    PERFORM tenure._durable();
    UPDATE tenure.batch
       SET status = p_status, detail = coalesce(tenure._kept_text(p_detail), detail),
           resolved_at = CASE WHEN p_status = 'unknown' THEN NULL ELSE coalesce(p_now, clock_timestamp()) END
     WHERE id = p_id;
    IF p_status = 'invalid' THEN
        -- Batches that depend on it, directly or not, cannot be valid either.
        WITH RECURSIVE doomed(id) AS (
            SELECT b.id FROM tenure.batch b
             WHERE b.depends_on @> ARRAY[p_id] AND cardinality(b.depends_on) > 0
               AND b.status IN ('queued', 'unknown')
            UNION
            SELECT b.id FROM tenure.batch b JOIN doomed d ON b.depends_on @> ARRAY[d.id]
             WHERE cardinality(b.depends_on) > 0 AND b.status IN ('queued', 'unknown')
        )
        UPDATE tenure.batch b
           SET status = 'invalid', resolved_at = coalesce(p_now, clock_timestamp()),
               detail = format('dependency %s is invalid', p_id)
          FROM doomed d WHERE b.id = d.id;
    END IF;
    PERFORM pg_notify('tenure_batch', p_keyspace);
    RETURN p_status;
END
$$;

-- Locks the keys of the batches p_ids that resolutions to p_statuses reach, and returns
-- those whose summary the resolutions may make more selectable, locked as selection
-- locks them (before their batches); the caller refreshes them once it has resolved.
-- A pending batch resolved as committed or invalid changes neither its key's waiting
-- batches nor, unless the key is serial, whether the key is blocked: its key is only
-- held in key share mode, so the monitor's resolutions do not wait for selections of
-- the same keys (with few keys, every selection and every resolution touches them all).
-- The mode is read after that lock, which batch_configure's waits for.
CREATE OR REPLACE FUNCTION tenure._batch_resolve_lock(p_keyspace text, p_ids uuid[], p_statuses text[])
RETURNS text[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_keys text[];
BEGIN
    PERFORM 1 FROM tenure.batch_key k
      WHERE k.keyspace = p_keyspace
        AND k.key IN (SELECT b.key FROM tenure.batch b WHERE b.id = ANY (p_ids) AND b.keyspace = p_keyspace)
      ORDER BY k.key
        FOR KEY SHARE OF k;
    v_keys := ARRAY(SELECT DISTINCT b.key
                      FROM unnest(p_ids, p_statuses) AS r(id, status)
                      JOIN tenure.batch b ON b.id = r.id AND b.keyspace = p_keyspace
                      JOIN tenure.batch_key k ON k.keyspace = p_keyspace AND k.key = b.key
                      LEFT JOIN tenure.batch_queue q ON q.keyspace = p_keyspace
                     WHERE b.status <> 'pending' OR r.status IS NULL OR r.status NOT IN ('committed', 'invalid')
                        OR coalesce(k.mode, q.mode, 'serial') = 'serial');
    IF cardinality(v_keys) > 0 THEN
        PERFORM tenure._batch_lock_keys(p_keyspace, v_keys);
    END IF;
    RETURN v_keys;
END
$$;

CREATE OR REPLACE FUNCTION tenure._batch_resolve(
    p_keyspace text, p_instance uuid, p_id uuid, p_epoch bigint, p_status text, p_detail text, p_now timestamptz
) RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_keys text[] := tenure._batch_resolve_lock(p_keyspace, ARRAY[p_id], ARRAY[p_status]);
    v_status text;
BEGIN
    v_status := tenure._batch_resolve_one(p_keyspace, p_instance, p_id, p_epoch, p_status, p_detail, p_now);
    PERFORM tenure._batch_refresh(p_keyspace, v_keys, '{}', NULL);
    RETURN v_status;
END
$$;

CREATE OR REPLACE FUNCTION tenure.batch_resolve(
    p_keyspace text, p_instance uuid, p_id uuid, p_epoch bigint, p_status text, p_detail text DEFAULT NULL
) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._batch_resolve(p_keyspace, p_instance, p_id, p_epoch, p_status, p_detail, NULL); END $$;

COMMENT ON FUNCTION tenure.batch_resolve(text, uuid, uuid, bigint, text, text) IS
$$Record what the external system says of a pending (or unknown) batch p_id: 'committed', 'invalid' (never resubmitted; its dependents turn invalid too; with implicit dependencies its key halts) or 'unknown' (the external system lost it: resubmitted before any later batch of its key). Only the holder of the key's claim in epoch p_epoch may: fenced like claim_fence.
Returns the new status.
Errors: TN001 on NULL or invalid arguments; TN201 for a batch not in the queue; TN103 when the caller does not hold the key's claim in that epoch; TN301 when the batch is already committed, invalid or skipped.$$;

-- The monitor resolves what it learned in one call: one round trip, one commit.
-- Resolves p_resolutions at once and returns true if every one is a well-formed resolution
-- of a distinct batch of the queue that is pending or unknown, as committed or unknown, under
-- the claim the caller holds now in that epoch; otherwise changes nothing and returns false
-- (the caller then resolves one by one, raising on the first at fault). Its locks are those
-- of the one-by-one path: the batches FOR UPDATE in id order, then their keys' claims FOR
-- KEY SHARE (claim_fence's: claim_take cannot move a key until the caller commits).
CREATE OR REPLACE FUNCTION tenure._batch_resolve_set(
    p_keyspace text, p_instance uuid, p_resolutions jsonb, p_now timestamptz
) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
    v_now timestamptz;
    v_count integer := jsonb_array_length(p_resolutions);
    v_ids uuid[];
    v_epochs bigint[];
    v_statuses text[];
    v_details text[];
    v_attempts integer[];
    v_good bigint;
    v_live_until timestamptz;
BEGIN
    IF v_count = 0 OR EXISTS (
        SELECT FROM jsonb_array_elements(p_resolutions) e(item)
         WHERE jsonb_typeof(e.item) <> 'object'
            OR jsonb_typeof(e.item -> 'id') IS DISTINCT FROM 'string'
            OR jsonb_typeof(e.item -> 'epoch') IS DISTINCT FROM 'number'
            OR (e.item ->> 'status') IS NULL OR (e.item ->> 'status') NOT IN ('committed', 'unknown')
            OR jsonb_typeof(e.item -> 'detail') NOT IN ('string', 'null')
            OR (e.item ->> 'id') !~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$'
            OR (e.item ->> 'epoch') !~ '^[0-9]{1,18}$'
            OR (e.item ? 'attempt' AND (e.item ->> 'attempt') !~ '^[0-9]{1,9}$')) THEN
        RETURN false;
    END IF;
    SELECT array_agg((e.item ->> 'id')::uuid ORDER BY e.ord), array_agg((e.item ->> 'epoch')::bigint ORDER BY e.ord),
           array_agg(e.item ->> 'status' ORDER BY e.ord), array_agg(e.item ->> 'detail' ORDER BY e.ord),
           array_agg((e.item ->> 'attempt')::integer ORDER BY e.ord)
      INTO v_ids, v_epochs, v_statuses, v_details, v_attempts
      FROM jsonb_array_elements(p_resolutions) WITH ORDINALITY AS e(item, ord);
    IF (SELECT count(DISTINCT r.id) FROM unnest(v_ids) r(id)) <> v_count THEN
        RETURN false;  -- an id twice
    END IF;
    PERFORM 1 FROM tenure.batch b WHERE b.id = ANY (v_ids) AND b.keyspace = p_keyspace ORDER BY b.id FOR UPDATE;
    PERFORM tenure._durable();  -- once, as every claim_fence would
    PERFORM 1 FROM tenure.claim_key c
     WHERE c.keyspace = p_keyspace
       AND c.key IN (SELECT b.key FROM tenure.batch b WHERE b.id = ANY (v_ids) AND b.keyspace = p_keyspace)
     ORDER BY c.key
       FOR KEY SHARE;
    v_now := coalesce(p_now, clock_timestamp());  -- after the locks, as claim_fence reads it
    -- the caller's claims that follow its instance row expire with it (claims_follow_instance)
    v_live_until := (SELECT i.expires_at FROM tenure.claim_instance i
                      WHERE i.keyspace = p_keyspace AND i.instance_id = p_instance);
    -- every batch found and resolvable, in the attempt given if one is, of a key held now in the
    -- epoch given (each row by its primary key)
    SELECT count(*) INTO v_good
      FROM unnest(v_ids, v_epochs, v_attempts) AS r(id, epoch, attempt)
      CROSS JOIN LATERAL (SELECT b.key FROM tenure.batch b
                           WHERE b.id = r.id AND b.keyspace = p_keyspace AND b.status IN ('pending', 'unknown')
                             AND (r.attempt IS NULL OR b.attempts = r.attempt)
                           LIMIT 1) b
      CROSS JOIN LATERAL (SELECT FROM tenure.claim_key c
                           WHERE c.keyspace = p_keyspace AND c.key = b.key
                             AND c.claimant IS NOT DISTINCT FROM p_instance AND c.epoch = r.epoch
                             AND CASE WHEN c.attached THEN v_live_until ELSE c.expires_at END >= v_now
                           LIMIT 1) c;
    IF v_good <> v_count THEN
        RETURN false;
    END IF;
    UPDATE tenure.batch b
       SET status = r.status, detail = coalesce(tenure._kept_text(r.detail), b.detail),
           resolved_at = CASE WHEN r.status = 'unknown' THEN NULL ELSE v_now END
      FROM unnest(v_ids, v_statuses, v_details) AS r(id, status, detail)
     WHERE b.id = r.id;
    PERFORM pg_notify('tenure_batch', p_keyspace);
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION tenure._batch_resolve_many(
    p_keyspace text, p_instance uuid, p_resolutions jsonb, p_now timestamptz
) RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_item record;
    v_count integer := 0;
    v_keys text[];
BEGIN
    -- Checked here too: an empty array reaches no batch_resolve to check them.
    PERFORM tenure._check_name('batch_resolve_many', 'p_keyspace', p_keyspace);
    PERFORM tenure._check_instance('batch_resolve_many', 'p_instance', p_instance);
    IF p_resolutions IS NULL OR jsonb_typeof(p_resolutions) <> 'array' THEN
        PERFORM tenure._invalid_argument('batch_resolve_many', 'p_resolutions',
            'must be a JSON array of resolution objects', quote_nullable(left(p_resolutions::text, 100)),
            'Pass [{"id": "<uuid>", "epoch": 3, "status": "committed"}, ...]; optional: detail.');
    END IF;
    BEGIN
        -- The keys first, in key order, as selection and every other writer lock them.
        v_keys := tenure._batch_resolve_lock(p_keyspace,
            ARRAY(SELECT (CASE jsonb_typeof(e.item) WHEN 'object' THEN e.item ->> 'id' END)::uuid
                    FROM jsonb_array_elements(p_resolutions) WITH ORDINALITY AS e(item, ord) ORDER BY e.ord),
            ARRAY(SELECT CASE jsonb_typeof(e.item) WHEN 'object' THEN e.item ->> 'status' END
                    FROM jsonb_array_elements(p_resolutions) WITH ORDINALITY AS e(item, ord) ORDER BY e.ord));
        -- The common case in one pass: well-formed resolutions of distinct pending (or unknown)
        -- batches of keys the caller holds in the epochs given, none invalid. The batches are
        -- locked in id order and the claims in key share mode (as the loop below and
        -- claim_fence lock them), checked, and resolved by one UPDATE: no statement per batch.
        -- Anything else (a malformed resolution, a stale epoch, a batch resolved already, an
        -- invalid one with its dependents to doom) goes through the loop, which raises the
        -- error of the first resolution at fault, in id order, as it always has.
        IF tenure._batch_resolve_set(p_keyspace, p_instance, p_resolutions, p_now) THEN
            PERFORM tenure._batch_refresh(p_keyspace, v_keys, '{}', NULL);
            RETURN jsonb_array_length(p_resolutions);
        END IF;
        -- In id order, so that two callers lock the same batches in the same order.
        FOR v_item IN
            SELECT e.ord, r.id, r.epoch, r.status, r.detail, r.attempt, jsonb_typeof(e.item) = 'object' AS is_object
              FROM jsonb_array_elements(p_resolutions) WITH ORDINALITY AS e(item, ord),
                   LATERAL jsonb_to_record(CASE jsonb_typeof(e.item) WHEN 'object' THEN e.item ELSE '{}' END)
                       AS r(id uuid, epoch bigint, status text, detail text, attempt integer)
             ORDER BY r.id, e.ord
        LOOP
            IF NOT v_item.is_object OR v_item.id IS NULL OR v_item.epoch IS NULL THEN
                PERFORM tenure._invalid_argument('batch_resolve_many', format('resolution %s', v_item.ord),
                    'needs an object with id and epoch', 'see the resolution at that position',
                    'Fix that resolution; nothing was resolved.');
            END IF;
            IF v_item.attempt < 1 THEN
                PERFORM tenure._invalid_argument('batch_resolve_many', format('resolution %s', v_item.ord),
                    'has an attempt below 1', v_item.attempt::text,
                    'Pass the attempts of the batch as batch_pending or batch_select returned it.');
            END IF;
            PERFORM tenure._batch_resolve_one(p_keyspace, p_instance, v_item.id, v_item.epoch, v_item.status,
                                              v_item.detail, p_now, v_item.attempt);
            v_count := v_count + 1;
        END LOOP;
        PERFORM tenure._batch_refresh(p_keyspace, v_keys, '{}', NULL);
    EXCEPTION WHEN invalid_text_representation OR numeric_value_out_of_range OR datatype_mismatch THEN
        PERFORM tenure._invalid_argument('batch_resolve_many', 'p_resolutions', 'has a value of the wrong type',
            SQLERRM, 'id must be a uuid, epoch and attempt integers, status and detail strings.');
    END;
    RETURN v_count;
END
$$;

CREATE OR REPLACE FUNCTION tenure.batch_resolve_many(p_keyspace text, p_instance uuid, p_resolutions jsonb)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._batch_resolve_many(p_keyspace, p_instance, p_resolutions, NULL); END $$;

COMMENT ON FUNCTION tenure.batch_resolve_many(text, uuid, jsonb) IS
$$Resolve several batches of queue p_keyspace at once, all or none: p_resolutions is a JSON array of {"id", "epoch", "status", "detail"?, "attempt"?} objects, each checked and applied as batch_resolve does. With "attempt" (the attempts of the batch_grant the external system was asked about), a resolution applies only to that selection of the batch: one that arrives after the batch was selected again (a resolution sent late, or by a call whose answer was lost) is refused, so it cannot send a batch already applied once more.
Returns how many batches were resolved.
Errors: those of batch_resolve for any one of them (nothing is resolved then); TN301 when the batch was selected again since the attempt given; TN001 when p_resolutions is not an array of objects with id and epoch.$$;

-- Operator repairs of an invalid batch: skip it (status skipped) or queue it again.
CREATE OR REPLACE FUNCTION tenure._batch_repair(p_function text, p_keyspace text, p_id uuid, p_status text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_keys text[];
BEGIN
    PERFORM tenure._check_name(p_function, 'p_keyspace', p_keyspace);
    IF p_id IS NULL THEN
        PERFORM tenure._invalid_argument(p_function, 'p_id', 'must not be NULL', NULL, 'Pass the id of an invalid batch.');
    END IF;
    PERFORM tenure._durable();
    -- The key first, as selection locks it before its batches; then its summary.
    v_keys := ARRAY(SELECT b.key FROM tenure.batch b WHERE b.id = p_id AND b.keyspace = p_keyspace);
    PERFORM tenure._batch_lock_keys(p_keyspace, v_keys);
    UPDATE tenure.batch
       SET status = p_status, resolved_at = CASE WHEN p_status = 'queued' THEN NULL ELSE resolved_at END
     WHERE id = p_id AND keyspace = p_keyspace AND status = 'invalid';
    IF FOUND THEN
        PERFORM tenure._batch_refresh(p_keyspace, v_keys, '{}', NULL);
        PERFORM pg_notify('tenure_batch', p_keyspace);
        RETURN true;
    END IF;
    IF NOT EXISTS (SELECT FROM tenure.batch WHERE id = p_id AND keyspace = p_keyspace) THEN
        PERFORM tenure._batch_missing(p_function, p_keyspace, p_id);
    END IF;
    RETURN false;
END
$$;

CREATE OR REPLACE FUNCTION tenure.batch_skip(p_keyspace text, p_id uuid)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._batch_repair('batch_skip', p_keyspace, p_id, 'skipped'); END $$;

COMMENT ON FUNCTION tenure.batch_skip(text, uuid) IS
$$Operator repair: let the key of the invalid batch p_id go past it (status skipped); the batch is never submitted again. A halted key flows again.
Returns true if the batch was invalid and is skipped, false otherwise (nothing changes).
Errors: TN001 on NULL arguments; TN201 for a batch not in the queue.$$;

CREATE OR REPLACE FUNCTION tenure.batch_retry(p_keyspace text, p_id uuid)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._batch_repair('batch_retry', p_keyspace, p_id, 'queued'); END $$;

COMMENT ON FUNCTION tenure.batch_retry(text, uuid) IS
$$Operator repair: queue the invalid batch p_id again, in its place in its key's order (after a fix on the external side, say). A halted key flows again.
Returns true if the batch was invalid and is queued again, false otherwise (nothing changes).
Errors: TN001 on NULL arguments; TN201 for a batch not in the queue.$$;

CREATE OR REPLACE FUNCTION tenure._batch_pending(p_keyspace text, p_instance uuid, p_now timestamptz)
RETURNS SETOF tenure.batch_grant
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_live_until timestamptz;
BEGIN
    PERFORM tenure._check_name('batch_pending', 'p_keyspace', p_keyspace);
    PERFORM tenure._check_instance('batch_pending', 'p_instance', p_instance);
    -- the caller's claims that follow its instance row expire with it (claims_follow_instance)
    v_live_until := (SELECT i.expires_at FROM tenure.claim_instance i
                      WHERE i.keyspace = p_keyspace AND i.instance_id = p_instance);
    -- Driven by the queue's pending batches (the index batch_unsettled: the batches in flight,
    -- few), each key's claim read by its primary key: never every held key per call (with
    -- stale statistics a join walked the caller's claims once per pending batch).
    RETURN QUERY
        SELECT b.id, b.key, b.seq, b.payload, b.state_keys, b.attempts, c.epoch, 0
          FROM tenure.batch b
          CROSS JOIN LATERAL (SELECT c.epoch FROM tenure.claim_key c
                               WHERE c.keyspace = p_keyspace AND c.key = b.key
                                 AND c.claimant IS NOT DISTINCT FROM p_instance
                                 AND CASE WHEN c.attached THEN v_live_until ELSE c.expires_at END >= v_now
                               LIMIT 1) c
         WHERE b.keyspace = p_keyspace AND b.status = 'pending'
         ORDER BY b.key, b.seq;
END
$$;

CREATE OR REPLACE FUNCTION tenure.batch_pending(p_keyspace text, p_instance uuid)
RETURNS SETOF tenure.batch_grant
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN QUERY SELECT * FROM tenure._batch_pending(p_keyspace, p_instance, NULL); END $$;

COMMENT ON FUNCTION tenure.batch_pending(text, uuid) IS
$$The pending batches of the keys of queue p_keyspace that instance p_instance holds claims on, in key and sequence order, with the current claim epoch: what its monitor should ask the external system about.
Errors: TN001 on an empty keyspace or a NULL instance.$$;

-- The submitters' last check before they submit, for every batch about to go at once: one
-- call and one statement, each claim read by its primary key.
CREATE OR REPLACE FUNCTION tenure._batch_check(
    p_keyspace text, p_instance uuid, p_keys text[], p_epochs bigint[], p_now timestamptz
) RETURNS boolean[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_live_until timestamptz;
BEGIN
    PERFORM tenure._check_name('batch_check', 'p_keyspace', p_keyspace);
    PERFORM tenure._check_instance('batch_check', 'p_instance', p_instance);
    IF p_keys IS NULL OR p_epochs IS NULL OR array_ndims(p_keys) > 1 OR array_ndims(p_epochs) > 1
       OR cardinality(p_keys) <> cardinality(p_epochs) THEN
        PERFORM tenure._invalid_argument('batch_check', 'p_epochs', 'must have one epoch per key of p_keys',
            format('%s keys, %s epochs', cardinality(p_keys), cardinality(p_epochs)),
            'Pass the key and the claim_epoch of each batch about to be submitted, in two arrays.');
    END IF;
    -- the caller's claims that follow its instance row expire with it (claims_follow_instance)
    v_live_until := (SELECT i.expires_at FROM tenure.claim_instance i
                      WHERE i.keyspace = p_keyspace AND i.instance_id = p_instance);
    RETURN ARRAY(
        SELECT EXISTS (SELECT FROM tenure.claim_key c
                        WHERE c.keyspace = p_keyspace AND c.key = r.key
                          AND c.claimant IS NOT DISTINCT FROM p_instance AND c.epoch = r.epoch
                          AND CASE WHEN c.attached THEN v_live_until ELSE c.expires_at END >= v_now)
          FROM unnest(p_keys, p_epochs) WITH ORDINALITY AS r(key, epoch, ord)
         ORDER BY r.ord);
END
$$;

CREATE OR REPLACE FUNCTION tenure.batch_check(p_keyspace text, p_instance uuid, p_keys text[], p_epochs bigint[])
RETURNS boolean[]
LANGUAGE plpgsql STABLE SECURITY DEFINER  -- not sql: a SQL function with SET is planned again on every call
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._batch_check(p_keyspace, p_instance, p_keys, p_epochs, NULL); END $$;

COMMENT ON FUNCTION tenure.batch_check(text, uuid, text[], bigint[]) IS
$$For submitters, right before they submit: one answer per pair (p_keys[i], p_epochs[i]), in order, true only if instance p_instance holds that key of queue p_keyspace in that epoch under a claim that has not expired (claim_check's answer for each, in one call). A NULL key or epoch, or an unknown key, is false.
Errors: TN001 on an empty keyspace, a NULL instance, or arrays that are NULL, not one-dimensional or of different lengths.$$;

-- Retention of settled batches: committed and skipped ones resolved before the age,
-- oldest first, in bounded batches, each leaving a tombstone (id, key, seq, status) in
-- the same transaction. Per-key order needs nothing of them (sequence numbers come
-- from batch_key.next_seq, selection reads open batches only); a batch that a batch
-- not yet settled depends on stays, so a skipped dependency keeps holding its
-- dependents. Tombstones older than the age again are removed too.
CREATE OR REPLACE FUNCTION tenure._batch_prune(p_older_than interval, p_limit integer, p_now timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_count bigint;
BEGIN
    PERFORM tenure._check_prune('batch_prune', p_older_than, p_limit);
    PERFORM tenure._durable();
    -- ARRAY(...) runs each locking subquery once (see _task_prune: rescanned, it took more
    -- than p_limit).
    DELETE FROM tenure.batch_tombstone AS t
     WHERE t.id = ANY (ARRAY(SELECT o.id FROM tenure.batch_tombstone o
                              WHERE o.pruned_at < v_now - p_older_than
                              ORDER BY o.pruned_at
                              LIMIT p_limit
                                FOR UPDATE SKIP LOCKED));
    WITH pruned AS (
        DELETE FROM tenure.batch AS b
         WHERE b.id = ANY (ARRAY(SELECT s.id FROM tenure.batch s
                                  WHERE s.status IN ('committed', 'skipped') AND s.resolved_at < v_now - p_older_than
                                    AND NOT EXISTS (SELECT FROM tenure.batch d
                                                     WHERE d.depends_on @> ARRAY[s.id] AND cardinality(d.depends_on) > 0
                                                       AND d.status NOT IN ('committed', 'skipped'))
                                  ORDER BY s.resolved_at
                                  LIMIT p_limit
                                    FOR UPDATE SKIP LOCKED))
           AND b.status IN ('committed', 'skipped')
        RETURNING b.id, b.keyspace, b.key, b.seq, b.status
    )
    INSERT INTO tenure.batch_tombstone (id, keyspace, key, seq, status, pruned_at)
    SELECT p.id, p.keyspace, p.key, p.seq, p.status, v_now FROM pruned p
    ON CONFLICT (id) DO UPDATE SET keyspace = excluded.keyspace, key = excluded.key, seq = excluded.seq,
                                   status = excluded.status, pruned_at = excluded.pruned_at;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;

CREATE OR REPLACE FUNCTION tenure.batch_prune(p_older_than interval, p_limit integer DEFAULT 10000)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._batch_prune(p_older_than, p_limit, NULL); END $$;

COMMENT ON FUNCTION tenure.batch_prune(interval, integer) IS
$$Retention: delete at most p_limit batches, committed or skipped, resolved more than p_older_than ago, oldest first; never a batch still queued, pending, unknown or invalid, nor one such a batch depends on. Each leaves a tombstone (id, key, sequence number, status) for p_older_than more: meanwhile batch_enqueue answers its id as an existing batch (created false) and counts a dependency on it as before (committed: satisfied; skipped: the new batch is invalid). Tombstones older than that are removed by the same call (at most p_limit); afterwards the id is unknown. Call again while it returns p_limit.
Returns how many batches were deleted.
Errors: TN001 on a NULL, negative or over 100 years p_older_than, or p_limit outside 1 to 1000000.$$;

GRANT EXECUTE ON FUNCTION
    tenure.batch_configure(text, text, boolean, text),
    tenure.batch_enqueue(text, text, bytea, text[], uuid[], uuid),
    tenure.batch_enqueue_many(text, jsonb),
    tenure.batch_select(text, uuid, integer, integer),
    tenure.batch_resolve(text, uuid, uuid, bigint, text, text),
    tenure.batch_resolve_many(text, uuid, jsonb),
    tenure.batch_skip(text, uuid),
    tenure.batch_retry(text, uuid),
    tenure.batch_pending(text, uuid),
    tenure.batch_check(text, uuid, text[], bigint[]),
    tenure.batch_prune(interval, integer)
TO tenure_worker;
