-- claim_cycle: renew and take in one call, by time travel through tenure._claim_cycle, on
-- day T = 2000-03-10 in keyspace 'cyc' (instances a = ...0a, b = ...0b); the stale
-- clean-up in 'cycstale'; bad input; and the blank-key checks of claim_key, which
-- claim_key_checks rewrote, against the rule btrim(x) <> ''.
BEGIN;
SELECT plan(29);

CREATE FUNCTION pg_temp.error_of(p_sql text)
RETURNS text
LANGUAGE plpgsql
AS $$
BEGIN
    EXECUTE p_sql;
    RETURN NULL;
EXCEPTION WHEN OTHERS THEN
    RETURN format('%s: %s', SQLSTATE, SQLERRM);
END
$$;

SELECT has_function('tenure', 'claim_cycle', ARRAY['text', 'uuid', 'interval', 'integer']);
SELECT function_returns('tenure', 'claim_cycle', ARRAY['text', 'uuid', 'interval', 'integer'], 'setof tenure.claim_grant');

SELECT is(tenure._claim_register('cyc', ARRAY['k1', 'k2', 'k3', 'k4'], '2000-03-10 00:00:00+00'), 4, 'four keys');

-- A new instance: the renewal finds nothing, the take takes its share.
SELECT results_eq(
    $$SELECT key, epoch, expires_at, change FROM tenure._claim_cycle('cyc', '00000000-0000-0000-0000-00000000000a', '10 s', NULL,
                                                                     '2000-03-10 00:00:00+00') ORDER BY key$$,
    $$VALUES ('k1', 1::bigint, '2000-03-10 00:00:10+00'::timestamptz, 'taken'), ('k2', 1, '2000-03-10 00:00:10+00', 'taken'),
             ('k3', 1, '2000-03-10 00:00:10+00', 'taken'), ('k4', 1, '2000-03-10 00:00:10+00', 'taken')$$,
    'a first cycle takes the fair share');
SELECT is((SELECT count(*) FROM tenure.claim_log WHERE keyspace = 'cyc'), 4::bigint, 'each take is logged');

-- At its share with a cache that vouches for now: every claim renewed, nothing taken.
SELECT results_eq(
    $$SELECT key, epoch, expires_at, change FROM tenure._claim_cycle('cyc', '00000000-0000-0000-0000-00000000000a', '10 s', NULL,
                                                                     '2000-03-10 00:00:01+00') ORDER BY key$$,
    $$VALUES ('k1', 1::bigint, '2000-03-10 00:00:11+00'::timestamptz, 'renewed'), ('k2', 1, '2000-03-10 00:00:11+00', 'renewed'),
             ('k3', 1, '2000-03-10 00:00:11+00', 'renewed'), ('k4', 1, '2000-03-10 00:00:11+00', 'renewed')$$,
    'a cycle at the fair share renews every claim');
SELECT results_eq(
    $$SELECT count(*), min(expires_at), max(expires_at) FROM tenure.claims WHERE keyspace = 'cyc'
       AND claimant = '00000000-0000-0000-0000-00000000000a'$$,
    $$VALUES (4::bigint, '2000-03-10 00:00:11+00'::timestamptz, '2000-03-10 00:00:11+00'::timestamptz)$$,
    'the keys expire at now + expiry');
SELECT is((SELECT count(*) FROM tenure.claim_key WHERE keyspace = 'cyc' AND claimant = '00000000-0000-0000-0000-00000000000a'
             AND attached AND expires_at = '2000-03-10 00:00:10+00'), 4::bigint,
    'with the instance row: the cycle wrote none of its keys');
SELECT results_eq(
    $$SELECT renewed_at, expires_at, held_count, held_until FROM tenure.claim_instance
       WHERE keyspace = 'cyc' AND instance_id = '00000000-0000-0000-0000-00000000000a'$$,
    $$VALUES ('2000-03-10 00:00:01+00'::timestamptz, '2000-03-10 00:00:11+00'::timestamptz, 4, '2000-03-10 00:00:11+00'::timestamptz)$$,
    'the instance is live until now + expiry, and its cache holds 4 keys until then');
SELECT is((SELECT count(*) FROM tenure.claim_log WHERE keyspace = 'cyc'), 4::bigint, 'a renewal logs no claim');

