-- Column comments of the public types and views, so that the generated SQL reference
-- (docs/sql-reference.md) says what each column means. Comments only: nothing else changes.
BEGIN;

SET LOCAL ROLE tenure_owner;

-- type tenure.batch_enqueued
COMMENT ON COLUMN tenure.batch_enqueued.id IS 'the batch';
COMMENT ON COLUMN tenure.batch_enqueued.key IS 'its key';
COMMENT ON COLUMN tenure.batch_enqueued.seq IS 'its number in the key''s sequence';
COMMENT ON COLUMN tenure.batch_enqueued.created IS 'false when the id already existed, or for a repeat of an id within the call';

-- type tenure.batch_grant
COMMENT ON COLUMN tenure.batch_grant.id IS 'the batch';
COMMENT ON COLUMN tenure.batch_grant.key IS 'its key';
COMMENT ON COLUMN tenure.batch_grant.seq IS 'its number in the key''s sequence, from 1';
COMMENT ON COLUMN tenure.batch_grant.payload IS 'what to submit';
COMMENT ON COLUMN tenure.batch_grant.state_keys IS 'its state keys (parallel mode); `{}` when none';
COMMENT ON COLUMN tenure.batch_grant.attempts IS 'how often it was selected, this time included';
COMMENT ON COLUMN tenure.batch_grant.claim_epoch IS 'from `batch_select`, the claim epoch it was selected under; from `batch_pending`, the key''s current claim epoch. Pass it to `claim_check` and `batch_resolve`';
COMMENT ON COLUMN tenure.batch_grant.round IS 'the round it was selected in, from 1; 0 from `batch_pending`';

-- view tenure.batch_keys
COMMENT ON COLUMN tenure.batch_keys.keyspace IS 'the queue';
COMMENT ON COLUMN tenure.batch_keys.key IS 'the key';
COMMENT ON COLUMN tenure.batch_keys.mode IS 'the key''s mode, else the queue''s, else `serial`';
COMMENT ON COLUMN tenure.batch_keys.implicit_deps IS 'the key''s setting, else the queue''s, else true';
COMMENT ON COLUMN tenure.batch_keys.claimant IS 'the holder of the key''s current or last claim; NULL when released or never claimed';
COMMENT ON COLUMN tenure.batch_keys.claimed IS '`claimant IS NOT NULL AND expires_at >= now()`';
COMMENT ON COLUMN tenure.batch_keys.queued IS 'batches of the key with status `queued`';
COMMENT ON COLUMN tenure.batch_keys.pending IS 'batches of the key with status `pending`';
COMMENT ON COLUMN tenure.batch_keys.unknown IS 'batches of the key with status `unknown`';
COMMENT ON COLUMN tenure.batch_keys.invalid IS 'batches of the key with status `invalid`';
COMMENT ON COLUMN tenure.batch_keys.committed IS 'batches of the key with status `committed`';
COMMENT ON COLUMN tenure.batch_keys.oldest_waiting_age IS '`now()` minus the enqueue time of its oldest `queued` or `unknown` batch; NULL when none';
COMMENT ON COLUMN tenure.batch_keys.halted IS '`implicit_deps` and the key has an `invalid` batch: `batch_select` selects none of its batches';

-- type tenure.claim_grant
COMMENT ON COLUMN tenure.claim_grant.key IS 'the key. NULL in a `busy` row';
COMMENT ON COLUMN tenure.claim_grant.epoch IS 'the claim''s epoch. Pass it to `claim_check` and `claim_fence`. NULL in a `busy` row';
COMMENT ON COLUMN tenure.claim_grant.expires_at IS 'when the claim expires unless renewed. NULL for a released key and in a `busy` row';
COMMENT ON COLUMN tenure.claim_grant.change IS '`renewed`, `released`, `taken` or `busy`';

-- view tenure.claim_instances
COMMENT ON COLUMN tenure.claim_instances.keyspace IS 'the keyspace';
COMMENT ON COLUMN tenure.claim_instances.instance_id IS 'the instance';
COMMENT ON COLUMN tenure.claim_instances.renewed_at IS 'its last renewal or take';
COMMENT ON COLUMN tenure.claim_instances.expires_at IS 'until when it counts as live';
COMMENT ON COLUMN tenure.claim_instances.live IS '`expires_at >= now()`';
COMMENT ON COLUMN tenure.claim_instances.keys_held IS 'its claims in the keyspace that have not expired';
COMMENT ON COLUMN tenure.claim_instances.fair_share IS '`ceil(registered keys / greatest(live instances, 1))` of the keyspace, the same on every row of the keyspace';

