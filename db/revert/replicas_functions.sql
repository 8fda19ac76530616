BEGIN;

DROP FUNCTION tenure.replica_prune(interval, integer);
DROP FUNCTION tenure._replica_prune(interval, integer, timestamptz);
DROP VIEW tenure.replicas;
DROP FUNCTION tenure.replica_holder(integer, text);
DROP FUNCTION tenure._replica_holders(integer, text);
DROP FUNCTION tenure.replica_release(text, integer, text);
DROP FUNCTION tenure._replica_release(text, integer, text);
DROP FUNCTION tenure.replica_ping(text, bigint, interval, integer, text);
DROP FUNCTION tenure._replica_ping(text, bigint, interval, integer, text, timestamptz);
DROP FUNCTION tenure.replica_guard(bigint, integer, text);
DROP FUNCTION tenure._replica_held(text, bigint, integer, text);
DROP FUNCTION tenure.replica_acquire(text, interval, integer, text);
DROP FUNCTION tenure._replica_acquire(text, interval, integer, text, timestamptz);
DROP FUNCTION tenure.replica_register(integer, text);
DROP FUNCTION tenure._replica_register(text, integer, text, timestamptz);
DROP FUNCTION tenure.replica_lock_id(integer, text);
DROP FUNCTION tenure._check_replica_lock(text, integer, text);
DROP FUNCTION tenure._replica_lock_pid(integer);
DROP FUNCTION tenure._replica_lock_id(text, integer);

COMMIT;
