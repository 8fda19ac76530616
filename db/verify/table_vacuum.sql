DO $$
BEGIN
    PERFORM table_name, live_rows, dead_rows, autovacuum_at, last_vacuum, vacuums, last_analyze, total_bytes
       FROM tenure.table_vacuum WHERE false;
END
$$;