-- b joins: the share falls to 2; a's claims are live, so b takes nothing yet.
SELECT is_empty(
    $$SELECT * FROM tenure._claim_cycle('cyc', '00000000-0000-0000-0000-00000000000b', '10 s', NULL, '2000-03-10 00:00:02+00')$$,
    'a newcomer finds nothing free');
-- a is above the share: it gives up its most recently claimed keys (all claimed at once: the last by key).
SELECT results_eq(
    $$SELECT key, epoch, expires_at, change FROM tenure._claim_cycle('cyc', '00000000-0000-0000-0000-00000000000a', '10 s', NULL,
                                                                     '2000-03-10 00:00:03+00') ORDER BY key$$,
    $$VALUES ('k1', 1::bigint, '2000-03-10 00:00:13+00'::timestamptz, 'renewed'), ('k2', 1, '2000-03-10 00:00:13+00', 'renewed'),
             ('k3', 1, NULL, 'released'), ('k4', 1, NULL, 'released')$$,
    'above the share, a cycle renews the oldest claims and releases the rest');
SELECT results_eq(
    $$SELECT held_count, held_until FROM tenure.claim_instance
       WHERE keyspace = 'cyc' AND instance_id = '00000000-0000-0000-0000-00000000000a'$$,
    $$VALUES (2, '2000-03-10 00:00:13+00'::timestamptz)$$,
    'the cache counts the two claims kept');
SELECT results_eq(
    $$SELECT key, epoch, change FROM tenure._claim_cycle('cyc', '00000000-0000-0000-0000-00000000000b', '10 s', NULL,
                                                         '2000-03-10 00:00:04+00') ORDER BY key$$,
    $$VALUES ('k3', 2::bigint, 'taken'), ('k4', 2::bigint, 'taken')$$,
    'below its share, a cycle takes the released keys in the next epoch');
SELECT results_eq(
    $$SELECT key, epoch, change FROM tenure._claim_cycle('cyc', '00000000-0000-0000-0000-00000000000b', '10 s', 1,
                                                         '2000-03-10 00:00:05+00') ORDER BY key$$,
    $$VALUES ('k3', 2::bigint, 'renewed'), ('k4', 2::bigint, 'renewed')$$,
    'at its share, b renews and takes nothing');

-- a stops cycling: its claims expire at :13; b takes them over at :14, after renewing its own.
SELECT results_eq(
    $$SELECT key, epoch, change FROM tenure._claim_cycle('cyc', '00000000-0000-0000-0000-00000000000b', '10 s', NULL,
                                                         '2000-03-10 00:00:14+00') ORDER BY key$$,
    $$VALUES ('k1', 2::bigint, 'taken'), ('k2', 2::bigint, 'taken'), ('k3', 2::bigint, 'renewed'), ('k4', 2::bigint, 'renewed')$$,
    'a cycle renews, then takes over expired claims');
SELECT results_eq(
    $$SELECT key, epoch, claimant, unclaimed_since FROM tenure.claim_log WHERE keyspace = 'cyc' AND epoch = 2 ORDER BY key$$,
    $$VALUES ('k1', 2::bigint, '00000000-0000-0000-0000-00000000000b'::uuid, '2000-03-10 00:00:13+00'::timestamptz),
             ('k2', 2::bigint, '00000000-0000-0000-0000-00000000000b'::uuid, '2000-03-10 00:00:13+00'::timestamptz),
             ('k3', 2::bigint, '00000000-0000-0000-0000-00000000000b'::uuid, '2000-03-10 00:00:03+00'::timestamptz),
             ('k4', 2::bigint, '00000000-0000-0000-0000-00000000000b'::uuid, '2000-03-10 00:00:03+00'::timestamptz)$$,
    'the claim log has every hand-over, with since when each key was without a claimant');
SELECT ok(NOT tenure._claim_check('cyc', '00000000-0000-0000-0000-00000000000a', 'k1', 1, '2000-03-10 00:00:14+00'),
    'the former holder''s epoch no longer checks');

-- A cache that is wrong (no write should leave it so) is dropped and recounted, not trusted again.
UPDATE tenure.claim_instance SET held_count = 3 WHERE keyspace = 'cyc' AND instance_id = '00000000-0000-0000-0000-00000000000b';
SELECT is(
    (SELECT count(*) FROM tenure._claim_cycle('cyc', '00000000-0000-0000-0000-00000000000b', '10 s', NULL, '2000-03-10 00:00:15+00')
      WHERE change = 'renewed'),
    4::bigint, 'with a wrong cache, every live claim is still renewed');
