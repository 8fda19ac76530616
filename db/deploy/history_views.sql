-- Read-only views of the grant histories (heartbeat terms, task leases, claims, replica
-- terms), so that tenure_worker (and tenure dashboard, connected as such a role) can
-- draw them without any grant on the tables themselves.
BEGIN;

SET LOCAL ROLE tenure_owner;

CREATE VIEW tenure.heartbeat_terms AS
SELECT t.utype, t.term, t.instance_id, t.started_at, t.ended_at, t.end_reason
  FROM tenure.heartbeat_term t;
COMMENT ON VIEW tenure.heartbeat_terms IS
    'History of primaries, one row per (utype, term): the instance, when its term started and ended (server clock) and why it ended; ended_at is NULL for the current term. Kept as long as heartbeat_prune allows.';
COMMENT ON COLUMN tenure.heartbeat_terms.utype IS 'the service type';
COMMENT ON COLUMN tenure.heartbeat_terms.term IS 'the term (fencing epoch of primacy)';
COMMENT ON COLUMN tenure.heartbeat_terms.instance_id IS 'the primary during that term';
COMMENT ON COLUMN tenure.heartbeat_terms.started_at IS 'when the term began';
COMMENT ON COLUMN tenure.heartbeat_terms.ended_at IS 'when it ended (last heartbeat + timeout, or the resignation); NULL while current';
COMMENT ON COLUMN tenure.heartbeat_terms.end_reason IS 'expired or resigned; NULL while current';

CREATE VIEW tenure.task_leases AS
SELECT l.task_id, t.kind, l.epoch, l.owner, l.leased_at, l.how
  FROM tenure.task_lease_log l
  JOIN tenure.task t ON t.id = l.task_id;
COMMENT ON VIEW tenure.task_leases IS
    'Every lease granted on a task that still exists, one row per (task, epoch): the owner, when the lease began (server clock) and how (acquired, or ejected by an operator).';
COMMENT ON COLUMN tenure.task_leases.task_id IS 'the task';
COMMENT ON COLUMN tenure.task_leases.kind IS 'its kind';
COMMENT ON COLUMN tenure.task_leases.epoch IS 'the epoch of this lease';
COMMENT ON COLUMN tenure.task_leases.owner IS 'the instance the lease went to';
COMMENT ON COLUMN tenure.task_leases.leased_at IS 'when the lease began';
COMMENT ON COLUMN tenure.task_leases.how IS 'acquired (by a worker) or ejected (taken over by an operator)';

CREATE VIEW tenure.claim_grants AS
SELECT l.keyspace, l.key, l.epoch, l.claimant, l.claimed_at, l.unclaimed_since
  FROM tenure.claim_log l;
COMMENT ON VIEW tenure.claim_grants IS
    'Every claim granted, one row per (keyspace, key, epoch): the claimant, when it claimed and since when the key had been without a claimant: each row after the first of a key is a handover.';
COMMENT ON COLUMN tenure.claim_grants.keyspace IS 'the keyspace';
COMMENT ON COLUMN tenure.claim_grants.key IS 'the key';
COMMENT ON COLUMN tenure.claim_grants.epoch IS 'the epoch of this claim';
COMMENT ON COLUMN tenure.claim_grants.claimant IS 'the instance that claimed it';
COMMENT ON COLUMN tenure.claim_grants.claimed_at IS 'when it was claimed';
COMMENT ON COLUMN tenure.claim_grants.unclaimed_since IS 'since when the key had had no live claimant';

CREATE VIEW tenure.replica_terms AS
SELECT r.scope, r.counter, t.lock_id, t.epoch, t.replica, t.pid, t.acquired_at
  FROM tenure.replica_term t
  JOIN tenure.replica_lock r ON r.lock_id = t.lock_id;
COMMENT ON VIEW tenure.replica_terms IS
    'Every acquisition of a replica lock, one row per (lock, epoch): the replica, the backend pid of its lock session and when it acquired (server clock); a term ends when the next one of its lock starts, or earlier.';
COMMENT ON COLUMN tenure.replica_terms.scope IS 'the scope of the lock';
COMMENT ON COLUMN tenure.replica_terms.counter IS 'the counter of the lock';
COMMENT ON COLUMN tenure.replica_terms.lock_id IS 'the lock id';
COMMENT ON COLUMN tenure.replica_terms.epoch IS 'the epoch of this acquisition';
COMMENT ON COLUMN tenure.replica_terms.replica IS 'the replica that acquired';
COMMENT ON COLUMN tenure.replica_terms.pid IS 'the backend pid of its lock session';
COMMENT ON COLUMN tenure.replica_terms.acquired_at IS 'when it acquired';

GRANT SELECT ON tenure.heartbeat_terms, tenure.task_leases, tenure.claim_grants, tenure.replica_terms
   TO tenure_worker;

COMMIT;
