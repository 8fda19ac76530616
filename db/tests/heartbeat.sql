-- Heartbeat election: signatures, the takeover rule by time travel, fencing and bad input.
-- Instances: a = ...0a, b = ...0b; T = 3 s, I = 1 s; t0 = 2026-01-01 00:00:00 UTC.
BEGIN;
SELECT plan(72);

-- Signatures -------------------------------------------------------------------
SELECT has_function('tenure', 'update_heartbeat', ARRAY['uuid', 'text', 'interval', 'interval']);
SELECT function_returns('tenure', 'update_heartbeat', ARRAY['uuid', 'text', 'interval', 'interval'], 'setof tenure.primary_entry');
SELECT has_function('tenure', 'get_primary', ARRAY['text']);
SELECT function_returns('tenure', 'get_primary', ARRAY['text'], 'setof tenure.primary_entry');
SELECT has_function('tenure', 'check_primary', ARRAY['uuid', 'text']);
SELECT function_returns('tenure', 'check_primary', ARRAY['uuid', 'text'], 'boolean');
SELECT has_function('tenure', 'heartbeat_resign', ARRAY['uuid', 'text']);
SELECT function_returns('tenure', 'heartbeat_resign', ARRAY['uuid', 'text'], 'boolean');
SELECT has_function('tenure', 'heartbeat_fence', ARRAY['uuid', 'text', 'bigint']);
SELECT function_returns('tenure', 'heartbeat_fence', ARRAY['uuid', 'text', 'bigint'], 'void');
SELECT has_view('tenure', 'heartbeat_status', 'operator view heartbeat_status exists');
SELECT columns_are('tenure', 'heartbeat_status', ARRAY['utype', 'instance_id', 'term', 'renewed_at',
    'heartbeat_age', 'timeout', 'heartbeat_interval', 'valid_until', 'live', 'term_started_at']);

-- First bid and contention -------------------------------------------------------
SELECT results_eq(
    $$SELECT instance_id, term, renewed_at, valid_until FROM tenure._update_heartbeat(
        '00000000-0000-0000-0000-00000000000a', 'sched', '3 s', '1 s', '2026-01-01 00:00:00+00')$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000a'::uuid, 1::bigint,
              '2026-01-01 00:00:00+00'::timestamptz, '2026-01-01 00:00:03+00'::timestamptz)$$,
    'the first bid for a type wins term 1');
SELECT results_eq(
    $$SELECT instance_id, term FROM tenure._update_heartbeat(
        '00000000-0000-0000-0000-00000000000b', 'sched', '3 s', '1 s', '2026-01-01 00:00:01+00')$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000a'::uuid, 1::bigint)$$,
    'a bid against a live primary is discarded and names the primary');
SELECT results_eq(
    $$SELECT instance_id, term, renewed_at FROM tenure._update_heartbeat(
        '00000000-0000-0000-0000-00000000000a', 'sched', '3 s', '1 s', '2026-01-01 00:00:02+00')$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000a'::uuid, 1::bigint, '2026-01-01 00:00:02+00'::timestamptz)$$,
    'the primary renews with the given time and keeps its term');

-- The takeover boundary: T exactly, just before, just after ---------------------------
SELECT results_eq(
    $$SELECT instance_id, term FROM tenure._update_heartbeat(
        '00000000-0000-0000-0000-00000000000b', 'sched', '3 s', '1 s', '2026-01-01 00:00:04.999999+00')$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000a'::uuid, 1::bigint)$$,
    'just before T has passed, no takeover');
SELECT results_eq(
    $$SELECT instance_id, term FROM tenure._update_heartbeat(
        '00000000-0000-0000-0000-00000000000b', 'sched', '3 s', '1 s', '2026-01-01 00:00:05+00')$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000a'::uuid, 1::bigint)$$,
    'at exactly T since the last heartbeat, no takeover (it must be more than T)');
SELECT results_eq(
    $$SELECT instance_id FROM tenure._get_primary('sched', '2026-01-01 00:00:05+00')$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000a'::uuid)$$,
    'get_primary still names the primary at exactly T');
SELECT ok(tenure._check_primary('00000000-0000-0000-0000-00000000000a', 'sched', '2026-01-01 00:00:05+00'),
    'check_primary is true for the primary at exactly T');
SELECT is_empty(
    $$SELECT * FROM tenure._get_primary('sched', '2026-01-01 00:00:05.000001+00')$$,
    'get_primary returns nothing just after T');
