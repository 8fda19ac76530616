-- The current text of the functions released in v0.1.0 (argument checks, heartbeat,
-- tasks, claims). Released changes are frozen: their deploy scripts include the
-- v0.1.0 text (db/procedures/*@v0.1.0.sql), and this change brings every later fix.
BEGIN;

SET LOCAL ROLE tenure_owner;

\ir ../procedures/errors.sql
\ir ../procedures/heartbeat.sql
\ir ../procedures/tasks.sql
\ir ../procedures/claims.sql

COMMIT;
