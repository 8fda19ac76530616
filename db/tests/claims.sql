-- Per-key claims: signatures, register and retire, take, the fair share, renewal and its
-- boundaries, take-over at expiry, skip-if-busy, release, check and fence by time travel,
-- bad input and least privilege.
-- Instances: a = ...0a, b = ...0b, c = ...0c (d = ...0d only by the server clock).
-- Each section has its own keyspace and its own day T (00:00:00 UTC): register 'reg'
-- 2000-03-01, take 'take' 03-02, fair share 'fair' 03-03, renewal 'renew' 03-04,
-- take-over 'takeover' 03-05, skip-if-busy 'busy' 03-06, release 'rel' 03-07, check and
-- fence 'chk' 03-08, costs 'cost' and 'cost2' 03-09. The server clock is used only for the key d of 'reg' and in the
-- keyspaces 'many', 'durable' and 'worker'.
BEGIN;
SELECT plan(225);

-- The SQLSTATE, message and DETAIL that a statement raises (NULL if it raises nothing).
CREATE FUNCTION pg_temp.error_of(p_sql text)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_detail text;
BEGIN
    EXECUTE p_sql;
    RETURN NULL;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS v_detail = PG_EXCEPTION_DETAIL;
    RETURN format('%s: %s / %s', SQLSTATE, SQLERRM, v_detail);
END
$$;

-- Signatures -------------------------------------------------------------------
SELECT has_function('tenure', 'claim_register', ARRAY['text', 'text[]']);
SELECT function_returns('tenure', 'claim_register', ARRAY['text', 'text[]'], 'integer');
SELECT has_function('tenure', 'claim_retire', ARRAY['text', 'text[]']);
SELECT function_returns('tenure', 'claim_retire', ARRAY['text', 'text[]'], 'integer');
SELECT has_function('tenure', 'claim_renew', ARRAY['text', 'uuid', 'interval']);
SELECT function_returns('tenure', 'claim_renew', ARRAY['text', 'uuid', 'interval'], 'setof tenure.claim_grant');
SELECT has_function('tenure', 'claim_take', ARRAY['text', 'uuid', 'interval', 'integer']);
SELECT function_returns('tenure', 'claim_take', ARRAY['text', 'uuid', 'interval', 'integer'], 'setof tenure.claim_grant');
SELECT has_function('tenure', 'claim_release', ARRAY['text', 'uuid', 'text[]']);
SELECT function_returns('tenure', 'claim_release', ARRAY['text', 'uuid', 'text[]'], 'integer');
SELECT has_function('tenure', 'claim_check', ARRAY['text', 'uuid', 'text', 'bigint']);
SELECT function_returns('tenure', 'claim_check', ARRAY['text', 'uuid', 'text', 'bigint'], 'boolean');
SELECT has_function('tenure', 'claim_fence', ARRAY['text', 'uuid', 'text', 'bigint']);
SELECT function_returns('tenure', 'claim_fence', ARRAY['text', 'uuid', 'text', 'bigint'], 'void');
SELECT has_table('tenure', 'claim_key', 'table claim_key exists');
SELECT has_table('tenure', 'claim_instance', 'table claim_instance exists');
SELECT has_table('tenure', 'claim_log', 'table claim_log exists');
SELECT has_type('tenure', 'claim_grant', 'type claim_grant exists');
SELECT has_view('tenure', 'claims', 'operator view claims exists');
SELECT has_view('tenure', 'claim_instances', 'operator view claim_instances exists');
SELECT columns_are('tenure', 'claims', ARRAY['keyspace', 'key', 'claimant', 'epoch', 'expires_at', 'claimed_at',
    'claim_age', 'live', 'unclaimed_for']);
SELECT columns_are('tenure', 'claim_instances', ARRAY['keyspace', 'instance_id', 'renewed_at', 'expires_at', 'live',
    'keys_held', 'fair_share']);

-- Register and retire (keyspace 'reg', T = 2000-03-01) ------------------------------------
SELECT is(tenure._claim_register('reg', ARRAY['a', 'b', 'a'], '2000-03-01 00:00:00+00'), 2,
    'register returns how many keys were new; a key twice in one call counts once');
SELECT is(tenure._claim_register('reg', ARRAY['b', 'c'], '2000-03-01 00:00:10+00'), 1,
    'a key already registered is not counted again');
SELECT is(tenure._claim_register('reg', ARRAY['c', 'a', 'b'], '2000-03-01 00:00:20+00'), 0,
    'registering only known keys returns 0');
SELECT results_eq(
    $$SELECT key, claimant, epoch, expires_at, claimed_at, unclaimed_since, registered_at
        FROM tenure.claim_key WHERE keyspace = 'reg' ORDER BY key$$,
    $$VALUES ('a', NULL::uuid, 0::bigint, NULL::timestamptz, NULL::timestamptz,
              '2000-03-01 00:00:00+00'::timestamptz, '2000-03-01 00:00:00+00'::timestamptz),
             ('b', NULL, 0, NULL, NULL, '2000-03-01 00:00:00+00', '2000-03-01 00:00:00+00'),
             ('c', NULL, 0, NULL, NULL, '2000-03-01 00:00:10+00', '2000-03-01 00:00:10+00')$$,
    'registered keys are unclaimed in epoch 0 since registration; keys registered again are left as they were');
SELECT is(tenure.claim_register('reg', ARRAY['c', 'd', 'd']), 1,
    'the public claim_register registers the new key, once however often it is named');
SELECT ok(
    (SELECT registered_at BETWEEN now() AND clock_timestamp() FROM tenure.claim_key WHERE keyspace = 'reg' AND key = 'd'),
    'claim_register registers by the server clock');
-- By the server clock as by time travel, a registration is one moment: every key of the
-- call is registered then, and unclaimed since then. (1000 keys, so that a clock read per
-- row and column could not go unnoticed.)
SELECT is(tenure.claim_register('many', ARRAY(SELECT 'm' || g FROM generate_series(1, 1000) g)), 1000,
    'claim_register of 1000 keys');
SELECT is(
    (SELECT count(*) FROM tenure.claim_key WHERE keyspace = 'many' AND unclaimed_since IS DISTINCT FROM registered_at),
    0::bigint,
    'a key registered by the server clock is unclaimed since exactly its registration');
SELECT is((SELECT count(DISTINCT registered_at) FROM tenure.claim_key WHERE keyspace = 'many'), 1::bigint,
    'the keys registered by one call share one registration time');
SELECT is(tenure._claim_register('reg2', ARRAY['a'], '2000-03-01 00:00:00+00'), 1,
    'the same key in another keyspace is another key');
SELECT results_eq(
    $$SELECT key, epoch FROM tenure._claim_take('reg', '00000000-0000-0000-0000-00000000000a', '10 s', 2,
                                                 '2000-03-01 00:01:00+00')$$,
    $$VALUES ('a', 1::bigint), ('b', 1)$$,
    'a takes a and b, so that they have claim history');
SELECT is(tenure.claim_retire('reg', ARRAY['a', 'zz', 'a']), 1,
    'retire returns how many keys were retired: unknown keys and repeats do not count');
SELECT is_empty($$SELECT * FROM tenure.claim_key WHERE keyspace = 'reg' AND key = 'a'$$, 'the retired key is gone');
SELECT results_eq(
    $$SELECT keyspace, key, epoch FROM tenure.claim_log WHERE keyspace IN ('reg', 'reg2') ORDER BY keyspace, key$$,
    $$VALUES ('reg', 'b', 1::bigint)$$,
    'the retired key''s claim history is gone with it; the others'' is kept');
SELECT results_eq(
    $$SELECT key FROM tenure.claim_key WHERE keyspace = 'reg2'$$,
    $$VALUES ('a')$$,
    'retire touches only its own keyspace');
SELECT results_eq(
    $$SELECT * FROM tenure._claim_renew('reg', '00000000-0000-0000-0000-00000000000a', '10 s', '2000-03-01 00:01:05+00')$$,
    $$VALUES ('b', 1::bigint, '2000-03-01 00:01:15+00'::timestamptz, 'renewed')$$,
    'the claimant of a retired key learns it at its next renewal, which no longer returns it');
SELECT is(tenure.claim_retire('reg', ARRAY['c', 'd']), 2, 'retire of several keys');
SELECT is(tenure.claim_retire('reg', ARRAY['c', 'd']), 0, 'retire of keys already retired returns 0');

-- Take (keyspace 'take', T = 2000-03-02) ---------------------------------------------------
DO $$
BEGIN
    PERFORM tenure._claim_register('take', ARRAY['t3', 't4', 't5'], '2000-03-01 23:58:00+00');
    PERFORM tenure._claim_register('take', ARRAY['t1', 't2'], '2000-03-01 23:59:00+00');
