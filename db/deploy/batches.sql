BEGIN;

SET LOCAL ROLE tenure_owner;

-- A queue is a claims keyspace: the instance that holds the claim on a key serves
-- that key's batches. Its mode applies to every key that does not set its own.
CREATE TABLE tenure.batch_queue (
    keyspace      text    PRIMARY KEY CHECK (btrim(keyspace) <> ''),
    mode          text    NOT NULL DEFAULT 'serial' CHECK (mode IN ('unconstrained', 'serial', 'parallel')),
    implicit_deps boolean NOT NULL DEFAULT true
);
COMMENT ON TABLE tenure.batch_queue IS
    'Submission mode per queue (a claims keyspace): unconstrained, serial or parallel; implicit_deps = an invalid batch halts its key.';

CREATE TABLE tenure.batch_key (
    keyspace      text    NOT NULL,
    key           text    NOT NULL,
    mode          text    CHECK (mode IN ('unconstrained', 'serial', 'parallel')),
    implicit_deps boolean,
    next_seq      bigint  NOT NULL DEFAULT 1,
    last_selected timestamptz,
    ready         boolean NOT NULL DEFAULT false,
    head_at       timestamptz,
    PRIMARY KEY (keyspace, key),
    FOREIGN KEY (keyspace, key) REFERENCES tenure.claim_key (keyspace, key) ON DELETE CASCADE
);
COMMENT ON TABLE tenure.batch_key IS
    'A key with batches: its own mode and implicit_deps (NULL = the queue''s), the next number of its per-key sequence, assigned under the lock of this row, and when a batch of it was last selected (keys least recently served go first). ready and head_at summarize its batches for selection (see tenure._batch_refresh): ready = a batch waits and the key is not plainly blocked (halted by an invalid batch, or serial with a batch pending); head_at = when its first waiting batch was enqueued.';
-- Selection walks the ready keys of a queue in the order it serves them and stops after
-- the few it needs: its cost follows what it returns, not the number of keys.
CREATE INDEX batch_key_ready ON tenure.batch_key (keyspace, last_selected NULLS FIRST, head_at, key) WHERE ready;

-- A batch reaches the external system in the order of seq within its key.
CREATE TABLE tenure.batch (
    id           uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    keyspace     text        NOT NULL,
    key          text        NOT NULL,
    seq          bigint      NOT NULL,
    payload      bytea       NOT NULL,
    status       text        NOT NULL DEFAULT 'queued'
                 CHECK (status IN ('queued', 'pending', 'committed', 'invalid', 'unknown', 'skipped')),
    state_keys   text[]      NOT NULL DEFAULT '{}',
    depends_on   uuid[]      NOT NULL DEFAULT '{}',
    attempts     integer     NOT NULL DEFAULT 0,
    enqueued_at  timestamptz NOT NULL,
    submitted_at timestamptz,
    resolved_at  timestamptz,
    submitter    uuid,
    claim_epoch  bigint,
    detail       text,
    UNIQUE (keyspace, key, seq),
    FOREIGN KEY (keyspace, key) REFERENCES tenure.batch_key (keyspace, key) ON DELETE CASCADE
);
COMMENT ON TABLE tenure.batch IS
    'Batches for the external system. queued: waiting; pending: submitted, not yet resolved; committed, invalid: resolved; unknown: the external system lost track, to be resubmitted; skipped: an invalid batch an operator let its key go past.';
-- Selection and depth only look at batches that are not finished.
CREATE INDEX batch_open ON tenure.batch (keyspace, key, seq) WHERE status NOT IN ('committed', 'skipped');
-- Selection counts, per key, the batches that are neither queued nor finished.
CREATE INDEX batch_unsettled ON tenure.batch (keyspace, key) WHERE status IN ('pending', 'unknown', 'invalid');
CREATE INDEX batch_depends_on ON tenure.batch USING gin (depends_on) WHERE cardinality(depends_on) > 0;
-- Settled batches by the time they were resolved (batch_prune, oldest first).
CREATE INDEX batch_settled ON tenure.batch (resolved_at) WHERE status IN ('committed', 'skipped');

CREATE TABLE tenure.batch_tombstone (
    id        uuid        PRIMARY KEY,
    keyspace  text        NOT NULL,
    key       text        NOT NULL,
    seq       bigint      NOT NULL,
    status    text        NOT NULL CHECK (status IN ('committed', 'skipped')),
    pruned_at timestamptz NOT NULL
);
COMMENT ON TABLE tenure.batch_tombstone IS
    'Batches removed by batch_prune: id, queue, key, sequence number and final status, kept until pruned_at is older than the retention age again. batch_enqueue answers a tombstoned id as an existing batch (created false) and judges a dependency on it by its status (committed: satisfied; skipped: the new batch is invalid).';
CREATE INDEX batch_tombstone_pruned ON tenure.batch_tombstone (pruned_at);