SELECT ok(NOT tenure._check_primary('00000000-0000-0000-0000-00000000000a', 'sched', '2026-01-01 00:00:05.000001+00'),
    'check_primary is false for the old primary just after T');
SELECT results_eq(
    $$SELECT instance_id, term, renewed_at FROM tenure._update_heartbeat(
        '00000000-0000-0000-0000-00000000000b', 'sched', '3 s', '1 s', '2026-01-01 00:00:05.000001+00')$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000b'::uuid, 2::bigint, '2026-01-01 00:00:05.000001+00'::timestamptz)$$,
    'just after T, another instance takes over with the next term');
SELECT results_eq(
    $$SELECT instance_id, term FROM tenure._update_heartbeat(
        '00000000-0000-0000-0000-00000000000a', 'sched', '3 s', '1 s', '2026-01-01 00:00:05.5+00')$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000b'::uuid, 2::bigint)$$,
    'the old primary cannot renew once overtaken; it learns who took over');
SELECT ok(tenure._check_primary('00000000-0000-0000-0000-00000000000b', 'sched', '2026-01-01 00:00:06+00'),
    'check_primary is true for the new primary');
SELECT ok(NOT tenure._check_primary('00000000-0000-0000-0000-00000000000a', 'sched', '2026-01-01 00:00:06+00'),
    'check_primary is false for the old primary');
SELECT results_eq(
    $$SELECT term, instance_id, started_at, ended_at, end_reason FROM tenure.heartbeat_term
       WHERE utype = 'sched' ORDER BY term$$,
    $$VALUES (1::bigint, '00000000-0000-0000-0000-00000000000a'::uuid, '2026-01-01 00:00:00+00'::timestamptz,
              '2026-01-01 00:00:05+00'::timestamptz, 'expired'),
             (2, '00000000-0000-0000-0000-00000000000b', '2026-01-01 00:00:05.000001+00', NULL, NULL)$$,
    'the term history records who led when: term 1 ended at last heartbeat + T');

-- Fencing ---------------------------------------------------------------------------
SELECT lives_ok(
    $$SELECT tenure._heartbeat_fence('00000000-0000-0000-0000-00000000000b', 'sched', 2, '2026-01-01 00:00:06+00')$$,
    'the fence lets the live primary write in its term');
SELECT throws_ok(
    $$SELECT tenure._heartbeat_fence('00000000-0000-0000-0000-00000000000a', 'sched', 1, '2026-01-01 00:00:06+00')$$,
    'TN101', NULL, 'the fence refuses the overtaken primary with not_primary (TN101)');
SELECT throws_ok(
    $$SELECT tenure._heartbeat_fence('00000000-0000-0000-0000-00000000000b', 'sched', 1, '2026-01-01 00:00:06+00')$$,
    'TN101', NULL, 'the fence refuses the right instance with a stale term');
SELECT throws_ok(
    $$SELECT tenure._heartbeat_fence('00000000-0000-0000-0000-00000000000b', 'sched', 2, '2026-01-01 00:00:09+00')$$,
    'TN101', NULL, 'the fence refuses a primary whose heartbeat expired, before anyone took over');
SELECT throws_ok(
    $$SELECT tenure._heartbeat_fence('00000000-0000-0000-0000-00000000000b', 'nosuchtype', 2, '2026-01-01 00:00:06+00')$$,
    'TN101', NULL, 'the fence refuses a type that has no entry');

-- Own expiry: the same instance re-bidding after its entry expired starts a new term.
SELECT results_eq(
    $$SELECT instance_id, term FROM tenure._update_heartbeat(
        '00000000-0000-0000-0000-00000000000b', 'sched', '3 s', '1 s', '2026-01-01 00:00:09+00')$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000b'::uuid, 3::bigint)$$,
    'a primary that let its own entry expire comes back in a new term');

-- Resignation ---------------------------------------------------------------------------
SELECT ok(NOT tenure._heartbeat_resign('00000000-0000-0000-0000-00000000000a', 'sched', '2026-01-01 00:00:10+00'),
    'an instance that is not primary cannot resign');
SELECT results_eq(
    $$SELECT instance_id, term FROM tenure._get_primary('sched', '2026-01-01 00:00:10+00')$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000b'::uuid, 3::bigint)$$,
    'a refused resignation changes nothing');
SELECT ok(tenure._heartbeat_resign('00000000-0000-0000-0000-00000000000b', 'sched', '2026-01-01 00:00:10+00'),
    'the primary resigns');
SELECT is_empty($$SELECT * FROM tenure._get_primary('sched', '2026-01-01 00:00:10+00')$$,
    'after resignation there is no primary');
