-- Back to the v0.1.0 text of the released functions.
BEGIN;

SET LOCAL ROLE tenure_owner;

\ir ../procedures/errors@v0.1.0.sql
\ir ../procedures/heartbeat@v0.1.0.sql
\ir ../procedures/tasks@v0.1.0.sql
\ir ../procedures/claims@v0.1.0.sql

-- Helpers added after v0.1.0.
DROP FUNCTION tenure._blank(text);

COMMIT;
