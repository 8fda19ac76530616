-- Task controls: priorities, per-kind settings (pause, concurrency limits per kind and
-- per limit key, a rate limit), cancellation and run-after dependencies.
BEGIN;

SET LOCAL ROLE tenure_owner;

ALTER TABLE tenure.task
    ADD COLUMN priority   integer NOT NULL DEFAULT 0,
    ADD COLUMN limit_key  text,
    ADD COLUMN after_left integer NOT NULL DEFAULT 0;
COMMENT ON COLUMN tenure.task.priority IS 'Higher is leased first; then the oldest due first.';
COMMENT ON COLUMN tenure.task.limit_key IS 'The key that max_running_per_key of the kind counts by (a customer id, say); NULL: none.';
COMMENT ON COLUMN tenure.task.after_left IS 'How many of the tasks it runs after (tenure.task_after) are not done yet.';

-- Every rule a row of tenure.task keeps, in one function that one CHECK calls. PostgreSQL
-- parses and plans every CHECK of a table anew for each statement that writes it (and
-- evaluates each on every row written, whatever columns the statement sets): the
-- separate CHECKs (those of v0.1.0 and the ones the controls need) cost each UPDATE of
-- a worker's round trip more than its index maintenance, about 0.3 M instructions; a
-- call of this function is planned once per session and compiled once per transaction.
-- The rules are those of the CHECKs it replaces (db/revert/task_controls.sql puts back
-- the v0.1.0 ones), plus: waiting runs after tasks not all done yet (next_action: the
-- earliest it may become due); cancelled: finished by task_cancel. Not STRICT: owner,
-- leased_at, next_action and limit_key may be NULL; the columns it takes that are NOT
-- NULL are refused NULL before any CHECK runs.
CREATE FUNCTION tenure._task_valid(
    p_kind text, p_state text, p_status text, p_owner uuid, p_epoch bigint, p_attempts integer,
    p_max_attempts integer, p_next_action timestamptz, p_leased_at timestamptz, p_limit_key text,
    p_after_left integer
) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    RETURN btrim(p_kind) <> '' AND btrim(p_state) <> ''
       AND p_epoch >= 0 AND p_attempts >= 0 AND p_max_attempts >= 1 AND p_after_left >= 0
       AND (p_limit_key IS NULL OR btrim(p_limit_key) <> '')
       AND (p_owner IS NULL) = (p_leased_at IS NULL)
       AND CASE p_status
               -- only a pending task is leased (has an owner); pending and waiting ones have a next_action
               WHEN 'pending' THEN p_next_action IS NOT NULL AND p_after_left = 0
               WHEN 'waiting' THEN p_next_action IS NOT NULL AND p_after_left > 0 AND p_owner IS NULL
               WHEN 'done' THEN p_next_action IS NULL AND p_owner IS NULL
               WHEN 'dead' THEN p_next_action IS NULL AND p_owner IS NULL
               WHEN 'cancelled' THEN p_next_action IS NULL AND p_owner IS NULL
               ELSE false
           END;
END
$$;

ALTER TABLE tenure.task
    DROP CONSTRAINT task_kind_check,
    DROP CONSTRAINT task_state_check,
    DROP CONSTRAINT task_status_check,
    DROP CONSTRAINT task_epoch_check,
    DROP CONSTRAINT task_attempts_check,
    DROP CONSTRAINT task_max_attempts_check,
    DROP CONSTRAINT task_check,
    DROP CONSTRAINT task_check1,
    DROP CONSTRAINT task_check2,
    ADD CONSTRAINT task_valid CHECK (tenure._task_valid(kind, state, status, owner, epoch, attempts, max_attempts,
                                                        next_action, leased_at, limit_key, after_left));

-- Time-ordered task ids, UUID version 7 (RFC 9562: 48 bits of Unix time in milliseconds,
-- then random bits): tasks enqueued together have neighbouring ids, so the primary key
-- entries that a round of leases or completions adds (each writes a new version of its
-- row) fall on a few leaf pages, not on one page per task; with random ids a busy
-- worker's rounds cost the server about a quarter more per task. The time an id shows
-- is the task's created_at to the millisecond. SQL without SET, so it is inlined where
-- it is called, every name schema-qualified (a column default runs in the caller's
-- search_path).
CREATE FUNCTION tenure._uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE
AS $$
    SELECT pg_catalog.encode(
               pg_catalog.set_bit(pg_catalog.set_bit(
                   pg_catalog.overlay(pg_catalog.uuid_send(pg_catalog.gen_random_uuid()),
                                      pg_catalog.substr(pg_catalog.int8send(
                                          (pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000)::bigint), 3),
                                      1, 6),
                   52, 1), 53, 1),  -- version 7 (4 from gen_random_uuid, whose variant bits stay)
               'hex')::uuid