END
$$;
SELECT results_eq(
    $$SELECT * FROM tenure._claim_take('take', '00000000-0000-0000-0000-00000000000a', '30 s', 2, '2000-03-02 00:00:00+00')$$,
    $$VALUES ('t3', 1::bigint, '2000-03-02 00:00:30+00'::timestamptz, 'taken'),
             ('t4', 1, '2000-03-02 00:00:30+00', 'taken')$$,
    'take respects p_limit and takes the longest unclaimed keys first, in epoch 1 until now + expiry');
SELECT results_eq(
    $$SELECT * FROM tenure._claim_take('take', '00000000-0000-0000-0000-00000000000a', '30 s', NULL, '2000-03-02 00:00:01+00')$$,
    $$VALUES ('t1', 1::bigint, '2000-03-02 00:00:31+00'::timestamptz, 'taken'),
             ('t2', 1, '2000-03-02 00:00:31+00', 'taken'),
             ('t5', 1, '2000-03-02 00:00:31+00', 'taken')$$,
    'an instance alone has all keys as its share: take with no limit takes all the rest');
SELECT is_empty(
    $$SELECT * FROM tenure._claim_take('take', '00000000-0000-0000-0000-00000000000a', '30 s', NULL, '2000-03-02 00:00:02+00')$$,
    'with every key held there is nothing to take: no row');
SELECT results_eq(
    $$SELECT key, claimant, epoch, expires_at, claimed_at, unclaimed_since FROM tenure.claim_key
       WHERE keyspace = 'take' ORDER BY key$$,
    $$VALUES ('t1', '00000000-0000-0000-0000-00000000000a'::uuid, 1::bigint, '2000-03-02 00:00:31+00'::timestamptz,
              '2000-03-02 00:00:01+00'::timestamptz, NULL::timestamptz),
             ('t2', '00000000-0000-0000-0000-00000000000a', 1, '2000-03-02 00:00:31+00', '2000-03-02 00:00:01+00', NULL),
             ('t3', '00000000-0000-0000-0000-00000000000a', 1, '2000-03-02 00:00:30+00', '2000-03-02 00:00:00+00', NULL),
             ('t4', '00000000-0000-0000-0000-00000000000a', 1, '2000-03-02 00:00:30+00', '2000-03-02 00:00:00+00', NULL),
             ('t5', '00000000-0000-0000-0000-00000000000a', 1, '2000-03-02 00:00:31+00', '2000-03-02 00:00:01+00', NULL)$$,
    'each taken key records its claimant, epoch, expiry and when it was claimed, and is no longer unclaimed');
SELECT results_eq(
    $$SELECT key, epoch, claimant, claimed_at, unclaimed_since FROM tenure.claim_log WHERE keyspace = 'take' ORDER BY key$$,
    $$VALUES ('t1', 1::bigint, '00000000-0000-0000-0000-00000000000a'::uuid, '2000-03-02 00:00:01+00'::timestamptz,
              '2000-03-01 23:59:00+00'::timestamptz),
             ('t2', 1, '00000000-0000-0000-0000-00000000000a', '2000-03-02 00:00:01+00', '2000-03-01 23:59:00+00'),
             ('t3', 1, '00000000-0000-0000-0000-00000000000a', '2000-03-02 00:00:00+00', '2000-03-01 23:58:00+00'),
             ('t4', 1, '00000000-0000-0000-0000-00000000000a', '2000-03-02 00:00:00+00', '2000-03-01 23:58:00+00'),
             ('t5', 1, '00000000-0000-0000-0000-00000000000a', '2000-03-02 00:00:01+00', '2000-03-01 23:58:00+00')$$,
    'the claim log has one row per claim granted: who, in which epoch, from when, unclaimed since registration');
SELECT results_eq(
    $$SELECT instance_id, renewed_at, expires_at FROM tenure.claim_instance WHERE keyspace = 'take'$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000a'::uuid, '2000-03-02 00:00:02+00'::timestamptz,
              '2000-03-02 00:00:32+00'::timestamptz)$$,
    'every take marks the caller live until now + expiry, even one that took nothing');

-- Fair share (keyspace 'fair', T = 2000-03-03): 10 keys, k06..k10 registered before k01..k05.
DO $$
BEGIN
    PERFORM tenure._claim_register('fair', ARRAY['k06', 'k07', 'k08', 'k09', 'k10'], '2000-03-02 23:58:00+00');
    PERFORM tenure._claim_register('fair', ARRAY['k01', 'k02', 'k03', 'k04', 'k05'], '2000-03-02 23:59:00+00');
END
$$;
SELECT results_eq(
    $$SELECT key FROM tenure._claim_take('fair', '00000000-0000-0000-0000-00000000000a', '10 s', 5, '2000-03-03 00:00:00+00')$$,
    $$VALUES ('k06'), ('k07'), ('k08'), ('k09'), ('k10')$$,
    'a takes the 5 longest unclaimed keys first');
SELECT results_eq(
    $$SELECT key FROM tenure._claim_take('fair', '00000000-0000-0000-0000-00000000000a', '10 s', NULL, '2000-03-03 00:00:01+00')$$,
    $$VALUES ('k01'), ('k02'), ('k03'), ('k04'), ('k05')$$,
    'then, alone in the keyspace, the other 5: a holds all 10');
SELECT is_empty(
    $$SELECT * FROM tenure._claim_renew('fair', '00000000-0000-0000-0000-00000000000b', '10 s', '2000-03-03 00:00:02+00')$$,
    'b renews without holding anything: no row, but b is live now');
SELECT results_eq(
    $$SELECT instance_id, expires_at FROM tenure.claim_instance WHERE keyspace = 'fair' ORDER BY instance_id$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000a'::uuid, '2000-03-03 00:00:11+00'::timestamptz),
             ('00000000-0000-0000-0000-00000000000b', '2000-03-03 00:00:12+00')$$,
    'both instances are live in the keyspace');
SELECT is_empty(
    $$SELECT * FROM tenure._claim_take('fair', '00000000-0000-0000-0000-00000000000b', '10 s', NULL, '2000-03-03 00:00:02+00')$$,
    'b has room for 5 but every key is held: its take takes nothing');
SELECT results_eq(
    $$SELECT * FROM tenure._claim_renew('fair', '00000000-0000-0000-0000-00000000000a', '10 s', '2000-03-03 00:00:03+00')$$,
    $$VALUES ('k01', 1::bigint, NULL::timestamptz, 'released'),
             ('k02', 1, NULL, 'released'),
             ('k03', 1, NULL, 'released'),
             ('k04', 1, NULL, 'released'),
             ('k05', 1, NULL, 'released'),
             ('k06', 1, '2000-03-03 00:00:13+00', 'renewed'),
             ('k07', 1, '2000-03-03 00:00:13+00', 'renewed'),
             ('k08', 1, '2000-03-03 00:00:13+00', 'renewed'),
             ('k09', 1, '2000-03-03 00:00:13+00', 'renewed'),
             ('k10', 1, '2000-03-03 00:00:13+00', 'renewed')$$,
    'with 2 live instances the share is 5: a''s renewal releases its 5 most recently claimed keys and renews the others');
SELECT results_eq(
    $$SELECT k.key, k.claimant, k.epoch, c.expires_at, k.claimed_at, k.unclaimed_since
        FROM tenure.claim_key k JOIN tenure.claims c USING (keyspace, key)
       WHERE keyspace = 'fair' AND key IN ('k01', 'k06') ORDER BY key$$,
    $$VALUES ('k01', NULL::uuid, 1::bigint, NULL::timestamptz, NULL::timestamptz, '2000-03-03 00:00:03+00'::timestamptz),
             ('k06', '00000000-0000-0000-0000-00000000000a', 1, '2000-03-03 00:00:13+00', '2000-03-03 00:00:00+00', NULL)$$,
    'a released key is unclaimed since the renewal and keeps its epoch; a renewed one keeps its claimed_at');
SELECT results_eq(
    $$SELECT * FROM tenure._claim_take('fair', '00000000-0000-0000-0000-00000000000b', '10 s', NULL, '2000-03-03 00:00:04+00')$$,
    $$VALUES ('k01', 2::bigint, '2000-03-03 00:00:14+00'::timestamptz, 'taken'),
             ('k02', 2, '2000-03-03 00:00:14+00', 'taken'),
             ('k03', 2, '2000-03-03 00:00:14+00', 'taken'),
             ('k04', 2, '2000-03-03 00:00:14+00', 'taken'),
             ('k05', 2, '2000-03-03 00:00:14+00', 'taken')$$,
    'b''s take then takes exactly the 5 released keys, each in the next epoch');
SELECT is_empty(
    $$SELECT * FROM tenure._claim_take('fair', '00000000-0000-0000-0000-00000000000b', '10 s', NULL, '2000-03-03 00:00:04+00')$$,
    'b at its share takes no more');
