-- Settings the schema owner may change: one row per setting, read by tenure's functions.
-- A table, not a custom GUC: anyone may SET a custom GUC for their own session, and a
-- limit that protects the database from its clients must be out of their reach
-- (tenure_worker has no privilege on this table).
BEGIN;

SET LOCAL ROLE tenure_owner;

CREATE TABLE tenure.setting (
    name  text   PRIMARY KEY CHECK (name IN ('max_task_data')),
    value bigint NOT NULL,
    -- Below 64 kB the functions do not look the limit up (it costs nothing on small data).
    CONSTRAINT setting_max_task_data_range CHECK (name <> 'max_task_data' OR value BETWEEN 65536 AND 268435455)
);
COMMENT ON TABLE tenure.setting IS
    'Settings of tenure that only the schema owner may change. max_task_data: the largest data of a task, in bytes of its jsonb value (pg_column_size), from 64 kB to 256 MB, default 1 MB (1048576); task_enqueue, task_enqueue_many, task_update, task_release, task_complete, task_cycle and schedule_set refuse larger data with TN001.';

INSERT INTO tenure.setting (name, value) VALUES ('max_task_data', 1048576);

COMMIT;
