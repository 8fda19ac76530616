-- Conventions every public function of schema tenure must keep, whatever its area.
BEGIN;
SELECT plan(8);

SELECT has_schema('tenure');
SELECT has_role('tenure_owner');
SELECT has_role('tenure_worker');

SELECT is(
    ARRAY(SELECT p.oid::regprocedure::text FROM pg_proc p
           WHERE p.pronamespace = 'tenure'::regnamespace AND p.proname !~ '^_'
             AND coalesce(obj_description(p.oid, 'pg_proc'), '') = ''
           ORDER BY 1),
    ARRAY[]::text[],
    'every public function has a COMMENT ON FUNCTION');

SELECT is(
    ARRAY(SELECT p.oid::regprocedure::text FROM pg_proc p
           WHERE p.pronamespace = 'tenure'::regnamespace AND p.proname !~ '^_'
             AND NOT (p.prosecdef
                      AND 'search_path=pg_catalog, pg_temp' = ANY (coalesce(p.proconfig, '{}'))
                      AND has_function_privilege('tenure_worker', p.oid, 'EXECUTE'))
           ORDER BY 1),
    ARRAY[]::text[],
    'every public function is SECURITY DEFINER, pins search_path and is executable by tenure_worker');

SELECT is(
    ARRAY(SELECT p.oid::regprocedure::text FROM pg_proc p
           WHERE p.pronamespace = 'tenure'::regnamespace AND p.proname !~ '^_'
             AND p.prolang <> (SELECT l.oid FROM pg_language l WHERE l.lanname = 'plpgsql')
           ORDER BY 1),
    ARRAY[]::text[],
    'every public function is PL/pgSQL (a SQL function with SET is parsed and planned again on every call)');

SELECT is(
    ARRAY(SELECT p.oid::regprocedure::text FROM pg_proc p
           WHERE p.pronamespace = 'tenure'::regnamespace
             AND (has_function_privilege('public', p.oid, 'EXECUTE')
                  OR (p.proname ~ '^_' AND has_function_privilege('tenure_worker', p.oid, 'EXECUTE')))
           ORDER BY 1),
    ARRAY[]::text[],
    'no function is executable by PUBLIC, and internal ones not by tenure_worker');

SELECT is(
    ARRAY(SELECT c.oid::regclass::text FROM pg_class c
           WHERE c.relnamespace = 'tenure'::regnamespace AND c.relkind IN ('r', 'p', 'S')
             AND (has_table_privilege('tenure_worker', c.oid, 'SELECT')
                  OR has_table_privilege('tenure_worker', c.oid, 'INSERT')
                  OR has_table_privilege('tenure_worker', c.oid, 'UPDATE')
                  OR has_table_privilege('tenure_worker', c.oid, 'DELETE'))
           ORDER BY 1),
    ARRAY[]::text[],
    'tenure_worker cannot touch any table directly');

SELECT * FROM finish();
ROLLBACK;