SELECT results_eq(
    $$SELECT ended_at, end_reason FROM tenure.heartbeat_term WHERE utype = 'sched' AND term = 3$$,
    $$VALUES ('2026-01-01 00:00:10+00'::timestamptz, 'resigned')$$,
    'the resignation closes the term at once');
SELECT throws_ok(
    $$SELECT tenure._heartbeat_fence('00000000-0000-0000-0000-00000000000b', 'sched', 3, '2026-01-01 00:00:10+00')$$,
    'TN101', NULL, 'the fence refuses a primary that resigned');
SELECT results_eq(
    $$SELECT instance_id, term FROM tenure._update_heartbeat(
        '00000000-0000-0000-0000-00000000000a', 'sched', '3 s', '1 s', '2026-01-01 00:00:10.1+00')$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000a'::uuid, 4::bigint)$$,
    'after a resignation the next bid takes over without waiting for T');
SELECT is(
    (SELECT array_agg(term ORDER BY started_at) FROM tenure.heartbeat_term WHERE utype = 'sched'),
    ARRAY[1, 2, 3, 4]::bigint[],
    'terms only grow, one per change of hands');

-- Types are independent; the holder's own T decides expiry ----------------------------
SELECT results_eq(
    $$SELECT instance_id, term FROM tenure._update_heartbeat(
        '00000000-0000-0000-0000-00000000000b', 'billing', '10 s', NULL, '2026-01-01 00:00:10.1+00')$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000b'::uuid, 1::bigint)$$,
    'each type has its own primary; the interval is optional');
SELECT results_eq(
    $$SELECT instance_id FROM tenure._update_heartbeat(
        '00000000-0000-0000-0000-00000000000a', 'billing', '1 s', NULL, '2026-01-01 00:00:15+00')$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000b'::uuid)$$,
    'a bidder with a shorter T cannot cut the holder''s T short');

-- The public wrappers use the server's clock ------------------------------------------
SELECT results_eq(
    $$SELECT instance_id, term, renewed_at <= clock_timestamp() AND valid_until = renewed_at + interval '3 s'
        FROM tenure.update_heartbeat('00000000-0000-0000-0000-0000000000c1', 'live', '3 s', '1 s')$$,
    $$VALUES ('00000000-0000-0000-0000-0000000000c1'::uuid, 1::bigint, true)$$,
    'update_heartbeat elects with the server clock');
SELECT ok(tenure.check_primary('00000000-0000-0000-0000-0000000000c1', 'live'), 'check_primary with the server clock');
SELECT ok(NOT tenure.check_primary('00000000-0000-0000-0000-0000000000c1', 'unknown-type'), 'check_primary is false for an unknown type');
SELECT is_empty($$SELECT * FROM tenure.get_primary('unknown-type')$$, 'get_primary is empty for an unknown type');
SELECT lives_ok($$SELECT tenure.heartbeat_fence('00000000-0000-0000-0000-0000000000c1', 'live', 1)$$,
    'heartbeat_fence with the server clock');
SELECT results_eq(
    $$SELECT utype, live, term FROM tenure.heartbeat_status WHERE utype IN ('live', 'sched') ORDER BY utype$$,
    $$VALUES ('live', true, 1::bigint), ('sched', false, 4::bigint)$$,
    'the operator view shows each type with its term and liveness');

-- Durability does not depend on the caller's session ----------------------------------
SET LOCAL synchronous_commit = off;
SELECT lives_ok($$SELECT * FROM tenure.update_heartbeat('00000000-0000-0000-0000-0000000000c1', 'live', '3 s', '1 s')$$,
    'a renewal in a session with synchronous_commit = off');
SELECT is(current_setting('synchronous_commit'), 'on',
    'tenure raised synchronous_commit to on for the transaction that wrote a heartbeat');
SET LOCAL synchronous_commit = remote_apply;
SELECT lives_ok($$SELECT * FROM tenure.update_heartbeat('00000000-0000-0000-0000-0000000000c1', 'live', '3 s', '1 s')$$,
    'a renewal in a session with synchronous_commit = remote_apply');
SELECT is(current_setting('synchronous_commit'), 'remote_apply', 'tenure never lowers synchronous_commit');
SET LOCAL synchronous_commit = on;

