BEGIN;

DROP FUNCTION tenure.claim_fence(text, uuid, text, bigint);
DROP FUNCTION tenure._claim_fence(text, uuid, text, bigint, timestamptz);
DROP FUNCTION tenure.claim_check(text, uuid, text, bigint);
DROP FUNCTION tenure._claim_check(text, uuid, text, bigint, timestamptz);
DROP FUNCTION tenure.claim_release(text, uuid, text[]);
DROP FUNCTION tenure._claim_release(text, uuid, text[], timestamptz);
DROP FUNCTION tenure.claim_take(text, uuid, interval, integer);
DROP FUNCTION tenure._claim_take(text, uuid, interval, integer, timestamptz);
DROP FUNCTION tenure.claim_renew(text, uuid, interval);
DROP FUNCTION tenure._claim_renew(text, uuid, interval, timestamptz);
DROP FUNCTION tenure.claim_retire(text, text[]);
DROP FUNCTION tenure.claim_register(text, text[]);
DROP FUNCTION tenure._claim_register(text, text[], timestamptz);
DROP FUNCTION tenure._check_claimer(text, text, uuid, interval);
DROP FUNCTION tenure._claim_alive(text, uuid, interval, timestamptz);
DROP FUNCTION tenure._check_keys(text, text, text[]);

COMMIT;
