-- Back to claims that carry their own expiry: each attached claim gets its instance's.
BEGIN;

SET LOCAL ROLE tenure_owner;

-- Every lock the change needs, first and in the order the fleet's calls take them (the
-- caller's instance row before its keys): taken statement by statement, a running
-- claimer's call holding one table and asking for the other could deadlock with it.
LOCK TABLE tenure.claim_instance, tenure.claim_key IN ACCESS EXCLUSIVE MODE;

UPDATE tenure.claim_key AS k SET expires_at = i.expires_at
  FROM tenure.claim_instance i
 WHERE k.attached AND i.keyspace = k.keyspace AND i.instance_id = k.claimant;

CREATE OR REPLACE VIEW tenure.claims AS
SELECT k.keyspace, k.key, k.claimant, k.epoch, k.expires_at, k.claimed_at,
       now() - k.claimed_at AS claim_age,
       k.claimant IS NOT NULL AND k.expires_at >= now() AS live,
       CASE WHEN k.claimant IS NULL THEN now() - k.unclaimed_since
            WHEN k.expires_at < now() THEN now() - k.expires_at END AS unclaimed_for
  FROM tenure.claim_key k;

CREATE OR REPLACE VIEW tenure.claim_instances AS
SELECT i.keyspace, i.instance_id, i.renewed_at, i.expires_at, i.expires_at >= now() AS live,
       (SELECT count(*) FROM tenure.claim_key k
         WHERE k.keyspace = i.keyspace AND k.claimant = i.instance_id AND k.expires_at >= now()) AS keys_held,
       (SELECT ceil(count(*)::numeric / greatest(1, (SELECT count(*) FROM tenure.claim_instance l
                                                      WHERE l.keyspace = i.keyspace AND l.expires_at >= now())))
          FROM tenure.claim_key k WHERE k.keyspace = i.keyspace)::bigint AS fair_share
  FROM tenure.claim_instance i;

DROP TRIGGER claim_instance_truncated ON tenure.claim_instance;
DROP TRIGGER claim_instance_deleted ON tenure.claim_instance;
DROP FUNCTION tenure._claim_instances_truncated();
DROP FUNCTION tenure._claim_instances_deleted();
DROP INDEX tenure.claim_key_detached;
ALTER TABLE tenure.claim_key DROP COLUMN attached;
UPDATE tenure.claim_instance SET held_until = NULL WHERE held_until IS NOT NULL;

COMMIT;