SELECT is_empty(
    $$SELECT * FROM tenure._claim_take('fair', '00000000-0000-0000-0000-00000000000c', '10 s', NULL, '2000-03-03 00:00:05+00')$$,
    'a third instance c finds nothing free, but is live now');
SELECT results_eq(
    $$SELECT key, change FROM tenure._claim_renew('fair', '00000000-0000-0000-0000-00000000000a', '10 s', '2000-03-03 00:00:06+00')$$,
    $$VALUES ('k06', 'renewed'), ('k07', 'renewed'), ('k08', 'renewed'), ('k09', 'renewed'), ('k10', 'released')$$,
    'with 3 live instances the share is ceil(10 / 3) = 4, rounded up: a keeps 4 and releases 1 (ties by key)');
SELECT results_eq(
    $$SELECT key, change FROM tenure._claim_renew('fair', '00000000-0000-0000-0000-00000000000b', '10 s', '2000-03-03 00:00:06+00')$$,
    $$VALUES ('k01', 'renewed'), ('k02', 'renewed'), ('k03', 'renewed'), ('k04', 'renewed'), ('k05', 'released')$$,
    'b also keeps 4 and releases 1');
SELECT results_eq(
    $$SELECT * FROM tenure._claim_take('fair', '00000000-0000-0000-0000-00000000000c', '10 s', NULL, '2000-03-03 00:00:07+00')$$,
    $$VALUES ('k05', 3::bigint, '2000-03-03 00:00:17+00'::timestamptz, 'taken'),
             ('k10', 2, '2000-03-03 00:00:17+00', 'taken')$$,
    'c takes the 2 released keys');
SELECT results_eq(
    $$SELECT claimant, count(*) FROM tenure.claim_key WHERE keyspace = 'fair' GROUP BY claimant ORDER BY claimant$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000a'::uuid, 4::bigint),
             ('00000000-0000-0000-0000-00000000000b', 4),
             ('00000000-0000-0000-0000-00000000000c', 2)$$,
    'the 10 keys are spread 4, 4, 2 over the 3 live instances');
SELECT results_eq(
    $$SELECT key, array_agg(claimant ORDER BY epoch)::text FROM tenure.claim_log
       WHERE keyspace = 'fair' AND key IN ('k01', 'k05', 'k10') GROUP BY key ORDER BY key$$,
    $$VALUES ('k01', '{00000000-0000-0000-0000-00000000000a,00000000-0000-0000-0000-00000000000b}'),
             ('k05', '{00000000-0000-0000-0000-00000000000a,00000000-0000-0000-0000-00000000000b,00000000-0000-0000-0000-00000000000c}'),
             ('k10', '{00000000-0000-0000-0000-00000000000a,00000000-0000-0000-0000-00000000000c}')$$,
    'the claim log has every hand a key passed through, one row per epoch');

-- Renewal and its boundaries (keyspace 'renew', T = 2000-03-04) -----------------------------
SELECT is(tenure._claim_register('renew', ARRAY['r1', 'r2'], '2000-03-03 23:59:00+00'), 2, 'renew: two keys');
SELECT results_eq(
    $$SELECT * FROM tenure._claim_take('renew', '00000000-0000-0000-0000-00000000000a', '10 s', 1, '2000-03-04 00:00:00+00')$$,
    $$VALUES ('r1', 1::bigint, '2000-03-04 00:00:10+00'::timestamptz, 'taken')$$,
    'a takes r1 until T + 10 s');
SELECT results_eq(
    $$SELECT * FROM tenure._claim_renew('renew', '00000000-0000-0000-0000-00000000000a', '10 s', '2000-03-04 00:00:10+00')$$,
    $$VALUES ('r1', 1::bigint, '2000-03-04 00:00:20+00'::timestamptz, 'renewed')$$,
    'at exactly expires_at the holder still renews, to now + expiry, in the same epoch');
SELECT results_eq(
    $$SELECT * FROM tenure._claim_take('renew', '00000000-0000-0000-0000-00000000000a', '10 s', 1, '2000-03-04 00:00:15+00')$$,
    $$VALUES ('r2', 1::bigint, '2000-03-04 00:00:25+00'::timestamptz, 'taken')$$,
    'a takes r2 until T + 25 s');
SELECT results_eq(
    $$SELECT key, expires_at FROM tenure.claims WHERE keyspace = 'renew' ORDER BY key$$,
    $$VALUES ('r1', '2000-03-04 00:00:25+00'::timestamptz), ('r2', '2000-03-04 00:00:25+00')$$,
    'r1 follows a''s instance row, which the take extended: both expire at T + 25 s');
SELECT is_empty(
    $$SELECT * FROM tenure._claim_take('renew', '00000000-0000-0000-0000-00000000000b', '10 s', NULL, '2000-03-04 00:00:25+00')$$,
    'at exactly the claims'' expiry another instance cannot take them');
SELECT is_empty(
    $$SELECT * FROM tenure._claim_renew('renew', '00000000-0000-0000-0000-00000000000a', '10 s', '2000-03-04 00:00:25.000001+00')$$,
    '1 microsecond after its claims expired the holder cannot renew them: absent from the result');
SELECT results_eq(
    $$SELECT claimant, epoch, attached, expires_at FROM tenure.claim_key WHERE keyspace = 'renew' ORDER BY key$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000a'::uuid, 1::bigint, false, '2000-03-04 00:00:25+00'::timestamptz),
             ('00000000-0000-0000-0000-00000000000a', 1, false, '2000-03-04 00:00:25+00')$$,
    'the expired claims are left to themselves by the refused renewal, with the expiry they had');
SELECT results_eq(
    $$SELECT * FROM tenure._claim_take('renew', '00000000-0000-0000-0000-00000000000b', '10 s', NULL, '2000-03-04 00:00:25.000001+00')$$,
    $$VALUES ('r1', 2::bigint, '2000-03-04 00:00:35.000001+00'::timestamptz, 'taken')$$,
    '1 microsecond after it expired another instance takes it in the next epoch (share 1: a counts as live again)');
SELECT results_eq(
    $$SELECT epoch, claimant, claimed_at, unclaimed_since FROM tenure.claim_log WHERE keyspace = 'renew' AND key = 'r1' ORDER BY epoch$$,
    $$VALUES (1::bigint, '00000000-0000-0000-0000-00000000000a'::uuid, '2000-03-04 00:00:00+00'::timestamptz,
              '2000-03-03 23:59:00+00'::timestamptz),
             (2, '00000000-0000-0000-0000-00000000000b', '2000-03-04 00:00:25.000001+00', '2000-03-04 00:00:25+00')$$,
    'the claim log: the second claim was unclaimed since the first one expired');
SELECT is_empty(
    $$SELECT * FROM tenure._claim_renew('renew', '00000000-0000-0000-0000-00000000000a', '10 s', '2000-03-04 00:00:40+00')$$,
    'a holder whose every claim expired renews nothing');

-- Take-over at expiry (keyspace 'takeover', T = 2000-03-05) ----------------------------------
SELECT is(tenure._claim_register('takeover', ARRAY['o1', 'o2', 'o3', 'o4'], '2000-03-04 23:59:00+00'), 4,
    'takeover: four keys');
SELECT results_eq(
    $$SELECT key FROM tenure._claim_take('takeover', '00000000-0000-0000-0000-00000000000a', '10 s', 2, '2000-03-05 00:00:00+00')$$,
    $$VALUES ('o1'), ('o2')$$,
    'a takes 2 keys until T + 10 s and then stops renewing');
SELECT results_eq(
    $$SELECT key, epoch FROM tenure._claim_take('takeover', '00000000-0000-0000-0000-00000000000b', '10 s', NULL,
                                                '2000-03-05 00:00:01+00')$$,
    $$VALUES ('o3', 1::bigint), ('o4', 1)$$,
    'b''s share is 2 of 4: it takes the other 2');
SELECT results_eq(
    $$SELECT key FROM tenure._claim_renew('takeover', '00000000-0000-0000-0000-00000000000b', '10 s', '2000-03-05 00:00:05+00')$$,
    $$VALUES ('o3'), ('o4')$$,
    'b renews');
SELECT is_empty(
    $$SELECT * FROM tenure._claim_take('takeover', '00000000-0000-0000-0000-00000000000b', '10 s', NULL, '2000-03-05 00:00:10+00')$$,
    'at exactly the expiry of a''s instance row and claims, a still counts: b has no room and nothing is free');
SELECT results_eq(
    $$SELECT * FROM tenure._claim_take('takeover', '00000000-0000-0000-0000-00000000000b', '10 s', NULL, '2000-03-05 00:00:10.000001+00')$$,
    $$VALUES ('o1', 2::bigint, '2000-03-05 00:00:20.000001+00'::timestamptz, 'taken'),
             ('o2', 2, '2000-03-05 00:00:20.000001+00', 'taken')$$,
    'once a''s instance row expired, b''s share grows to all 4 and it takes a''s expired keys in the next epoch');
