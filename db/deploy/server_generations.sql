-- Which server grants are made on. A failover promotes another server: a new
-- timeline (or, for a restored copy, another system identifier) and another clock.
-- Each change of server starts a generation; grants and their history carry the
-- generation they were made in, so that a grant of an earlier server is never
-- taken as current and history from two clocks is never compared as one.
BEGIN;

SET LOCAL ROLE tenure_owner;

CREATE TABLE tenure.server_generation (
    generation        bigint      PRIMARY KEY CHECK (generation > 0),
    timeline          integer     NOT NULL,
    system_identifier bigint      NOT NULL,
    started_at        timestamptz NOT NULL
);
COMMENT ON TABLE tenure.server_generation IS
    'One row per server that has made tenure''s grants, in order: its timeline and system identifier, and when (by its own clock) tenure first wrote on it. The last row is the current server. A new row starts when a write finds the server changed (failover, restore); grants of earlier generations then have their expiries re-based on the new clock.';

-- The timeline a primary writes WAL on now: the first 8 hex digits of the current WAL
-- file's name (pg_walfile_name uses the insertion timeline, new at once after a
-- promotion, where pg_control_checkpoint() waits for the next checkpoint).
-- SQL without SET, so it is inlined where it is called (internal: only tenure's own
-- functions, which pin search_path, call it).
CREATE FUNCTION tenure._server_timeline() RETURNS integer
LANGUAGE sql VOLATILE
AS $$ SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer $$;

-- The server this change is deployed on is the first generation.
INSERT INTO tenure.server_generation (generation, timeline, system_identifier, started_at)
SELECT 1, tenure._server_timeline(), (SELECT system_identifier FROM pg_control_system()), clock_timestamp();

-- PL/pgSQL, whose plan is kept for the session: as a column default, a SQL function
-- (not inlinable, with a FROM) was parsed and planned again by every INSERT.
CREATE FUNCTION tenure._current_generation() RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$ BEGIN RETURN (SELECT max(generation) FROM tenure.server_generation); END $$;

ALTER TABLE tenure.heartbeat ADD COLUMN generation bigint NOT NULL DEFAULT 1;
ALTER TABLE tenure.heartbeat ALTER COLUMN generation SET DEFAULT tenure._current_generation();
COMMENT ON COLUMN tenure.heartbeat.generation IS
    'Server generation in which the holder was granted its term or last renewed it. A renewal in a later generation starts a new term.';

ALTER TABLE tenure.heartbeat_term ADD COLUMN generation bigint NOT NULL DEFAULT 1;
ALTER TABLE tenure.heartbeat_term ALTER COLUMN generation SET DEFAULT tenure._current_generation();
ALTER TABLE tenure.heartbeat_term DROP CONSTRAINT heartbeat_term_end_reason_check;
ALTER TABLE tenure.heartbeat_term ADD CONSTRAINT heartbeat_term_end_reason_check
    CHECK (end_reason IN ('expired', 'resigned', 'failover'));
COMMENT ON COLUMN tenure.heartbeat_term.generation IS
    'Server generation the term started in: started_at and ended_at are read from that server''s clock.';

ALTER TABLE tenure.task_lease_log ADD COLUMN generation bigint NOT NULL DEFAULT 1;
ALTER TABLE tenure.task_lease_log ALTER COLUMN generation SET DEFAULT tenure._current_generation();
COMMENT ON COLUMN tenure.task_lease_log.generation IS
    'Server generation the lease was granted in: leased_at is read from that server''s clock.';

ALTER TABLE tenure.claim_log ADD COLUMN generation bigint NOT NULL DEFAULT 1;
ALTER TABLE tenure.claim_log ALTER COLUMN generation SET DEFAULT tenure._current_generation();
COMMENT ON COLUMN tenure.claim_log.generation IS
    'Server generation the claim was granted in: claimed_at is read from that server''s clock.';

CREATE VIEW tenure.server_generations AS
SELECT g.generation, g.timeline, g.system_identifier, g.started_at,
       g.generation = max(g.generation) OVER () AS current
  FROM tenure.server_generation g;
COMMENT ON VIEW tenure.server_generations IS
    'The servers tenure''s grants were made on, one row per generation in order: timeline, system identifier, when tenure first wrote on it (by its own clock) and whether it is the current one. A failover shows as a new row.';
GRANT SELECT ON tenure.server_generations TO tenure_worker;

COMMIT;
