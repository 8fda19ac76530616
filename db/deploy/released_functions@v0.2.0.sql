-- The current text of the functions released in v0.1.0 (argument checks, heartbeat,
-- tasks, claims), as released in v0.2.0. Released changes are frozen: their deploy scripts include the
-- v0.1.0 text (db/procedures/*@v0.1.0.sql), and this change brought the fixes up to v0.2.0.
BEGIN;

SET LOCAL ROLE tenure_owner;

\ir ../procedures/errors@v0.2.0.sql
\ir ../procedures/heartbeat@v0.2.0.sql
\ir ../procedures/tasks@v0.2.0.sql
\ir ../procedures/claims@v0.2.0.sql

COMMIT;
