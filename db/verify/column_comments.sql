-- The public types and views carry their column comments (columns added by later changes may have none yet).
DO $$
DECLARE
    v_missing text;
BEGIN
    SELECT string_agg(r.relname, ', ' ORDER BY r.relname) INTO v_missing
      FROM unnest(ARRAY['batch_enqueued', 'batch_grant', 'batch_keys', 'claim_grant', 'claim_instances', 'claims',
                        'heartbeat_status', 'primary_entry', 'task_enqueued', 'task_lease', 'task_status',
                        'tasks']) AS r(relname)
     WHERE NOT EXISTS (
         SELECT FROM pg_attribute a
          WHERE a.attrelid = format('tenure.%I', r.relname)::regclass AND a.attnum > 0
            AND col_description(a.attrelid, a.attnum) IS NOT NULL);
    IF v_missing IS NOT NULL THEN
        RAISE 'tenure: no column comments on %', v_missing;
    END IF;
END
$$;