SELECT results_eq(
    $$SELECT held_count, held_until IS NOT NULL FROM tenure.claim_instance
       WHERE keyspace = 'cyc' AND instance_id = '00000000-0000-0000-0000-00000000000b'$$,
    $$VALUES (4, true)$$,
    'and the cache is recounted');

-- Instances gone for more than 10 x expiry are deleted by a cycle at its fair share too.
SELECT is(tenure._claim_register('cycstale', ARRAY['s1'], '2000-03-10 00:00:00+00'), 1, 'one key');
SELECT is((SELECT count(*) FROM tenure._claim_cycle('cycstale', '00000000-0000-0000-0000-00000000000a', '10 s', NULL,
                                                    '2000-03-10 00:00:00+00')), 1::bigint, 'a takes it');
SELECT is((SELECT count(*) FROM tenure._claim_cycle('cycstale', '00000000-0000-0000-0000-00000000000b', '1 h', NULL,
                                                    '2000-03-10 00:00:20+00')), 1::bigint, 'b takes it over');
SELECT results_eq(
    $$SELECT change FROM tenure._claim_cycle('cycstale', '00000000-0000-0000-0000-00000000000b', '10 s', NULL,
                                             '2000-03-10 00:03:00+00')$$,
    $$VALUES ('renewed')$$,
    'b at its share renews');
SELECT is((SELECT array_agg(instance_id) FROM tenure.claim_instance WHERE keyspace = 'cycstale'),
    ARRAY['00000000-0000-0000-0000-00000000000b'::uuid], 'and deletes a''s row, gone for more than 10 x expiry');

-- Bad input: TN001 naming claim_cycle and the argument; nothing changes.
SELECT results_eq(
    $$SELECT pg_temp.error_of(format('SELECT * FROM tenure.claim_cycle(%L, %L, %L, %L)', ks, i, e, l))
        FROM (VALUES (' ', '00000000-0000-0000-0000-00000000000a', '10 s', NULL),
                     ('cyc', NULL, '10 s', NULL),
                     ('cyc', '00000000-0000-0000-0000-00000000000a', '0 s', NULL),
                     ('cyc', '00000000-0000-0000-0000-00000000000a', '10 s', '0')) AS v(ks, i, e, l)$$,
    $$VALUES ('TN001: tenure.claim_cycle: p_keyspace must be a non-empty name'),
             ('TN001: tenure.claim_cycle: p_instance must not be NULL'),
             ('TN001: tenure.claim_cycle: p_expiry must be a positive interval'),
             ('TN001: tenure.claim_cycle: p_limit must be NULL (up to the fair share) or at least 1')$$,
    'bad input raises TN001 naming the argument');

-- The blank-key checks accept and refuse what btrim(x) <> '' does.
SELECT is_empty(
    $$SELECT v FROM unnest(ARRAY['', ' ', '   ', ' a', 'a ', ' a ', E'\t', E'\t ', E' \t', 'a', E'\u00a0']) v
       WHERE (pg_temp.error_of(format('INSERT INTO tenure.claim_key (keyspace, key, unclaimed_since, registered_at)
                                       VALUES (''blank'', %L, now(), now())', v)) IS NULL) <> (btrim(v) <> '')
          OR (pg_temp.error_of(format('INSERT INTO tenure.claim_key (keyspace, key, unclaimed_since, registered_at)
                                       VALUES (%L, ''k'', now(), now())', v)) IS NULL) <> (btrim(v) <> '')$$,
    'the key and keyspace checks of claim_key agree with btrim(x) <> '''' on every value tried');
SELECT is(pg_temp.error_of($$INSERT INTO tenure.claim_key (keyspace, key, unclaimed_since, registered_at) VALUES ('blank', ' ', now(), now())$$),
    '23514: new row for relation "claim_key" violates check constraint "claim_key_key_check"',
    'a blank key is refused by the same constraint as before');

-- tenure_worker may call it.
SET LOCAL ROLE tenure_worker;
SELECT is((SELECT count(*) FROM tenure.claim_cycle('cycworker', '00000000-0000-0000-0000-00000000000c', '1 min')), 0::bigint,
    'tenure_worker can call claim_cycle (an empty keyspace: nothing to renew or take)');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