$$;
ALTER TABLE tenure.task ALTER COLUMN id SET DEFAULT tenure._uuid_v7();

-- Due tasks are leased highest priority first, then oldest due first. With one priority
-- (the common case) a walk of task_due is the same as before. A leased task is in none
-- of the due indexes (leased_at is set exactly when owner is), so a lease adds entries
-- only to the primary key and task_leased: an acquisition first ends the leases of its
-- kinds that ran out (by task_leased), which puts their tasks back in the due indexes.
DROP INDEX tenure.task_due;
DROP INDEX tenure.task_kind_due;
CREATE INDEX task_due ON tenure.task (priority DESC, next_action) WHERE status = 'pending' AND leased_at IS NULL;
CREATE INDEX task_kind_due ON tenure.task (kind, priority DESC, next_action)
    WHERE status = 'pending' AND leased_at IS NULL;
-- The keys with due work of a kind limited per key, found by skipping through this
-- index; tasks without a limit key (most) are not in it.
CREATE INDEX task_key_due ON tenure.task (kind, limit_key, priority DESC, next_action)
    WHERE status = 'pending' AND leased_at IS NULL AND limit_key IS NOT NULL;
-- Waiting tasks, for those who list them (few, unlike finished ones).
CREATE INDEX task_waiting ON tenure.task (priority DESC, next_action) WHERE status = 'waiting';
-- Leased tasks by kind and the end of their lease: what runs now (counted against the
-- limits) and the leases that ran out. Its predicate names leased_at, not owner: one on
-- owner would be implied by the holder's writes (owner = $1), and their generic plans
-- scanned this index, dead entries and all, instead of looking each task up by id (10
-- times the time).
CREATE INDEX task_leased ON tenure.task (kind, next_action) WHERE status = 'pending' AND leased_at IS NOT NULL;

CREATE TABLE tenure.task_after (
    task_id  uuid NOT NULL REFERENCES tenure.task (id) ON DELETE CASCADE,
    after_id uuid NOT NULL REFERENCES tenure.task (id) ON DELETE CASCADE,
    PRIMARY KEY (task_id, after_id),
    CHECK (task_id <> after_id)
);
CREATE INDEX task_after_after ON tenure.task_after (after_id);
COMMENT ON TABLE tenure.task_after IS
    'Run-after dependencies: task task_id becomes due only when task after_id (and every other it names) is done.';

-- A waiter is told once per registration: the first announcement for it marks it told,
-- later enqueues send nothing until it registers again (its next look sees their tasks).
ALTER TABLE tenure.task_waiter ADD COLUMN told boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN tenure.task_waiter.told IS
    'An announcement for it committed since it registered: enqueues leave it be until it registers again.';

CREATE TABLE tenure.task_kind (
    kind                text        PRIMARY KEY CHECK (btrim(kind) <> ''),
    paused              boolean     NOT NULL DEFAULT false,
    max_running         integer     CHECK (max_running BETWEEN 1 AND 1000000),
    max_running_per_key integer     CHECK (max_running_per_key BETWEEN 1 AND 1000000),
    rate                integer     CHECK (rate BETWEEN 1 AND 100000),
    rate_period         interval    CHECK (rate_period > interval '0' AND rate_period <= interval '1 day'),
    changed_at          timestamptz NOT NULL,
    CHECK (rate IS NULL OR rate_period IS NOT NULL)
);
COMMENT ON TABLE tenure.task_kind IS
    'Settings of a kind of task, set by task_kind_set: paused, concurrency limits per kind and per limit key, a rate limit. A kind without a row has none.';

-- The leases of rate-limited kinds within their rate period (older ones are deleted as
-- the kind is next leased).
CREATE TABLE tenure.task_kind_lease (
    kind      text        NOT NULL REFERENCES tenure.task_kind (kind) ON DELETE CASCADE,
    leased_at timestamptz NOT NULL
);
CREATE INDEX task_kind_lease_kind ON tenure.task_kind_lease (kind, leased_at);

-- When each key of a kind limited per key was last served: of the keys with as few
-- tasks leased, the one served longest ago goes first. Forgotten after an hour.
CREATE TABLE tenure.task_key_turn (
    kind      text        NOT NULL REFERENCES tenure.task_kind (kind) ON DELETE CASCADE,
    limit_key text        NOT NULL,
    served_at timestamptz NOT NULL,
    PRIMARY KEY (kind, limit_key)
);

