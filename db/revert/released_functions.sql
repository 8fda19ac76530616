-- Back to the v0.1.0 text of the released functions.
BEGIN;

SET LOCAL ROLE tenure_owner;

\ir ../procedures/errors@v0.1.0.sql
\ir ../procedures/heartbeat@v0.1.0.sql
\ir ../procedures/tasks@v0.1.0.sql
\ir ../procedures/claims@v0.1.0.sql

-- Functions that came after v0.1.0.
DROP FUNCTION tenure._claim_held(text, uuid, timestamptz);
DROP FUNCTION tenure._claim_share(text, uuid, timestamptz);
DROP FUNCTION tenure._follow_server(timestamptz);
DROP FUNCTION tenure._on_primary();
DROP FUNCTION tenure._blank(text);

COMMIT;
