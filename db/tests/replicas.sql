-- Active/passive replicas: lock id derivation, the collision registry, acquire with
-- reservation by time travel, the write guard with and without the lock, and bad input.
-- t0 = 2026-01-01 00:00:00 UTC. Behaviour across sessions (another session holds the
-- lock, a session ends) is tested from Python with several connections and processes.
BEGIN;
SELECT plan(52);

-- Signatures -------------------------------------------------------------------------
SELECT has_function('tenure', 'replica_lock_id', ARRAY['integer', 'text']);
SELECT function_returns('tenure', 'replica_lock_id', ARRAY['integer', 'text'], 'integer');
SELECT has_function('tenure', 'replica_register', ARRAY['integer', 'text']);
SELECT has_function('tenure', 'replica_acquire', ARRAY['text', 'interval', 'integer', 'text']);
SELECT function_returns('tenure', 'replica_acquire', ARRAY['text', 'interval', 'integer', 'text'], 'setof tenure.replica_grant');
SELECT has_function('tenure', 'replica_guard', ARRAY['bigint', 'integer', 'text']);
SELECT function_returns('tenure', 'replica_guard', ARRAY['bigint', 'integer', 'text'], 'bigint');
SELECT has_function('tenure', 'replica_ping', ARRAY['text', 'bigint', 'interval', 'integer', 'text']);
SELECT has_function('tenure', 'replica_release', ARRAY['text', 'integer', 'text']);
SELECT has_function('tenure', 'replica_holder', ARRAY['integer', 'text']);
SELECT function_returns('tenure', 'replica_holder', ARRAY['integer', 'text'], 'setof tenure.replica_holder');
SELECT has_view('tenure', 'replicas', 'operator view replicas exists');

-- Lock id derivation: stable, 30 bits, scope defaults to the database's name ------------
SELECT is(tenure.replica_lock_id(0, 'tenure'), 989890283,
    'the id of (tenure, 0) is the first 32 bits of md5(''tenure/0'') truncated to 30 bits');
SELECT is(tenure.replica_lock_id(0, 'tenure'), tenure.replica_lock_id(0, 'tenure'), 'the id is stable');
SELECT is(tenure.replica_lock_id(), tenure.replica_lock_id(0, current_database()),
    'the scope defaults to the database''s name and the counter to 0');
SELECT isnt(tenure.replica_lock_id(1, 'tenure'), tenure.replica_lock_id(0, 'tenure'),
    'another counter gives another id');
SELECT is(
    (SELECT count(*) FROM generate_series(0, 9999) c
      WHERE tenure.replica_lock_id(c, 'bits') NOT BETWEEN 0 AND 1073741823)::integer, 0,
    'every id of 10000 counters fits in 30 bits (0 .. 2^30 - 1)');
SELECT cmp_ok(
    (SELECT max(tenure.replica_lock_id(c, 'bits')) FROM generate_series(0, 9999) c), '>=', 1 << 29,
    'the ids use the 30th bit');

-- The collision registry ------------------------------------------------------------------
SELECT is(tenure.replica_lock_id(35003, 'collide'), tenure.replica_lock_id(41657, 'collide'),
    'counters 35003 and 41657 of scope collide hash to the same 30-bit id');
SELECT is(tenure.replica_register(35003, 'collide'), 355203952, 'the first of them registers');
SELECT is(tenure.replica_register(35003, 'collide'), 355203952, 'registering it again returns the same id');
SELECT throws_ok($$SELECT tenure.replica_register(41657, 'collide')$$, 'TN002', NULL,
    'the second pair mapping to a registered id is refused with TN002');
SELECT throws_like($$SELECT * FROM tenure.replica_acquire('a', NULL, 41657, 'collide')$$,
    '%lock id 355203952 of scope ''collide'' counter 41657 is already registered for scope ''collide'' counter 35003%',
    'acquire refuses the colliding pair too, naming both pairs and the id');
SELECT is((SELECT count(*) FROM tenure.replica_lock WHERE scope = 'collide')::integer, 1,
    'the refused pair left nothing behind');

-- Acquire, guard, ping, holder, release on this session --------------------------------------
SELECT throws_ok($$SELECT tenure.replica_guard(NULL, 0, 'svc')$$, 'TN101', NULL,
    'the guard refuses a session when the lock was never acquired');
SELECT results_eq(
    $$SELECT lock_id, acquired, epoch, replica, pid, since, reserved_until
        FROM tenure._replica_acquire('a', '5 s', 0, 'svc', '2026-01-01 00:00:00+00')$$,
    $$VALUES (tenure.replica_lock_id(0, 'svc'), true, 1::bigint, 'a', pg_backend_pid(),
              '2026-01-01 00:00:00+00'::timestamptz, '2026-01-01 00:00:05+00'::timestamptz)$$,
    'the first acquisition succeeds in epoch 1, reserved for 5 s');
SELECT results_eq(
    $$SELECT classid, objid, objsubid, mode FROM pg_locks
       WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND objid = tenure.replica_lock_id(0, 'svc')::oid$$,
    $$VALUES (1952804469::oid, tenure.replica_lock_id(0, 'svc')::oid, 2::smallint, 'ExclusiveLock')$$,
    'pg_locks shows the two-int advisory lock: classid 1952804469, objid = lock id, objsubid 2');