-- Bad input raises tenure's SQLSTATEs and changes nothing -------------------------------
CREATE TEMP TABLE before AS SELECT * FROM tenure.heartbeat;
CREATE TEMP TABLE before_terms AS SELECT * FROM tenure.heartbeat_term;
SELECT throws_ok($$SELECT * FROM tenure.update_heartbeat('00000000-0000-0000-0000-00000000000a', NULL, '3 s')$$,
    'TN001', 'tenure.update_heartbeat: p_utype must be a non-empty name', 'NULL utype is refused');
SELECT throws_ok($$SELECT * FROM tenure.update_heartbeat('00000000-0000-0000-0000-00000000000a', '', '3 s')$$,
    'TN001', NULL, 'empty utype is refused');
SELECT throws_ok($$SELECT * FROM tenure.update_heartbeat('00000000-0000-0000-0000-00000000000a', '   ', '3 s')$$,
    'TN001', NULL, 'blank utype is refused');
SELECT throws_ok($$SELECT * FROM tenure.update_heartbeat('00000000-0000-0000-0000-00000000000a', repeat('x', 201), '3 s')$$,
    'TN001', NULL, 'an over-long utype is refused');
SELECT throws_ok($$SELECT * FROM tenure.update_heartbeat(NULL, 'sched', '3 s')$$,
    'TN001', 'tenure.update_heartbeat: p_instance_id must not be NULL', 'NULL instance is refused');
SELECT throws_ok($$SELECT * FROM tenure.update_heartbeat('00000000-0000-0000-0000-00000000000a', 'sched', '0 s')$$,
    'TN001', 'tenure.update_heartbeat: p_timeout must be a positive interval', 'T = 0 is refused');
SELECT throws_ok($$SELECT * FROM tenure.update_heartbeat('00000000-0000-0000-0000-00000000000a', 'sched', '-1 s')$$,
    'TN001', NULL, 'negative T is refused');
SELECT throws_ok($$SELECT * FROM tenure.update_heartbeat('00000000-0000-0000-0000-00000000000a', 'sched', NULL)$$,
    'TN001', NULL, 'NULL T is refused');
SELECT throws_ok($$SELECT * FROM tenure.update_heartbeat('00000000-0000-0000-0000-00000000000a', 'sched', '3 s', '0 s')$$,
    'TN001', NULL, 'I = 0 is refused');
SELECT throws_ok($$SELECT * FROM tenure.update_heartbeat('00000000-0000-0000-0000-00000000000a', 'sched', '2 s', '1 s')$$,
    'TN002', 'tenure.update_heartbeat: p_timeout must be longer than twice p_interval', 'T = 2I is refused');
SELECT throws_ok($$SELECT * FROM tenure.update_heartbeat('00000000-0000-0000-0000-00000000000a', 'sched', '1 s', '1 s')$$,
    'TN002', NULL, 'T < 2I is refused');
SELECT throws_ok($$SELECT * FROM tenure.get_primary('')$$, 'TN001', NULL, 'get_primary refuses an empty utype');
SELECT throws_ok($$SELECT tenure.check_primary(NULL, 'sched')$$, 'TN001', NULL, 'check_primary refuses a NULL instance');
SELECT throws_ok($$SELECT tenure.heartbeat_resign('00000000-0000-0000-0000-00000000000a', NULL)$$, 'TN001', NULL,
    'heartbeat_resign refuses a NULL utype');
SELECT throws_ok($$SELECT tenure.heartbeat_fence('00000000-0000-0000-0000-00000000000a', 'sched', 0)$$, 'TN001', NULL,
    'heartbeat_fence refuses a term below 1');
SELECT results_eq($$SELECT * FROM tenure.heartbeat ORDER BY utype$$, $$SELECT * FROM before ORDER BY utype$$,
    'refused calls changed no entry');
SELECT results_eq($$SELECT * FROM tenure.heartbeat_term ORDER BY utype, term$$,
    $$SELECT * FROM before_terms ORDER BY utype, term$$, 'refused calls changed no history');

-- Least privilege: the worker role calls functions and nothing else ---------------------
SET LOCAL ROLE tenure_worker;
SELECT lives_ok($$SELECT * FROM tenure.update_heartbeat('00000000-0000-0000-0000-0000000000c2', 'worker', '3 s', '1 s')$$,
    'tenure_worker can call update_heartbeat');
SELECT throws_ok($$SELECT * FROM tenure.heartbeat$$, '42501', NULL, 'tenure_worker cannot read the table');
SELECT throws_ok($$SELECT * FROM tenure._update_heartbeat('00000000-0000-0000-0000-0000000000c2', 'worker', '3 s', '1 s', now())$$,
    '42501', NULL, 'tenure_worker cannot call the time-travel function');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
