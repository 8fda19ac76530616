-- Claims follow their claimant's instance row (claims_follow_instance), by time travel on
-- day T = 2000-03-11 (instances a = ...0a, b = ...0b): attached claims expire with the
-- row; a row that lapsed leaves them detached with its expiry, whether its own renewal or
-- a take finds it so; deleting a row detaches them too; claims that came detached (from
-- before the change) are attached by their holder's next renewal.
BEGIN;
SELECT plan(26);

SELECT has_column('tenure', 'claim_key', 'attached', 'claim_key.attached exists');
SELECT has_index('tenure', 'claim_key', 'claim_key_detached', 'the index of detached claims exists');

-- A lapsed row, found by a take ('lap') ---------------------------------------------------
SELECT is(tenure._claim_register('lap', ARRAY['l1', 'l2', 'l3', 'l4'], '2000-03-10 23:59:00+00'), 4, 'lap: four keys');
SELECT is((SELECT count(*) FROM tenure._claim_cycle('lap', '00000000-0000-0000-0000-00000000000a', '10 s', 2,
                                                     '2000-03-11 00:00:00+00')), 2::bigint, 'a takes l1 and l2');
SELECT is((SELECT count(*) FROM tenure._claim_cycle('lap', '00000000-0000-0000-0000-00000000000a', '10 s', NULL,
                                                     '2000-03-11 00:00:05+00') WHERE change = 'renewed'), 2::bigint,
    'a renews both until 00:00:15, and takes the other two');
SELECT results_eq(
    $$SELECT key, attached, expires_at FROM tenure.claim_key WHERE keyspace = 'lap' AND key IN ('l1', 'l2') ORDER BY key$$,
    $$VALUES ('l1', true, '2000-03-11 00:00:10+00'::timestamptz), ('l2', true, '2000-03-11 00:00:10+00')$$,
    'a renewal writes no key: each keeps the expiry it was taken with, attached');
SELECT ok(tenure._claim_check('lap', '00000000-0000-0000-0000-00000000000a', 'l1', 1, '2000-03-11 00:00:15+00'),
    'check follows the instance row: l1 is a''s at 00:00:15');
SELECT ok(NOT tenure._claim_check('lap', '00000000-0000-0000-0000-00000000000a', 'l1', 1, '2000-03-11 00:00:15.000001+00'),
    'and not a microsecond after the row''s expiry');
SELECT throws_like(
    $$SELECT tenure._claim_fence('lap', '00000000-0000-0000-0000-00000000000a', 'l1', 1, '2000-03-11 00:00:16+00')$$,
    '%does not hold key l1%',
    'fence refuses a claim whose row lapsed');
SELECT is_empty(
    $$SELECT * FROM tenure._claim_cycle('lap', '00000000-0000-0000-0000-00000000000b', '10 s', NULL, '2000-03-11 00:00:14+00')$$,
    'b joins while a is live: nothing to take (share 2, a above it until its next cycle)');
SELECT results_eq(
    $$SELECT key, epoch FROM tenure._claim_take('lap', '00000000-0000-0000-0000-00000000000b', '10 s', 1,
                                                 '2000-03-11 00:00:16+00')$$,
    $$VALUES ('l1', 2::bigint)$$,
    'once a''s row lapsed, b takes one of its claims');
SELECT results_eq(
    $$SELECT key, claimant, attached, expires_at FROM tenure.claim_key WHERE keyspace = 'lap' ORDER BY key$$,
    $$VALUES ('l1', '00000000-0000-0000-0000-00000000000b'::uuid, true, '2000-03-11 00:00:26+00'::timestamptz),
             ('l2', '00000000-0000-0000-0000-00000000000a', false, '2000-03-11 00:00:15+00'),
             ('l3', '00000000-0000-0000-0000-00000000000a', false, '2000-03-11 00:00:15+00'),
             ('l4', '00000000-0000-0000-0000-00000000000a', false, '2000-03-11 00:00:15+00')$$,
    'the take left a''s other claims detached, with the expiry of its lapsed row');
SELECT is((SELECT held_until FROM tenure.claim_instance
            WHERE keyspace = 'lap' AND instance_id = '00000000-0000-0000-0000-00000000000a'), NULL,
    'and cleared a''s cache');
