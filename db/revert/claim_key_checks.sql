BEGIN;

SET LOCAL ROLE tenure_owner;

ALTER TABLE tenure.claim_key
    DROP CONSTRAINT claim_key_keyspace_check,
    DROP CONSTRAINT claim_key_key_check,
    ADD CONSTRAINT claim_key_keyspace_check CHECK (btrim(keyspace) <> ''),
    ADD CONSTRAINT claim_key_key_check CHECK (btrim(key) <> '');

COMMIT;
