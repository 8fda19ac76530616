-- Summaries for `tenure status` (and for psql): one row per claims keyspace and per
-- batch queue, beside the per-item views of each area.
BEGIN;

SET LOCAL ROLE tenure_owner;

CREATE VIEW tenure.claim_keyspaces AS
SELECT c.keyspace,
       count(*) AS keys,
       count(*) FILTER (WHERE c.live) AS claimed,
       count(*) FILTER (WHERE NOT c.live) AS unclaimed,
       max(c.unclaimed_for) AS longest_unclaimed,
       (SELECT count(*) FROM tenure.claim_instance i
         WHERE i.keyspace = c.keyspace AND i.expires_at >= now()) AS live_instances
  FROM tenure.claims c
 GROUP BY c.keyspace;
COMMENT ON VIEW tenure.claim_keyspaces IS
    'One row per claims keyspace: its keys, how many have a live claim and how many not, the longest time a key has gone without one, and the live instances.';

CREATE VIEW tenure.batch_queues AS
SELECT k.keyspace,
       count(*) AS keys,
       sum(k.queued)::bigint AS queued,
       sum(k.pending)::bigint AS pending,
       sum(k.unknown)::bigint AS unknown,
       sum(k.invalid)::bigint AS invalid,
       sum(k.committed)::bigint AS committed,
       coalesce(array_agg(k.key ORDER BY k.key) FILTER (WHERE k.halted), '{}') AS halted_keys,
       max(k.oldest_waiting_age) AS oldest_waiting_age
  FROM tenure.batch_keys k
 GROUP BY k.keyspace;
COMMENT ON VIEW tenure.batch_queues IS
    'One row per batch queue: its keys, batches per status, the keys an invalid batch halts, and the age of the oldest waiting batch.';

COMMENT ON COLUMN tenure.claim_keyspaces.keyspace IS 'the keyspace';
COMMENT ON COLUMN tenure.claim_keyspaces.keys IS 'its registered keys';
COMMENT ON COLUMN tenure.claim_keyspaces.claimed IS 'keys with a live claim';
COMMENT ON COLUMN tenure.claim_keyspaces.unclaimed IS 'keys without a live claim';
COMMENT ON COLUMN tenure.claim_keyspaces.longest_unclaimed IS 'the longest time one of its keys has gone without a live claim; NULL when every key is claimed';
COMMENT ON COLUMN tenure.claim_keyspaces.live_instances IS 'instances whose membership has not expired';
COMMENT ON COLUMN tenure.batch_queues.keyspace IS 'the queue';
COMMENT ON COLUMN tenure.batch_queues.keys IS 'its keys with batches';
COMMENT ON COLUMN tenure.batch_queues.queued IS 'batches with status `queued`';
COMMENT ON COLUMN tenure.batch_queues.pending IS 'batches with status `pending`';
COMMENT ON COLUMN tenure.batch_queues.unknown IS 'batches with status `unknown`';
COMMENT ON COLUMN tenure.batch_queues.invalid IS 'batches with status `invalid`';
COMMENT ON COLUMN tenure.batch_queues.committed IS 'batches with status `committed`';
COMMENT ON COLUMN tenure.batch_queues.halted_keys IS 'the keys an invalid batch halts, by name';
COMMENT ON COLUMN tenure.batch_queues.oldest_waiting_age IS 'the age of its oldest `queued` or `unknown` batch; NULL when none waits';

GRANT SELECT ON tenure.claim_keyspaces, tenure.batch_queues TO tenure_worker;

COMMIT;