SELECT results_eq(
    $$SELECT key, epoch, claimant, claimed_at, unclaimed_since FROM tenure.claim_log
       WHERE keyspace = 'takeover' AND epoch = 2 ORDER BY key$$,
    $$VALUES ('o1', 2::bigint, '00000000-0000-0000-0000-00000000000b'::uuid, '2000-03-05 00:00:10.000001+00'::timestamptz,
              '2000-03-05 00:00:10+00'::timestamptz),
             ('o2', 2, '00000000-0000-0000-0000-00000000000b', '2000-03-05 00:00:10.000001+00', '2000-03-05 00:00:10+00')$$,
    'the taken keys were unclaimed since a''s old expires_at');
SELECT results_eq(
    $$SELECT key, change FROM tenure._claim_renew('takeover', '00000000-0000-0000-0000-00000000000b', '10 s', '2000-03-05 00:00:12+00')$$,
    $$VALUES ('o1', 'renewed'), ('o2', 'renewed'), ('o3', 'renewed'), ('o4', 'renewed')$$,
    'b alone renews all 4 keys');
SELECT is_empty(
    $$SELECT * FROM tenure._claim_renew('takeover', '00000000-0000-0000-0000-00000000000a', '10 s', '2000-03-05 00:00:13+00')$$,
    'a, waking up late, renews nothing: none of the keys is its own any more');
SELECT results_eq(
    $$SELECT key, change FROM tenure._claim_renew('takeover', '00000000-0000-0000-0000-00000000000b', '10 s', '2000-03-05 00:00:14+00')$$,
    $$VALUES ('o1', 'released'), ('o2', 'released'), ('o3', 'renewed'), ('o4', 'renewed')$$,
    'a is live again: b''s share falls back to 2 and it gives up its 2 most recently claimed keys, those it took over');

-- Skip if busy (keyspace 'busy', T = 2000-03-06): the take lock held by another session -----
SELECT is(tenure._claim_register('busy', ARRAY['b1'], '2000-03-05 23:59:00+00'), 1, 'busy: one key');
CREATE FUNCTION pg_temp.busy_tests()
RETURNS SETOF text
LANGUAGE plpgsql
AS $$
DECLARE
    v_schema name;
    v_conninfo text;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_available_extensions WHERE name = 'dblink')
       OR NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        RETURN NEXT skip('dblink is not available here: skip-if-busy needs a second session', 5);
        RETURN;
    END IF;
    CREATE EXTENSION IF NOT EXISTS dblink;
    SELECT n.nspname INTO v_schema
      FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'dblink';
    PERFORM set_config('search_path', current_setting('search_path') || ', ' || quote_ident(v_schema), true);
    -- Reach the server the way this session did: over TCP, or else over its socket.
    v_conninfo := format('dbname=%s user=%s port=%s host=%s', current_database(), current_user, current_setting('port'),
                         coalesce(host(inet_server_addr()),
                                  btrim(split_part(current_setting('unix_socket_directories'), ',', 1))));
    PERFORM dblink_connect('tenure_claims_busy', v_conninfo);
    PERFORM dblink_exec('tenure_claims_busy', 'BEGIN');
    RETURN NEXT is(
        (SELECT x FROM dblink('tenure_claims_busy',
            $q$SELECT pg_try_advisory_xact_lock(hashtext('tenure.claim_take'), hashtext('busy'))::text$q$) AS t(x text)),
        'true',
        'another session holds the take lock of keyspace busy');
    RETURN NEXT results_eq(
        $q$SELECT * FROM tenure._claim_take('busy', '00000000-0000-0000-0000-00000000000a', '10 s', NULL,
                                            '2000-03-06 00:00:00+00')$q$,
        $q$VALUES (NULL::text, NULL::bigint, NULL::timestamptz, 'busy')$q$,
        'a take while another instance is taking in the keyspace is skipped: one row (NULL, NULL, NULL, busy)');
    RETURN NEXT results_eq(
        $q$SELECT (SELECT count(*) FROM tenure.claim_key WHERE keyspace = 'busy' AND claimant IS NOT NULL),
                  (SELECT count(*) FROM tenure.claim_instance WHERE keyspace = 'busy'),
                  (SELECT count(*) FROM tenure.claim_log WHERE keyspace = 'busy')$q$,
        $q$VALUES (0::bigint, 0::bigint, 0::bigint)$q$,
        'the skipped take changed nothing: no claim, no live instance, no log');
    PERFORM dblink_exec('tenure_claims_busy', 'ROLLBACK');
    PERFORM dblink_disconnect('tenure_claims_busy');
    RETURN NEXT results_eq(
        $q$SELECT * FROM tenure._claim_take('busy', '00000000-0000-0000-0000-00000000000a', '10 s', NULL,
                                            '2000-03-06 00:00:01+00')$q$,
        $q$VALUES ('b1', 1::bigint, '2000-03-06 00:00:11+00'::timestamptz, 'taken')$q$,
        'once the other session let go, the take goes ahead');
    RETURN NEXT is_empty(
        $q$SELECT * FROM tenure._claim_take('busy', '00000000-0000-0000-0000-00000000000b', '10 s', NULL,
                                            '2000-03-06 00:00:02+00')$q$,
        'a session that holds the take lock itself is not busy for its own takes');
END
$$;
SELECT * FROM pg_temp.busy_tests();

-- Release (keyspace 'rel', T = 2000-03-07) ---------------------------------------------------
SELECT is(tenure._claim_register('rel', ARRAY['k1', 'k2', 'k3', 'k4'], '2000-03-06 23:59:00+00'), 4, 'rel: four keys');
SELECT results_eq(
    $$SELECT key FROM tenure._claim_take('rel', '00000000-0000-0000-0000-00000000000a', '10 s', 2, '2000-03-07 00:00:00+00')$$,
    $$VALUES ('k1'), ('k2')$$,
    'a takes k1 and k2');
SELECT results_eq(
    $$SELECT key FROM tenure._claim_take('rel', '00000000-0000-0000-0000-00000000000b', '10 s', NULL, '2000-03-07 00:00:01+00')$$,
    $$VALUES ('k3'), ('k4')$$,
    'b takes its share, k3 and k4');
SELECT is(
    tenure._claim_release('rel', '00000000-0000-0000-0000-00000000000a', ARRAY['k1', 'k3', 'nokey'], '2000-03-07 00:00:02+00'),
    1,
    'release of named keys returns how many were released: keys of others and unknown keys are ignored');
SELECT results_eq(
    $$SELECT key, claimant, epoch, expires_at, claimed_at, unclaimed_since FROM tenure.claim_key
       WHERE keyspace = 'rel' ORDER BY key$$,
    $$VALUES ('k1', NULL::uuid, 1::bigint, NULL::timestamptz, NULL::timestamptz, '2000-03-07 00:00:02+00'::timestamptz),
             ('k2', '00000000-0000-0000-0000-00000000000a', 1, '2000-03-07 00:00:10+00', '2000-03-07 00:00:00+00', NULL),
             ('k3', '00000000-0000-0000-0000-00000000000b', 1, '2000-03-07 00:00:11+00', '2000-03-07 00:00:01+00', NULL),
             ('k4', '00000000-0000-0000-0000-00000000000b', 1, '2000-03-07 00:00:11+00', '2000-03-07 00:00:01+00', NULL)$$,
    'the released key is unclaimed since the release in its epoch; the others are untouched');
SELECT results_eq(
    $$SELECT instance_id FROM tenure.claim_instance WHERE keyspace = 'rel' ORDER BY instance_id$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000a'::uuid), ('00000000-0000-0000-0000-00000000000b')$$,
    'releasing named keys keeps the instance in the keyspace');
SELECT is(
    tenure._claim_release('rel', '00000000-0000-0000-0000-00000000000a', NULL, '2000-03-07 00:00:03+00'),
    1,
    'release of all (NULL) releases every claim the caller holds');
SELECT results_eq(
    $$SELECT instance_id FROM tenure.claim_instance WHERE keyspace = 'rel'$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000b'::uuid)$$,
    'release of all also removes the caller''s instance row');
SELECT results_eq(
    $$SELECT * FROM tenure._claim_take('rel', '00000000-0000-0000-0000-00000000000b', '10 s', NULL, '2000-03-07 00:00:03+00')$$,
    $$VALUES ('k1', 2::bigint, '2000-03-07 00:00:13+00'::timestamptz, 'taken'),
             ('k2', 2, '2000-03-07 00:00:13+00', 'taken')$$,
    'the other''s share grows at once (a''s row would have been live until T + 10 s): b takes the released keys');
SELECT results_eq(
    $$SELECT key, unclaimed_since FROM tenure.claim_log WHERE keyspace = 'rel' AND epoch = 2 ORDER BY key$$,
    $$VALUES ('k1', '2000-03-07 00:00:02+00'::timestamptz), ('k2', '2000-03-07 00:00:03+00')$$,
    'the claim log: released keys were unclaimed since their release');
