-- Retention: indexes of the released histories that let the prune functions find the
-- oldest ended entries without a scan of the whole history (heartbeat_prune,
-- claim_prune; task_prune uses task_finished). Tasks need no tombstone: their
-- idempotency keys de-duplicate within the retention age (docs/tasks.md#retention).
-- The unreleased tables (batches, replicas) carry theirs in their own changes.
BEGIN;

SET LOCAL ROLE tenure_owner;

-- Ended terms by the time they ended.
CREATE INDEX heartbeat_term_ended ON tenure.heartbeat_term (ended_at) WHERE ended_at IS NOT NULL;

-- Claims by the time they were granted (a claim ends after it began).
CREATE INDEX claim_log_claimed ON tenure.claim_log (claimed_at);

COMMIT;
