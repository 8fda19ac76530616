-- Autovacuum of tenure.task with its indexes, and after 1% of its rows changed, not 20%.
-- A lease takes its task out of the due indexes (task_due, task_kind_due, task_key_due);
-- the entry it leaves there is dead, but still read by every later lookup of due tasks,
-- which starts at the front of the index where those entries lie, until a VACUUM
-- removes it. PostgreSQL's defaults keep them long where tasks are retained: a VACUUM
-- skips the indexes when fewer than 2% of the table's pages have dead rows (3,000,000
-- retained tasks and 20,000 leased since: 102 index pages read by each lookup after
-- such a VACUUM, 2 with the indexes vacuumed), and autovacuum waits for dead rows of
-- 20% of the table (600,000 there). Each VACUUM then reads every index of the table
-- whole: after 1% of its rows changed, about a page of index per task processed.
BEGIN;

SET LOCAL ROLE tenure_owner;

ALTER TABLE tenure.task SET (vacuum_index_cleanup = on, autovacuum_vacuum_scale_factor = 0.01);

COMMIT;