SELECT results_eq(
    $$SELECT acquired, epoch FROM tenure.replica_acquire('a', '5 s', 0, 'svc')$$,
    $$VALUES (true, 1::bigint)$$,
    'acquiring again on the holding session keeps the epoch');
SELECT is((SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())::integer, 1,
    'and does not take the lock twice');
SELECT throws_ok($$SELECT * FROM tenure.replica_acquire('b', NULL, 0, 'svc')$$, 'TN001', NULL,
    'a session holding the lock as one replica cannot acquire it as another');
SELECT is(tenure.replica_guard(NULL, 0, 'svc'), 1::bigint, 'the guard passes on the holding session');
SELECT is(tenure.replica_guard(1, 0, 'svc'), 1::bigint, 'and with the current epoch');
SELECT throws_ok($$SELECT tenure.replica_guard(2, 0, 'svc')$$, 'TN101', NULL,
    'the guard refuses another epoch');
SELECT throws_ok($$SELECT tenure.replica_guard(NULL, 1, 'svc')$$, 'TN101', NULL,
    'the guard refuses a lock the session does not hold');
SELECT results_eq(
    $$SELECT pid, application_name, replica, epoch, since FROM tenure.replica_holder(0, 'svc')$$,
    $$SELECT pg_backend_pid(), current_setting('application_name'), 'a', 1::bigint,
             '2026-01-01 00:00:00+00'::timestamptz$$,
    'replica_holder names the holding backend, its application, replica, epoch and since when');
SELECT results_eq(
    $$SELECT scope, pid, replica, epoch FROM tenure.replicas WHERE scope = 'svc'$$,
    $$VALUES ('svc', pg_backend_pid(), 'a', 1::bigint)$$,
    'the view replicas shows the same');
SET LOCAL synchronous_commit = off;
SELECT is(tenure._replica_ping('a', 1, '5 s', 0, 'svc', '2026-01-01 00:00:01+00'),
    '2026-01-01 00:00:01+00'::timestamptz, 'a ping records the time');
SELECT is(current_setting('synchronous_commit'), 'on',
    'a ping raises synchronous_commit to on: it confirms the epoch, so it commits as durably as the acquisition');
SET LOCAL synchronous_commit = on;
SELECT is((SELECT reserved_until FROM tenure.replica_lock WHERE scope = 'svc'),
    '2026-01-01 00:00:06+00'::timestamptz, 'and moves the reservation to 5 s after it');
SELECT throws_ok($$SELECT tenure.replica_ping('a', 2, NULL, 0, 'svc')$$, 'TN101', NULL,
    'a ping in another epoch is refused');

-- Reservation: the lock is lost (as when the session ends); others wait, the holder reclaims
SELECT ok(pg_advisory_unlock(1952804469, tenure.replica_lock_id(0, 'svc')), 'the lock is lost');
SELECT throws_ok($$SELECT tenure.replica_guard(NULL, 0, 'svc')$$, 'TN101', NULL,
    'the guard refuses the session once it no longer holds the lock');
SELECT results_eq(
    $$SELECT acquired, replica, pid, reserved_until
        FROM tenure._replica_acquire('b', NULL, 0, 'svc', '2026-01-01 00:00:05.999999+00')$$,
    $$VALUES (false, 'a', NULL::integer, '2026-01-01 00:00:06+00'::timestamptz)$$,
    'another replica is refused while the lock is reserved for its previous holder');
SELECT results_eq(
    $$SELECT acquired, epoch FROM tenure._replica_acquire('a', '5 s', 0, 'svc', '2026-01-01 00:00:03+00')$$,
    $$VALUES (true, 2::bigint)$$,
    'the previous holder reclaims it within the reservation, in a new epoch');
SELECT ok(tenure.replica_release('a', 0, 'svc'), 'release gives the lock up');
SELECT ok(NOT tenure.replica_release('a', 0, 'svc'), 'a second release finds nothing held');
SELECT results_eq(
    $$SELECT acquired, epoch FROM tenure._replica_acquire('b', NULL, 0, 'svc', '2026-01-01 00:00:04+00')$$,
    $$VALUES (true, 3::bigint)$$,
    'after a release the reservation is gone: another replica acquires at once');
SELECT results_eq(
    $$SELECT epoch, replica FROM tenure.replica_term WHERE lock_id = tenure.replica_lock_id(0, 'svc') ORDER BY epoch$$,
    $$VALUES (1::bigint, 'a'), (2::bigint, 'a'), (3::bigint, 'b')$$,
    'every acquisition is logged with its epoch');

-- Bad input ----------------------------------------------------------------------------------
SELECT throws_ok($$SELECT tenure.replica_lock_id(-1, 'svc')$$, 'TN001', NULL, 'a negative counter is refused');
SELECT throws_ok($$SELECT tenure.replica_lock_id(0, '')$$, 'TN001', NULL, 'an empty scope is refused');
SELECT throws_ok($$SELECT * FROM tenure.replica_acquire('', NULL, 0, 'svc2')$$, 'TN001', NULL,
    'an empty replica name is refused');
SELECT throws_ok($$SELECT * FROM tenure.replica_acquire('a', '0 s', 0, 'svc2')$$, 'TN001', NULL,
    'a non-positive reservation is refused');

SELECT * FROM finish();
ROLLBACK;
