-- The checks that a key and its keyspace are not blank, rewritten to cost less on every
-- row a renewal updates (PostgreSQL evaluates every CHECK of a row on each UPDATE, even
-- of columns they do not read; btrim() builds a new string for each). They accept and
-- refuse exactly what btrim(x) <> '' did: a non-empty value whose first character is no
-- space keeps that character after btrim, so only values starting with a space reach
-- btrim. Same names, so a violation reports the same constraint.
BEGIN;

SET LOCAL ROLE tenure_owner;

ALTER TABLE tenure.claim_key
    DROP CONSTRAINT claim_key_keyspace_check,
    DROP CONSTRAINT claim_key_key_check,
    ADD CONSTRAINT claim_key_keyspace_check CHECK (keyspace NOT LIKE ' %' AND keyspace <> '' OR btrim(keyspace) <> ''),
    ADD CONSTRAINT claim_key_key_check CHECK (key NOT LIKE ' %' AND key <> '' OR btrim(key) <> '');

COMMIT;