-- One batch of an enqueue request, as parsed from its JSON.
CREATE TYPE tenure._batch_input AS (
    ord        bigint,
    id         uuid,
    key        text,
    payload    bytea,
    state_keys text[],
    depends_on uuid[],
    is_object  boolean
);

CREATE TYPE tenure.batch_grant AS (
    id          uuid,
    key         text,
    seq         bigint,
    payload     bytea,
    state_keys  text[],
    attempts    integer,
    claim_epoch bigint,
    round       integer
);
COMMENT ON TYPE tenure.batch_grant IS
    'A batch handed to a submitter: its key, per-key sequence number and payload, the claim epoch under which it was selected (re-check it just before submitting), and the round it was selected in.';

CREATE TYPE tenure.batch_enqueued AS (
    id      uuid,
    key     text,
    seq     bigint,
    created boolean
);
COMMENT ON TYPE tenure.batch_enqueued IS
    'Result of a batch enqueue: the batch id, its key and sequence number, and whether this call created it.';

CREATE VIEW tenure.batch_keys AS
SELECT k.keyspace, k.key,
       coalesce(k.mode, q.mode, 'serial') AS mode,
       coalesce(k.implicit_deps, q.implicit_deps, true) AS implicit_deps,
       c.claimant, c.claimant IS NOT NULL AND c.expires_at >= now() AS claimed,
       count(*) FILTER (WHERE b.status = 'queued') AS queued,
       count(*) FILTER (WHERE b.status = 'pending') AS pending,
       count(*) FILTER (WHERE b.status = 'unknown') AS unknown,
       count(*) FILTER (WHERE b.status = 'invalid') AS invalid,
       count(*) FILTER (WHERE b.status = 'committed') AS committed,
       now() - min(b.enqueued_at) FILTER (WHERE b.status IN ('queued', 'unknown')) AS oldest_waiting_age,
       coalesce(k.implicit_deps, q.implicit_deps, true) AND bool_or(b.status = 'invalid') IS TRUE AS halted
  FROM tenure.batch_key k
  JOIN tenure.claim_key c ON c.keyspace = k.keyspace AND c.key = k.key
  LEFT JOIN tenure.batch_queue q ON q.keyspace = k.keyspace
  LEFT JOIN tenure.batch b ON b.keyspace = k.keyspace AND b.key = k.key
 GROUP BY k.keyspace, k.key, k.mode, k.implicit_deps, q.mode, q.implicit_deps, c.claimant, c.expires_at;
COMMENT ON VIEW tenure.batch_keys IS
    'Depth per key: its mode, its claimant, batches per status, the age of its oldest waiting batch, and whether an invalid batch halts it.';

-- One row per batch, for operators: find the invalid batch that halts a key, then skip or retry it.
CREATE VIEW tenure.batches AS
SELECT b.keyspace, b.key, b.seq, b.id, b.status, length(b.payload) AS payload_bytes, b.state_keys, b.depends_on,
       b.attempts, b.enqueued_at, b.submitted_at, b.resolved_at, b.submitter, b.claim_epoch, b.detail
  FROM tenure.batch b;
COMMENT ON VIEW tenure.batches IS
    'One row per batch (without its payload): key, per-key sequence, status, attempts, times, the instance and claim epoch of the last selection, and what the external system said.';

COMMENT ON COLUMN tenure.batches.keyspace IS 'the queue';
COMMENT ON COLUMN tenure.batches.key IS 'the key';
COMMENT ON COLUMN tenure.batches.seq IS 'its number in its key''s sequence: the order the external system gets the key''s batches in';
COMMENT ON COLUMN tenure.batches.id IS 'the batch id';
COMMENT ON COLUMN tenure.batches.status IS '`queued`, `pending`, `committed`, `invalid`, `unknown` or `skipped`';
COMMENT ON COLUMN tenure.batches.payload_bytes IS 'the size of its payload in bytes';
COMMENT ON COLUMN tenure.batches.state_keys IS 'the state keys it reads or writes (parallel mode)';
COMMENT ON COLUMN tenure.batches.depends_on IS 'the batches that must be committed before it';
COMMENT ON COLUMN tenure.batches.attempts IS 'how many times it was selected for submission';
COMMENT ON COLUMN tenure.batches.enqueued_at IS 'when it was enqueued';
COMMENT ON COLUMN tenure.batches.submitted_at IS 'when it was last selected; NULL before';
COMMENT ON COLUMN tenure.batches.resolved_at IS 'when it was committed, invalid or skipped; NULL before and while unknown';
COMMENT ON COLUMN tenure.batches.submitter IS 'the instance that last selected it';
COMMENT ON COLUMN tenure.batches.claim_epoch IS 'the claim epoch it was last selected under';
COMMENT ON COLUMN tenure.batches.detail IS 'what the external system (or a dependency) said of it';

GRANT SELECT ON tenure.batch_keys, tenure.batches TO tenure_worker;

COMMIT;
