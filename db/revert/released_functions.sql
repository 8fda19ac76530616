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

-- Functions that came after v0.2.0 (none yet): DROP FUNCTION each one here.

COMMIT;
