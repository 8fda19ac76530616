-- The current text of every released function: the argument checks and the heartbeat,
-- tasks and claims of v0.1.0, the batches, replicas and schedules of v0.2.0. Released
-- changes are frozen: their deploy scripts include the text of their release
-- (db/procedures/*@v0.1.0.sql, *@v0.2.0.sql), and this change brings every later fix.
-- Reworked after v0.2.0: the v0.2.0 instance covered errors, heartbeat, tasks and claims only.
BEGIN;

SET LOCAL ROLE tenure_owner;

-- task_enqueue gained arguments and its input type fields (the task controls): the
-- v0.2.0 function is replaced in this transaction, so a call never finds none.
DROP FUNCTION IF EXISTS tenure.task_enqueue(text, jsonb, text, interval, uuid, text, integer);
DROP FUNCTION IF EXISTS tenure._task_enqueue(text, jsonb, text, interval, uuid, text, integer, timestamptz);
-- _batch_resolve_one takes the attempt a resolution is about.
DROP FUNCTION IF EXISTS tenure._batch_resolve_one(text, uuid, uuid, bigint, text, text, timestamptz);
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'tenure._task_input'::regclass AND attname = 'after') THEN
        ALTER TYPE tenure._task_input ADD ATTRIBUTE priority integer, ADD ATTRIBUTE limit_key text,
                                      ADD ATTRIBUTE after uuid[];
    END IF;
END
$$;

\ir ../procedures/errors.sql
\ir ../procedures/heartbeat.sql
\ir ../procedures/tasks.sql
\ir ../procedures/claims.sql
\ir ../procedures/batches.sql
\ir ../procedures/replicas.sql
\ir ../procedures/schedules.sql

COMMIT;
