BEGIN;

SET LOCAL ROLE tenure_owner;

ALTER TABLE tenure.claim_key RESET (fillfactor);
DROP INDEX tenure.claim_key_free;
DROP TRIGGER claim_key_truncated ON tenure.claim_key;
DROP TRIGGER claim_key_deleted ON tenure.claim_key;
DROP TRIGGER claim_key_inserted ON tenure.claim_key;
ALTER TABLE tenure.claim_instance DROP COLUMN held_count, DROP COLUMN held_at, DROP COLUMN held_until;
DROP FUNCTION tenure._claim_keys_truncated();
DROP FUNCTION tenure._claim_keys_deleted();
DROP FUNCTION tenure._claim_keys_inserted();
DROP TABLE tenure.claim_keyspace;

COMMIT;
