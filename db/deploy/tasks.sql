BEGIN;

SET LOCAL ROLE tenure_owner;

-- A task is a durable state machine: `state` is the application's, `status` is
-- tenure's (pending until completed or dead). A pending task with an owner is
-- leased until next_action; without one it is due at next_action.
CREATE TABLE tenure.task (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    kind            text        NOT NULL CHECK (btrim(kind) <> ''),
    state           text        NOT NULL CHECK (btrim(state) <> ''),
    status          text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'done', 'dead')),
    owner           uuid,
    epoch           bigint      NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    data            jsonb       NOT NULL DEFAULT '{}',
    attempts        integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts    integer     NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    last_error      text,
    idempotency_key text        UNIQUE,
    created_at      timestamptz NOT NULL,
    last_change     timestamptz NOT NULL,
    last_action     timestamptz NOT NULL,
    next_action     timestamptz,
    leased_at       timestamptz,
    finished_at     timestamptz,
    CHECK ((status = 'pending') = (next_action IS NOT NULL)),
    CHECK (owner IS NULL OR status = 'pending'),
    CHECK ((owner IS NULL) = (leased_at IS NULL))
);
COMMENT ON TABLE tenure.task IS
    'Lease-based tasks. A pending task is due at next_action; while owner is set it is leased to that instance until next_action, under epoch, which grows every time the task changes hands.';

-- Picking a due task walks this index from the oldest next_action: its cost does
-- not grow with the backlog. Finished tasks are not in it.
CREATE INDEX task_due ON tenure.task (next_action) WHERE status = 'pending';
CREATE INDEX task_kind_due ON tenure.task (kind, next_action) WHERE status = 'pending';
CREATE INDEX task_finished ON tenure.task (finished_at) WHERE status <> 'pending';

-- Who held which task from when, by the server's clock: one row per epoch.
CREATE TABLE tenure.task_lease_log (
    task_id   uuid        NOT NULL REFERENCES tenure.task (id) ON DELETE CASCADE,
    epoch     bigint      NOT NULL,
    owner     uuid        NOT NULL,
    leased_at timestamptz NOT NULL,
    how       text        NOT NULL CHECK (how IN ('acquired', 'ejected')),
    PRIMARY KEY (task_id, epoch)
);
COMMENT ON TABLE tenure.task_lease_log IS
    'One row per lease ever granted: task, epoch, owner and the server time it began (read after the row lock, so after every write fenced by the previous epoch committed).';

CREATE TYPE tenure.task_lease AS (
    id          uuid,
    kind        text,
    state       text,
    data        jsonb,
    epoch       bigint,
    attempts    integer,
    lease_until timestamptz
);
COMMENT ON TYPE tenure.task_lease IS
    'A task handed to an owner: its state and data, the epoch that fences every write under this lease, and when the lease ends unless extended.';

CREATE TYPE tenure.task_enqueued AS (
    id          uuid,
    kind        text,
    created     boolean,
    next_action timestamptz
);
COMMENT ON TYPE tenure.task_enqueued IS
    'Result of an enqueue: the task id, and whether this call created it (false when the id or idempotency key already existed).';

-- One task of an enqueue request, as parsed from its JSON.
CREATE TYPE tenure._task_input AS (
    ord             bigint,
    id              uuid,
    kind            text,
    data            jsonb,
    state           text,
    delay           interval,
    idempotency_key text,
    max_attempts    integer,
    is_object       boolean
);

CREATE VIEW tenure.tasks AS
SELECT id, kind, state, status, owner, epoch, data, attempts, max_attempts, last_error,
       idempotency_key, created_at, last_change, last_action, next_action, leased_at, finished_at,
       status = 'pending' AND owner IS NOT NULL AND next_action >= now() AS leased,
       status = 'pending' AND next_action <= now() AND (owner IS NULL OR next_action < now()) AS due
  FROM tenure.task;
COMMENT ON VIEW tenure.tasks IS
    'Every task with its state, status, owner and epoch; leased = held under a lease that has not run out, due = can be acquired now.';

CREATE VIEW tenure.task_status AS
SELECT kind, state, status,
       count(*) AS tasks,
       count(*) FILTER (WHERE status = 'pending' AND owner IS NOT NULL AND next_action >= now()) AS leased,
       count(*) FILTER (WHERE status = 'pending' AND next_action <= now()
                          AND (owner IS NULL OR next_action < now())) AS due,
       now() - min(next_action) FILTER (WHERE status = 'pending' AND next_action <= now()
                                         AND (owner IS NULL OR next_action < now())) AS oldest_due_age,
       max(attempts) AS max_attempts_used
  FROM tenure.task
 GROUP BY kind, state, status;
COMMENT ON VIEW tenure.task_status IS
    'Tasks counted by kind, state and status: how many are leased, how many are due, how long the oldest due one has waited, and the most attempts any has used. Dead tasks show as status dead.';

GRANT SELECT ON tenure.tasks, tenure.task_status TO tenure_worker;

COMMIT;
