BEGIN;

SET LOCAL ROLE tenure_owner;

-- Keys are registered explicitly in a keyspace; a key is claimed by one instance at
-- a time until expires_at, under an epoch that grows each time it changes hands.
CREATE TABLE tenure.claim_key (
    keyspace        text        NOT NULL CHECK (btrim(keyspace) <> ''),
    key             text        NOT NULL CHECK (btrim(key) <> ''),
    claimant        uuid,
    epoch           bigint      NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    expires_at      timestamptz,
    claimed_at      timestamptz,
    unclaimed_since timestamptz,
    registered_at   timestamptz NOT NULL,
    PRIMARY KEY (keyspace, key),
    CHECK ((claimant IS NULL) = (expires_at IS NULL)),
    CHECK ((claimant IS NULL) = (claimed_at IS NULL)),
    CHECK ((claimant IS NULL) = (unclaimed_since IS NOT NULL))
);
COMMENT ON TABLE tenure.claim_key IS
    'Registered keys. claimant holds the key while expires_at is not past; epoch grows every time the key changes hands. unclaimed_since is set while nobody holds it (registration or release).';
CREATE INDEX claim_key_claimant ON tenure.claim_key (keyspace, claimant) WHERE claimant IS NOT NULL;

-- Who is alive in a keyspace: each renewal refreshes the caller's row. The fair
-- share of a keyspace is its keys divided by its live instances.
CREATE TABLE tenure.claim_instance (
    keyspace    text        NOT NULL,
    instance_id uuid        NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (keyspace, instance_id)
);
COMMENT ON TABLE tenure.claim_instance IS
    'Instances that claim keys, per keyspace: live while expires_at is not past (each renewal or take pushes it to now + expiry).';

-- Every claim ever granted, by the server's clock: who, in which epoch, from when,
-- and since when the key had been without a claimant.
CREATE TABLE tenure.claim_log (
    keyspace        text        NOT NULL,
    key             text        NOT NULL,
    epoch           bigint      NOT NULL,
    claimant        uuid        NOT NULL,
    claimed_at      timestamptz NOT NULL,
    unclaimed_since timestamptz NOT NULL,
    PRIMARY KEY (keyspace, key, epoch),
    FOREIGN KEY (keyspace, key) REFERENCES tenure.claim_key (keyspace, key) ON DELETE CASCADE
);
COMMENT ON TABLE tenure.claim_log IS
    'One row per claim granted: keyspace, key, epoch, claimant, when it was claimed (read after the row lock) and since when the key had been unclaimed (release, registration, or the expiry of the previous claim).';

CREATE TYPE tenure.claim_grant AS (
    key        text,
    epoch      bigint,
    expires_at timestamptz,
    change     text
);
COMMENT ON TYPE tenure.claim_grant IS
    'A key of the caller with its epoch and expiry, and what the call did: renewed, released (given up above the fair share: stop working on it), taken, or busy (one row with no key: another instance was taking, this take was skipped).';

CREATE VIEW tenure.claims AS
SELECT k.keyspace, k.key, k.claimant, k.epoch, k.expires_at, k.claimed_at,
       now() - k.claimed_at AS claim_age,
       k.claimant IS NOT NULL AND k.expires_at >= now() AS live,
       CASE WHEN k.claimant IS NULL THEN now() - k.unclaimed_since
            WHEN k.expires_at < now() THEN now() - k.expires_at END AS unclaimed_for
  FROM tenure.claim_key k;
COMMENT ON VIEW tenure.claims IS
    'Every registered key: its claimant, epoch, expiry and the age of the claim; live = held by a claim that has not expired; unclaimed_for = how long it has had no live claimant.';

CREATE VIEW tenure.claim_instances AS
SELECT i.keyspace, i.instance_id, i.renewed_at, i.expires_at, i.expires_at >= now() AS live,
       (SELECT count(*) FROM tenure.claim_key k
         WHERE k.keyspace = i.keyspace AND k.claimant = i.instance_id AND k.expires_at >= now()) AS keys_held,
       (SELECT ceil(count(*)::numeric / greatest(1, (SELECT count(*) FROM tenure.claim_instance l
                                                      WHERE l.keyspace = i.keyspace AND l.expires_at >= now())))
          FROM tenure.claim_key k WHERE k.keyspace = i.keyspace)::bigint AS fair_share
  FROM tenure.claim_instance i;
COMMENT ON VIEW tenure.claim_instances IS
    'Instances per keyspace: when they last renewed, whether they are live, how many keys they hold and the fair share (keys / live instances, rounded up).';

GRANT SELECT ON tenure.claims, tenure.claim_instances TO tenure_worker;

COMMIT;
