-- Back to the v0.2.0 text of the released functions.
BEGIN;

SET LOCAL ROLE tenure_owner;

-- Functions that came after v0.2.0 with the task controls (task_enqueue has more arguments).
DROP FUNCTION tenure.task_enqueue(text, jsonb, text, interval, uuid, text, integer, integer, text, uuid[]);
DROP FUNCTION tenure._task_enqueue(text, jsonb, text, interval, uuid, text, integer, integer, text, uuid[], timestamptz);
DROP FUNCTION tenure._task_insert(text, tenure._task_input[], timestamptz);
DROP FUNCTION tenure._task_pick(text[], text[], integer, timestamptz, boolean);
DROP FUNCTION tenure._task_lease(uuid, interval, integer, text[], timestamptz, boolean);
DROP FUNCTION tenure._task_front(text[], timestamptz);
DROP FUNCTION tenure._task_after_finished(uuid[], timestamptz, uuid[]);
DROP FUNCTION tenure._task_finished(uuid[], text[], timestamptz);
DROP FUNCTION tenure.task_cancel(uuid);
DROP FUNCTION tenure._task_cancel(uuid, timestamptz);
DROP FUNCTION tenure.task_set_priority(uuid, integer);
DROP FUNCTION tenure._task_set_priority(uuid, integer, timestamptz);
DROP FUNCTION tenure.task_kind_set(text, boolean, integer, integer, integer, interval);
DROP FUNCTION tenure._task_kind_set(text, boolean, integer, integer, integer, interval, timestamptz);
DROP FUNCTION tenure._check_limit(text, integer, integer);
DROP FUNCTION tenure._batch_resolve_one(text, uuid, uuid, bigint, text, text, timestamptz, integer);
-- Came with claims following their instance row (claims_follow_instance).
DROP FUNCTION tenure._claim_detach(text, uuid[], boolean);
ALTER TYPE tenure._task_input DROP ATTRIBUTE priority, DROP ATTRIBUTE limit_key, DROP ATTRIBUTE after;

\ir ../procedures/errors@v0.2.0.sql
\ir ../procedures/heartbeat@v0.2.0.sql
\ir ../procedures/tasks@v0.2.0.sql
\ir ../procedures/claims@v0.2.0.sql
\ir ../procedures/batches@v0.2.0.sql
\ir ../procedures/replicas@v0.2.0.sql
\ir ../procedures/schedules@v0.2.0.sql

-- Functions that came after v0.2.0.
DROP FUNCTION tenure._check_data(text, text, jsonb);
DROP FUNCTION tenure._refuse_data(text, text, integer);
DROP FUNCTION tenure._data_too_large(integer);
DROP FUNCTION tenure._max_task_data();
DROP FUNCTION tenure._check_count(text, text, text, bigint, integer);
DROP FUNCTION tenure._kept_text(text);
DROP FUNCTION tenure._excerpt(text, integer);

COMMIT;
