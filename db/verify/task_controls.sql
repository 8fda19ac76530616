SELECT priority, limit_key, after_left FROM tenure.task WHERE false;
SELECT task_id, after_id FROM tenure.task_after WHERE false;
SELECT owner, kinds, until, told FROM tenure.task_waiter WHERE false;
SELECT kind, paused, max_running, max_running_per_key, rate, rate_period, running, due, rate_used, changed_at
  FROM tenure.task_kinds WHERE false;
SELECT 1/count(*) FROM pg_constraint WHERE conrelid = 'tenure.task'::regclass AND conname = 'task_valid';
SELECT tenure._uuid_v7();
