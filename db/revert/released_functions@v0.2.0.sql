-- Back to the v0.1.0 text of the released functions.
BEGIN;

SET LOCAL ROLE tenure_owner;

\ir ../procedures/errors@v0.1.0.sql
\ir ../procedures/heartbeat@v0.1.0.sql
\ir ../procedures/tasks@v0.1.0.sql
\ir ../procedures/claims@v0.1.0.sql

-- Functions that came after v0.1.0.
DROP FUNCTION tenure.task_cycle(uuid, interval, integer, text[], jsonb, interval);
DROP FUNCTION tenure._task_cycle(uuid, interval, integer, text[], jsonb, interval, timestamptz);
DROP FUNCTION tenure._task_announce(text[], timestamptz);
DROP FUNCTION tenure._task_wait(uuid, text[], timestamptz);
DROP FUNCTION tenure._task_outcome_problem(jsonb);
DROP FUNCTION tenure._task_outcome_keys(text);
DROP FUNCTION tenure._seconds_value(jsonb, boolean);
DROP FUNCTION tenure._task_take(uuid, interval, integer, text[], timestamptz);
DROP FUNCTION tenure._task_check_take(text, uuid, interval, integer, integer, text[]);
DROP FUNCTION tenure._task_backoff(integer);
DROP FUNCTION tenure._task_lost_detail(tenure.task, uuid, bigint, timestamptz);
DROP FUNCTION tenure.claim_cycle(text, uuid, interval, integer);
DROP FUNCTION tenure._claim_cycle(text, uuid, interval, integer, timestamptz);
DROP FUNCTION tenure._claim_held(text, uuid, timestamptz);
DROP FUNCTION tenure._claim_share(text, uuid, timestamptz);
DROP FUNCTION tenure._follow_server(timestamptz);
DROP FUNCTION tenure._on_primary();
DROP FUNCTION tenure._blank(text);
DROP FUNCTION tenure.task_prune(interval, integer);
DROP FUNCTION tenure._task_prune(interval, integer, timestamptz);
DROP FUNCTION tenure.heartbeat_prune(interval, integer);
DROP FUNCTION tenure._heartbeat_prune(interval, integer, timestamptz);
DROP FUNCTION tenure.claim_prune(interval, integer);
DROP FUNCTION tenure._claim_prune(interval, integer, timestamptz);
DROP FUNCTION tenure._check_prune(text, interval, integer);

COMMIT;
