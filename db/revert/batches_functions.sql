BEGIN;

DROP FUNCTION tenure.batch_pending(text, uuid);
DROP FUNCTION tenure._batch_pending(text, uuid, timestamptz);
DROP FUNCTION tenure.batch_check(text, uuid, text[], bigint[]);
DROP FUNCTION tenure._batch_check(text, uuid, text[], bigint[], timestamptz);
DROP FUNCTION tenure.batch_retry(text, uuid);
DROP FUNCTION tenure.batch_skip(text, uuid);
DROP FUNCTION tenure._batch_repair(text, text, uuid, text);
DROP FUNCTION tenure.batch_resolve_many(text, uuid, jsonb);
DROP FUNCTION tenure._batch_resolve_many(text, uuid, jsonb, timestamptz);
DROP FUNCTION tenure._batch_resolve_set(text, uuid, jsonb, timestamptz);
DROP FUNCTION tenure.batch_resolve(text, uuid, uuid, bigint, text, text);
DROP FUNCTION tenure._batch_resolve(text, uuid, uuid, bigint, text, text, timestamptz);
DROP FUNCTION tenure._batch_resolve_one(text, uuid, uuid, bigint, text, text, timestamptz);
DROP FUNCTION tenure.batch_select(text, uuid, integer, integer);
DROP FUNCTION tenure._batch_select(text, uuid, integer, integer, timestamptz);
DROP FUNCTION tenure.batch_enqueue(text, text, bytea, text[], uuid[], uuid);
DROP FUNCTION tenure.batch_enqueue_many(text, jsonb);
DROP FUNCTION tenure._batch_enqueue_many(text, jsonb, timestamptz, text);
DROP FUNCTION tenure.batch_configure(text, text, boolean, text);
DROP FUNCTION tenure._batch_configure(text, text, boolean, text, timestamptz);
DROP FUNCTION tenure._batch_key(text, text, timestamptz);
DROP FUNCTION tenure._batch_missing(text, text, uuid);
DROP FUNCTION tenure._batch_resolve_lock(text, uuid[], text[]);
DROP FUNCTION tenure._batch_lock_keys(text, text[], text);
DROP FUNCTION tenure._batch_refresh(text, text[], text[], timestamptz);

COMMIT;
