-- plpgsql_check over every PL/pgSQL function of schema tenure; any finding fails.
CREATE EXTENSION IF NOT EXISTS plpgsql_check;
\set ON_ERROR_STOP on
CREATE TEMP TABLE findings AS
SELECT p.oid::regprocedure AS function, c.*
  FROM pg_proc p
  JOIN pg_language l ON l.oid = p.prolang AND l.lanname = 'plpgsql'
  -- A trigger function is checked against the table of its trigger and the names it
  -- gives the transition tables.
  LEFT JOIN LATERAL (SELECT t.tgrelid, t.tgoldtable, t.tgnewtable FROM pg_trigger t
                      WHERE t.tgfoid = p.oid ORDER BY t.oid LIMIT 1) t ON true
  CROSS JOIN LATERAL plpgsql_check_function_tb(p.oid, relid => coalesce(t.tgrelid, 0),
                                               oldtable => t.tgoldtable, newtable => t.tgnewtable,
                                               extra_warnings => true,
                                               performance_warnings => true,
                                               security_warnings => true) c
 WHERE p.pronamespace = 'tenure'::regnamespace;
SELECT function, lineno, level, message, detail FROM findings;
DO $$
DECLARE
    v_count int := (SELECT count(*) FROM findings);
    v_checked int := (SELECT count(*) FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
                       WHERE l.lanname = 'plpgsql' AND p.pronamespace = 'tenure'::regnamespace);
BEGIN
    IF v_count > 0 THEN
        RAISE 'plpgsql_check: % finding(s) in schema tenure (listed above)', v_count;
    END IF;
    RAISE NOTICE 'plpgsql_check: % PL/pgSQL functions checked, no finding', v_checked;
END
$$;
