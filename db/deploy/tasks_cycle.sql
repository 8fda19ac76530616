-- What a worker's one round trip tells and gets back: task_cycle reports the outcomes of
-- tasks it finished (and extends the leases it keeps) and leases due tasks for its free
-- slots, in one call and one commit.
BEGIN;

SET LOCAL ROLE tenure_owner;

CREATE TYPE tenure.task_cycled AS (
    id          uuid,
    epoch       bigint,
    outcome     text,
    refused     text,
    kind        text,
    state       text,
    data        jsonb,
    attempts    integer,
    next_action timestamptz
);
COMMENT ON TYPE tenure.task_cycled IS
    'One row of task_cycle''s answer: a reported outcome (outcome complete, release, fail or extend; refused says why it was not applied, NULL when it was) or a new lease (outcome lease).';
COMMENT ON COLUMN tenure.task_cycled.id IS 'The task.';
COMMENT ON COLUMN tenure.task_cycled.epoch IS 'The epoch of the lease the outcome was reported under, or of the new lease.';
COMMENT ON COLUMN tenure.task_cycled.outcome IS 'complete, release, fail or extend for a reported outcome; lease for a task newly leased to the caller.';
COMMENT ON COLUMN tenure.task_cycled.refused IS 'Why the outcome was not applied (the lease was lost, no such task); NULL when it was applied, and for new leases.';
COMMENT ON COLUMN tenure.task_cycled.kind IS 'The kind of the task (NULL for an unknown task).';
COMMENT ON COLUMN tenure.task_cycled.state IS 'The task''s state after the call (NULL for a refused outcome).';
COMMENT ON COLUMN tenure.task_cycled.data IS 'New leases: the task''s data; NULL for reported outcomes.';
COMMENT ON COLUMN tenure.task_cycled.attempts IS 'Failed attempts so far.';
COMMENT ON COLUMN tenure.task_cycled.next_action IS 'A new or extended lease: when it ends; a release or a failure: when the task is due again (NULL once dead); a completion: NULL.';

-- Most tasks have no idempotency key: a unique index of every row's key (NULL included)
-- costs an index entry on each insert and each update that moves the row. Index only
-- the keys that are set; enqueue's ON CONFLICT DO NOTHING names no constraint, so it
-- arbitrates on every unique index, this one included.
ALTER TABLE tenure.task DROP CONSTRAINT task_idempotency_key_key;
CREATE UNIQUE INDEX task_idempotency_key ON tenure.task (idempotency_key) WHERE idempotency_key IS NOT NULL;

-- One outcome of a task_cycle request, as parsed from its JSON.
CREATE TYPE tenure._task_outcome AS (
    ord         integer,
    id          uuid,
    epoch       bigint,
    outcome     text,
    state       text,
    data        jsonb,
    delay       interval,
    error       text,
    retry_delay interval
);

-- Workers that wait for notifications (task_cycle's p_wait): a task that becomes due is
-- announced with NOTIFY only while one waits for its kind. A NOTIFY serialises the
-- commits of every transaction that sent one, so announcing each enqueue to no one
-- capped concurrent enqueues. Unlogged: after a crash or a failover the registry starts
-- empty and each worker registers again at its next poll.
CREATE UNLOGGED TABLE tenure.task_waiter (
    owner uuid        PRIMARY KEY,
    kinds text[],     -- NULL: any kind
    until timestamptz NOT NULL
);
COMMENT ON TABLE tenure.task_waiter IS
    'Instances waiting for NOTIFY tenure_task (registered by task_cycle with p_wait), each until a time by the server''s clock; kinds NULL means any kind.';

COMMIT;
