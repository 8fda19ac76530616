-- What lets claim_renew and claim_take cost what the caller holds, not what the
-- keyspace holds (issue 14):
-- - claim_keyspace keeps the number of registered keys per keyspace (statement
--   triggers on claim_key), so the fair share needs no count over every key;
-- - claim_instance caches, per instance, how many live claims it holds (held_count
--   as of held_at) and a lower bound of the expiry of every key it claims
--   (held_until); claim_renew and claim_take keep it, every other write to a claim
--   clears it, and a cleared or outdated cache is recounted from the keys;
-- - claim_key_free indexes the keys without a claimant, so that a take finds them
--   without a scan; expired claims are looked for only among the keys of claimants
--   whose cache does not vouch for them;
-- - claim_key pages are filled to 30%, so that a renewal (which writes no indexed
--   column) finds room on its page for the new row version, a HOT update, even while
--   the versions of the last few renewals still wait to be pruned (at 50%, 8
--   instances renewing 1,250 keys each made 92% of updates HOT; at 30%, 99-100%).
--   Existing rows move to the new fill at the next VACUUM FULL or CLUSTER; new pages
--   use it at once.
BEGIN;

SET LOCAL ROLE tenure_owner;

CREATE TABLE tenure.claim_keyspace (
    keyspace text   PRIMARY KEY,
    keys     bigint NOT NULL CHECK (keys >= 0)
);
COMMENT ON TABLE tenure.claim_keyspace IS
    'Registered keys per claims keyspace, kept by triggers on claim_key: the numerator of the fair share.';

CREATE FUNCTION tenure._claim_keys_inserted() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO tenure.claim_keyspace AS s (keyspace, keys)
    SELECT n.keyspace, count(*) FROM new_keys n GROUP BY n.keyspace ORDER BY n.keyspace
    ON CONFLICT (keyspace) DO UPDATE SET keys = s.keys + excluded.keys;
    RETURN NULL;
END
$$;

CREATE FUNCTION tenure._claim_keys_deleted() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE tenure.claim_keyspace AS s SET keys = s.keys - o.keys
      FROM (SELECT keyspace, count(*) AS keys FROM old_keys GROUP BY keyspace) o
     WHERE s.keyspace = o.keyspace;
    -- The live claims of the deleted keys were counted in their holders' caches.
    -- claim_retire locked those rows first; SKIP LOCKED keeps any other delete from
    -- waiting for an instance in its renewal (which rewrites its cache from the keys
    -- it still holds) and from deadlocking with it.
    UPDATE tenure.claim_instance AS i SET held_until = NULL
     WHERE (i.keyspace, i.instance_id) IN (
            SELECT l.keyspace, l.instance_id FROM tenure.claim_instance l
             WHERE (l.keyspace, l.instance_id) IN (SELECT o.keyspace, o.claimant FROM old_keys o)
               FOR UPDATE SKIP LOCKED);
    RETURN NULL;
END
$$;

CREATE FUNCTION tenure._claim_keys_truncated() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM tenure.claim_keyspace;
    UPDATE tenure.claim_instance SET held_until = NULL WHERE held_until IS NOT NULL;
    RETURN NULL;
END
$$;

ALTER TABLE tenure.claim_instance
    ADD COLUMN held_count integer CHECK (held_count >= 0),
    ADD COLUMN held_at    timestamptz,
    ADD COLUMN held_until timestamptz;
COMMENT ON COLUMN tenure.claim_instance.held_count IS
    'Cache kept by claim_renew and claim_take: the live claims the instance held at held_at. Trusted only while held_at <= now <= held_until.';
COMMENT ON COLUMN tenure.claim_instance.held_at IS
    'When held_count was true.';
COMMENT ON COLUMN tenure.claim_instance.held_until IS
    'No key claimed by the instance (live or expired) expires before this; NULL when unknown (a write other than the instance''s own renew or take touched its claims).';

CREATE TRIGGER claim_key_inserted AFTER INSERT ON tenure.claim_key
    REFERENCING NEW TABLE AS new_keys FOR EACH STATEMENT EXECUTE FUNCTION tenure._claim_keys_inserted();
CREATE TRIGGER claim_key_deleted AFTER DELETE ON tenure.claim_key
    REFERENCING OLD TABLE AS old_keys FOR EACH STATEMENT EXECUTE FUNCTION tenure._claim_keys_deleted();
CREATE TRIGGER claim_key_truncated AFTER TRUNCATE ON tenure.claim_key
    FOR EACH STATEMENT EXECUTE FUNCTION tenure._claim_keys_truncated();

INSERT INTO tenure.claim_keyspace (keyspace, keys)
SELECT keyspace, count(*) FROM tenure.claim_key GROUP BY keyspace;

CREATE INDEX claim_key_free ON tenure.claim_key (keyspace, unclaimed_since, key) WHERE claimant IS NULL;

ALTER TABLE tenure.claim_key SET (fillfactor = 30);

COMMIT;
