-- The current text of every released function: the argument checks and the heartbeat,
-- tasks and claims of v0.1.0, the batches, replicas and schedules of v0.2.0. Released
-- changes are frozen: their deploy scripts include the text of their release
-- (db/procedures/*@v0.1.0.sql, *@v0.2.0.sql), and this change brings every later fix.
-- Reworked after v0.2.0: the v0.2.0 instance covered errors, heartbeat, tasks and claims only.
BEGIN;

SET LOCAL ROLE tenure_owner;

\ir ../procedures/errors.sql
\ir ../procedures/heartbeat.sql
\ir ../procedures/tasks.sql
\ir ../procedures/claims.sql
\ir ../procedures/batches.sql
\ir ../procedures/replicas.sql
\ir ../procedures/schedules.sql

COMMIT;