SELECT is(
    tenure._claim_release('rel', '00000000-0000-0000-0000-00000000000b', ARRAY['k1', 'k2'], '2000-03-07 00:00:13.000001+00'),
    0,
    'expired claims are no longer held: releasing them releases nothing');
SELECT results_eq(
    $$SELECT key, claimant FROM tenure.claim_key WHERE keyspace = 'rel' AND key IN ('k1', 'k2') ORDER BY key$$,
    $$VALUES ('k1', '00000000-0000-0000-0000-00000000000b'::uuid), ('k2', '00000000-0000-0000-0000-00000000000b')$$,
    'and leaves them as they were');
SELECT is(
    tenure._claim_release('rel', '00000000-0000-0000-0000-00000000000c', NULL, '2000-03-07 00:00:04+00'),
    0,
    'release of all by an instance that holds nothing returns 0');

-- Check and fence (keyspace 'chk', T = 2000-03-08) -------------------------------------------
SELECT is(tenure._claim_register('chk', ARRAY['c1', 'c2'], '2000-03-07 23:59:00+00'), 2, 'chk: two keys');
SELECT results_eq(
    $$SELECT * FROM tenure._claim_take('chk', '00000000-0000-0000-0000-00000000000a', '10 s', 1, '2000-03-08 00:00:00+00')$$,
    $$VALUES ('c1', 1::bigint, '2000-03-08 00:00:10+00'::timestamptz, 'taken')$$,
    'a takes c1 in epoch 1 until T + 10 s');
SELECT ok(tenure._claim_check('chk', '00000000-0000-0000-0000-00000000000a', 'c1', 1, '2000-03-08 00:00:05+00'),
    'check is true for the holder in its epoch before expiry');
SELECT ok(tenure._claim_check('chk', '00000000-0000-0000-0000-00000000000a', 'c1', 1, '2000-03-08 00:00:10+00'),
    'check is true at exactly expires_at');
SELECT ok(NOT tenure._claim_check('chk', '00000000-0000-0000-0000-00000000000a', 'c1', 1, '2000-03-08 00:00:10.000001+00'),
    'check is false 1 microsecond after expiry');
SELECT ok(NOT tenure._claim_check('chk', '00000000-0000-0000-0000-00000000000a', 'c1', 2, '2000-03-08 00:00:05+00'),
    'check is false for a wrong epoch');
SELECT ok(NOT tenure._claim_check('chk', '00000000-0000-0000-0000-00000000000b', 'c1', 1, '2000-03-08 00:00:05+00'),
    'check is false for another instance');
SELECT ok(NOT tenure._claim_check('chk', '00000000-0000-0000-0000-00000000000a', 'nokey', 1, '2000-03-08 00:00:05+00'),
    'check is false for an unknown key');
SELECT ok(NOT tenure._claim_check('nochk', '00000000-0000-0000-0000-00000000000a', 'c1', 1, '2000-03-08 00:00:05+00'),
    'check is false for the key in another keyspace');
SELECT ok(NOT tenure._claim_check('chk', '00000000-0000-0000-0000-00000000000a', 'c2', 1, '2000-03-08 00:00:05+00'),
    'check is false for an unclaimed key');
SELECT lives_ok(
    $$SELECT tenure._claim_fence('chk', '00000000-0000-0000-0000-00000000000a', 'c1', 1, '2000-03-08 00:00:10+00')$$,
    'fence lets the holder write, up to exactly expires_at');
SELECT throws_ok(
    $$SELECT tenure._claim_fence('chk', '00000000-0000-0000-0000-00000000000a', 'c1', 1, '2000-03-08 00:00:10.000001+00')$$,
    'TN103', 'tenure.claim_fence: instance 00000000-0000-0000-0000-00000000000a does not hold key c1 of chk in epoch 1',
    'fence raises claim lost (TN103) for an expired claim, before anyone took the key');
SELECT is(
    pg_temp.error_of($$SELECT tenure._claim_fence('chk', '00000000-0000-0000-0000-00000000000a', 'c1', 1, '2000-03-08 00:00:10.000001+00')$$),
    'TN103: tenure.claim_fence: instance 00000000-0000-0000-0000-00000000000a does not hold key c1 of chk in epoch 1'
        || ' / The claim expired at 2000-03-08 00:00:10+00 (now 2000-03-08 00:00:10.000001+00).',
    'its DETAIL says when the claim expired');
SELECT results_eq(
    $$SELECT key, epoch FROM tenure._claim_take('chk', '00000000-0000-0000-0000-00000000000b', '10 s', NULL,
                                                '2000-03-08 00:00:10.000001+00')$$,
    $$VALUES ('c1', 2::bigint), ('c2', 1)$$,
    'b, alone live now, takes c1 in epoch 2 and c2 in epoch 1');
SELECT ok(NOT tenure._claim_check('chk', '00000000-0000-0000-0000-00000000000a', 'c1', 1, '2000-03-08 00:00:11+00'),
    'check is false for the overtaken holder');
SELECT ok(tenure._claim_check('chk', '00000000-0000-0000-0000-00000000000b', 'c1', 2, '2000-03-08 00:00:11+00'),
    'check is true for the new holder');
SELECT lives_ok(
    $$SELECT tenure._claim_fence('chk', '00000000-0000-0000-0000-00000000000b', 'c1', 2, '2000-03-08 00:00:11+00')$$,
    'fence lets the new holder write');
SELECT throws_ok(
    $$SELECT tenure._claim_fence('chk', '00000000-0000-0000-0000-00000000000a', 'c1', 1, '2000-03-08 00:00:11+00')$$,
    'TN103', NULL, 'fence refuses the overtaken holder with its stale epoch');
SELECT is(
    pg_temp.error_of($$SELECT tenure._claim_fence('chk', '00000000-0000-0000-0000-00000000000a', 'c1', 1, '2000-03-08 00:00:11+00')$$),
    'TN103: tenure.claim_fence: instance 00000000-0000-0000-0000-00000000000a does not hold key c1 of chk in epoch 1'
        || ' / The key is held by 00000000-0000-0000-0000-00000000000b in epoch 2.',
    'its DETAIL names the holder and its epoch');
SELECT throws_ok(
    $$SELECT tenure._claim_fence('chk', '00000000-0000-0000-0000-00000000000b', 'c1', 1, '2000-03-08 00:00:11+00')$$,
    'TN103', NULL, 'fence refuses the holder with a stale epoch');
SELECT throws_ok(
    $$SELECT tenure._claim_fence('chk', '00000000-0000-0000-0000-00000000000a', 'c1', 2, '2000-03-08 00:00:11+00')$$,
    'TN103', NULL, 'fence refuses another instance with the current epoch');
SELECT throws_ok(
    $$SELECT tenure._claim_fence('chk', '00000000-0000-0000-0000-00000000000b', 'c1', 2, '2000-03-08 00:00:20.000002+00')$$,
    'TN103', NULL, 'fence refuses the holder once its claim expired');
SELECT throws_ok(
    $$SELECT tenure._claim_fence('chk', '00000000-0000-0000-0000-00000000000b', 'nokey', 1, '2000-03-08 00:00:11+00')$$,
    'TN103', 'tenure.claim_fence: instance 00000000-0000-0000-0000-00000000000b does not hold key nokey of chk in epoch 1',
    'fence refuses an unknown key');
SELECT is(
    pg_temp.error_of($$SELECT tenure._claim_fence('chk', '00000000-0000-0000-0000-00000000000b', 'nokey', 1, '2000-03-08 00:00:11+00')$$),
    'TN103: tenure.claim_fence: instance 00000000-0000-0000-0000-00000000000b does not hold key nokey of chk in epoch 1'
        || ' / Key ''nokey'' is not registered in keyspace ''chk''.',
    'its DETAIL says the key is not registered');
SELECT is(tenure._claim_release('chk', '00000000-0000-0000-0000-00000000000b', ARRAY['c2'], '2000-03-08 00:00:12+00'), 1,
    'b releases c2');
SELECT throws_ok(
    $$SELECT tenure._claim_fence('chk', '00000000-0000-0000-0000-00000000000b', 'c2', 1, '2000-03-08 00:00:12+00')$$,
    'TN103', NULL, 'fence refuses a key its holder released');
SELECT ok(NOT tenure._claim_check('chk', '00000000-0000-0000-0000-00000000000b', 'c2', 1, '2000-03-08 00:00:12+00'),
    'check is false for a key its holder released');

-- What keeps claims cheap (keyspace 'cost', T = 2000-03-09): the key count per keyspace,
-- each instance's cache of what it holds (trusted only while it vouches for now, cleared
-- by every other write to its claims), and expired claims found among the keys of
-- the claimants no cache vouches for.
SELECT is(tenure._claim_register('cost', ARRAY['c1', 'c2', 'c3', 'c4', 'c5', 'c6'], '2000-03-08 23:59:00+00'), 6,
    'cost: six keys registered');