SELECT is_empty(
    $$SELECT * FROM tenure._claim_cycle('lap', '00000000-0000-0000-0000-00000000000a', '10 s', 1, '2000-03-11 00:00:17+00')
       WHERE change <> 'taken'$$,
    'a, back, renews none of its expired claims');
SELECT results_eq(
    $$SELECT c.key, k.attached, c.expires_at FROM tenure.claims c JOIN tenure.claim_key k USING (keyspace, key)
       WHERE c.keyspace = 'lap' AND c.claimant = '00000000-0000-0000-0000-00000000000a'
         AND c.expires_at >= '2000-03-11 00:00:17+00' ORDER BY c.key$$,
    $$VALUES ('l2', true, '2000-03-11 00:00:27+00'::timestamptz)$$,
    'it took one back (epoch 2), attached; the others went on expired... ');
SELECT results_eq(
    $$SELECT key, claimant FROM tenure.claim_key WHERE keyspace = 'lap' AND key IN ('l3', 'l4') ORDER BY key$$,
    $$VALUES ('l3', '00000000-0000-0000-0000-00000000000a'::uuid), ('l4', '00000000-0000-0000-0000-00000000000a')$$,
    '... still a''s name on them, detached and expired, until some instance takes them');

-- A lapsed row, found by its own renewal ('self') --------------------------------------------
SELECT is(tenure._claim_register('self', ARRAY['s1'], '2000-03-10 23:59:00+00'), 1, 'self: one key');
SELECT is((SELECT count(*) FROM tenure._claim_cycle('self', '00000000-0000-0000-0000-00000000000a', '10 s', NULL,
                                                     '2000-03-11 00:00:00+00')), 1::bigint, 'a takes s1');
SELECT results_eq(
    $$SELECT key, change FROM tenure._claim_cycle('self', '00000000-0000-0000-0000-00000000000a', '10 s', NULL,
                                                  '2000-03-11 00:00:10.000001+00')$$,
    $$VALUES ('s1', 'taken')$$,
    'a cycle a microsecond after its row lapsed renews nothing: it takes s1 again, in a new epoch');
SELECT is((SELECT epoch FROM tenure.claim_key WHERE keyspace = 'self' AND key = 's1'), 2::bigint, 'epoch 2');

-- A deleted row, and claims that came detached ('del') -------------------------------------
SELECT is(tenure._claim_register('del', ARRAY['d1', 'd2'], '2000-03-10 23:59:00+00'), 2, 'del: two keys');
SELECT is((SELECT count(*) FROM tenure._claim_cycle('del', '00000000-0000-0000-0000-00000000000a', '10 s', NULL,
                                                     '2000-03-11 00:00:00+00')), 2::bigint, 'a takes both');
SELECT is((SELECT count(*) FROM tenure._claim_renew('del', '00000000-0000-0000-0000-00000000000a', '20 s',
                                                     '2000-03-11 00:00:05+00')), 2::bigint, 'a renews both until 00:00:25');
DELETE FROM tenure.claim_instance WHERE keyspace = 'del';
SELECT results_eq(
    $$SELECT key, attached, expires_at FROM tenure.claim_key WHERE keyspace = 'del' ORDER BY key$$,
    $$VALUES ('d1', false, '2000-03-11 00:00:25+00'::timestamptz), ('d2', false, '2000-03-11 00:00:25+00')$$,
    'deleting an instance row leaves its claims detached with the row''s expiry');
SELECT results_eq(
    $$SELECT key, expires_at, change FROM tenure._claim_renew('del', '00000000-0000-0000-0000-00000000000a', '10 s',
                                                              '2000-03-11 00:00:20+00') ORDER BY key$$,
    $$VALUES ('d1', '2000-03-11 00:00:30+00'::timestamptz, 'renewed'), ('d2', '2000-03-11 00:00:30+00', 'renewed')$$,
    'live claims that are detached (as every claim from before the change) are renewed by their holder''s next renewal');
SELECT is((SELECT count(*) FROM tenure.claim_key WHERE keyspace = 'del' AND attached), 2::bigint, '... which attaches them');

SELECT * FROM finish();
ROLLBACK;