-- view tenure.claims
COMMENT ON COLUMN tenure.claims.keyspace IS 'the keyspace';
COMMENT ON COLUMN tenure.claims.key IS 'the key';
COMMENT ON COLUMN tenure.claims.claimant IS 'the holder of the current or last claim; NULL when the key was released or never claimed';
COMMENT ON COLUMN tenure.claims.epoch IS 'the epoch of the current or last claim; 0 before the first';
COMMENT ON COLUMN tenure.claims.expires_at IS 'when the claim expires or expired; NULL without a claimant';
COMMENT ON COLUMN tenure.claims.claimed_at IS 'when the claim began; NULL without a claimant';
COMMENT ON COLUMN tenure.claims.claim_age IS '`now() - claimed_at`';
COMMENT ON COLUMN tenure.claims.live IS '`claimant IS NOT NULL AND expires_at >= now()`';
COMMENT ON COLUMN tenure.claims.unclaimed_for IS 'without a claimant, `now() - unclaimed_since`; for an expired claim, `now() - expires_at`; NULL while the claim is live';

-- view tenure.heartbeat_status
COMMENT ON COLUMN tenure.heartbeat_status.utype IS 'service type';
COMMENT ON COLUMN tenure.heartbeat_status.instance_id IS 'the holder. NULL after it resigned';
COMMENT ON COLUMN tenure.heartbeat_status.term IS 'the current or last term';
COMMENT ON COLUMN tenure.heartbeat_status.renewed_at IS 'last heartbeat (after a resignation, the time of the resignation)';
COMMENT ON COLUMN tenure.heartbeat_status.heartbeat_age IS '`now() - renewed_at` (`now()` is the start of the reading transaction)';
COMMENT ON COLUMN tenure.heartbeat_status.timeout IS 'the holder''s T';
COMMENT ON COLUMN tenure.heartbeat_status.heartbeat_interval IS 'the holder''s I, if it passed one. Otherwise NULL';
COMMENT ON COLUMN tenure.heartbeat_status.valid_until IS '`renewed_at + timeout`';
COMMENT ON COLUMN tenure.heartbeat_status.live IS '`instance_id IS NOT NULL AND now() - renewed_at <= timeout`';
COMMENT ON COLUMN tenure.heartbeat_status.term_started_at IS 'when the current term began';

-- type tenure.primary_entry
COMMENT ON COLUMN tenure.primary_entry.utype IS 'the service type';
COMMENT ON COLUMN tenure.primary_entry.instance_id IS 'the primary';
COMMENT ON COLUMN tenure.primary_entry.term IS 'the term (fencing epoch). It starts at 1 and grows by one each time the entry changes hands';
COMMENT ON COLUMN tenure.primary_entry.renewed_at IS 'the primary''s last heartbeat, by the server clock';
COMMENT ON COLUMN tenure.primary_entry.valid_until IS '`renewed_at + T`: no other instance can take over before this time';

-- type tenure.task_enqueued
COMMENT ON COLUMN tenure.task_enqueued.id IS 'the task created, or the existing one with that id or key';
COMMENT ON COLUMN tenure.task_enqueued.kind IS 'that task''s kind';
COMMENT ON COLUMN tenure.task_enqueued.created IS 'true if this call created the task';
COMMENT ON COLUMN tenure.task_enqueued.next_action IS 'when that task is due (for an existing task, as it is now)';

-- type tenure.task_lease
COMMENT ON COLUMN tenure.task_lease.id IS 'the task';
COMMENT ON COLUMN tenure.task_lease.kind IS 'its kind';
COMMENT ON COLUMN tenure.task_lease.state IS 'its state, as the previous holder left it';
COMMENT ON COLUMN tenure.task_lease.data IS 'its data';
COMMENT ON COLUMN tenure.task_lease.epoch IS 'the epoch of this lease. Pass it to every holder call';
COMMENT ON COLUMN tenure.task_lease.attempts IS 'failed attempts so far, including a lease that ran out just before this one';
COMMENT ON COLUMN tenure.task_lease.lease_until IS 'the end of the lease (`next_action`), unless extended';

-- view tenure.task_status
COMMENT ON COLUMN tenure.task_status.kind IS 'the kind';
COMMENT ON COLUMN tenure.task_status.state IS 'the state';
COMMENT ON COLUMN tenure.task_status.status IS '`pending`, `done` or `dead`';
COMMENT ON COLUMN tenure.task_status.tasks IS 'how many tasks';
COMMENT ON COLUMN tenure.task_status.leased IS 'how many are leased, as in `tenure.tasks`';
COMMENT ON COLUMN tenure.task_status.due IS 'how many are due, as in `tenure.tasks`';
COMMENT ON COLUMN tenure.task_status.oldest_due_age IS '`now()` minus the oldest `next_action` among the due ones. NULL when none is due';
COMMENT ON COLUMN tenure.task_status.max_attempts_used IS 'the highest `attempts` among them';

-- view tenure.tasks
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

COMMIT;
