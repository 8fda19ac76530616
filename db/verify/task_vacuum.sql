DO $$
BEGIN
    IF NOT (SELECT c.reloptions @> ARRAY['vacuum_index_cleanup=on', 'autovacuum_vacuum_scale_factor=0.01']
              FROM pg_class c WHERE c.oid = 'tenure.task'::regclass) THEN
        RAISE 'tenure.task is not vacuumed with its indexes after 1%% of its rows changed';
    END IF;
END
$$;