SELECT is(tenure._claim_register('cost', ARRAY['c6', 'c7'], '2000-03-08 23:59:30+00'), 1, 'cost: one more, one again');
INSERT INTO tenure.claim_key (keyspace, key, unclaimed_since, registered_at)
VALUES ('cost', 'c8', '2000-03-08 23:59:30+00', '2000-03-08 23:59:30+00');
SELECT is((SELECT keys FROM tenure.claim_keyspace WHERE keyspace = 'cost'), 8::bigint,
    'claim_keyspace counts every key inserted, by claim_register or not, once');
SELECT is(tenure.claim_retire('cost', ARRAY['c8']), 1, 'cost: c8 retired');
SELECT is((SELECT keys FROM tenure.claim_keyspace WHERE keyspace = 'cost'), 7::bigint,
    'claim_keyspace counts a retired key out');
SELECT results_eq(
    $$SELECT key, epoch FROM tenure._claim_take('cost', '00000000-0000-0000-0000-00000000000a', '10 s', 3,
                                                 '2000-03-09 00:00:00+00')$$,
    $$VALUES ('c1', 1::bigint), ('c2', 1), ('c3', 1)$$,
    'cost: a takes three keys');
SELECT results_eq(
    $$SELECT held_count, held_at, held_until FROM tenure.claim_instance
       WHERE keyspace = 'cost' AND instance_id = '00000000-0000-0000-0000-00000000000a'$$,
    $$VALUES (3, '2000-03-09 00:00:00+00'::timestamptz, '2000-03-09 00:00:10+00'::timestamptz)$$,
    'a take leaves the caller''s cache: what it holds, since when, and the earliest expiry of its claims');
SELECT is((SELECT count(*) FROM tenure._claim_renew('cost', '00000000-0000-0000-0000-00000000000a', '10 s',
                                                     '2000-03-09 00:00:05+00') WHERE change = 'renewed'),
    3::bigint, 'cost: a renews its three keys');
SELECT results_eq(
    $$SELECT held_count, held_at, held_until FROM tenure.claim_instance
       WHERE keyspace = 'cost' AND instance_id = '00000000-0000-0000-0000-00000000000a'$$,
    $$VALUES (3, '2000-03-09 00:00:05+00'::timestamptz, '2000-03-09 00:00:15+00'::timestamptz)$$,
    'a renewal leaves the cache: every claim of the caller now expires at now + expiry');
SELECT is_empty(
    $$SELECT * FROM tenure._claim_renew('cost', '00000000-0000-0000-0000-00000000000b', '10 s', '2000-03-09 00:00:05+00')$$,
    'cost: b joins, holding nothing');
SELECT results_eq(
    $$SELECT held_count, held_until FROM tenure.claim_instance
       WHERE keyspace = 'cost' AND instance_id = '00000000-0000-0000-0000-00000000000b'$$,
    $$VALUES (0, 'infinity'::timestamptz)$$,
    'an instance that claims nothing has a cache that vouches for any time');
SELECT results_eq(
    $$SELECT key FROM tenure._claim_take('cost', '00000000-0000-0000-0000-00000000000b', '10 s', NULL,
                                          '2000-03-09 00:00:06+00')$$,
    $$VALUES ('c4'), ('c5'), ('c6'), ('c7')$$,
    'with 7 keys and 2 instances the share is 4: b takes the 4 free keys');
-- A cache that vouches for now decides alone: a take at the fair share reads no key.
UPDATE tenure.claim_instance SET held_count = 4
 WHERE keyspace = 'cost' AND instance_id = '00000000-0000-0000-0000-00000000000a';
SELECT is(tenure._claim_release('cost', '00000000-0000-0000-0000-00000000000b', ARRAY['c7'], '2000-03-09 00:00:07+00'), 1,
    'cost: b gives c7 back');
SELECT is((SELECT held_until FROM tenure.claim_instance
            WHERE keyspace = 'cost' AND instance_id = '00000000-0000-0000-0000-00000000000b'), NULL,
    'a release of some keys clears the caller''s cache');
SELECT is_empty(
    $$SELECT * FROM tenure._claim_take('cost', '00000000-0000-0000-0000-00000000000a', '10 s', NULL, '2000-03-09 00:00:08+00')$$,
    'a take whose cache vouches for now trusts it: a counted at its share takes nothing, without looking at the keys');
UPDATE tenure.claim_instance SET held_until = NULL
 WHERE keyspace = 'cost' AND instance_id = '00000000-0000-0000-0000-00000000000a';
SELECT results_eq(
    $$SELECT key, epoch FROM tenure._claim_take('cost', '00000000-0000-0000-0000-00000000000a', '10 s', NULL,
                                                 '2000-03-09 00:00:08+00')$$,
    $$VALUES ('c7', 2::bigint)$$,
    'a cache that cannot vouch is recounted from the keys: a holds 3 of its 4 and takes c7');
SELECT results_eq(
    $$SELECT held_count, held_at, held_until FROM tenure.claim_instance
       WHERE keyspace = 'cost' AND instance_id = '00000000-0000-0000-0000-00000000000a'$$,
    $$VALUES (4, '2000-03-09 00:00:08+00'::timestamptz, '2000-03-09 00:00:18+00'::timestamptz)$$,
    'after the recount and the take, the cache holds 4 and their expiry: the take extended a''s row, which they all follow');
SELECT results_eq(
    $$SELECT key, change FROM tenure._claim_renew('cost', '00000000-0000-0000-0000-00000000000b', '10 s',
                                                   '2000-03-09 00:00:09+00')$$,
    $$VALUES ('c4', 'renewed'), ('c5', 'renewed'), ('c6', 'renewed')$$,
    'a renewal without a cache that vouches renews the same keys');
SELECT results_eq(
    $$SELECT held_count, held_at, held_until FROM tenure.claim_instance
       WHERE keyspace = 'cost' AND instance_id = '00000000-0000-0000-0000-00000000000b'$$,
    $$VALUES (3, '2000-03-09 00:00:09+00'::timestamptz, '2000-03-09 00:00:19+00'::timestamptz)$$,
    'and rebuilds the cache');
-- a stops renewing: c1..c3 and c7 expire at 00:00:18, with a's row.
SELECT is((SELECT count(*) FROM tenure._claim_renew('cost', '00000000-0000-0000-0000-00000000000b', '10 s',
                                                     '2000-03-09 00:00:16+00')), 3::bigint, 'cost: b renews');
SELECT is_empty(
    $$SELECT * FROM tenure._claim_renew('cost', '00000000-0000-0000-0000-00000000000c', '10 s', '2000-03-09 00:00:16+00')$$,
    'cost: c joins');
SELECT is_empty(
    $$SELECT * FROM tenure._claim_take('cost', '00000000-0000-0000-0000-00000000000c', '10 s', NULL,
                                        '2000-03-09 00:00:17+00')$$,
    'share 3 (a, b, c live): before a''s row lapses c finds nothing to take');
SELECT results_eq(
    $$SELECT * FROM tenure._claim_take('cost', '00000000-0000-0000-0000-00000000000c', '10 s', 3,
                                        '2000-03-09 00:00:18.5+00')$$,
    $$VALUES ('c1', 2::bigint, '2000-03-09 00:00:28.5+00'::timestamptz, 'taken'),
             ('c2', 2, '2000-03-09 00:00:28.5+00', 'taken'),
             ('c3', 2, '2000-03-09 00:00:28.5+00', 'taken')$$,
    'once it lapsed (share 4, b and c live) c takes over 3 (its limit) of a''s claims, which expired with a''s row; c7 is still a''s');
SELECT results_eq(
    $$SELECT key, unclaimed_since FROM tenure.claim_log WHERE keyspace = 'cost' AND epoch = 2 AND key <> 'c7' ORDER BY key$$,
    $$VALUES ('c1', '2000-03-09 00:00:18+00'::timestamptz), ('c2', '2000-03-09 00:00:18+00'),
             ('c3', '2000-03-09 00:00:18+00')$$,
    'the claim log says since when each taken-over key was without a live claim');
SELECT is((SELECT held_until FROM tenure.claim_instance
            WHERE keyspace = 'cost' AND instance_id = '00000000-0000-0000-0000-00000000000a'), NULL,
    'the cache of the instance whose claims were taken over is cleared');
SELECT is(tenure._claim_release('cost', '00000000-0000-0000-0000-00000000000b', ARRAY['c4'], '2000-03-09 00:00:19+00'), 1,
    'cost: b gives c4 back at 00:00:19');
SELECT results_eq(
    $$SELECT key, epoch FROM tenure._claim_take('cost', '00000000-0000-0000-0000-00000000000c', '10 s', 1,
                                                 '2000-03-09 00:00:20+00')$$,
    $$VALUES ('c7', 3::bigint)$$,
    'free and expired keys in one order: c7, expired at 00:00:18 with a''s row, before c4, free since 00:00:19');
