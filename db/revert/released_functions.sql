-- Back to the v0.2.0 text of the released functions.
BEGIN;

SET LOCAL ROLE tenure_owner;

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
