BEGIN;

DROP VIEW tenure.table_vacuum;

COMMIT;