CREATE VIEW tenure.task_kinds AS
SELECT k.kind, k.paused, k.max_running, k.max_running_per_key, k.rate, k.rate_period,
       (SELECT count(*) FROM tenure.task t
         WHERE t.kind = k.kind AND t.status = 'pending' AND t.leased_at IS NOT NULL AND t.next_action >= now()) AS running,
       (SELECT count(*) FROM tenure.task t
         WHERE t.kind = k.kind AND t.status = 'pending' AND t.leased_at IS NULL AND t.next_action <= now())
       + (SELECT count(*) FROM tenure.task t
           WHERE t.kind = k.kind AND t.status = 'pending' AND t.leased_at IS NOT NULL AND t.next_action < now()) AS due,
       CASE WHEN k.rate IS NOT NULL THEN
           (SELECT count(*) FROM tenure.task_kind_lease l WHERE l.kind = k.kind AND l.leased_at > now() - k.rate_period)
       END AS rate_used,
       k.changed_at
  FROM tenure.task_kind k;
COMMENT ON VIEW tenure.task_kinds IS
    'Every kind of task with settings (task_kind_set): paused, its limits, and what runs against them now.';
COMMENT ON COLUMN tenure.task_kinds.kind IS 'the kind of task';
COMMENT ON COLUMN tenure.task_kinds.paused IS 'true: no task of the kind is leased (leased ones run on)';
COMMENT ON COLUMN tenure.task_kinds.max_running IS 'at most this many tasks of the kind leased at once; NULL: no limit';
COMMENT ON COLUMN tenure.task_kinds.max_running_per_key IS 'at most this many leased at once per limit key; NULL: no limit';
COMMENT ON COLUMN tenure.task_kinds.rate IS 'at most this many leases per rate_period; NULL: no rate limit';
COMMENT ON COLUMN tenure.task_kinds.rate_period IS 'the sliding window of the rate limit';
COMMENT ON COLUMN tenure.task_kinds.running IS 'tasks of the kind leased now (leases not run out)';
COMMENT ON COLUMN tenure.task_kinds.due IS 'tasks of the kind due now';
COMMENT ON COLUMN tenure.task_kinds.rate_used IS 'leases granted in the last rate_period (NULL without a rate limit)';
COMMENT ON COLUMN tenure.task_kinds.changed_at IS 'when the settings last changed';

CREATE VIEW tenure.task_dependencies AS
SELECT a.task_id, a.after_id, f.status AS after_status
  FROM tenure.task_after a
  JOIN tenure.task f ON f.id = a.after_id;
COMMENT ON VIEW tenure.task_dependencies IS
    'Run-after dependencies: task task_id runs after task after_id, whose status is after_status.';
COMMENT ON COLUMN tenure.task_dependencies.task_id IS 'the task that waits';
COMMENT ON COLUMN tenure.task_dependencies.after_id IS 'a task it runs after';
COMMENT ON COLUMN tenure.task_dependencies.after_status IS 'the status of that task (done lets the dependent run)';

CREATE OR REPLACE VIEW tenure.tasks AS
SELECT id, kind, state, status, owner, epoch, data, attempts, max_attempts, last_error,
       idempotency_key, created_at, last_change, last_action, next_action, leased_at, finished_at,
       status = 'pending' AND owner IS NOT NULL AND next_action >= now() AS leased,
       status = 'pending' AND next_action <= now() AND (owner IS NULL OR next_action < now()) AS due,
       priority, limit_key, after_left
  FROM tenure.task;

COMMENT ON COLUMN tenure.tasks.id IS 'primary key; time-ordered (UUID version 7) unless the caller gives one';
COMMENT ON COLUMN tenure.tasks.priority IS 'higher is leased first; default 0';
COMMENT ON COLUMN tenure.tasks.limit_key IS 'what `max_running_per_key` of the kind counts by; NULL: none';
COMMENT ON COLUMN tenure.tasks.after_left IS 'how many of the tasks it runs after are not done yet';
COMMENT ON COLUMN tenure.tasks.status IS '`pending` (default), `waiting` (for the tasks it runs after), `done`, `dead` or `cancelled`';
COMMENT ON COLUMN tenure.tasks.next_action IS 'when it is due, or while leased the end of the lease; while waiting, the earliest it may become due; NULL once finished';
COMMENT ON COLUMN tenure.tasks.finished_at IS 'when it became done, dead or cancelled';
COMMENT ON COLUMN tenure.task_status.status IS '`pending`, `waiting`, `done`, `dead` or `cancelled`';

-- A due task that an acquisition of a kind with settings may lease, with what orders it.
CREATE TYPE tenure._task_candidate AS (
    id          uuid,
    priority    integer,
    rank        bigint,       -- its key's turn: the key's leased tasks + 1 for its first, + 2 for its second, ...
    served_at   timestamptz,  -- when its key was last served (NULL: not lately), so keys take turns
    next_action timestamptz
);

GRANT SELECT ON tenure.task_kinds, tenure.task_dependencies TO tenure_worker;

-- Everything here works with the functions of v0.2.0 too (new columns have defaults, the
-- old statuses still hold): released_functions then brings the functions that use it,
-- and replaces task_enqueue and the type of its input in the same transaction.

COMMIT;