SELECT is(tenure.claim_retire('cost', ARRAY['c5']), 1, 'cost: c5, b''s, retired');
SELECT is((SELECT held_until FROM tenure.claim_instance
            WHERE keyspace = 'cost' AND instance_id = '00000000-0000-0000-0000-00000000000b'), NULL,
    'retiring a key clears the cache of its holder');
SELECT results_eq(
    $$SELECT key, change FROM tenure._claim_renew('cost', '00000000-0000-0000-0000-00000000000b', '10 s',
                                                   '2000-03-09 00:00:21+00')$$,
    $$VALUES ('c6', 'renewed')$$,
    'b''s next renewal returns the one key it still holds');
-- An instance whose row is gone (not live for 10 expiries) still has its expired claims taken over.
SELECT is(tenure._claim_register('cost2', ARRAY['k1'], '2000-03-09 00:00:00+00'), 1, 'cost2: one key');
SELECT is((SELECT count(*) FROM tenure._claim_take('cost2', '00000000-0000-0000-0000-00000000000d', '10 s', NULL,
                                                    '2000-03-09 00:00:00+00')), 1::bigint, 'cost2: d takes it for 10 s');
SELECT results_eq(
    $$SELECT key, epoch FROM tenure._claim_take('cost2', '00000000-0000-0000-0000-00000000000e', '10 s', NULL,
                                                 '2000-03-09 00:03:00+00')$$,
    $$VALUES ('k1', 2::bigint)$$,
    'long after, e takes over the expired claim of d');
SELECT is_empty($$SELECT * FROM tenure.claim_instance WHERE keyspace = 'cost2'
                   AND instance_id = '00000000-0000-0000-0000-00000000000d'$$,
    'though d''s row was deleted by that take, before it looked for expired claims');
-- A change of server re-bases live claims: every cache is cleared.
UPDATE tenure.server_generation SET timeline = timeline + 100
 WHERE generation = (SELECT max(generation) FROM tenure.server_generation);
SELECT is(tenure.claim_register('cost', ARRAY['c1']), 0, 'cost: a write on a "new" server');
SELECT is((SELECT count(*) FROM tenure.claim_instance WHERE held_until IS NOT NULL), 0::bigint,
    'a change of server clears every cache of held claims');
SELECT is_empty(
    $$SELECT keyspace, count(*) FROM tenure.claim_key GROUP BY keyspace
      EXCEPT SELECT keyspace, keys FROM tenure.claim_keyspace$$,
    'claim_keyspace holds the number of keys of every keyspace');
SAVEPOINT before_truncate;
SET LOCAL client_min_messages = warning;
TRUNCATE tenure.claim_key CASCADE;
SELECT is_empty($$SELECT * FROM tenure.claim_keyspace$$, 'a truncation of claim_key empties claim_keyspace');
ROLLBACK TO SAVEPOINT before_truncate;
RESET client_min_messages;

-- Durability does not depend on the caller's session ---------------------------------------
SET LOCAL synchronous_commit = off;
SELECT lives_ok($$SELECT * FROM tenure.claim_renew('durable', '00000000-0000-0000-0000-00000000000a', '10 s')$$,
    'a renewal in a session with synchronous_commit = off');
SELECT is(current_setting('synchronous_commit'), 'on',
    'tenure raised synchronous_commit to on for the transaction that renewed');
SET LOCAL synchronous_commit = on;

-- Bad input raises TN001 and changes nothing -----------------------------------------------
CREATE TEMP TABLE claim_key_before AS SELECT * FROM tenure.claim_key;
CREATE TEMP TABLE claim_instance_before AS SELECT * FROM tenure.claim_instance;
CREATE TEMP TABLE claim_log_before AS SELECT * FROM tenure.claim_log;
SELECT throws_ok($$SELECT tenure.claim_register('', ARRAY['x'])$$,
    'TN001', 'tenure.claim_register: p_keyspace must be a non-empty name', 'register refuses an empty keyspace');
SELECT throws_ok($$SELECT tenure.claim_register(NULL, ARRAY['x'])$$, 'TN001', NULL, 'register refuses a NULL keyspace');
SELECT throws_ok($$SELECT tenure.claim_register(repeat('s', 201), ARRAY['x'])$$, 'TN001', NULL,
    'register refuses an over-long keyspace');
SELECT throws_ok($$SELECT tenure.claim_register('bad', '{}')$$,
    'TN001', 'tenure.claim_register: p_keys must be a non-empty array of keys', 'register refuses an empty key array');
SELECT throws_ok($$SELECT tenure.claim_register('bad', NULL)$$, 'TN001', NULL, 'register refuses a NULL key array');
SELECT throws_ok($$SELECT tenure.claim_register('bad', ARRAY['x', NULL])$$,
    'TN001', 'tenure.claim_register: p_keys must hold non-empty keys of at most 200 characters',
    'register refuses a NULL element');
SELECT throws_ok($$SELECT tenure.claim_register('bad', ARRAY['x', ' '])$$, 'TN001', NULL, 'register refuses a blank key');
SELECT throws_ok($$SELECT tenure.claim_register('bad', ARRAY[repeat('k', 201)])$$, 'TN001', NULL,
    'register refuses an over-long key');
SELECT throws_ok($$SELECT tenure.claim_retire('', ARRAY['k1'])$$, 'TN001', NULL, 'retire refuses an empty keyspace');
SELECT throws_ok($$SELECT tenure.claim_retire('rel', '{}')$$, 'TN001', NULL, 'retire refuses an empty key array');
SELECT throws_ok($$SELECT tenure.claim_retire('rel', ARRAY['k1', NULL])$$, 'TN001', NULL,
    'retire refuses a NULL element, and retires none of the others');
SELECT throws_ok($$SELECT * FROM tenure.claim_renew('', '00000000-0000-0000-0000-00000000000a', '10 s')$$,
    'TN001', 'tenure.claim_renew: p_keyspace must be a non-empty name', 'renew refuses an empty keyspace');
SELECT throws_ok($$SELECT * FROM tenure.claim_renew('fair', NULL, '10 s')$$,
    'TN001', 'tenure.claim_renew: p_instance must not be NULL', 'renew refuses a NULL instance');
SELECT throws_ok($$SELECT * FROM tenure.claim_renew('fair', '00000000-0000-0000-0000-00000000000a', '0 s')$$,
    'TN001', 'tenure.claim_renew: p_expiry must be a positive interval', 'renew refuses a zero expiry');
SELECT throws_ok($$SELECT * FROM tenure.claim_renew('fair', '00000000-0000-0000-0000-00000000000a', '-1 s')$$,
    'TN001', NULL, 'renew refuses a negative expiry');
SELECT throws_ok($$SELECT * FROM tenure.claim_renew('fair', '00000000-0000-0000-0000-00000000000a', NULL)$$,
    'TN001', NULL, 'renew refuses a NULL expiry');
SELECT throws_ok($$SELECT * FROM tenure.claim_take('', '00000000-0000-0000-0000-00000000000a', '10 s')$$,
    'TN001', 'tenure.claim_take: p_keyspace must be a non-empty name', 'take refuses an empty keyspace');
SELECT throws_ok($$SELECT * FROM tenure.claim_take('fair', NULL, '10 s')$$,
    'TN001', 'tenure.claim_take: p_instance must not be NULL', 'take refuses a NULL instance');
SELECT throws_ok($$SELECT * FROM tenure.claim_take('fair', '00000000-0000-0000-0000-00000000000d', '0 s')$$,
    'TN001', 'tenure.claim_take: p_expiry must be a positive interval', 'take refuses a zero expiry');
SELECT throws_ok($$SELECT * FROM tenure.claim_take('fair', '00000000-0000-0000-0000-00000000000d', '-1 s')$$,
    'TN001', NULL, 'take refuses a negative expiry');
SELECT throws_ok($$SELECT * FROM tenure.claim_take('fair', '00000000-0000-0000-0000-00000000000d', '10 s', 0)$$,
    'TN001', 'tenure.claim_take: p_limit must be NULL (up to the fair share) or at least 1', 'take refuses p_limit 0');
SELECT throws_ok($$SELECT * FROM tenure.claim_take('fair', '00000000-0000-0000-0000-00000000000d', '10 s', -1)$$,
    'TN001', NULL, 'take refuses a negative p_limit');
SELECT throws_ok($$SELECT tenure.claim_release('', '00000000-0000-0000-0000-00000000000a')$$,
    'TN001', 'tenure.claim_release: p_keyspace must be a non-empty name', 'release refuses an empty keyspace');
SELECT throws_ok($$SELECT tenure.claim_release('fair', NULL)$$,
    'TN001', 'tenure.claim_release: p_instance must not be NULL', 'release refuses a NULL instance');
