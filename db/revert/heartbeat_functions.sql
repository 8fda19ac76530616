BEGIN;

DROP FUNCTION tenure.heartbeat_fence(uuid, text, bigint);
DROP FUNCTION tenure._heartbeat_fence(uuid, text, bigint, timestamptz);
DROP FUNCTION tenure.heartbeat_resign(uuid, text);
DROP FUNCTION tenure._heartbeat_resign(uuid, text, timestamptz);
DROP FUNCTION tenure.check_primary(uuid, text);
DROP FUNCTION tenure._check_primary(uuid, text, timestamptz);
DROP FUNCTION tenure.get_primary(text);
DROP FUNCTION tenure._get_primary(text, timestamptz);
DROP FUNCTION tenure.update_heartbeat(uuid, text, interval, interval);
DROP FUNCTION tenure._update_heartbeat(uuid, text, interval, interval, timestamptz);
DROP FUNCTION tenure._as_primary_entry(tenure.heartbeat);

COMMIT;
