BEGIN;

SET LOCAL ROLE tenure_owner;

-- One entry per service type: who is primary, since which term, and when the
-- holder last proved it is alive, all by the server's clock.
CREATE TABLE tenure.heartbeat (
    utype              text        PRIMARY KEY,
    instance_id        uuid,
    term               bigint      NOT NULL CHECK (term > 0),
    renewed_at         timestamptz NOT NULL,
    timeout            interval    NOT NULL CHECK (timeout > interval '0'),
    heartbeat_interval interval    CHECK (heartbeat_interval > interval '0'
                                          AND timeout > 2 * heartbeat_interval)
);
COMMENT ON TABLE tenure.heartbeat IS
    'One entry per service type. instance_id is the primary while renewed_at + timeout is not past; NULL after it resigned. term grows by one every time the entry changes hands.';
COMMENT ON COLUMN tenure.heartbeat.timeout IS
    'T of the holder: the entry is live while (server time - renewed_at) <= timeout, and only then can nobody else take it.';

-- Every term ever granted, so that who led when can be read back and checked.
CREATE TABLE tenure.heartbeat_term (
    utype       text        NOT NULL REFERENCES tenure.heartbeat (utype) ON DELETE CASCADE,
    term        bigint      NOT NULL,
    instance_id uuid        NOT NULL,
    started_at  timestamptz NOT NULL,
    ended_at    timestamptz,
    end_reason  text        CHECK (end_reason IN ('expired', 'resigned')),
    PRIMARY KEY (utype, term),
    CHECK ((ended_at IS NULL) = (end_reason IS NULL)),
    CHECK (ended_at >= started_at)
);
COMMENT ON TABLE tenure.heartbeat_term IS
    'History of primaries: one row per (utype, term) with the server time the term started and ended (last heartbeat + timeout, or the resignation). ended_at is NULL for the current term.';

-- What every election function returns: the primary of a type and its term.
CREATE TYPE tenure.primary_entry AS (
    utype       text,
    instance_id uuid,
    term        bigint,
    renewed_at  timestamptz,
    valid_until timestamptz
);
COMMENT ON TYPE tenure.primary_entry IS
    'The primary of a service type: its instance id, its term (fencing epoch), its last heartbeat and until when it stays primary without another.';

CREATE VIEW tenure.heartbeat_status AS
SELECT h.utype,
       h.instance_id,
       h.term,
       h.renewed_at,
       now() - h.renewed_at AS heartbeat_age,
       h.timeout,
       h.heartbeat_interval,
       h.renewed_at + h.timeout AS valid_until,
       h.instance_id IS NOT NULL AND now() - h.renewed_at <= h.timeout AS live,
       t.started_at AS term_started_at
  FROM tenure.heartbeat h
  LEFT JOIN tenure.heartbeat_term t ON t.utype = h.utype AND t.term = h.term;
COMMENT ON VIEW tenure.heartbeat_status IS
    'Operator view of every service type: the primary (live or not), its term, when it last renewed and how long ago, and when its entry expires.';
GRANT SELECT ON tenure.heartbeat_status TO tenure_worker;

COMMIT;