SELECT throws_ok($$SELECT tenure.claim_release('fair', '00000000-0000-0000-0000-00000000000a', '{}')$$,
    'TN001', 'tenure.claim_release: p_keys must be a non-empty array of keys', 'release refuses an empty key array');
SELECT throws_ok($$SELECT tenure.claim_release('fair', '00000000-0000-0000-0000-00000000000a', ARRAY['k06', NULL])$$,
    'TN001', NULL, 'release refuses a NULL element, and releases none of the others');
SELECT throws_ok($$SELECT tenure.claim_check('', '00000000-0000-0000-0000-00000000000a', 'c1', 1)$$,
    'TN001', 'tenure.claim_check: p_keyspace must be a non-empty name', 'check refuses an empty keyspace');
SELECT throws_ok($$SELECT tenure.claim_check('chk', NULL, 'c1', 1)$$, 'TN001', NULL, 'check refuses a NULL instance');
SELECT throws_ok($$SELECT tenure.claim_check('chk', '00000000-0000-0000-0000-00000000000a', '', 1)$$,
    'TN001', 'tenure.claim_check: p_key must be a non-empty name', 'check refuses an empty key');
SELECT throws_ok($$SELECT tenure.claim_check('chk', '00000000-0000-0000-0000-00000000000a', NULL, 1)$$,
    'TN001', NULL, 'check refuses a NULL key');
SELECT throws_ok($$SELECT tenure.claim_check('chk', '00000000-0000-0000-0000-00000000000a', 'c1', 0)$$,
    'TN001', 'tenure.claim_check: p_epoch must be an epoch of at least 1', 'check refuses epoch 0');
SELECT throws_ok($$SELECT tenure.claim_check('chk', '00000000-0000-0000-0000-00000000000a', 'c1', NULL)$$,
    'TN001', NULL, 'check refuses a NULL epoch');
SELECT throws_ok($$SELECT tenure.claim_fence('', '00000000-0000-0000-0000-00000000000a', 'c1', 1)$$,
    'TN001', 'tenure.claim_fence: p_keyspace must be a non-empty name', 'fence refuses an empty keyspace');
SELECT throws_ok($$SELECT tenure.claim_fence('chk', NULL, 'c1', 1)$$, 'TN001', NULL, 'fence refuses a NULL instance');
SELECT throws_ok($$SELECT tenure.claim_fence('chk', '00000000-0000-0000-0000-00000000000a', ' ', 1)$$,
    'TN001', NULL, 'fence refuses a blank key');
SELECT throws_ok($$SELECT tenure.claim_fence('chk', '00000000-0000-0000-0000-00000000000a', 'c1', 0)$$,
    'TN001', 'tenure.claim_fence: p_epoch must be an epoch of at least 1', 'fence refuses epoch 0 with TN001, not TN103');
SELECT throws_ok($$SELECT tenure.claim_fence('chk', '00000000-0000-0000-0000-00000000000a', 'c1', NULL)$$,
    'TN001', NULL, 'fence refuses a NULL epoch');
SELECT results_eq($$SELECT * FROM tenure.claim_key ORDER BY keyspace, key$$,
    $$SELECT * FROM claim_key_before ORDER BY keyspace, key$$, 'refused calls changed no key');
SELECT results_eq($$SELECT * FROM tenure.claim_instance ORDER BY keyspace, instance_id$$,
    $$SELECT * FROM claim_instance_before ORDER BY keyspace, instance_id$$, 'refused calls marked no instance live');
SELECT results_eq($$SELECT * FROM tenure.claim_log ORDER BY keyspace, key, epoch$$,
    $$SELECT * FROM claim_log_before ORDER BY keyspace, key, epoch$$, 'refused calls granted no claim');

-- Least privilege: the worker role calls the functions and reads the views, nothing else -----
SET LOCAL ROLE tenure_worker;
SELECT is(tenure.claim_register('worker', ARRAY['w1', 'w2', 'w3']), 3, 'tenure_worker can call claim_register');
SELECT results_eq(
    $$SELECT key, epoch, change, expires_at BETWEEN now() + interval '1 min' AND clock_timestamp() + interval '1 min'
        FROM tenure.claim_take('worker', '00000000-0000-0000-0000-00000000000c', '1 min')$$,
    $$VALUES ('w1', 1::bigint, 'taken', true), ('w2', 1, 'taken', true), ('w3', 1, 'taken', true)$$,
    'tenure_worker can call claim_take, which claims by the server clock');
SELECT is_empty(
    $$SELECT * FROM tenure.claim_take('worker', '00000000-0000-0000-0000-00000000000d', '1 min')$$,
    'a second instance finds nothing free');
SELECT results_eq(
    $$SELECT key, claimant, epoch, live, unclaimed_for, claim_age IS NOT NULL FROM tenure.claims
       WHERE keyspace = 'worker' ORDER BY key$$,
    $$VALUES ('w1', '00000000-0000-0000-0000-00000000000c'::uuid, 1::bigint, true, NULL::interval, true),
             ('w2', '00000000-0000-0000-0000-00000000000c', 1, true, NULL, true),
             ('w3', '00000000-0000-0000-0000-00000000000c', 1, true, NULL, true)$$,
    'tenure_worker can read tenure.claims: every key live, held by c');
SELECT results_eq(
    $$SELECT instance_id, live, keys_held, fair_share FROM tenure.claim_instances WHERE keyspace = 'worker' ORDER BY instance_id$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000c'::uuid, true, 3::bigint, 2::bigint),
             ('00000000-0000-0000-0000-00000000000d', true, 0, 2)$$,
    'tenure_worker can read tenure.claim_instances: keys held and the fair share ceil(3 / 2) = 2');
-- Keys taken in one call by the server clock are claimed at slightly different times, in no
-- particular order: the most recently claimed one is looked up rather than assumed.
CREATE TEMP TABLE worker_claims AS SELECT key, claimed_at FROM tenure.claims WHERE keyspace = 'worker';
CREATE TEMP TABLE worker_renewal AS
SELECT * FROM tenure.claim_renew('worker', '00000000-0000-0000-0000-00000000000c', '1 min');
SELECT results_eq(
    $$SELECT change, count(*), bool_and(expires_at IS NULL) FROM worker_renewal GROUP BY change ORDER BY change$$,
    $$VALUES ('released', 1::bigint, true), ('renewed', 2, false)$$,
    'tenure_worker can call claim_renew: c gives up the key above its share');
SELECT is(
    (SELECT key FROM worker_renewal WHERE change = 'released'),
    (SELECT key FROM worker_claims ORDER BY claimed_at DESC, key DESC LIMIT 1),
    'the key given up is the most recently claimed one');
SELECT ok(tenure.claim_check('worker', '00000000-0000-0000-0000-00000000000c',
                             (SELECT min(key) FROM worker_renewal WHERE change = 'renewed'), 1),
    'claim_check by the server clock');
SELECT lives_ok(
    $$SELECT tenure.claim_fence('worker', '00000000-0000-0000-0000-00000000000c',
                                (SELECT min(key) FROM worker_renewal WHERE change = 'renewed'), 1)$$,
    'claim_fence by the server clock lets the holder write');
SELECT throws_ok(
    $$SELECT tenure.claim_fence('worker', '00000000-0000-0000-0000-00000000000c',
                                (SELECT key FROM worker_renewal WHERE change = 'released'), 1)$$,
    'TN103', NULL, 'claim_fence by the server clock refuses a released key');
SELECT results_eq(
    $$SELECT c.claimant, c.unclaimed_for IS NOT NULL, c.live FROM tenure.claims c
       WHERE c.keyspace = 'worker' AND c.key = (SELECT key FROM worker_renewal WHERE change = 'released')$$,
    $$VALUES (NULL::uuid, true, false)$$,
    'the view shows the released key unclaimed, not live, and for how long it has been unclaimed');
SELECT is(tenure.claim_release('worker', '00000000-0000-0000-0000-00000000000c'), 2, 'tenure_worker can call claim_release');
SELECT is(tenure.claim_retire('worker', ARRAY['w1', 'w2', 'w3']), 3, 'tenure_worker can call claim_retire');
SELECT throws_ok($$SELECT * FROM tenure.claim_key$$, '42501', NULL, 'tenure_worker cannot read the claim_key table');
SELECT throws_ok($$SELECT * FROM tenure.claim_instance$$, '42501', NULL, 'tenure_worker cannot read the claim_instance table');
SELECT throws_ok($$SELECT * FROM tenure.claim_log$$, '42501', NULL, 'tenure_worker cannot read the claim log');
SELECT throws_ok(
    $$SELECT * FROM tenure._claim_take('worker', '00000000-0000-0000-0000-00000000000c', '1 min', NULL, now())$$,
    '42501', NULL, 'tenure_worker cannot call the time-travel function');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
