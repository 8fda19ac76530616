-- Lease-based tasks. Each public function is a SECURITY DEFINER wrapper over an
-- internal one that takes the time to act at (p_now, NULL = the server's clock). The
-- wrappers are PL/pgSQL: a SQL function with SET is parsed and planned on every call.
--
-- Every write that only the lease holder may make matches (id, owner, epoch) and a
-- lease that has not run out in one UPDATE; when nothing matched, _task_refuse says
-- why with TN201 (no such task) or TN102 (lease lost).

CREATE OR REPLACE FUNCTION tenure._check_holder(p_function text, p_id uuid, p_owner uuid, p_epoch bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_id IS NULL THEN
        PERFORM tenure._invalid_argument(p_function, 'p_id', 'must not be NULL', NULL,
            'Pass the id of the task, as task_acquire returned it.');
    END IF;
    PERFORM tenure._check_instance(p_function, 'p_owner', p_owner);
    IF p_epoch IS NULL OR p_epoch < 1 THEN
        PERFORM tenure._invalid_argument(p_function, 'p_epoch', 'must be an epoch of at least 1',
            quote_nullable(p_epoch), 'Pass the epoch that task_acquire or task_eject returned with the lease.');
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION tenure._check_delay(p_function text, p_argument text, p_value interval)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_value IS NULL OR p_value < interval '0' THEN
        PERFORM tenure._invalid_argument(p_function, p_argument, 'must be a non-negative interval',
            quote_nullable(p_value::text), format('Pass a delay such as ''0'' or ''1 minute'' as %s.', p_argument));
    ELSIF p_value > interval '100 years' THEN
        PERFORM tenure._invalid_argument(p_function, p_argument, 'must be at most 100 years',
            quote_literal(p_value::text), format('Pass a delay such as ''0'' or ''1 minute'' as %s.', p_argument));
    END IF;
END
$$;

-- Why the holder (p_owner, p_epoch) of task v_task can no longer write it.
CREATE OR REPLACE FUNCTION tenure._task_lost_detail(
    v_task tenure.task, p_owner uuid, p_epoch bigint, p_now timestamptz
) RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
               WHEN v_task.status <> 'pending' THEN
                   format('The task is %s (state %L) since %s.', v_task.status, v_task.state, v_task.finished_at)
               WHEN v_task.epoch <> p_epoch THEN
                   format('The task is in epoch %s, held by %s.', v_task.epoch, coalesce(v_task.owner::text, 'nobody'))
               WHEN v_task.owner IS NULL THEN
                   format('The lease of epoch %s was released; the task is due at %s.', p_epoch, v_task.next_action)
               WHEN v_task.owner <> p_owner THEN format('Epoch %s is held by %s.', p_epoch, v_task.owner)
               ELSE format('The lease ran out at %s (now %s).', v_task.next_action, p_now)
           END
$$;

-- Why a holder's write matched no row: the task is unknown (TN201) or the lease is lost (TN102).
CREATE OR REPLACE FUNCTION tenure._task_refuse(
    p_function text, p_id uuid, p_owner uuid, p_epoch bigint, p_now timestamptz
) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_task tenure.task;
BEGIN
    SELECT * INTO v_task FROM tenure.task WHERE id = p_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'tenure.%: no task %', p_function, p_id
            USING ERRCODE = 'TN201',
                  DETAIL = format('No task has id %s; it may never have existed or have been purged.', p_id),
                  HINT = 'Check the id; nothing was changed.';
    END IF;
    RAISE EXCEPTION 'tenure.%: instance % no longer holds task % in epoch %', p_function, p_owner, p_id, p_epoch
        USING ERRCODE = 'TN102',
              DETAIL = tenure._task_lost_detail(v_task, p_owner, p_epoch, p_now),
              HINT = 'Stop working on this task and discard the result: another instance may own it now.';
END
$$;

-- Announcing due tasks ----------------------------------------------------------------

-- A task that becomes due is announced with NOTIFY tenure_task (payload: its kind) only
-- while a worker waits for that kind, and only once per registration: PostgreSQL
-- serialises the commits of every transaction that sent a notification, so announcing
-- each enqueue capped how many could commit at once. Workers register by task_cycle's
-- p_wait (_task_wait); the first announcement for a registration marks it told, and
-- later enqueues send nothing for it until it registers again.
--
-- No wake-up is lost between the two: a waiter registers (told = false) under the
-- exclusive transaction lock below and then looks for due tasks once more; an announcer
-- takes the same lock shared after its write, and reads the waiters in a later statement.
-- Either the announcer committed before the waiter took the lock, and the waiter's
-- second look (a later snapshot) sees its task; or the announcer took the lock after the
-- waiter committed, and its read of the waiters (a later snapshot) sees the registration:
-- - not told: it marks it told and notifies at its commit;
-- - told: an announcement for this registration committed, which wakes the waiter, and
--   the waiter looks again (its next task_cycle) or registers again, which waits for
--   this announcer's lock and then looks (after this commit);
-- - being marked told by another announcer that has not committed (its row locked): it
--   notifies too, as that one may yet roll back. It never waits for a waiter's row, so
--   it cannot deadlock with a cycle that ends its own registration.
-- A transaction that reads from one snapshot (repeatable read, serializable) cannot rely
-- on the second, so it always announces.
CREATE OR REPLACE FUNCTION tenure._task_announce(p_kinds text[], p_now timestamptz)
RETURNS text[]  -- the kinds announced
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan  -- planning its statements would cost more than running them
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_announced text[];
BEGIN
    IF cardinality(p_kinds) = 0 THEN
        RETURN '{}'::text[];
    END IF;
    IF current_setting('transaction_isolation') = 'read committed' THEN
        PERFORM pg_advisory_xact_lock_shared(hashtext('tenure.task_wait'), 0);
        IF NOT EXISTS (SELECT FROM tenure.task_waiter w WHERE w.until > v_now AND NOT w.told) THEN
            RETURN '{}'::text[];  -- the common case under load: every worker busy, or told already
        END IF;
        WITH told AS (
            UPDATE tenure.task_waiter w SET told = true
              FROM (SELECT x.owner FROM tenure.task_waiter x
                     WHERE x.until > v_now AND NOT x.told AND (x.kinds IS NULL OR x.kinds && p_kinds)
                     FOR NO KEY UPDATE SKIP LOCKED) x
             WHERE w.owner = x.owner
            RETURNING w.kinds
        )
        SELECT ARRAY(SELECT DISTINCT k FROM unnest(p_kinds) k
                      WHERE EXISTS (SELECT FROM told t WHERE t.kinds IS NULL OR k = ANY (t.kinds)))
          INTO v_announced;
        -- A later statement: the waiters still not told are those another transaction
        -- holds (being told, or ending their registration): announce to them as well.
        v_announced := v_announced || ARRAY(
            SELECT DISTINCT k FROM unnest(p_kinds) k
             WHERE k <> ALL (v_announced)
               AND EXISTS (SELECT FROM tenure.task_waiter w
                            WHERE w.until > v_now AND NOT w.told AND (w.kinds IS NULL OR k = ANY (w.kinds))));
    ELSE
        v_announced := ARRAY(SELECT DISTINCT k FROM unnest(p_kinds) k);
    END IF;
    PERFORM pg_notify('tenure_task', k) FROM unnest(v_announced) k;
    RETURN v_announced;
END
$$;

-- Register p_owner as waiting for NOTIFY tenure_task of p_kinds (NULL: any) until
-- p_until, not told yet. The caller must look for due tasks again afterwards, in a later
-- statement (see _task_announce).
CREATE OR REPLACE FUNCTION tenure._task_wait(p_owner uuid, p_kinds text[], p_until timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('tenure.task_wait'), 0);
    INSERT INTO tenure.task_waiter AS w (owner, kinds, until) VALUES (p_owner, p_kinds, p_until)
    ON CONFLICT (owner) DO UPDATE SET kinds = excluded.kinds, until = excluded.until, told = false;
END
$$;

-- Enqueue ----------------------------------------------------------------------------

-- What is wrong with a task to enqueue, or NULL: one rule for one task and for many.
-- One expression without a subquery, so that it is inlined where it is called: not
-- inlined (an EXISTS made it so), its body was parsed and planned again in every
-- transaction that enqueued, a quarter of task_enqueue's time.
CREATE OR REPLACE FUNCTION tenure._task_input_problem(i tenure._task_input)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN NOT i.is_object THEN 'must be a JSON object'
                WHEN tenure._blank(i.kind) THEN 'needs a non-empty kind'
                WHEN length(i.kind) > 200 THEN 'has a kind over 200 characters'
                WHEN tenure._blank(i.state) THEN 'needs a non-empty state'
                WHEN length(i.state) > 200 THEN 'has a state over 200 characters'
                WHEN i.delay IS NULL OR i.delay < interval '0' THEN 'needs a non-negative delay'
                WHEN i.delay > interval '100 years' THEN 'has a delay over 100 years'
                WHEN i.max_attempts IS NULL OR i.max_attempts < 1 THEN 'needs max_attempts of at least 1'
                WHEN i.idempotency_key IS NOT NULL AND tenure._blank(i.idempotency_key)
                    THEN 'has an empty idempotency_key'
                WHEN length(i.idempotency_key) > 500 THEN 'has an idempotency_key over 500 characters'
                WHEN i.priority IS NULL THEN 'needs a priority, an integer'
                WHEN i.limit_key IS NOT NULL AND tenure._blank(i.limit_key) THEN 'has an empty limit_key'
                WHEN length(i.limit_key) > 200 THEN 'has a limit_key over 200 characters'
                WHEN array_ndims(i.after) > 1 THEN 'runs after an array of more than one dimension'
                WHEN cardinality(i.after) > 1000 THEN 'runs after more than 1000 tasks'
                WHEN array_position(i.after, NULL) IS NOT NULL THEN 'runs after a NULL task id'
                WHEN i.id = ANY (i.after) THEN 'runs after itself (a cycle)'
           END
$$;

CREATE OR REPLACE FUNCTION tenure._task_refuse_input(p_function text, p_label text, p_input tenure._task_input)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM tenure._invalid_argument(p_function, p_label, tenure._task_input_problem(p_input),
        format('kind %s, state %s, delay %s, max_attempts %s', quote_nullable(p_input.kind),
               quote_nullable(p_input.state), quote_nullable(p_input.delay::text), quote_nullable(p_input.max_attempts)),
        'Give every task a kind and a state of at most 200 characters (e.g. ''email''), a delay from 0 to 100 years,'
        || ' max_attempts of at least 1, an idempotency_key and a limit_key of at most 500 and 200 characters, and'
        || ' run it after at most 1000 other tasks (not itself).');
END
$$;

-- One task: a plain INSERT, and a lookup by index only when the id or key existed.
CREATE OR REPLACE FUNCTION tenure._task_enqueue(
    p_kind text, p_data jsonb, p_state text, p_delay interval, p_id uuid, p_idempotency_key text,
    p_max_attempts integer, p_priority integer, p_limit_key text, p_after uuid[], p_now timestamptz
) RETURNS SETOF tenure.task_enqueued
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_input tenure._task_input := (1::bigint, coalesce(p_id, tenure._uuid_v7()), p_kind, coalesce(p_data, '{}'), p_state,
                                   p_delay, p_idempotency_key, p_max_attempts, true, p_priority, p_limit_key, p_after);
    v_done tenure.task_enqueued;
BEGIN
    IF tenure._task_input_problem(v_input) IS NOT NULL THEN
        PERFORM tenure._task_refuse_input('task_enqueue', 'the task', v_input);
    END IF;
    IF pg_column_size(v_input.data) > 65536 THEN
        PERFORM tenure._check_data('task_enqueue', 'p_data', v_input.data);
    END IF;
    IF cardinality(p_after) > 0 THEN
        RETURN QUERY SELECT * FROM tenure._task_insert('task_enqueue', ARRAY[v_input], v_now);
        RETURN;
    END IF;
    PERFORM tenure._durable();
    INSERT INTO tenure.task AS t (id, kind, state, data, max_attempts, idempotency_key, priority, limit_key,
                                  created_at, last_change, last_action, next_action)
    VALUES (v_input.id, p_kind, p_state, v_input.data, p_max_attempts, p_idempotency_key, p_priority, p_limit_key,
            v_now, v_now, v_now, v_now + p_delay)
    ON CONFLICT DO NOTHING
    RETURNING t.id, t.kind, true, t.next_action INTO v_done;
    IF FOUND THEN
        IF p_delay = interval '0' THEN
            PERFORM tenure._task_announce(ARRAY[p_kind], v_now);
        END IF;
        RETURN NEXT v_done;
        RETURN;
    END IF;
    -- A new statement, so a new snapshot: a task that a concurrent enqueue with the
    -- same id or key committed while ours waited on it is visible now.
    RETURN QUERY
        SELECT t.id, t.kind, false, t.next_action
          FROM tenure.task t
         WHERE t.id = p_id OR t.idempotency_key = p_idempotency_key
         LIMIT 1;
END
$$;

CREATE OR REPLACE FUNCTION tenure._task_enqueue_many(p_tasks jsonb, p_now timestamptz, p_function text)
RETURNS SETOF tenure.task_enqueued
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_input tenure._task_input[];
    v_bad tenure._task_input;
    v_field record;
BEGIN
    IF p_tasks IS NULL OR jsonb_typeof(p_tasks) <> 'array' THEN
        PERFORM tenure._invalid_argument(p_function, 'p_tasks', 'must be a JSON array of task objects',
            quote_nullable(left(p_tasks::text, 100)),
            'Pass [{"kind": "email", "data": {...}}, ...]; optional keys: state, delay, id, idempotency_key, max_attempts,'
            || ' priority, limit_key, after.');
    END IF;
    PERFORM tenure._check_count(p_function, 'p_tasks', 'tasks', jsonb_array_length(p_tasks), 10000);
    -- Each field must have its JSON type: an object is no kind, [1] no delay.
    SELECT e.ord, f.key INTO v_field
      FROM jsonb_array_elements(p_tasks) WITH ORDINALITY AS e(task, ord),
           LATERAL jsonb_each(CASE jsonb_typeof(e.task) WHEN 'object' THEN e.task ELSE '{}' END) AS f(key, value)
     WHERE jsonb_typeof(f.value) <> 'null'
       AND CASE f.key WHEN 'kind' THEN jsonb_typeof(f.value) <> 'string'
                      WHEN 'state' THEN jsonb_typeof(f.value) <> 'string'
                      WHEN 'id' THEN jsonb_typeof(f.value) <> 'string'
                      WHEN 'idempotency_key' THEN jsonb_typeof(f.value) <> 'string'
                      WHEN 'delay' THEN jsonb_typeof(f.value) NOT IN ('string', 'number')
                      WHEN 'max_attempts' THEN jsonb_typeof(f.value) <> 'number'
                      WHEN 'priority' THEN jsonb_typeof(f.value) <> 'number'
                      WHEN 'limit_key' THEN jsonb_typeof(f.value) <> 'string'
                      WHEN 'after' THEN jsonb_typeof(f.value) <> 'array'
                      ELSE false END
     ORDER BY e.ord, f.key
     LIMIT 1;
    IF FOUND THEN
        PERFORM tenure._invalid_argument(p_function, format('task %s', v_field.ord),
            format('has a %s that is not a JSON %s', v_field.key,
                   CASE v_field.key WHEN 'delay' THEN 'string or number (of seconds)'
                                    WHEN 'max_attempts' THEN 'number' WHEN 'priority' THEN 'number'
                                    WHEN 'after' THEN 'array (of task ids)' ELSE 'string' END),
            'see the task at that position',
            'kind, state, id, idempotency_key and limit_key are strings, delay a string such as ''30 seconds'' (or a'
            || ' number of seconds), max_attempts and priority integers, after an array of task ids.');
    END IF;
    BEGIN
        SELECT array_agg((e.ord, coalesce(r.id, tenure._uuid_v7()), r.kind,
                          CASE WHEN jsonb_typeof(e.task) <> 'object' THEN '{}'
                               WHEN e.task ? 'data' THEN e.task -> 'data' ELSE '{}' END,
                          coalesce(r.state, 'new'), coalesce(r.delay, interval '0'), r.idempotency_key,
                          coalesce(r.max_attempts, 5), jsonb_typeof(e.task) = 'object', coalesce(r.priority, 0),
                          r.limit_key, r.after)::tenure._task_input
                         ORDER BY e.ord)
          INTO v_input
          FROM jsonb_array_elements(p_tasks) WITH ORDINALITY AS e(task, ord),
               LATERAL jsonb_to_record(CASE jsonb_typeof(e.task) WHEN 'object' THEN e.task ELSE '{}' END)
                   AS r(kind text, data jsonb, state text, delay interval, id uuid, idempotency_key text,
                        max_attempts integer, priority integer, limit_key text, after uuid[]);
    EXCEPTION WHEN invalid_text_representation OR invalid_datetime_format OR datetime_field_overflow
                   OR interval_field_overflow OR numeric_value_out_of_range OR invalid_parameter_value THEN
        PERFORM tenure._invalid_argument(p_function, 'p_tasks', 'has a value of the wrong type', SQLERRM,
            'id and the ids in after must be uuids, delay an interval such as ''30 seconds'', max_attempts and'
            || ' priority integers.');
    END;

    SELECT * INTO v_bad FROM unnest(v_input) i WHERE tenure._task_input_problem(i) IS NOT NULL ORDER BY i.ord LIMIT 1;
    IF FOUND THEN
        PERFORM tenure._task_refuse_input(p_function, format('task %s', v_bad.ord), v_bad);
    END IF;
    SELECT * INTO v_bad FROM unnest(v_input) i
     WHERE pg_column_size(i.data) > 65536 AND tenure._data_too_large(pg_column_size(i.data)) ORDER BY i.ord LIMIT 1;
    IF FOUND THEN
        PERFORM tenure._refuse_data(p_function, format('the data of task %s', v_bad.ord), pg_column_size(v_bad.data));
    END IF;
    RETURN QUERY SELECT * FROM tenure._task_insert(p_function, v_input, v_now);
END
$$;

-- Insert checked tasks (one enqueue call's), with the tasks they run after.
CREATE OR REPLACE FUNCTION tenure._task_insert(p_function text, p_input tenure._task_input[], p_now timestamptz)
RETURNS SETOF tenure.task_enqueued
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := p_now;
    v_created uuid[];
    v_deps uuid[];
    v_found uuid[];
    v_bad record;
    v_due text[];
BEGIN
    PERFORM tenure._durable();
    IF EXISTS (SELECT FROM unnest(p_input) i WHERE cardinality(i.after) > 0) THEN
        -- A task runs after tasks that exist or come earlier in p_input, so no cycle can form.
        -- Those that exist are locked (shared) before their status is read: one that
        -- finishes after this finds the dependents added here (it waits for this commit),
        -- one that finished before is seen finished.
        v_deps := ARRAY(SELECT DISTINCT a FROM unnest(p_input) i, unnest(i.after) a);
        v_found := ARRAY(SELECT t.id FROM tenure.task t WHERE t.id = ANY (v_deps) ORDER BY t.id FOR SHARE);
        SELECT i.ord, a AS after_id, EXISTS (SELECT FROM unnest(p_input) e WHERE e.id = a) AS later INTO v_bad
          FROM unnest(p_input) i, unnest(i.after) a
         WHERE a <> ALL (v_found) AND NOT EXISTS (SELECT FROM unnest(p_input) e WHERE e.id = a AND e.ord < i.ord)
         ORDER BY i.ord
         LIMIT 1;
        IF FOUND THEN
            PERFORM tenure._invalid_argument(p_function,
                CASE WHEN p_function = 'task_enqueue' THEN 'p_after' ELSE format('task %s', v_bad.ord) END,
                CASE WHEN v_bad.later THEN 'runs after a task that comes later in p_tasks (a cycle could form)'
                     ELSE 'runs after a task that does not exist' END,
                v_bad.after_id::text,
                'Name tasks that exist, or come earlier in the same call; enqueue a task after the tasks it runs after.');
        END IF;
    END IF;

    WITH inserted AS (
        INSERT INTO tenure.task AS t (id, kind, state, data, max_attempts, idempotency_key, priority, limit_key,
                                      status, after_left, created_at, last_change, last_action, next_action)
        SELECT i.id, i.kind, i.state, i.data, i.max_attempts, i.idempotency_key, i.priority, i.limit_key,
               CASE WHEN cardinality(i.after) > 0 THEN 'waiting' ELSE 'pending' END,
               CASE WHEN cardinality(i.after) > 0 THEN (SELECT count(DISTINCT a) FROM unnest(i.after) a) ELSE 0 END,
               v_now, v_now, v_now, v_now + i.delay
          FROM unnest(p_input) i
         ORDER BY i.ord
        ON CONFLICT DO NOTHING
        RETURNING t.id
    )
    SELECT coalesce(array_agg(n.id), '{}') INTO v_created FROM inserted n;

    IF v_deps IS NOT NULL THEN
        INSERT INTO tenure.task_after (task_id, after_id)
        SELECT DISTINCT i.id, a
          FROM (SELECT DISTINCT ON (i.id) i.* FROM unnest(p_input) i ORDER BY i.id, i.ord) i, unnest(i.after) a
         WHERE i.id = ANY (v_created);
        -- The dependencies that had finished count now: done ones are not waited for, a
        -- dead or cancelled one makes its new dependents dead.
        v_due := tenure._task_after_finished(
            ARRAY(SELECT t.id FROM tenure.task t WHERE t.id = ANY (v_found) AND t.status IN ('done', 'dead', 'cancelled')),
            v_now, v_created);
    END IF;

    -- Rows this call created are answered from the input. The others are looked up
    -- by index, in a new statement and so a new snapshot: a task that a concurrent
    -- enqueue with the same id or key committed while ours waited on it is visible.
    RETURN QUERY
    WITH input AS (
        SELECT i.*, row_number() OVER (PARTITION BY i.id ORDER BY i.ord) = 1 AS first_of_id
          FROM unnest(p_input) i
    ), created AS (
        SELECT c.id FROM unnest(v_created) c(id)
    )
    SELECT r.id, r.kind, r.created, r.next_action
      FROM (
          -- (one created dead, after a dead or cancelled task, is due never)
          SELECT i.ord, i.id, i.kind, true AS created,
                 CASE WHEN v_deps IS NULL THEN v_now + i.delay
                      ELSE (SELECT t.next_action FROM tenure.task t WHERE t.id = i.id) END AS next_action
            FROM input i JOIN created c ON c.id = i.id
           WHERE i.first_of_id
          UNION ALL
          SELECT i.ord, found.id, found.kind, false, found.next_action
            FROM input i
            LEFT JOIN created c ON c.id = i.id AND i.first_of_id
            CROSS JOIN LATERAL (
                (SELECT t.id, t.kind, t.next_action FROM tenure.task t WHERE t.id = i.id
                 UNION ALL
                 SELECT t.id, t.kind, t.next_action FROM tenure.task t WHERE t.idempotency_key = i.idempotency_key)
                LIMIT 1
            ) found
           WHERE c.id IS NULL
      ) r
     ORDER BY r.ord;

    PERFORM tenure._task_announce(
        ARRAY(SELECT i.kind FROM unnest(p_input) i WHERE i.delay = interval '0' AND coalesce(cardinality(i.after), 0) = 0)
        || v_due, v_now);
END
$$;

CREATE OR REPLACE FUNCTION tenure.task_enqueue(
    p_kind text, p_data jsonb DEFAULT '{}', p_state text DEFAULT 'new', p_delay interval DEFAULT '0',
    p_id uuid DEFAULT NULL, p_idempotency_key text DEFAULT NULL, p_max_attempts integer DEFAULT 5,
    p_priority integer DEFAULT 0, p_limit_key text DEFAULT NULL, p_after uuid[] DEFAULT NULL
) RETURNS SETOF tenure.task_enqueued
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN QUERY SELECT * FROM tenure._task_enqueue(p_kind, p_data, p_state, p_delay, p_id, p_idempotency_key, p_max_attempts, p_priority, p_limit_key, p_after, NULL); END $$;

COMMENT ON FUNCTION tenure.task_enqueue(text, jsonb, text, interval, uuid, text, integer, integer, text, uuid[]) IS
$$Enqueue one task of kind p_kind in state p_state (default 'new') with data p_data, due after p_delay (default now).
p_id (a uuid chosen by the caller) or p_idempotency_key makes the enqueue idempotent: when a task with that id or key exists, nothing is created and the existing task is returned with created = false.
A task due now is announced with NOTIFY tenure_task (payload: the kind) while a worker waits for its kind (see task_cycle's p_wait). p_max_attempts (default 5) bounds failed attempts before the task is dead.
p_priority (default 0): of the due tasks, the higher priority is leased first, then the oldest due. p_limit_key: what the kind's max_running_per_key counts by (a customer id, say).
p_after: the task runs after these tasks: it is created waiting and becomes due (at p_delay after enqueue at the earliest) once every one of them is done; if one is dead or cancelled, or becomes so, the task becomes dead, last_error naming it.
Errors: TN001 on an empty kind or state (whitespace alone is empty), a kind or state over 200 characters, a delay outside 0 .. 100 years, max_attempts below 1, an idempotency key that is empty or over 500 characters, a NULL priority, an empty limit key or one over 200 characters, p_after naming a task that does not exist, itself, NULL or over 1000 tasks, or data larger than max_task_data (tenure.setting, 1 MB unless the schema owner raised it).$$;

CREATE OR REPLACE FUNCTION tenure.task_enqueue_many(p_tasks jsonb)
RETURNS SETOF tenure.task_enqueued
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN QUERY SELECT * FROM tenure._task_enqueue_many(p_tasks, NULL, 'task_enqueue_many'); END $$;

COMMENT ON FUNCTION tenure.task_enqueue_many(jsonb) IS
$$Enqueue many tasks in one call and one transaction: p_tasks is a JSON array of objects with the keys of task_enqueue: kind (required), data, state, delay (an interval such as '30 seconds'), id, idempotency_key, max_attempts, priority, limit_key, after (an array of task ids: tasks that exist or come earlier in p_tasks).
Returns one row per input task, in input order, with created = false for those whose id or key already existed.
Errors: TN001 on more than 10000 tasks, or naming the first bad task (not an object, no kind, negative delay, data larger than max_task_data, after naming a task that does not exist or comes later, ...); nothing is enqueued then.$$;

-- Acquire ---------------------------------------------------------------------------

-- The arguments of a request for leases: p_limit from p_least (1, or 0 for task_cycle) to 10000.
CREATE OR REPLACE FUNCTION tenure._task_check_take(
    p_function text, p_owner uuid, p_lease interval, p_limit integer, p_least integer, p_kinds text[]
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_owner IS NULL OR p_lease IS NULL OR p_lease <= interval '0' OR p_lease > interval '100 years' OR p_limit IS NULL
       OR p_limit NOT BETWEEN p_least AND 10000 OR cardinality(p_kinds) = 0
       OR (CASE WHEN array_ndims(p_kinds) > 1 THEN true ELSE array_position(p_kinds, NULL) IS NOT NULL END) THEN
        PERFORM tenure._check_instance(p_function, 'p_owner', p_owner);
        PERFORM tenure._check_duration(p_function, 'p_lease', p_lease);
        IF p_limit IS NULL OR p_limit NOT BETWEEN p_least AND 10000 THEN
            PERFORM tenure._invalid_argument(p_function, 'p_limit', format('must be between %s and 10000', p_least),
                quote_nullable(p_limit), 'Ask for as many tasks as this instance has free slots.');
        END IF;
        PERFORM tenure._invalid_argument(p_function, 'p_kinds',
            'must be NULL (any kind) or a non-empty one-dimensional array of kinds',
            quote_nullable(p_kinds::text), 'Pass NULL or ARRAY[''email'', ...] without NULL elements.');
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION tenure._task_acquire(
    p_owner uuid, p_lease interval, p_limit integer, p_kinds text[], p_now timestamptz
) RETURNS SETOF tenure.task_lease
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM tenure._task_check_take('task_acquire', p_owner, p_lease, p_limit, 1, p_kinds);
    PERFORM tenure._durable();
    RETURN QUERY SELECT * FROM tenure._task_lease(p_owner, p_lease, p_limit, p_kinds, p_now, false) l WHERE l.id IS NOT NULL;
END
$$;

-- Lease up to p_limit due tasks to p_owner (arguments already checked). Besides the
-- leases, one row with a NULL id per rate-limited kind that held back due tasks: its
-- lease_until is when the rate lets the next lease of that kind through.
--
-- Every statement here has one plan for every call (a generic plan): planning them per
-- call cost a sixth of a busy worker's database time. That is why the due tasks are
-- found by one of three statements (any kind, one kind by its own index, several kinds)
-- and leased by a second statement over their ids, instead of one statement whose
-- generic plan cannot see how few rows LIMIT asks for. Kinds with settings
-- (tenure.task_kind) are picked by _task_pick instead.
CREATE OR REPLACE FUNCTION tenure._task_take(
    p_owner uuid, p_lease interval, p_limit integer, p_kinds text[], p_now timestamptz
) RETURNS SETOF tenure.task_lease
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN QUERY SELECT * FROM tenure._task_lease(p_owner, p_lease, p_limit, p_kinds, p_now, false); END $$;

-- Where this session last found the front of the due tasks of p_kinds (NULL: any kind),
-- when that was less than a second before p_now (_task_lease keeps it in the setting
-- tenure.task_front); else NULLs. A value it cannot read (set by hand) is none.
CREATE OR REPLACE FUNCTION tenure._task_front(
    p_kinds text[], p_now timestamptz, OUT priority integer, OUT next_action timestamptz
) LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_kept jsonb;
BEGIN
    v_kept := nullif(current_setting('tenure.task_front', true), '')::jsonb;
    IF v_kept ->> 'kinds' IS NOT DISTINCT FROM p_kinds::text
       AND p_now - (v_kept ->> 'found_at')::timestamptz BETWEEN interval '0' AND interval '1 second' THEN
        priority := (v_kept ->> 'priority')::integer;
        next_action := (v_kept ->> 'next_action')::timestamptz;
    END IF;
EXCEPTION WHEN data_exception THEN
    RETURN;
END
$$;

-- _task_take; with p_skip_busy, a limited kind whose row another acquisition holds is
-- passed over rather than waited for (task_cycle's second look, made while it holds
-- _task_wait's lock: waiting there for a kind's row could deadlock with an acquisition
-- that holds the row and waits for that lock).
CREATE OR REPLACE FUNCTION tenure._task_lease(
    p_owner uuid, p_lease interval, p_limit integer, p_kinds text[], p_now timestamptz, p_skip_busy boolean
) RETURNS SETOF tenure.task_lease
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_controlled text[];
    v_ids uuid[];
    v_leases tenure.task_lease[];
    v_died uuid[];
    v_leased_at timestamptz;
    v_kept_priority integer;
    v_kept_next timestamptz;
    v_priority integer;
    v_next timestamptz;
BEGIN
    -- The kinds with settings this call could lease: none in the common case.
    SELECT array_agg(k.kind ORDER BY k.kind) INTO v_controlled
      FROM tenure.task_kind k WHERE p_kinds IS NULL OR k.kind = ANY (p_kinds);
    -- Leases of these kinds that ran out (past next_action: the holder may still write
    -- at next_action itself) end first: a failed attempt, so the task is due again (from
    -- when its lease ran out) or, after its last attempt, dies. Only then are due tasks
    -- looked up, among tasks not leased: a lease leaves the due indexes, so leasing a
    -- task adds no entries to them. SKIP LOCKED passes over a task held by a fenced
    -- transaction, and the lease's time is read after the row lock, so a new lease
    -- always begins after every write fenced by the previous one committed.
    IF p_kinds IS NULL THEN
        v_ids := ARRAY(SELECT t.id FROM tenure.task t
                        WHERE t.status = 'pending' AND t.leased_at IS NOT NULL AND t.next_action < v_now
                        FOR UPDATE SKIP LOCKED);
    ELSE
        v_ids := ARRAY(SELECT t.id FROM tenure.task t
                        WHERE t.status = 'pending' AND t.leased_at IS NOT NULL AND t.kind = ANY (p_kinds)
                          AND t.next_action < v_now
                        FOR UPDATE SKIP LOCKED);
    END IF;
    IF cardinality(v_ids) > 0 THEN
        WITH lapsed AS (
            UPDATE tenure.task AS t
               SET owner = NULL, leased_at = NULL, last_action = v_now, attempts = t.attempts + 1,
                   last_error = format('lease of %s in epoch %s ran out at %s', t.owner, t.epoch, t.next_action),
                   status = CASE WHEN t.attempts + 1 < t.max_attempts THEN 'pending' ELSE 'dead' END,
                   next_action = CASE WHEN t.attempts + 1 < t.max_attempts THEN t.next_action END,
                   finished_at = CASE WHEN t.attempts + 1 < t.max_attempts THEN NULL ELSE v_now END
             WHERE t.id = ANY (v_ids)
            RETURNING t.id, t.status
        )
        SELECT array_agg(l.id) FILTER (WHERE l.status = 'dead') INTO v_died FROM lapsed l;
    END IF;
    IF v_controlled IS NOT NULL THEN
        SELECT coalesce(array_agg(c.id ORDER BY c.ord), '{}') INTO v_ids
          FROM tenure._task_pick(p_kinds, v_controlled, p_limit, v_now, p_skip_busy)
               WITH ORDINALITY AS c (id, kind, until, ord);
    -- The highest priority first, by one range scan of the index that stops at the
    -- first task not due yet, from the front of the due tasks: with as many due there as
    -- wanted (one priority and a backlog, the common case) that is all. Then, when
    -- fewer were due there, priority by priority (each found by one probe), highest
    -- first. One scan ordered by (priority DESC, next_action) would instead read every
    -- pending task (leased, or due later) whenever fewer than p_limit are due: the
    -- index cannot skip to the next priority by itself.
    --
    -- The front is found by a probe that walks the entries of every task leased since
    -- the last VACUUM (dead, at the front of the index, still read: at a backlog of a
    -- million, thousands of pages a call). So a session probes at most once a second
    -- (_task_front keeps where it found the front) and in between starts where it
    -- found it, after a probe of the priorities above alone. A task that becomes due
    -- behind that point (its lease rolled back, or ran out at a time before it) waits
    -- for the next probe, a second at most, or for a call that finds fewer than
    -- p_limit due, whose priority-by-priority look starts at the front.
    ELSE
        SELECT f.priority, f.next_action INTO v_kept_priority, v_kept_next FROM tenure._task_front(p_kinds, v_now) f;
        -- A priority above the one kept, or (none kept) the front; of several kinds, the
        -- first of their fronts (one probe of each kind's index).
        IF p_kinds IS NULL THEN
            SELECT p.priority, p.next_action INTO v_priority, v_next FROM tenure.task p
             WHERE p.status = 'pending' AND p.leased_at IS NULL
               AND p.priority >= coalesce(v_kept_priority::bigint + 1, -2147483648)
             ORDER BY p.priority DESC, p.next_action LIMIT 1;
        ELSIF cardinality(p_kinds) = 1 THEN
            SELECT p.priority, p.next_action INTO v_priority, v_next FROM tenure.task p
             WHERE p.status = 'pending' AND p.leased_at IS NULL AND p.kind = p_kinds[1]
               AND p.priority >= coalesce(v_kept_priority::bigint + 1, -2147483648)
             ORDER BY p.priority DESC, p.next_action LIMIT 1;
        ELSE
            SELECT f.priority, f.next_action INTO v_priority, v_next
              FROM unnest(p_kinds) k (kind) CROSS JOIN LATERAL (
                   SELECT p.priority, p.next_action FROM tenure.task p
                    WHERE p.status = 'pending' AND p.leased_at IS NULL AND p.kind = k.kind
                      AND p.priority >= coalesce(v_kept_priority::bigint + 1, -2147483648)
                    ORDER BY p.priority DESC, p.next_action LIMIT 1) f
             ORDER BY f.priority DESC, f.next_action LIMIT 1;
        END IF;
        IF FOUND THEN
            -- Looked for from the front of the index: where the front is now.
            PERFORM set_config('tenure.task_front', jsonb_build_object('kinds', p_kinds::text,
                'priority', v_priority, 'next_action', v_next, 'found_at', v_now)::text, false);
        ELSE
            v_priority := v_kept_priority;
            v_next := v_kept_next;
        END IF;
        IF p_kinds IS NULL THEN
            v_ids := ARRAY(
                SELECT t.id FROM tenure.task t
                 WHERE t.status = 'pending' AND t.leased_at IS NULL AND t.priority = v_priority
                   AND t.next_action >= v_next AND t.next_action <= v_now
                 ORDER BY t.next_action LIMIT p_limit FOR UPDATE SKIP LOCKED);
        ELSIF cardinality(p_kinds) = 1 THEN
            v_ids := ARRAY(
                SELECT t.id FROM tenure.task t
                 WHERE t.status = 'pending' AND t.kind = p_kinds[1] AND t.leased_at IS NULL
                   AND t.priority = v_priority
                   AND t.next_action >= v_next AND t.next_action <= v_now
                 ORDER BY t.next_action LIMIT p_limit FOR UPDATE SKIP LOCKED);
        ELSE
            v_ids := ARRAY(
                SELECT t.id FROM tenure.task t
                 WHERE t.status = 'pending' AND t.kind = ANY (p_kinds) AND t.leased_at IS NULL
                   AND t.priority = v_priority
                   AND t.next_action >= v_next AND t.next_action <= v_now
                 ORDER BY t.next_action LIMIT p_limit FOR UPDATE SKIP LOCKED);
        END IF;
        -- Fewer due there: from the front, priority by priority (nothing to look for when
        -- the front was looked for and none was found).
        IF cardinality(v_ids) < p_limit AND v_priority IS NOT NULL THEN
            IF p_kinds IS NULL THEN
                v_ids := v_ids || ARRAY(
                    WITH RECURSIVE level (priority) AS (
                        (SELECT t.priority FROM tenure.task t WHERE t.status = 'pending' AND t.leased_at IS NULL
                          ORDER BY t.priority DESC LIMIT 1)
                        UNION ALL
                        SELECT (SELECT t.priority FROM tenure.task t
                                 WHERE t.status = 'pending' AND t.leased_at IS NULL AND t.priority < level.priority
                                 ORDER BY t.priority DESC LIMIT 1)
                          FROM level WHERE level.priority IS NOT NULL
                    )
                    SELECT x.id FROM level CROSS JOIN LATERAL (
                        SELECT t.id FROM tenure.task t
                         WHERE t.status = 'pending' AND t.priority = level.priority AND t.next_action <= v_now
                           AND t.leased_at IS NULL AND t.id <> ALL (v_ids)
                         ORDER BY t.next_action LIMIT p_limit FOR UPDATE SKIP LOCKED) x
                    LIMIT p_limit - cardinality(v_ids));
            ELSIF cardinality(p_kinds) = 1 THEN
                v_ids := v_ids || ARRAY(
                    WITH RECURSIVE level (priority) AS (
                        (SELECT t.priority FROM tenure.task t
                          WHERE t.status = 'pending' AND t.leased_at IS NULL AND t.kind = p_kinds[1]
                          ORDER BY t.priority DESC LIMIT 1)
                        UNION ALL
                        SELECT (SELECT t.priority FROM tenure.task t
                                 WHERE t.status = 'pending' AND t.leased_at IS NULL AND t.kind = p_kinds[1]
                                   AND t.priority < level.priority
                                 ORDER BY t.priority DESC LIMIT 1)
                          FROM level WHERE level.priority IS NOT NULL
                    )
                    SELECT x.id FROM level CROSS JOIN LATERAL (
                        SELECT t.id FROM tenure.task t
                         WHERE t.status = 'pending' AND t.kind = p_kinds[1] AND t.priority = level.priority
                           AND t.next_action <= v_now AND t.leased_at IS NULL
                           AND t.id <> ALL (v_ids)
                         ORDER BY t.next_action LIMIT p_limit FOR UPDATE SKIP LOCKED) x
                    LIMIT p_limit - cardinality(v_ids));
            ELSE
                -- The next priority: the highest below the last among the kinds, one probe each.
                v_ids := v_ids || ARRAY(
                    WITH RECURSIVE level (priority) AS (
                        SELECT max((SELECT t.priority FROM tenure.task t
                                      WHERE t.status = 'pending' AND t.leased_at IS NULL AND t.kind = k.kind
                                     ORDER BY t.priority DESC LIMIT 1))
                          FROM unnest(p_kinds) k (kind)
                        UNION ALL
                        SELECT (SELECT max((SELECT t.priority FROM tenure.task t
                                             WHERE t.status = 'pending' AND t.leased_at IS NULL AND t.kind = k.kind
                                               AND t.priority < level.priority
                                             ORDER BY t.priority DESC LIMIT 1))
                                  FROM unnest(p_kinds) k (kind))
                          FROM level WHERE level.priority IS NOT NULL
                    )
                    -- Each level's scan starts at the first of the kinds' fronts there: the
                    -- index holds other kinds too, and those due before would be read.
                    SELECT x.id FROM level CROSS JOIN LATERAL (
                        SELECT min((SELECT t.next_action FROM tenure.task t
                                     WHERE t.status = 'pending' AND t.leased_at IS NULL AND t.kind = k.kind
                                       AND t.priority = level.priority
                                     ORDER BY t.next_action LIMIT 1)) AS next_action
                          FROM unnest(p_kinds) k (kind)) front CROSS JOIN LATERAL (
                        SELECT t.id FROM tenure.task t
                         WHERE t.status = 'pending' AND t.kind = ANY (p_kinds) AND t.priority = level.priority
                           AND t.next_action >= front.next_action AND t.next_action <= v_now
                           AND t.leased_at IS NULL AND t.id <> ALL (v_ids)
                         ORDER BY t.next_action LIMIT p_limit FOR UPDATE SKIP LOCKED) x
                    LIMIT p_limit - cardinality(v_ids));
            END IF;
        END IF;
    END IF;
    IF cardinality(v_ids) > 0 THEN
        WITH taken AS (
            UPDATE tenure.task AS t
               SET owner       = p_owner,
                   epoch       = t.epoch + 1,
                   leased_at   = coalesce(p_now, clock_timestamp()),
                   next_action = coalesce(p_now, clock_timestamp()) + p_lease,
                   last_action = coalesce(p_now, clock_timestamp())
              FROM unnest(v_ids) WITH ORDINALITY AS d (id, ord)
             WHERE t.id = d.id
            RETURNING t.id, t.kind, t.state, t.data, t.epoch, t.attempts, t.next_action, t.owner, t.leased_at, d.ord
        ), logged AS (
            INSERT INTO tenure.task_lease_log (task_id, epoch, owner, leased_at, how, generation)
            SELECT k.id, k.epoch, k.owner, k.leased_at, 'acquired', (SELECT tenure._current_generation())  -- once per call
              FROM taken k
        )
        SELECT coalesce(array_agg((k.id, k.kind, k.state, k.data, k.epoch, k.attempts, k.next_action)::tenure.task_lease
                                  ORDER BY k.ord), '{}'),
               max(k.leased_at)
          INTO v_leases, v_leased_at
          FROM taken k;
        IF v_controlled IS NOT NULL THEN
            -- The rate log of the rate-limited kinds leased (at the latest lease time:
            -- a lease leaves the window no earlier than it should).
            INSERT INTO tenure.task_kind_lease (kind, leased_at)
            SELECT l.kind, v_leased_at FROM unnest(v_leases) l JOIN tenure.task_kind k ON k.kind = l.kind
             WHERE k.rate IS NOT NULL;
            -- The keys served, for their turns.
            INSERT INTO tenure.task_key_turn AS turn (kind, limit_key, served_at)
            SELECT DISTINCT t.kind, t.limit_key, v_leased_at
              FROM unnest(v_leases) l JOIN tenure.task t ON t.id = l.id JOIN tenure.task_kind k ON k.kind = t.kind
             WHERE t.limit_key IS NOT NULL AND k.max_running_per_key IS NOT NULL
            ON CONFLICT (kind, limit_key) DO UPDATE SET served_at = excluded.served_at;
        END IF;
        RETURN QUERY SELECT * FROM unnest(v_leases);
    END IF;
    -- The dependents of tasks that died above die with them, only now: an acquisition
    -- locks the rows of its limited kinds (_task_pick) before any dependent, the one order
    -- task_cycle keeps too (no deadlock).
    IF v_died IS NOT NULL THEN
        PERFORM tenure._task_finished(v_died, '{}', v_now);
    END IF;
    IF p_limit > coalesce(cardinality(v_leases), 0) AND v_controlled IS NOT NULL THEN
        -- The rate-limited kinds that hold back due tasks now, this call's own leases
        -- counted (their rows are still locked), and when each rate lets the next lease
        -- through. Not a kind also at its concurrency limit: a finishing task wakes those.
        -- Whether a kind has a due task is one probe of task_kind_due (ORDER BY ... LIMIT
        -- 1), not EXISTS: the generic plan made an EXISTS a semi-join that read every task
        -- and grouped them by kind before any kind's rate was looked at, about 90 ms per
        -- call at 100,000 tasks, so every acquisition held back by max_running (it runs
        -- while the kind's row is locked) made the others wait that long.
        RETURN QUERY
        SELECT NULL::uuid, k.kind, NULL::text, NULL::jsonb, NULL::bigint, NULL::integer,
               (SELECT l.leased_at + k.rate_period FROM tenure.task_kind_lease l
                 WHERE l.kind = k.kind AND l.leased_at > v_now - k.rate_period
                 ORDER BY l.leased_at OFFSET w.used - k.rate LIMIT 1)
          FROM tenure.task_kind k
         CROSS JOIN LATERAL (SELECT count(*) AS used FROM tenure.task_kind_lease l
                              WHERE l.kind = k.kind AND l.leased_at > v_now - k.rate_period) w
         WHERE k.kind = ANY (v_controlled) AND k.rate IS NOT NULL AND NOT k.paused AND w.used >= k.rate
           AND (k.max_running IS NULL
                OR k.max_running > (SELECT count(*) FROM tenure.task t
                                     WHERE t.kind = k.kind AND t.status = 'pending' AND t.leased_at IS NOT NULL
                                       AND t.next_action >= v_now))
           AND (SELECT true FROM tenure.task t
                 WHERE t.kind = k.kind AND t.status = 'pending' AND t.next_action <= v_now
                   AND t.leased_at IS NULL
                 ORDER BY t.priority DESC, t.next_action LIMIT 1);
    END IF;
END
$$;

-- The due tasks an acquisition of up to p_wanted tasks of p_kinds (NULL: any) may lease
-- now, some of them of the kinds with settings p_controlled, locked: what the settings
-- allow, highest priority first, then (for a kind limited per key) the keys in turn,
-- then the oldest due. (kind and until are always NULL: which kinds a rate holds back is
-- known only after the leases, in _task_take.)
--
-- The row of each limited kind is locked while its running tasks and recent leases are
-- counted, and stays locked until the leases commit: acquisitions of one limited kind
-- take turns, so their counts cannot both miss the other's leases.
CREATE OR REPLACE FUNCTION tenure._task_pick(
    p_kinds text[], p_controlled text[], p_wanted integer, p_now timestamptz, p_skip_busy boolean
) RETURNS TABLE (id uuid, kind text, until timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_free text[];
    v_candidates tenure._task_candidate[];
    k tenure.task_kind;
    v_limited tenure.task_kind[];
    v_cap bigint;
    v_count bigint;
    v_keyed tenure._task_candidate[];
BEGIN
    -- Kinds without settings, as _task_take would pick them.
    IF p_kinds IS NULL THEN
        v_candidates := ARRAY(SELECT (t.id, t.priority, 1, NULL, t.next_action)::tenure._task_candidate
                                FROM tenure.task t
                               WHERE t.status = 'pending' AND t.kind <> ALL (p_controlled) AND t.next_action <= p_now
                                 AND t.leased_at IS NULL
                               ORDER BY t.priority DESC, t.next_action LIMIT p_wanted FOR UPDATE SKIP LOCKED);
    ELSE
        v_free := ARRAY(SELECT unnest(p_kinds) EXCEPT SELECT unnest(p_controlled));
        IF cardinality(v_free) > 0 THEN
            v_candidates := ARRAY(SELECT (t.id, t.priority, 1, NULL, t.next_action)::tenure._task_candidate
                                    FROM tenure.task t
                                   WHERE t.status = 'pending' AND t.kind = ANY (v_free) AND t.next_action <= p_now
                                     AND t.leased_at IS NULL
                                   ORDER BY t.priority DESC, t.next_action LIMIT p_wanted FOR UPDATE SKIP LOCKED);
        ELSE
            v_candidates := '{}';
        END IF;
    END IF;

    -- Kinds with settings, one at a time, their rows locked in kind order (no deadlock).
    IF p_skip_busy THEN
        v_limited := ARRAY(SELECT c FROM tenure.task_kind c WHERE c.kind = ANY (p_controlled) AND NOT c.paused
                            ORDER BY c.kind FOR UPDATE SKIP LOCKED);
    ELSE
        v_limited := ARRAY(SELECT c FROM tenure.task_kind c WHERE c.kind = ANY (p_controlled) AND NOT c.paused
                            ORDER BY c.kind FOR UPDATE);
    END IF;
    FOREACH k IN ARRAY v_limited
    LOOP
        v_cap := p_wanted::bigint;
        IF k.max_running IS NOT NULL THEN
            SELECT count(*) INTO v_count FROM tenure.task t
             WHERE t.kind = k.kind AND t.status = 'pending' AND t.leased_at IS NOT NULL AND t.next_action >= p_now;
            v_cap := least(v_cap, k.max_running - v_count);
        END IF;
        IF k.rate IS NOT NULL THEN
            DELETE FROM tenure.task_kind_lease l WHERE l.kind = k.kind AND l.leased_at <= p_now - k.rate_period;
            SELECT count(*) INTO v_count FROM tenure.task_kind_lease l
             WHERE l.kind = k.kind AND l.leased_at > p_now - k.rate_period;
            v_cap := least(v_cap, k.rate - v_count);
        END IF;
        CONTINUE WHEN v_cap <= 0;
        IF k.max_running_per_key IS NULL THEN
            v_candidates := v_candidates || ARRAY(
                SELECT (t.id, t.priority, 1, NULL, t.next_action)::tenure._task_candidate FROM tenure.task t
                 WHERE t.status = 'pending' AND t.kind = k.kind AND t.next_action <= p_now
                   AND t.leased_at IS NULL
                 ORDER BY t.priority DESC, t.next_action LIMIT v_cap FOR UPDATE SKIP LOCKED);
        ELSE
            -- Each key with pending tasks (found by skipping through task_key_due) offers
            -- its due tasks up to what its limit leaves; the keys take turns.
            WITH RECURSIVE keys (key) AS (
                (SELECT t.limit_key FROM tenure.task t
                  WHERE t.kind = k.kind AND t.status = 'pending' AND t.leased_at IS NULL AND t.limit_key IS NOT NULL
                  ORDER BY t.limit_key LIMIT 1)
                UNION ALL
                SELECT (SELECT t.limit_key FROM tenure.task t
                         WHERE t.kind = k.kind AND t.status = 'pending' AND t.leased_at IS NULL AND t.limit_key > keys.key
                         ORDER BY t.limit_key LIMIT 1)
                  FROM keys WHERE keys.key IS NOT NULL
            ), running AS (
                SELECT t.limit_key AS key, count(*) AS n FROM tenure.task t
                 WHERE t.kind = k.kind AND t.status = 'pending' AND t.leased_at IS NOT NULL AND t.next_action >= p_now
                   AND t.limit_key IS NOT NULL
                 GROUP BY t.limit_key
            ), offered AS (
                SELECT x.id, x.priority, coalesce(r.n, 0) + x.position AS rank, turn.served_at, x.next_action
                  FROM keys
                  LEFT JOIN running r ON r.key = keys.key
                  LEFT JOIN tenure.task_key_turn turn ON turn.kind = k.kind AND turn.limit_key = keys.key
                 CROSS JOIN LATERAL (
                     SELECT t.id, t.priority, row_number() OVER (ORDER BY t.priority DESC, t.next_action) AS position,
                            t.next_action
                       FROM tenure.task t
                      WHERE t.kind = k.kind AND t.status = 'pending' AND t.limit_key = keys.key
                        AND t.next_action <= p_now AND t.leased_at IS NULL
                      ORDER BY t.priority DESC, t.next_action
                      LIMIT greatest(k.max_running_per_key - coalesce(r.n, 0), 0)) x
                 WHERE keys.key IS NOT NULL
                UNION ALL
                SELECT t.id, t.priority, row_number() OVER (ORDER BY t.priority DESC, t.next_action), NULL, t.next_action
                  FROM (SELECT t.* FROM tenure.task t
                         WHERE t.kind = k.kind AND t.status = 'pending' AND t.limit_key IS NULL
                           AND t.next_action <= p_now AND t.leased_at IS NULL
                         ORDER BY t.priority DESC, t.next_action LIMIT v_cap) t
            )
            SELECT array_agg((o.id, o.priority, o.rank, o.served_at, o.next_action)::tenure._task_candidate)
              INTO v_keyed
              FROM (SELECT * FROM offered o
                     ORDER BY o.priority DESC, o.rank, o.served_at NULLS FIRST, o.next_action LIMIT v_cap) o;
            DELETE FROM tenure.task_key_turn turn WHERE turn.kind = k.kind AND turn.served_at < p_now - interval '1 hour';
            v_candidates := v_candidates || ARRAY(
                SELECT o FROM unnest(v_keyed) o
                  JOIN LATERAL (SELECT FROM tenure.task t
                                 WHERE t.id = o.id AND t.status = 'pending' AND t.next_action <= p_now
                                   AND t.leased_at IS NULL
                                   FOR UPDATE SKIP LOCKED) t ON true);
        END IF;
    END LOOP;

    RETURN QUERY
    SELECT c.id, NULL::text, NULL::timestamptz FROM unnest(v_candidates) c
     ORDER BY c.priority DESC, c.rank, c.served_at NULLS FIRST, c.next_action
     LIMIT p_wanted;
END
$$;

CREATE OR REPLACE FUNCTION tenure.task_acquire(
    p_owner uuid, p_lease interval, p_limit integer DEFAULT 1, p_kinds text[] DEFAULT NULL
) RETURNS SETOF tenure.task_lease
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN QUERY SELECT * FROM tenure._task_acquire(p_owner, p_lease, p_limit, p_kinds, NULL); END $$;

COMMENT ON FUNCTION tenure.task_acquire(uuid, interval, integer, text[]) IS
$$Lease up to p_limit due tasks (next_action <= now; the highest priority first, then the oldest due; of the kinds p_kinds or any) to instance p_owner for p_lease, skipping tasks other transactions hold (FOR UPDATE SKIP LOCKED). The settings of each kind (task_kind_set) hold: nothing of a paused kind, never more leased at once than its max_running and max_running_per_key allow (keys with due tasks take turns), never more leases per rate_period than its rate.
Each task's epoch grows by one and next_action becomes the end of the lease. A task whose previous lease ran out counts that as a failed attempt; past its max_attempts it turns dead instead of being leased.
When no kind it may lease has settings (task_kind_set), a session looks for the oldest due from the front of the index at most once a second, and in between from where it found it then (the front holds an entry of every task leased since the last VACUUM, which each look from there reads): a task that becomes due behind that point while a backlog is drained (its lease rolled back, or ran out while older tasks were still due) is leased by the next look from the front, a second later at most. A higher priority is looked for on every call.
Returns the leased tasks with their epochs; no row when nothing is due. Never more than p_limit.
Errors: TN001 on a NULL owner, a non-positive lease, p_limit outside 1..10000, or an empty or NULL-holding p_kinds.$$;

-- Writes by the lease holder -----------------------------------------------------------

CREATE OR REPLACE FUNCTION tenure._task_extend(
    p_id uuid, p_owner uuid, p_epoch bigint, p_lease interval, p_now timestamptz
) RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_until timestamptz;
BEGIN
    PERFORM tenure._check_holder('task_extend', p_id, p_owner, p_epoch);
    PERFORM tenure._check_duration('task_extend', 'p_lease', p_lease);
    PERFORM tenure._durable();
    UPDATE tenure.task AS t
       SET next_action = v_now + p_lease, last_action = v_now
     WHERE t.id = p_id AND t.owner = p_owner AND t.epoch = p_epoch AND t.status = 'pending'
       AND t.next_action >= v_now
    RETURNING t.next_action INTO v_until;
    IF NOT FOUND THEN
        PERFORM tenure._task_refuse('task_extend', p_id, p_owner, p_epoch, v_now);
    END IF;
    RETURN v_until;
END
$$;

CREATE OR REPLACE FUNCTION tenure.task_extend(p_id uuid, p_owner uuid, p_epoch bigint, p_lease interval)
RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._task_extend(p_id, p_owner, p_epoch, p_lease, NULL); END $$;

COMMENT ON FUNCTION tenure.task_extend(uuid, uuid, bigint, interval) IS
$$Push the lease of task p_id forward to now + p_lease. Only the holder may: (p_owner, p_epoch) must match and the lease must not have run out.
Returns the new end of the lease.
Errors: TN001 on NULL or invalid arguments; TN201 for an unknown task; TN102 (lease_lost) when the caller no longer holds the lease.$$;

CREATE OR REPLACE FUNCTION tenure._task_update(
    p_id uuid, p_owner uuid, p_epoch bigint, p_state text, p_data jsonb, p_lease interval, p_now timestamptz
) RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_until timestamptz;
BEGIN
    PERFORM tenure._check_holder('task_update', p_id, p_owner, p_epoch);
    IF p_state IS NULL AND p_data IS NULL THEN
        PERFORM tenure._invalid_argument('task_update', 'p_state and p_data', 'must not both be NULL', NULL,
            'Pass the new state, the new data, or both; use task_extend to only extend the lease.');
    END IF;
    IF p_state IS NOT NULL THEN
        PERFORM tenure._check_name('task_update', 'p_state', p_state);
    END IF;
    IF pg_column_size(p_data) > 65536 THEN
        PERFORM tenure._check_data('task_update', 'p_data', p_data);
    END IF;
    IF p_lease IS NOT NULL THEN
        PERFORM tenure._check_duration('task_update', 'p_lease', p_lease);
    END IF;
    PERFORM tenure._durable();
    UPDATE tenure.task AS t
       SET state = coalesce(p_state, t.state), data = coalesce(p_data, t.data),
           next_action = CASE WHEN p_lease IS NULL THEN t.next_action ELSE v_now + p_lease END,
           last_change = v_now, last_action = v_now
     WHERE t.id = p_id AND t.owner = p_owner AND t.epoch = p_epoch AND t.status = 'pending'
       AND t.next_action >= v_now
    RETURNING t.next_action INTO v_until;
    IF NOT FOUND THEN
        PERFORM tenure._task_refuse('task_update', p_id, p_owner, p_epoch, v_now);
    END IF;
    RETURN v_until;
END
$$;

CREATE OR REPLACE FUNCTION tenure.task_update(
    p_id uuid, p_owner uuid, p_epoch bigint, p_state text, p_data jsonb DEFAULT NULL, p_lease interval DEFAULT NULL
) RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._task_update(p_id, p_owner, p_epoch, p_state, p_data, p_lease, NULL); END $$;

COMMENT ON FUNCTION tenure.task_update(uuid, uuid, bigint, text, jsonb, interval) IS
$$Store a state transition (p_state) and/or new data (p_data, replacing the old) of task p_id under the caller's lease, in one call; with p_lease, also extend the lease to now + p_lease.
Returns the end of the lease. Do it in the same transaction as the application's own writes of that step to make the step happen exactly once.
Errors: TN001 on NULL or invalid arguments (both p_state and p_data NULL included, p_data larger than max_task_data); TN201 for an unknown task; TN102 (lease_lost) when the caller no longer holds the lease.$$;

CREATE OR REPLACE FUNCTION tenure._task_release(
    p_id uuid, p_owner uuid, p_epoch bigint, p_delay interval, p_state text, p_data jsonb, p_now timestamptz
) RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_due timestamptz;
    v_kind text;
BEGIN
    PERFORM tenure._check_holder('task_release', p_id, p_owner, p_epoch);
    PERFORM tenure._check_delay('task_release', 'p_delay', p_delay);
    IF p_state IS NOT NULL THEN
        PERFORM tenure._check_name('task_release', 'p_state', p_state);
    END IF;
    IF pg_column_size(p_data) > 65536 THEN
        PERFORM tenure._check_data('task_release', 'p_data', p_data);
    END IF;
    PERFORM tenure._durable();
    UPDATE tenure.task AS t
       SET owner = NULL, leased_at = NULL, next_action = v_now + p_delay, last_action = v_now,
           state = coalesce(p_state, t.state), data = coalesce(p_data, t.data),
           last_change = CASE WHEN p_state IS NULL AND p_data IS NULL THEN t.last_change ELSE v_now END
     WHERE t.id = p_id AND t.owner = p_owner AND t.epoch = p_epoch AND t.status = 'pending'
       AND t.next_action >= v_now
    RETURNING t.next_action, t.kind INTO v_due, v_kind;
    IF NOT FOUND THEN
        PERFORM tenure._task_refuse('task_release', p_id, p_owner, p_epoch, v_now);
    END IF;
    IF p_delay = interval '0' THEN
        PERFORM tenure._task_announce(ARRAY[v_kind], v_now);
    END IF;
    IF EXISTS (SELECT FROM tenure.task_kind k WHERE k.kind = v_kind) THEN
        PERFORM tenure._task_finished(NULL, ARRAY[v_kind], v_now);
    END IF;
    RETURN v_due;
END
$$;

CREATE OR REPLACE FUNCTION tenure.task_release(
    p_id uuid, p_owner uuid, p_epoch bigint, p_delay interval DEFAULT '0', p_state text DEFAULT NULL,
    p_data jsonb DEFAULT NULL
) RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._task_release(p_id, p_owner, p_epoch, p_delay, p_state, p_data, NULL); END $$;

COMMENT ON FUNCTION tenure.task_release(uuid, uuid, bigint, interval, text, jsonb) IS
$$Give task p_id back without finishing it: the owner is cleared and the task is due again after p_delay ("nothing new yet, check again in 1 minute"), optionally in a new state p_state and with new data p_data. Does not count as a failed attempt. A task due at once is announced with NOTIFY tenure_task while a worker waits for its kind.
Returns when the task is next due.
Errors: TN001 on NULL or invalid arguments (a negative delay or p_data larger than max_task_data included); TN201 for an unknown task; TN102 (lease_lost) when the caller no longer holds the lease.$$;

CREATE OR REPLACE FUNCTION tenure._task_complete(
    p_id uuid, p_owner uuid, p_epoch bigint, p_state text, p_data jsonb, p_now timestamptz
) RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_kind text;
BEGIN
    PERFORM tenure._check_holder('task_complete', p_id, p_owner, p_epoch);
    PERFORM tenure._check_name('task_complete', 'p_state', p_state);
    IF pg_column_size(p_data) > 65536 THEN
        PERFORM tenure._check_data('task_complete', 'p_data', p_data);
    END IF;
    PERFORM tenure._durable();
    UPDATE tenure.task AS t
       SET status = 'done', state = p_state, data = coalesce(p_data, t.data), owner = NULL, leased_at = NULL,
           next_action = NULL, finished_at = v_now, last_change = v_now, last_action = v_now
     WHERE t.id = p_id AND t.owner = p_owner AND t.epoch = p_epoch AND t.status = 'pending'
       AND t.next_action >= v_now
    RETURNING t.kind INTO v_kind;
    IF NOT FOUND THEN
        PERFORM tenure._task_refuse('task_complete', p_id, p_owner, p_epoch, v_now);
    END IF;
    IF EXISTS (SELECT FROM tenure.task_kind k WHERE k.kind = v_kind)
       OR EXISTS (SELECT FROM tenure.task_after a WHERE a.after_id = p_id) THEN
        PERFORM tenure._task_finished(ARRAY[p_id], ARRAY[v_kind], v_now);
    END IF;
    RETURN v_now;
END
$$;

CREATE OR REPLACE FUNCTION tenure.task_complete(
    p_id uuid, p_owner uuid, p_epoch bigint, p_state text DEFAULT 'done', p_data jsonb DEFAULT NULL
) RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._task_complete(p_id, p_owner, p_epoch, p_state, p_data, NULL); END $$;

COMMENT ON FUNCTION tenure.task_complete(uuid, uuid, bigint, text, jsonb) IS
$$Finish task p_id under the caller's lease: status done, final state p_state (default 'done'), optionally final data p_data. The task is kept for inspection until task_purge removes it.
Returns the time it finished.
Errors: TN001 on NULL or invalid arguments (p_data larger than max_task_data included); TN201 for an unknown task; TN102 (lease_lost) when the caller no longer holds the lease.$$;

-- The default wait after a failed attempt: 1 s, 2 s, 4 s, ... after the 1st, 2nd, 3rd
-- failure (p_attempts failures before it), at most 1 hour.
CREATE OR REPLACE FUNCTION tenure._task_backoff(p_attempts integer)
RETURNS interval
LANGUAGE sql IMMUTABLE
AS $$ SELECT least(interval '1 second' * power(2, least(p_attempts, 12)), interval '1 hour') $$;

CREATE OR REPLACE FUNCTION tenure._task_fail(
    p_id uuid, p_owner uuid, p_epoch bigint, p_error text, p_retry_delay interval, p_now timestamptz
) RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_task tenure.task;
BEGIN
    PERFORM tenure._check_holder('task_fail', p_id, p_owner, p_epoch);
    IF tenure._blank(p_error) THEN
        PERFORM tenure._invalid_argument('task_fail', 'p_error', 'must describe the failure',
            quote_nullable(p_error), 'Pass the error message; it is kept in last_error.');
    END IF;
    IF p_retry_delay IS NOT NULL THEN
        PERFORM tenure._check_delay('task_fail', 'p_retry_delay', p_retry_delay);
    END IF;
    PERFORM tenure._durable();
    UPDATE tenure.task AS t
       SET attempts = t.attempts + 1, last_error = tenure._kept_text(p_error), owner = NULL, leased_at = NULL,
           status = CASE WHEN t.attempts + 1 >= t.max_attempts THEN 'dead' ELSE 'pending' END,
           next_action = CASE WHEN t.attempts + 1 >= t.max_attempts THEN NULL
                              ELSE v_now + coalesce(p_retry_delay, tenure._task_backoff(t.attempts))
                         END,
           finished_at = CASE WHEN t.attempts + 1 >= t.max_attempts THEN v_now END,
           last_action = v_now
     WHERE t.id = p_id AND t.owner = p_owner AND t.epoch = p_epoch AND t.status = 'pending'
       AND t.next_action >= v_now
    RETURNING t.* INTO v_task;
    IF NOT FOUND THEN
        PERFORM tenure._task_refuse('task_fail', p_id, p_owner, p_epoch, v_now);
    END IF;
    IF v_task.next_action = v_now THEN
        PERFORM tenure._task_announce(ARRAY[v_task.kind], v_now);
    END IF;
    IF EXISTS (SELECT FROM tenure.task_kind k WHERE k.kind = v_task.kind)
       OR EXISTS (SELECT FROM tenure.task_after a WHERE a.after_id = p_id) THEN
        PERFORM tenure._task_finished(CASE WHEN v_task.status = 'dead' THEN ARRAY[p_id] END, ARRAY[v_task.kind], v_now);
    END IF;
    RETURN v_task.next_action;
END
$$;

CREATE OR REPLACE FUNCTION tenure.task_fail(
    p_id uuid, p_owner uuid, p_epoch bigint, p_error text, p_retry_delay interval DEFAULT NULL
) RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._task_fail(p_id, p_owner, p_epoch, p_error, p_retry_delay, NULL); END $$;

COMMENT ON FUNCTION tenure.task_fail(uuid, uuid, bigint, text, interval) IS
$$Record a failed attempt of task p_id under the caller's lease, with the error p_error. The task is due again after p_retry_delay, or by default after an exponential backoff (1 s, 2 s, 4 s, ... at most 1 hour); once attempts reach max_attempts it is dead instead, for an operator to list and task_requeue.
Returns when the task is next due, or NULL when it is dead.
Errors: TN001 on NULL or invalid arguments (an empty error included); TN201 for an unknown task; TN102 (lease_lost) when the caller no longer holds the lease.$$;

CREATE OR REPLACE FUNCTION tenure._task_fence(p_id uuid, p_owner uuid, p_epoch bigint, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_task tenure.task;
    v_now timestamptz;
BEGIN
    PERFORM tenure._check_holder('task_fence', p_id, p_owner, p_epoch);
    -- The share lock keeps task_acquire (SKIP LOCKED) and task_eject off the task
    -- until the caller's transaction ends.
    PERFORM tenure._durable();  -- the fenced write commits as durably as the lease
    SELECT * INTO v_task FROM tenure.task WHERE id = p_id FOR KEY SHARE;
    v_now := coalesce(p_now, clock_timestamp());
    IF NOT FOUND OR v_task.owner IS DISTINCT FROM p_owner OR v_task.epoch <> p_epoch
       OR v_task.status <> 'pending' OR v_task.next_action < v_now THEN
        PERFORM tenure._task_refuse('task_fence', p_id, p_owner, p_epoch, v_now);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION tenure.task_fence(p_id uuid, p_owner uuid, p_epoch bigint)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN PERFORM tenure._task_fence(p_id, p_owner, p_epoch, NULL); END $$;

COMMENT ON FUNCTION tenure.task_fence(uuid, uuid, bigint) IS
$$Fence an application write: call it inside the transaction that makes the write; it raises TN102 (lease_lost) unless p_owner holds task p_id in epoch p_epoch under a lease that has not run out, and otherwise keeps any other instance from taking the task until that transaction ends.
Errors: TN001 on NULL or invalid arguments; TN201 for an unknown task; TN102 when the caller no longer holds the lease.$$;

-- One worker round trip -----------------------------------------------------------------

-- Whether v (a JSON value, SQL NULL when absent) is a number of seconds from 0 to 100 years
-- (or, with p_null_ok, JSON null or absent).
CREATE OR REPLACE FUNCTION tenure._seconds_value(v jsonb, p_null_ok boolean)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN v IS NULL THEN true
                WHEN jsonb_typeof(v) = 'null' THEN p_null_ok
                WHEN jsonb_typeof(v) <> 'number' THEN false
                ELSE (v #>> '{}')::numeric BETWEEN 0 AND 3155760000
           END
$$;

-- The keys an outcome of task_cycle may have.
CREATE OR REPLACE FUNCTION tenure._task_outcome_keys(p_outcome text)
RETURNS text[]
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE p_outcome WHEN 'complete' THEN ARRAY['id', 'epoch', 'outcome', 'state', 'data']
                          WHEN 'release' THEN ARRAY['id', 'epoch', 'outcome', 'state', 'data', 'delay']
                          WHEN 'fail' THEN ARRAY['id', 'epoch', 'outcome', 'error', 'retry_delay']
                          ELSE ARRAY['id', 'epoch', 'outcome'] END
$$;

-- What is wrong with outcome o of a task_cycle request, or NULL.
-- (One expression without a FROM clause, so that the planner inlines it.)
CREATE OR REPLACE FUNCTION tenure._task_outcome_problem(o jsonb)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE
        WHEN jsonb_typeof(o) IS DISTINCT FROM 'object' THEN 'must be a JSON object'
        WHEN jsonb_typeof(o -> 'id') IS DISTINCT FROM 'string'
             OR o ->> 'id' !~* '^\{?[0-9a-f]{4}(-?[0-9a-f]{4}){7}\}?$' THEN 'needs an id, a uuid as a string'
        WHEN jsonb_typeof(o -> 'epoch') IS DISTINCT FROM 'number' OR (o ->> 'epoch') !~ '^0*[1-9][0-9]{0,17}$'
            THEN 'needs an epoch, an integer of at least 1'
        WHEN jsonb_typeof(o -> 'outcome') IS DISTINCT FROM 'string'
             OR o ->> 'outcome' NOT IN ('complete', 'release', 'fail', 'extend')
            THEN 'needs an outcome: complete, release, fail or extend'
        WHEN o - tenure._task_outcome_keys(o ->> 'outcome') <> '{}'
            THEN format('has keys that a %s outcome does not take: %s (it takes %s)', o ->> 'outcome',
                        o - tenure._task_outcome_keys(o ->> 'outcome'),
                        array_to_string(tenure._task_outcome_keys(o ->> 'outcome'), ', '))
        WHEN o ? 'state' AND (jsonb_typeof(o -> 'state') <> 'string' OR tenure._blank(o ->> 'state')
                              OR length(o ->> 'state') > 200)
            THEN 'has a state that is not a non-empty string of at most 200 characters'
        WHEN o ->> 'outcome' = 'fail' AND (jsonb_typeof(o -> 'error') IS DISTINCT FROM 'string' OR tenure._blank(o ->> 'error'))
            THEN 'needs an error, a non-empty string describing the failure'
        WHEN NOT tenure._seconds_value(o -> 'delay', false) OR NOT tenure._seconds_value(o -> 'retry_delay', true)
            THEN 'has a delay that is not a number of seconds from 0 to 100 years'
    END
$$;

CREATE OR REPLACE FUNCTION tenure._task_cycle(
    p_owner uuid, p_lease interval, p_limit integer, p_kinds text[], p_outcomes jsonb, p_wait interval,
    p_now timestamptz
) RETURNS SETOF tenure.task_cycled
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
-- Planning its statements anew for each call would cost more than running them.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now timestamptz;
    v_bad record;
    v_count integer;
    v_outcomes tenure._task_outcome[];
    v_applied tenure.task_cycled[];
    v_wake text[];
    v_finished uuid[];
    v_ended text[];
    v_taken tenure.task_lease[];
    v_leased integer;
    v_second integer;
BEGIN
    PERFORM tenure._task_check_take('task_cycle', p_owner, p_lease, p_limit, 0, p_kinds);
    IF p_wait < interval '0' OR p_wait > interval '1 day' THEN
        PERFORM tenure._invalid_argument('task_cycle', 'p_wait', 'must be NULL or between 0 and 1 day',
            p_wait::text, 'Pass about twice the poll interval, such as ''10 seconds''.');
    END IF;
    IF p_outcomes IS NULL OR jsonb_typeof(p_outcomes) <> 'array' THEN
        PERFORM tenure._invalid_argument('task_cycle', 'p_outcomes', 'must be a JSON array of outcomes',
            quote_nullable(left(p_outcomes::text, 100)),
            'Pass [] or [{"id": "...", "epoch": 3, "outcome": "complete"}, ...].');
    END IF;
    v_count := jsonb_array_length(p_outcomes);
    IF v_count > 10000 THEN
        PERFORM tenure._invalid_argument('task_cycle', 'p_outcomes', 'must hold at most 10000 outcomes',
            v_count::text, 'Report the outcomes in several calls.');
    END IF;
    -- Parse every outcome by its type; only when that fails, or a parsed outcome breaks a
    -- rule, look for the first bad one to name it.
    BEGIN
        SELECT coalesce(array_agg((e.ord, r.id, r.epoch, r.outcome, r.state, nullif(r.data, 'null'),
                                   make_interval(secs => coalesce(r.delay, 0)), r.error,
                                   make_interval(secs => r.retry_delay))::tenure._task_outcome ORDER BY e.ord), '{}')
          INTO v_outcomes
          FROM jsonb_array_elements(p_outcomes) WITH ORDINALITY AS e(o, ord),
               LATERAL jsonb_to_record(e.o) AS r(id uuid, epoch bigint, outcome text, state text, data jsonb,
                                                 delay float8, error text, retry_delay float8);
    EXCEPTION WHEN data_exception THEN
        v_outcomes := NULL;
    END;
    IF v_outcomes IS NULL OR EXISTS (
        SELECT FROM unnest(v_outcomes) o
         WHERE o.id IS NULL OR o.epoch IS NULL OR o.epoch < 1 OR o.outcome IS NULL
            OR o.outcome NOT IN ('complete', 'release', 'fail', 'extend')
            OR (o.state IS NOT NULL AND (tenure._blank(o.state) OR length(o.state) > 200))
            OR (o.outcome = 'fail' AND tenure._blank(o.error))
            OR o.delay NOT BETWEEN interval '0' AND interval '100 years'
            OR o.retry_delay NOT BETWEEN interval '0' AND interval '100 years')
       OR (SELECT count(DISTINCT o.id) FROM unnest(v_outcomes) o) < v_count
       OR EXISTS (SELECT FROM jsonb_array_elements(p_outcomes) e(o)
                   WHERE e.o - tenure._task_outcome_keys(e.o ->> 'outcome') <> '{}') THEN
        SELECT c.ord, coalesce(c.problem, CASE WHEN row_number() OVER (PARTITION BY c.id ORDER BY c.ord) > 1
                                               THEN 'names a task that an earlier outcome names' END) AS problem
          INTO v_bad
          FROM (SELECT e.ord, p.problem, CASE WHEN p.problem IS NULL THEN (e.o ->> 'id')::uuid END AS id
                  FROM jsonb_array_elements(p_outcomes) WITH ORDINALITY AS e(o, ord),
                       LATERAL (SELECT tenure._task_outcome_problem(e.o) AS problem) p) c
         ORDER BY (c.problem IS NULL AND row_number() OVER (PARTITION BY c.id ORDER BY c.ord) = 1), c.ord
         LIMIT 1;
        PERFORM tenure._invalid_argument('task_cycle', format('outcome %s', v_bad.ord),
            coalesce(v_bad.problem, 'is not a valid outcome'),
            left((p_outcomes -> (v_bad.ord::integer - 1))::text, 200),
            'Each outcome is {"id": uuid, "epoch": n, "outcome": "complete"|"release"|"fail"|"extend"} with, for '
            || 'complete, optional state and data; for release, optional state, data and delay (seconds); for fail, '
            || 'error and an optional retry_delay (seconds); each task at most once.');
    END IF;
    SELECT o.ord, pg_column_size(o.data) AS size INTO v_bad FROM unnest(v_outcomes) o
     WHERE pg_column_size(o.data) > 65536 AND tenure._data_too_large(pg_column_size(o.data)) ORDER BY o.ord LIMIT 1;
    IF FOUND THEN
        PERFORM tenure._refuse_data('task_cycle', format('the data of outcome %s', v_bad.ord), v_bad.size);
    END IF;
    PERFORM tenure._durable();

    -- One UPDATE applies every outcome whose (owner, epoch) still holds an unexpired
    -- lease; the rest are refused one by one below. Each transition is the one of the
    -- single-task function of the same name (task_complete, task_release, task_fail,
    -- task_extend).
    v_now := coalesce(p_now, clock_timestamp());
    WITH o AS (
        SELECT * FROM unnest(v_outcomes)
    ), applied AS (
        UPDATE tenure.task AS t
           SET status      = CASE o.outcome WHEN 'complete' THEN 'done'
                                            WHEN 'fail' THEN CASE WHEN t.attempts + 1 >= t.max_attempts THEN 'dead'
                                                                  ELSE 'pending' END
                                            ELSE 'pending' END,
               state       = CASE o.outcome WHEN 'complete' THEN coalesce(o.state, 'done') ELSE coalesce(o.state, t.state) END,
               data        = coalesce(o.data, t.data),
               owner       = CASE WHEN o.outcome = 'extend' THEN t.owner END,
               leased_at   = CASE WHEN o.outcome = 'extend' THEN t.leased_at END,
               attempts    = t.attempts + (o.outcome = 'fail')::integer,
               last_error  = CASE WHEN o.outcome = 'fail' THEN tenure._kept_text(o.error) ELSE t.last_error END,
               next_action = CASE o.outcome
                                 WHEN 'extend' THEN v_now + p_lease
                                 WHEN 'release' THEN v_now + o.delay
                                 WHEN 'fail' THEN CASE WHEN t.attempts + 1 >= t.max_attempts THEN NULL
                                                       ELSE v_now + coalesce(o.retry_delay, tenure._task_backoff(t.attempts))
                                                  END
                             END,
               finished_at = CASE WHEN o.outcome = 'complete' OR (o.outcome = 'fail' AND t.attempts + 1 >= t.max_attempts)
                                  THEN v_now END,
               last_change = CASE WHEN o.outcome = 'complete' OR o.state IS NOT NULL OR o.data IS NOT NULL THEN v_now
                                  ELSE t.last_change END,
               last_action = v_now
          FROM o
         WHERE t.id = o.id AND t.owner = p_owner AND t.epoch = o.epoch AND t.status = 'pending'
           AND t.next_action >= v_now
        RETURNING o.ord, t.id, t.epoch, o.outcome, t.kind, t.state, t.attempts, t.next_action, t.owner, t.status
    )
    SELECT coalesce(array_agg((a.id, a.epoch, a.outcome, NULL, a.kind, a.state, NULL, a.attempts, a.next_action)
                              ::tenure.task_cycled ORDER BY a.ord), '{}'),
           array_agg(DISTINCT a.kind) FILTER (WHERE a.owner IS NULL AND a.next_action = v_now),
           array_agg(a.id) FILTER (WHERE a.status <> 'pending'),
           array_agg(DISTINCT a.kind) FILTER (WHERE a.outcome <> 'extend')
      INTO v_applied, v_wake, v_finished, v_ended
      FROM applied a;

    IF cardinality(v_applied) = v_count THEN
        RETURN QUERY SELECT * FROM unnest(v_applied);
    ELSE
        -- A new statement, so a new snapshot: what refused an outcome is visible now.
        RETURN QUERY
        SELECT e.id, e.epoch, e.outcome,
               CASE WHEN a.id IS NOT NULL THEN NULL
                    WHEN t.id IS NULL THEN format('no task %s', e.id)
                    ELSE format('lease lost: %s', tenure._task_lost_detail(t, p_owner, e.epoch, v_now))
               END,
               t.kind, a.state, NULL::jsonb, t.attempts, a.next_action
          FROM unnest(v_outcomes) e
          LEFT JOIN unnest(v_applied) a ON a.id = e.id
          LEFT JOIN tenure.task t ON t.id = e.id
         ORDER BY e.ord;
    END IF;

    IF p_limit > 0 THEN
        -- A row with a NULL id is a rate-limited kind held back (_task_take): outcome throttled.
        -- (a second look below says again which kinds are throttled: once is enough)
        RETURN QUERY
        SELECT l.id, l.epoch, CASE WHEN l.id IS NULL THEN 'throttled' ELSE 'lease' END, NULL, l.kind, l.state, l.data,
               l.attempts, l.lease_until
          FROM tenure._task_lease(p_owner, p_lease, p_limit, p_kinds, p_now, false) l
         WHERE l.id IS NOT NULL OR p_wait IS NULL;
        -- The leases, with p_wait (the only case that reads v_leased): the throttled rows are left out then.
        GET DIAGNOSTICS v_leased = ROW_COUNT;
        IF p_wait IS NOT NULL AND v_leased < p_limit THEN
            -- Slots left free: wait for notifications, then look once more (_task_announce).
            PERFORM tenure._task_wait(p_owner, p_kinds, v_now + p_wait);
            v_taken := ARRAY(SELECT l FROM tenure._task_lease(p_owner, p_lease, p_limit - v_leased, p_kinds, p_now, true) l);
            RETURN QUERY
            SELECT l.id, l.epoch, CASE WHEN l.id IS NULL THEN 'throttled' ELSE 'lease' END, NULL, l.kind, l.state,
                   l.data, l.attempts, l.lease_until
              FROM unnest(v_taken) l;
            v_second := cardinality(array_remove(ARRAY(SELECT l.id FROM unnest(v_taken) l), NULL));
            v_leased := v_leased + v_second;
        END IF;
        IF p_wait IS NOT NULL AND v_leased = p_limit THEN
            DELETE FROM tenure.task_waiter WHERE owner = p_owner;  -- every slot filled: no longer waiting
        END IF;
    END IF;
    -- After the leases: an acquisition locks the row of a limited kind and then, when a
    -- task dies, its dependents; taking the kind's row before any dependent keeps that
    -- one order of locks (no deadlock).
    IF v_ended IS NOT NULL AND (EXISTS (SELECT FROM tenure.task_kind k WHERE k.kind = ANY (v_ended))
                                OR EXISTS (SELECT FROM tenure.task_after a WHERE a.after_id = ANY (v_finished))) THEN
        PERFORM tenure._task_finished(v_finished, v_ended, v_now);
    END IF;
    IF v_wake IS NOT NULL THEN
        PERFORM tenure._task_announce(v_wake, v_now);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION tenure.task_cycle(
    p_owner uuid, p_lease interval, p_limit integer, p_kinds text[] DEFAULT NULL, p_outcomes jsonb DEFAULT '[]',
    p_wait interval DEFAULT NULL
) RETURNS SETOF tenure.task_cycled
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN QUERY SELECT * FROM tenure._task_cycle(p_owner, p_lease, p_limit, p_kinds, p_outcomes, p_wait, NULL); END $$;

COMMENT ON FUNCTION tenure.task_cycle(uuid, interval, integer, text[], jsonb, interval) IS
$$A worker's whole round trip in one call and one commit: apply the outcomes p_outcomes that instance p_owner reports for tasks it holds, then lease up to p_limit due tasks (0: none) of the kinds p_kinds (NULL: any) for p_lease, as task_acquire does.
p_outcomes is a JSON array of {"id": uuid, "epoch": n, "outcome": o}: o is complete (optional state, default 'done', and data), release (optional state, data and delay in seconds, default 0), fail (error, optional retry_delay in seconds, default the exponential backoff) or extend (the lease becomes now + p_lease). Each outcome is the transition of task_complete, task_release, task_fail or task_extend, fenced the same way: it applies only while p_owner holds the task in that epoch under a lease that has not run out.
With p_wait (such as '10 seconds', about twice the caller's poll interval), a call that leaves slots free registers p_owner as waiting until now + p_wait and looks once more: until then the first task of its kinds that becomes due is announced with NOTIFY tenure_task (payload: the kind), once per registration (call task_cycle again after a notification: it looks, and registers again), and no announcement made while it registered is lost. A call that fills every slot ends the registration. Without any waiter, nothing is announced: LISTEN alone no longer hears of new tasks.
Returns one row per outcome, in input order (refused NULL when applied, else why: no task, or lease lost with the task's status), then one row per new lease (outcome 'lease'), and when it leased fewer than p_limit because a rate-limited kind held due tasks back, a row per such kind with outcome 'throttled', id and epoch NULL, and next_action when its rate lets the next lease through (wait until then rather than poll). A refused outcome is not an error: the others still apply.
Errors: TN001 on invalid arguments, naming the first bad outcome (not an object, no uuid id, an epoch below 1, an unknown outcome, a key that outcome does not take, an empty state or error, a negative delay, a task named twice, data larger than max_task_data) and on p_wait outside 0 .. 1 day; nothing changes then.$$;

-- Controls: what follows a task's end, cancelling, priorities, settings per kind ---------

-- The dependents of tasks p_ids that just finished (or, enqueueing, had finished): a
-- done one is no longer waited for, and a dependent waiting for nothing else becomes
-- due; a dead or cancelled one makes its waiting dependents dead, and theirs in turn.
-- p_only: consider only these dependents (new ones). Returns the kinds of the tasks
-- that became due now.
--
-- A dependent's row is updated once per finishing statement, and a concurrent one
-- waits for the row lock and then counts down from the committed value: two
-- dependencies finishing at once both count.
CREATE OR REPLACE FUNCTION tenure._task_after_finished(p_ids uuid[], p_now timestamptz, p_only uuid[] DEFAULT NULL)
RETURNS text[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_ids uuid[] := p_ids;
    v_only uuid[] := p_only;
    v_due text[];
BEGIN
    WITH done AS (
        SELECT a.task_id, count(*) AS n
          FROM tenure.task_after a JOIN tenure.task f ON f.id = a.after_id
         WHERE a.after_id = ANY (v_ids) AND f.status = 'done' AND (v_only IS NULL OR a.task_id = ANY (v_only))
         GROUP BY a.task_id
    ), freed AS (
        UPDATE tenure.task AS d
           SET after_left  = d.after_left - done.n,
               status      = CASE WHEN d.after_left = done.n THEN 'pending' ELSE 'waiting' END,
               next_action = CASE WHEN d.after_left = done.n THEN greatest(d.next_action, p_now) ELSE d.next_action END,
               last_action = p_now
          FROM done
         WHERE d.id = done.task_id AND d.status = 'waiting'
        RETURNING d.kind, d.status, d.next_action
    )
    SELECT coalesce(array_agg(DISTINCT f.kind) FILTER (WHERE f.status = 'pending' AND f.next_action <= p_now), '{}')
      INTO v_due FROM freed f;

    LOOP
        WITH doomed AS (
            SELECT DISTINCT ON (a.task_id) a.task_id, a.after_id, f.status
              FROM tenure.task_after a JOIN tenure.task f ON f.id = a.after_id
             WHERE a.after_id = ANY (v_ids) AND f.status IN ('dead', 'cancelled')
               AND (v_only IS NULL OR a.task_id = ANY (v_only))
             ORDER BY a.task_id, a.after_id
        ), died AS (
            UPDATE tenure.task AS d
               SET status = 'dead', next_action = NULL, finished_at = p_now, last_action = p_now,
                   last_error = format('runs after task %s, which is %s', doomed.after_id, doomed.status)
              FROM doomed
             WHERE d.id = doomed.task_id AND d.status = 'waiting'
            RETURNING d.id
        )
        SELECT array_agg(died.id) INTO v_ids FROM died;
        EXIT WHEN v_ids IS NULL;
        v_only := NULL;  -- the dependents of the new dead ones are all concerned
    END LOOP;
    RETURN v_due;
END
$$;

-- After tasks p_ids finished or leases of kinds p_kinds ended: the tasks that run after
-- them (_task_after_finished), and a word to the workers waiting for the kinds whose
-- concurrency limit a task left.
--
-- Its callers on the busy paths (complete, fail, release, task_cycle) call it only when
-- a kind concerned has settings or a task runs after one that ended: the call alone
-- cost more than the two lookups that decide it.
CREATE OR REPLACE FUNCTION tenure._task_finished(p_ids uuid[], p_kinds text[], p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_kinds text[] := '{}'::text[];
BEGIN
    IF cardinality(p_ids) > 0 AND EXISTS (SELECT FROM tenure.task_after a WHERE a.after_id = ANY (p_ids)) THEN
        v_kinds := tenure._task_after_finished(p_ids, p_now);
    END IF;
    IF cardinality(p_kinds) > 0 THEN
        v_kinds := v_kinds || ARRAY(SELECT k.kind FROM tenure.task_kind k
                                     WHERE k.kind = ANY (p_kinds) AND NOT k.paused
                                       AND (k.max_running IS NOT NULL OR k.max_running_per_key IS NOT NULL));
    END IF;
    IF cardinality(v_kinds) > 0 THEN
        PERFORM tenure._task_announce(v_kinds, p_now);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION tenure._task_cancel(p_id uuid, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_task tenure.task;
    v_now timestamptz;
BEGIN
    IF p_id IS NULL THEN
        PERFORM tenure._invalid_argument('task_cancel', 'p_id', 'must not be NULL', NULL, 'Pass the id of the task to cancel.');
    END IF;
    -- Wait for a write the holder fenced (task_fence keeps a key-share lock), then read the clock.
    PERFORM tenure._durable();
    SELECT * INTO v_task FROM tenure.task WHERE id = p_id FOR UPDATE;
    v_now := coalesce(p_now, clock_timestamp());
    IF NOT FOUND THEN
        PERFORM tenure._task_refuse('task_cancel', p_id, NULL, 1, v_now);
    END IF;
    IF v_task.status NOT IN ('pending', 'waiting') THEN
        RETURN false;
    END IF;
    UPDATE tenure.task AS t
       SET status = 'cancelled', owner = NULL, leased_at = NULL, next_action = NULL, finished_at = v_now,
           last_action = v_now
     WHERE t.id = p_id;
    PERFORM tenure._task_finished(ARRAY[p_id], CASE WHEN v_task.owner IS NOT NULL THEN ARRAY[v_task.kind] END, v_now);
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION tenure.task_cancel(p_id uuid)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._task_cancel(p_id, NULL); END $$;

COMMENT ON FUNCTION tenure.task_cancel(uuid) IS
$$Cancel task p_id: a pending or waiting task never runs; a leased one ends its lease at once, so its holder's outcome and every write it fences are refused with TN102. Waits for a write the holder fenced to commit first. Its status becomes cancelled (finished_at set; pruned and purged like a done task); tasks that run after it become dead.
Returns true if it was pending or waiting and is cancelled now, false if it had already finished (nothing changes).
Errors: TN001 on a NULL p_id; TN201 for an unknown task.$$;

CREATE OR REPLACE FUNCTION tenure._task_set_priority(p_id uuid, p_priority integer, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_id IS NULL THEN
        PERFORM tenure._invalid_argument('task_set_priority', 'p_id', 'must not be NULL', NULL, 'Pass the id of the task.');
    END IF;
    IF p_priority IS NULL THEN
        PERFORM tenure._invalid_argument('task_set_priority', 'p_priority', 'must not be NULL', NULL,
            'Pass an integer: higher is leased first; the default is 0.');
    END IF;
    PERFORM tenure._durable();
    UPDATE tenure.task AS t SET priority = p_priority, last_action = coalesce(p_now, clock_timestamp())
     WHERE t.id = p_id AND t.status IN ('pending', 'waiting');
    IF FOUND THEN
        RETURN true;
    END IF;
    IF NOT EXISTS (SELECT FROM tenure.task WHERE id = p_id) THEN
        PERFORM tenure._task_refuse('task_set_priority', p_id, NULL, 1, p_now);
    END IF;
    RETURN false;
END
$$;

CREATE OR REPLACE FUNCTION tenure.task_set_priority(p_id uuid, p_priority integer)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._task_set_priority(p_id, p_priority, NULL); END $$;

COMMENT ON FUNCTION tenure.task_set_priority(uuid, integer) IS
$$Change the priority of task p_id while it is pending or waiting (a leased one keeps its lease; the priority counts for its next acquisition). Of the due tasks, the higher priority is leased first.
Returns true if it was pending or waiting, false if it had finished (nothing changes).
Errors: TN001 on a NULL argument; TN201 for an unknown task.$$;

-- One limit of task_kind_set: NULL (leave), 0 (remove) or 1 .. p_most.
CREATE OR REPLACE FUNCTION tenure._check_limit(p_argument text, p_value integer, p_most integer)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_value < 0 OR p_value > p_most THEN
        PERFORM tenure._invalid_argument('task_kind_set', p_argument, format('must be from 0 to %s', p_most),
            p_value::text, format('Pass NULL to leave it as it is, 0 to remove the limit, or 1 .. %s.', p_most));
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION tenure._task_kind_set(
    p_kind text, p_paused boolean, p_max_running integer, p_max_running_per_key integer, p_rate integer,
    p_rate_period interval, p_now timestamptz
) RETURNS SETOF tenure.task_kinds
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_row tenure.task_kind;
BEGIN
    PERFORM tenure._check_name('task_kind_set', 'p_kind', p_kind);
    PERFORM tenure._check_limit('p_max_running', p_max_running, 1000000);
    PERFORM tenure._check_limit('p_max_running_per_key', p_max_running_per_key, 1000000);
    PERFORM tenure._check_limit('p_rate', p_rate, 100000);
    IF p_rate_period <= interval '0' OR p_rate_period > interval '1 day' THEN
        PERFORM tenure._invalid_argument('task_kind_set', 'p_rate_period', 'must be more than 0 and at most 1 day',
            p_rate_period::text, 'Pass the window of the rate limit, such as ''1 second'' or ''1 minute''.');
    END IF;
    PERFORM tenure._durable();
    SELECT * INTO v_row FROM tenure.task_kind k WHERE k.kind = p_kind FOR UPDATE;
    IF p_rate > 0 AND p_rate_period IS NULL AND v_row.rate_period IS NULL THEN
        PERFORM tenure._invalid_argument('task_kind_set', 'p_rate_period', 'must be given with the first rate',
            NULL, 'Pass the window of the rate limit, such as p_rate => 10, p_rate_period => ''1 second''.');
    END IF;
    INSERT INTO tenure.task_kind AS k (kind, paused, max_running, max_running_per_key, rate, rate_period, changed_at)
    VALUES (p_kind, coalesce(p_paused, false), nullif(p_max_running, 0), nullif(p_max_running_per_key, 0),
            nullif(p_rate, 0), coalesce(p_rate_period, v_row.rate_period), v_now)
    ON CONFLICT (kind) DO UPDATE
       SET paused              = coalesce(p_paused, k.paused),
           max_running         = CASE WHEN p_max_running IS NULL THEN k.max_running ELSE nullif(p_max_running, 0) END,
           max_running_per_key = CASE WHEN p_max_running_per_key IS NULL THEN k.max_running_per_key
                                      ELSE nullif(p_max_running_per_key, 0) END,
           rate                = CASE WHEN p_rate IS NULL THEN k.rate ELSE nullif(p_rate, 0) END,
           rate_period         = coalesce(p_rate_period, k.rate_period),
           changed_at          = v_now
    RETURNING k.* INTO v_row;
    IF NOT v_row.paused AND v_row.max_running IS NULL AND v_row.max_running_per_key IS NULL AND v_row.rate IS NULL THEN
        DELETE FROM tenure.task_kind k WHERE k.kind = p_kind;  -- no setting left (the rate log goes with it)
    END IF;
    -- A kind resumed, or with room for more perhaps: wake the workers waiting for it.
    IF NOT v_row.paused AND (p_paused IS NOT NULL OR p_max_running IS NOT NULL OR p_max_running_per_key IS NOT NULL
                             OR p_rate IS NOT NULL) THEN
        PERFORM tenure._task_announce(ARRAY[p_kind], v_now);
    END IF;
    RETURN QUERY SELECT * FROM tenure.task_kinds k WHERE k.kind = p_kind;
    IF NOT FOUND THEN
        RETURN QUERY
        SELECT p_kind, false, NULL::integer, NULL::integer, NULL::integer, NULL::interval,
               (SELECT count(*) FROM tenure.task t
                 WHERE t.kind = p_kind AND t.status = 'pending' AND t.leased_at IS NOT NULL AND t.next_action >= now()),
               (SELECT count(*) FROM tenure.task t
                 WHERE t.kind = p_kind AND t.status = 'pending' AND t.leased_at IS NULL AND t.next_action <= now())
               + (SELECT count(*) FROM tenure.task t
                   WHERE t.kind = p_kind AND t.status = 'pending' AND t.leased_at IS NOT NULL AND t.next_action < now()),
               NULL::bigint, v_now;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION tenure.task_kind_set(
    p_kind text, p_paused boolean DEFAULT NULL, p_max_running integer DEFAULT NULL,
    p_max_running_per_key integer DEFAULT NULL, p_rate integer DEFAULT NULL, p_rate_period interval DEFAULT NULL
) RETURNS SETOF tenure.task_kinds
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN QUERY SELECT * FROM tenure._task_kind_set(p_kind, p_paused, p_max_running, p_max_running_per_key, p_rate, p_rate_period, NULL); END $$;

COMMENT ON FUNCTION tenure.task_kind_set(text, boolean, integer, integer, integer, interval) IS
$$Change the settings of kind p_kind; each argument left NULL leaves its setting as it is, and 0 removes a limit.
p_paused: true pauses the kind (nothing of it is leased; leased tasks run on), false resumes it. p_max_running: at most this many tasks of the kind leased at once, across every worker. p_max_running_per_key: at most this many leased at once that share a limit_key (tasks without one count only against p_max_running); keys with due tasks take turns. p_rate per p_rate_period: at most this many leases of the kind in any window of that length (task_cycle tells a worker held back when the next lease may come). A setting applies to acquisitions that begin after it commits; leases granted before run on. Waiting workers are woken when a kind is resumed or its limits change.
Returns the kind's row of tenure.task_kinds after the change (all NULL and not paused once every setting is removed: the kind then leaves the view).
Errors: TN001 on a NULL, blank or over 200 characters kind, a negative limit, limits over 1000000, a rate over 100000, a period not more than 0 or over 1 day, or a first rate without a period; nothing changes then.$$;

-- Taking over, requeueing and cleaning up --------------------------------------------

CREATE OR REPLACE FUNCTION tenure._task_eject(p_id uuid, p_owner uuid, p_lease interval, p_now timestamptz)
RETURNS SETOF tenure.task_lease
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_task tenure.task;
    v_now timestamptz;
BEGIN
    IF p_id IS NULL THEN
        PERFORM tenure._invalid_argument('task_eject', 'p_id', 'must not be NULL', NULL, 'Pass the id of the task to take over.');
    END IF;
    PERFORM tenure._check_instance('task_eject', 'p_owner', p_owner);
    PERFORM tenure._check_duration('task_eject', 'p_lease', p_lease);
    -- Wait for the current holder's fenced transaction, then read the clock.
    PERFORM tenure._durable();
    SELECT * INTO v_task FROM tenure.task WHERE id = p_id FOR UPDATE;
    v_now := coalesce(p_now, clock_timestamp());
    IF NOT FOUND THEN
        PERFORM tenure._task_refuse('task_eject', p_id, p_owner, 1, v_now);
    END IF;
    IF v_task.status <> 'pending' THEN
        RETURN;  -- finished meanwhile: nothing to take over
    END IF;
    UPDATE tenure.task AS t
       SET owner = p_owner, epoch = t.epoch + 1, leased_at = v_now, next_action = v_now + p_lease,
           last_action = v_now
     WHERE t.id = p_id
    RETURNING t.* INTO v_task;
    INSERT INTO tenure.task_lease_log (task_id, epoch, owner, leased_at, how)
    VALUES (p_id, v_task.epoch, p_owner, v_now, 'ejected');
    RETURN NEXT (v_task.id, v_task.kind, v_task.state, v_task.data, v_task.epoch, v_task.attempts,
                 v_task.next_action)::tenure.task_lease;
END
$$;

CREATE OR REPLACE FUNCTION tenure.task_eject(p_id uuid, p_owner uuid, p_lease interval)
RETURNS SETOF tenure.task_lease
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN QUERY SELECT * FROM tenure._task_eject(p_id, p_owner, p_lease, NULL); END $$;

COMMENT ON FUNCTION tenure.task_eject(uuid, uuid, interval) IS
$$Take task p_id over at once for instance p_owner (a REST callback, say), whoever holds it: p_owner becomes the owner with a new epoch and a lease of p_lease, so every later write of the previous owner is refused with TN102. Waits for a write the previous owner fenced to commit first.
Returns the new lease; no row if the task is already done or dead.
Errors: TN001 on NULL or invalid arguments; TN201 for an unknown task.$$;

CREATE OR REPLACE FUNCTION tenure._task_requeue(p_id uuid, p_delay interval, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_kind text;
BEGIN
    IF p_id IS NULL THEN
        PERFORM tenure._invalid_argument('task_requeue', 'p_id', 'must not be NULL', NULL, 'Pass the id of a dead task.');
    END IF;
    PERFORM tenure._check_delay('task_requeue', 'p_delay', p_delay);
    PERFORM tenure._durable();
    UPDATE tenure.task AS t
       SET status = 'pending', attempts = 0, next_action = v_now + p_delay, finished_at = NULL,
           after_left = 0, last_action = v_now
     WHERE t.id = p_id AND t.status = 'dead'
    RETURNING t.kind INTO v_kind;
    IF NOT FOUND THEN
        IF NOT EXISTS (SELECT FROM tenure.task WHERE id = p_id) THEN
            PERFORM tenure._task_refuse('task_requeue', p_id, NULL, 1, v_now);
        END IF;
        RETURN false;
    END IF;
    IF p_delay = interval '0' THEN
        PERFORM tenure._task_announce(ARRAY[v_kind], v_now);
    END IF;
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION tenure.task_requeue(p_id uuid, p_delay interval DEFAULT '0')
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._task_requeue(p_id, p_delay, NULL); END $$;

COMMENT ON FUNCTION tenure.task_requeue(uuid, interval) IS
$$Give a dead task p_id another life: pending again with its attempts reset, due after p_delay (default now). Its last_error is kept.
Returns true if it was dead and is requeued, false if it is not dead (nothing changes).
Errors: TN001 on NULL or invalid arguments; TN201 for an unknown task.$$;

CREATE OR REPLACE FUNCTION tenure._task_purge(p_older_than interval, p_include_dead boolean, p_now timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_count bigint;
BEGIN
    PERFORM tenure._check_delay('task_purge', 'p_older_than', p_older_than);
    IF p_include_dead IS NULL THEN
        PERFORM tenure._invalid_argument('task_purge', 'p_include_dead', 'must not be NULL', NULL,
            'Pass true to purge dead tasks too, false to keep them for inspection.');
    END IF;
    PERFORM tenure._durable();
    DELETE FROM tenure.task AS t
     WHERE t.status IN ('done', 'cancelled', CASE WHEN p_include_dead THEN 'dead' END)
       AND t.finished_at < v_now - p_older_than;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;

CREATE OR REPLACE FUNCTION tenure.task_purge(p_older_than interval, p_include_dead boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._task_purge(p_older_than, p_include_dead, NULL); END $$;

COMMENT ON FUNCTION tenure.task_purge(interval, boolean) IS
$$Retention clean-up: delete tasks that finished (done and cancelled, and dead with p_include_dead) more than p_older_than ago, with their lease log.
Returns how many tasks were deleted.
Errors: TN001 on a NULL or negative p_older_than or a NULL p_include_dead.$$;

-- Retention of finished tasks, oldest first, in bounded batches. No tombstone: an
-- idempotency key (or id) de-duplicates for as long as its task is kept, that is for
-- the retention age after it finished (docs/tasks.md#retention).
CREATE OR REPLACE FUNCTION tenure._task_prune(p_older_than interval, p_limit integer, p_now timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_count bigint;
BEGIN
    PERFORM tenure._check_prune('task_prune', p_older_than, p_limit);
    PERFORM tenure._durable();
    -- The lease log goes with each task (trigger task_deleted). A task locked by someone
    -- else (task_requeue of a dead one) is skipped, left for the next call.
    -- ARRAY(...) runs the locking subquery once: as a semi join's inner side it could be
    -- rescanned per row, each rescan skipping the rows already deleted and locking more,
    -- so more than p_limit went (seen with empty statistics after a vacuum).
    DELETE FROM tenure.task AS t
     WHERE t.id = ANY (ARRAY(SELECT f.id FROM tenure.task f
                              WHERE f.status <> 'pending' AND f.finished_at < v_now - p_older_than
                              ORDER BY f.finished_at
                              LIMIT p_limit
                                FOR UPDATE SKIP LOCKED))
       AND t.status <> 'pending';
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;

CREATE OR REPLACE FUNCTION tenure.task_prune(p_older_than interval, p_limit integer DEFAULT 10000)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._task_prune(p_older_than, p_limit, NULL); END $$;

COMMENT ON FUNCTION tenure.task_prune(interval, integer) IS
$$Retention: delete at most p_limit finished tasks (done and dead) whose finished_at is more than p_older_than ago, oldest first, with their lease log. Pending tasks are never deleted. Call again while it returns p_limit. An idempotency key or task id de-duplicates only while its task is kept: once pruned, an enqueue with the same key or id creates a new task (the de-duplication window is the retention age).
Returns how many tasks were deleted.
Errors: TN001 on a NULL, negative or over 100 years p_older_than, or p_limit outside 1 to 1000000.$$;

GRANT EXECUTE ON FUNCTION
    tenure.task_enqueue(text, jsonb, text, interval, uuid, text, integer, integer, text, uuid[]),
    tenure.task_cancel(uuid),
    tenure.task_set_priority(uuid, integer),
    tenure.task_kind_set(text, boolean, integer, integer, integer, interval),
    tenure.task_enqueue_many(jsonb),
    tenure.task_acquire(uuid, interval, integer, text[]),
    tenure.task_cycle(uuid, interval, integer, text[], jsonb, interval),
    tenure.task_extend(uuid, uuid, bigint, interval),
    tenure.task_update(uuid, uuid, bigint, text, jsonb, interval),
    tenure.task_release(uuid, uuid, bigint, interval, text, jsonb),
    tenure.task_complete(uuid, uuid, bigint, text, jsonb),
    tenure.task_fail(uuid, uuid, bigint, text, interval),
    tenure.task_fence(uuid, uuid, bigint),
    tenure.task_eject(uuid, uuid, interval),
    tenure.task_requeue(uuid, interval),
    tenure.task_purge(interval, boolean),
    tenure.task_prune(interval, integer)
TO tenure_worker;
