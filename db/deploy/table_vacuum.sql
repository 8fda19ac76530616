-- How clean tenure's tables are, for `tenure status` and psql: rows, dead rows against
-- the count at which autovacuum visits, the last vacuum and the size of each table.
-- Dead rows cost most in tenure.task: every lease leaves an entry at the front of the
-- due indexes that each lookup from there reads until a VACUUM removes it
-- (docs/operations.md, Vacuum).
BEGIN;

SET LOCAL ROLE tenure_owner;

CREATE VIEW tenure.table_vacuum AS
SELECT s.relname::text AS table_name,
       s.n_live_tup AS live_rows,
       s.n_dead_tup AS dead_rows,
       -- autovacuum's own rule: threshold + scale factor x the rows it last counted, each
       -- from the table's storage options when set there, else from the server's settings
       CASE WHEN current_setting('autovacuum')::boolean
                 AND coalesce(o.enabled, 'on')::boolean
            THEN (coalesce(o.threshold, current_setting('autovacuum_vacuum_threshold'))::float8
                  + coalesce(o.scale_factor, current_setting('autovacuum_vacuum_scale_factor'))::float8
                    * greatest(c.reltuples, 0))::bigint
       END AS autovacuum_at,
       greatest(s.last_vacuum, s.last_autovacuum) AS last_vacuum,
       s.vacuum_count + s.autovacuum_count AS vacuums,
       greatest(s.last_analyze, s.last_autoanalyze) AS last_analyze,
       pg_total_relation_size(s.relid) AS total_bytes
  FROM pg_catalog.pg_stat_user_tables s
  JOIN pg_catalog.pg_class c ON c.oid = s.relid
 CROSS JOIN LATERAL (
       SELECT max(split_part(option, '=', 2)) FILTER (WHERE split_part(option, '=', 1) = 'autovacuum_enabled') AS enabled,
              max(split_part(option, '=', 2)) FILTER (WHERE split_part(option, '=', 1) = 'autovacuum_vacuum_threshold')
                  AS threshold,
              max(split_part(option, '=', 2)) FILTER (WHERE split_part(option, '=', 1) = 'autovacuum_vacuum_scale_factor')
                  AS scale_factor
         FROM unnest(c.reloptions) option) o
 WHERE s.schemaname = 'tenure';
COMMENT ON VIEW tenure.table_vacuum IS
    'One row per table of tenure: its rows and dead rows (the server''s statistics, a second or so behind), the dead rows at which autovacuum visits it, when it was last vacuumed and analyzed, and its size with indexes.';
COMMENT ON COLUMN tenure.table_vacuum.table_name IS 'the table, in schema tenure';
COMMENT ON COLUMN tenure.table_vacuum.live_rows IS 'its live rows, as last counted';
COMMENT ON COLUMN tenure.table_vacuum.dead_rows IS 'its dead row versions not yet vacuumed away';
COMMENT ON COLUMN tenure.table_vacuum.autovacuum_at IS 'autovacuum visits once dead_rows pass this; NULL when autovacuum is off for it';
COMMENT ON COLUMN tenure.table_vacuum.last_vacuum IS 'the end of its last VACUUM, by autovacuum or by hand; NULL: never since the statistics were reset';
COMMENT ON COLUMN tenure.table_vacuum.vacuums IS 'VACUUMs since the statistics were reset';
COMMENT ON COLUMN tenure.table_vacuum.last_analyze IS 'the end of its last ANALYZE, by autovacuum or by hand';
COMMENT ON COLUMN tenure.table_vacuum.total_bytes IS 'its size on disk with its indexes and TOAST';

GRANT SELECT ON tenure.table_vacuum TO tenure_worker;

COMMIT;
