-- Back to tasks without controls. Waiting tasks become dead (the old functions cannot
-- hold them back until their dependencies are done), cancelled ones dead too.
BEGIN;

SET LOCAL ROLE tenure_owner;

UPDATE tenure.task
   SET status = 'dead', next_action = NULL, finished_at = coalesce(finished_at, clock_timestamp()),
       last_error = CASE status WHEN 'waiting' THEN 'waiting for its dependencies when task controls were reverted'
                                ELSE 'cancelled' END
 WHERE status IN ('waiting', 'cancelled');

DROP VIEW tenure.task_kinds;
DROP VIEW tenure.task_dependencies;
DROP VIEW tenure.tasks;
CREATE VIEW tenure.tasks AS
SELECT id, kind, state, status, owner, epoch, data, attempts, max_attempts, last_error,
       idempotency_key, created_at, last_change, last_action, next_action, leased_at, finished_at,
       status = 'pending' AND owner IS NOT NULL AND next_action >= now() AS leased,
       status = 'pending' AND next_action <= now() AND (owner IS NULL OR next_action < now()) AS due
  FROM tenure.task;
COMMENT ON VIEW tenure.tasks IS
    'Every task with its state, status, owner and epoch; leased = held under a lease that has not run out, due = can be acquired now.';
GRANT SELECT ON tenure.tasks TO tenure_worker;
COMMENT ON COLUMN tenure.tasks.id IS 'primary key; `gen_random_uuid()` unless the caller gives one';
COMMENT ON COLUMN tenure.tasks.kind IS 'what sort of work; not blank';
COMMENT ON COLUMN tenure.tasks.state IS 'the application''s step; not blank';
COMMENT ON COLUMN tenure.tasks.status IS '`pending` (default), `done` or `dead`';
COMMENT ON COLUMN tenure.tasks.owner IS 'the lease holder; NULL when not leased';
COMMENT ON COLUMN tenure.tasks.epoch IS '0 at enqueue; grows by one with every lease (acquire or eject)';
COMMENT ON COLUMN tenure.tasks.data IS 'the application''s data; default `{}`';
COMMENT ON COLUMN tenure.tasks.attempts IS 'failed attempts (failures and leases that ran out); 0 again after a requeue';
COMMENT ON COLUMN tenure.tasks.max_attempts IS 'at least 1; default 5';
COMMENT ON COLUMN tenure.tasks.last_error IS 'the last failure''s error, or which lease ran out';
COMMENT ON COLUMN tenure.tasks.idempotency_key IS 'unique when set';
COMMENT ON COLUMN tenure.tasks.created_at IS 'when it was enqueued';
COMMENT ON COLUMN tenure.tasks.last_change IS 'when `state` or `data` last changed';
COMMENT ON COLUMN tenure.tasks.last_action IS 'when any function last changed the task';
COMMENT ON COLUMN tenure.tasks.next_action IS 'when it is due, or while leased the end of the lease; NULL once finished';
COMMENT ON COLUMN tenure.tasks.leased_at IS 'when the current lease began; NULL when not leased';
COMMENT ON COLUMN tenure.tasks.finished_at IS 'when it became done or dead';
COMMENT ON COLUMN tenure.tasks.leased IS '`status = ''pending'' AND owner IS NOT NULL AND next_action >= now()`';
COMMENT ON COLUMN tenure.tasks.due IS '`status = ''pending'' AND next_action <= now() AND (owner IS NULL OR next_action < now())`';
COMMENT ON COLUMN tenure.task_status.status IS '`pending`, `done` or `dead`';

DROP TABLE tenure.task_kind_lease;
DROP TABLE tenure.task_key_turn;
DROP TABLE tenure.task_kind;
DROP TABLE tenure.task_after;
DROP INDEX tenure.task_due;
DROP INDEX tenure.task_kind_due;
DROP INDEX tenure.task_leased;
ALTER TABLE tenure.task ALTER COLUMN id SET DEFAULT gen_random_uuid();
DROP FUNCTION tenure._uuid_v7();
ALTER TABLE tenure.task
    DROP CONSTRAINT task_valid,
    DROP COLUMN priority,
    DROP COLUMN limit_key,
    DROP COLUMN after_left,
    ADD CONSTRAINT task_kind_check CHECK (btrim(kind) <> ''),
    ADD CONSTRAINT task_state_check CHECK (btrim(state) <> ''),
    ADD CONSTRAINT task_status_check CHECK (status IN ('pending', 'done', 'dead')),
    ADD CONSTRAINT task_epoch_check CHECK (epoch >= 0),
    ADD CONSTRAINT task_attempts_check CHECK (attempts >= 0),
    ADD CONSTRAINT task_max_attempts_check CHECK (max_attempts >= 1),
    ADD CONSTRAINT task_check CHECK ((status = 'pending') = (next_action IS NOT NULL)),
    ADD CONSTRAINT task_check1 CHECK (owner IS NULL OR status = 'pending'),
    ADD CONSTRAINT task_check2 CHECK ((owner IS NULL) = (leased_at IS NULL));
DROP FUNCTION tenure._task_valid(text, text, text, uuid, bigint, integer, integer, timestamptz, timestamptz, text, integer);
CREATE INDEX task_due ON tenure.task (next_action) WHERE status = 'pending';
CREATE INDEX task_kind_due ON tenure.task (kind, next_action) WHERE status = 'pending';

DROP TYPE tenure._task_candidate;

ALTER TABLE tenure.task_waiter DROP COLUMN told;

COMMIT;
