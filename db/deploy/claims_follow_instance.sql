-- A claim follows its claimant's own row in claim_instance while it is attached: its
-- expiry is the instance's, so a renewal writes the instance row alone and reads its
-- keys (it wrote every key it held: at 1,000 keys that UPDATE alone ran at 0.6 of a
-- plain one). A claim is detached, with its own expires_at, when the instance row
-- lapsed (its renewal or a take writes the lapsed expiry into its keys), or is deleted
-- (the trigger below), or came from before this change. So at every moment:
-- a claim's expiry is the instance row's expires_at when attached, else its own.
BEGIN;

SET LOCAL ROLE tenure_owner;

-- Every lock the change needs, first and in the order the fleet's calls take them (the
-- caller's instance row before its keys): taken statement by statement, a running
-- claimer's call holding one table and asking for the other could deadlock with it.
LOCK TABLE tenure.claim_instance, tenure.claim_key IN ACCESS EXCLUSIVE MODE;

ALTER TABLE tenure.claim_key
    ADD COLUMN attached boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT claim_key_attached_check CHECK (NOT attached OR claimant IS NOT NULL);
COMMENT ON COLUMN tenure.claim_key.attached IS
    'The claim expires with its claimant''s row in tenure.claim_instance (its expires_at), not at its own expires_at, which is then the expiry it had when it was taken.';

-- Claims that expired on their own or with a lapsed instance, not yet taken over: where a
-- take looks besides the free keys, and where a renewal finds claims to attach again.
CREATE INDEX claim_key_detached ON tenure.claim_key (keyspace, claimant)
 WHERE claimant IS NOT NULL AND NOT attached;

-- An instance row deleted (claim_release with all keys, the clean-up of instances gone
-- for long, an operator) leaves its attached claims with the expiry it had.
CREATE FUNCTION tenure._claim_instances_deleted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE tenure.claim_key AS k SET attached = false, expires_at = o.expires_at
      FROM old_instances o
     WHERE k.keyspace = o.keyspace AND k.claimant = o.instance_id AND k.attached;
    RETURN NULL;
END
$$;

CREATE TRIGGER claim_instance_deleted AFTER DELETE ON tenure.claim_instance
    REFERENCING OLD TABLE AS old_instances FOR EACH STATEMENT EXECUTE FUNCTION tenure._claim_instances_deleted();

-- TRUNCATE of claim_instance keeps no old rows to read the expiries from: the attached
-- claims end then (an operator's reset, not a path of tenure's functions).
CREATE FUNCTION tenure._claim_instances_truncated() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE tenure.claim_key SET attached = false, expires_at = now() WHERE attached;
    RETURN NULL;
END
$$;

CREATE TRIGGER claim_instance_truncated AFTER TRUNCATE ON tenure.claim_instance
    FOR EACH STATEMENT EXECUTE FUNCTION tenure._claim_instances_truncated();

CREATE OR REPLACE VIEW tenure.claims AS
SELECT k.keyspace, k.key, k.claimant, k.epoch, e.expires_at, k.claimed_at,
       now() - k.claimed_at AS claim_age,
       k.claimant IS NOT NULL AND e.expires_at >= now() AS live,
       CASE WHEN k.claimant IS NULL THEN now() - k.unclaimed_since
            WHEN e.expires_at < now() THEN now() - e.expires_at END AS unclaimed_for
  FROM tenure.claim_key k
  CROSS JOIN LATERAL (SELECT CASE WHEN k.attached
                                  THEN (SELECT i.expires_at FROM tenure.claim_instance i
                                         WHERE i.keyspace = k.keyspace AND i.instance_id = k.claimant)
                                  ELSE k.expires_at END AS expires_at) e;

CREATE OR REPLACE VIEW tenure.claim_instances AS
SELECT i.keyspace, i.instance_id, i.renewed_at, i.expires_at, i.expires_at >= now() AS live,
       (SELECT count(*) FROM tenure.claim_key k
         WHERE k.keyspace = i.keyspace AND k.claimant = i.instance_id
           AND CASE WHEN k.attached THEN i.expires_at ELSE k.expires_at END >= now()) AS keys_held,
       (SELECT ceil(count(*)::numeric / greatest(1, (SELECT count(*) FROM tenure.claim_instance l
                                                      WHERE l.keyspace = i.keyspace AND l.expires_at >= now())))
          FROM tenure.claim_key k WHERE k.keyspace = i.keyspace)::bigint AS fair_share
  FROM tenure.claim_instance i;

-- Every claim starts detached, with its own expiry, as before; the caches of held claims
-- are dropped, so that each instance's next renewal goes over its keys and attaches them.
UPDATE tenure.claim_instance SET held_until = NULL WHERE held_until IS NOT NULL;

COMMIT;
