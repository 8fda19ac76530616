DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM tenure.setting WHERE name = 'max_task_data') THEN
        RAISE 'tenure.setting has no max_task_data';
    END IF;
END
$$;
