-- The submission queue: signatures, enqueue and its sequences, idempotency and bad input,
-- multi-round and one-round selection (unconstrained), p_limit, serial and parallel modes,
-- unknown batches, invalid batches with and without implicit dependencies (skip, retry),
-- explicit dependencies, two instances (fencing, pending), errors and least privilege.
-- Instances: a = ...0a, b = ...0b, c = ...0c (c only by the server clock).
-- Batch ids: pg_temp.u(n) = 00000000-0000-0000-0000-<n, 12 digits>, with n = 1xx enqueue,
-- 2xx rounds, 3xx one round, 4xx limit, 5xx serial, 6xx parallel, 7xx unknown, 8xx halt,
-- 9xx no halt, 10xx dependencies, 11xx two instances, 12xx worker (server clock).
-- Each section has its own keyspace and its own day T (00:00:00 UTC): batches are enqueued
-- at T + n s, claims taken at T + 1 min for a day, selections and resolutions at T + 1 h.
-- The server clock is used only in the keyspaces 'enq' and 'worker'.
BEGIN;
SELECT plan(263);

CREATE FUNCTION pg_temp.u(p_n integer) RETURNS uuid
LANGUAGE sql IMMUTABLE
AS $$ SELECT format('00000000-0000-0000-0000-%s', lpad(p_n::text, 12, '0'))::uuid $$;

-- Enqueues batch u(p_n) of key p_key at p_at (payload 'x'); returns its sequence number.
CREATE FUNCTION pg_temp.enq(p_ks text, p_key text, p_n integer, p_at timestamptz,
                            p_state text[] DEFAULT '{}', p_deps integer[] DEFAULT '{}')
RETURNS bigint
LANGUAGE sql
AS $$
    SELECT seq FROM tenure._batch_enqueue_many(p_ks,
        jsonb_build_array(jsonb_build_object('key', p_key, 'payload', 'eA==', 'id', pg_temp.u(p_n),
                                             'state_keys', p_state,
                                             'depends_on', ARRAY(SELECT pg_temp.u(d) FROM unnest(p_deps) d))),
        p_at, 'batch_enqueue')
$$;

-- Selects for instance p_inst; returns the grants in the order returned, as 'A1/1' (key, seq / round).
CREATE FUNCTION pg_temp.sel(p_ks text, p_inst uuid, p_limit integer, p_depth integer, p_at timestamptz)
RETURNS text
LANGUAGE sql
AS $$
    SELECT coalesce(string_agg(g.key || g.seq || '/' || g.round, ' ' ORDER BY g.n), '')
      FROM tenure._batch_select(p_ks, p_inst, p_limit, p_depth, p_at) WITH ORDINALITY AS g(id, key, seq, payload,
           state_keys, attempts, claim_epoch, round, n)
$$;

-- Resolves batch u(p_n) for p_inst under the current epoch of its key.
CREATE FUNCTION pg_temp.res(p_ks text, p_inst uuid, p_n integer, p_status text, p_at timestamptz)
RETURNS text
LANGUAGE sql
AS $$
    SELECT tenure._batch_resolve(p_ks, p_inst, pg_temp.u(p_n),
        (SELECT c.epoch FROM tenure.claim_key c JOIN tenure.batch b ON b.keyspace = c.keyspace AND b.key = c.key
          WHERE b.id = pg_temp.u(p_n)), p_status, NULL, p_at)
$$;

-- Resolves every pending batch of p_inst as committed; returns how many.
CREATE FUNCTION pg_temp.commit_all(p_ks text, p_inst uuid, p_at timestamptz)
RETURNS bigint
LANGUAGE sql
AS $$
    SELECT count(tenure._batch_resolve(p_ks, p_inst, p.id, p.claim_epoch, 'committed', NULL, p_at))
      FROM tenure._batch_pending(p_ks, p_inst, p_at) p
$$;

CREATE FUNCTION pg_temp.status(p_n integer) RETURNS text
LANGUAGE sql
AS $$ SELECT status FROM tenure.batch WHERE id = pg_temp.u(p_n) $$;

-- Signatures -------------------------------------------------------------------
SELECT has_function('tenure', 'batch_configure', ARRAY['text', 'text', 'boolean', 'text']);
SELECT function_returns('tenure', 'batch_configure', ARRAY['text', 'text', 'boolean', 'text'], 'void');
SELECT has_function('tenure', 'batch_enqueue', ARRAY['text', 'text', 'bytea', 'text[]', 'uuid[]', 'uuid']);
SELECT function_returns('tenure', 'batch_enqueue', ARRAY['text', 'text', 'bytea', 'text[]', 'uuid[]', 'uuid'],
    'setof tenure.batch_enqueued');
SELECT has_function('tenure', 'batch_enqueue_many', ARRAY['text', 'jsonb']);
SELECT function_returns('tenure', 'batch_enqueue_many', ARRAY['text', 'jsonb'], 'setof tenure.batch_enqueued');
SELECT has_function('tenure', 'batch_select', ARRAY['text', 'uuid', 'integer', 'integer']);
SELECT function_returns('tenure', 'batch_select', ARRAY['text', 'uuid', 'integer', 'integer'], 'setof tenure.batch_grant');
SELECT has_function('tenure', 'batch_resolve', ARRAY['text', 'uuid', 'uuid', 'bigint', 'text', 'text']);
SELECT has_view('tenure', 'batches', 'the view tenure.batches');
SELECT has_function('tenure', 'batch_resolve_many', ARRAY['text', 'uuid', 'jsonb']);
SELECT function_returns('tenure', 'batch_resolve_many', ARRAY['text', 'uuid', 'jsonb'], 'integer');
SELECT function_returns('tenure', 'batch_resolve', ARRAY['text', 'uuid', 'uuid', 'bigint', 'text', 'text'], 'text');
SELECT has_function('tenure', 'batch_skip', ARRAY['text', 'uuid']);
SELECT function_returns('tenure', 'batch_skip', ARRAY['text', 'uuid'], 'boolean');
SELECT has_function('tenure', 'batch_retry', ARRAY['text', 'uuid']);
SELECT function_returns('tenure', 'batch_retry', ARRAY['text', 'uuid'], 'boolean');
SELECT has_function('tenure', 'batch_pending', ARRAY['text', 'uuid']);
SELECT function_returns('tenure', 'batch_check', ARRAY['text', 'uuid', 'text[]', 'bigint[]'], 'boolean[]');
SELECT function_returns('tenure', 'batch_pending', ARRAY['text', 'uuid'], 'setof tenure.batch_grant');
SELECT has_table('tenure', 'batch', 'table batch exists');
SELECT has_view('tenure', 'batch_keys', 'operator view batch_keys exists');
SELECT columns_are('tenure', 'batch_keys', ARRAY['keyspace', 'key', 'mode', 'implicit_deps', 'claimant', 'claimed',
    'queued', 'pending', 'unknown', 'invalid', 'committed', 'oldest_waiting_age', 'halted']);

-- Enqueue ('enq', server clock) -----------------------------------------------------
SELECT results_eq(
    $$SELECT * FROM tenure.batch_enqueue('enq', 'A', 'one', p_id => pg_temp.u(101))$$,
    $$VALUES (pg_temp.u(101), 'A', 1::bigint, true)$$,
    'the first batch of a key gets sequence number 1');
SELECT results_eq(
    $$SELECT * FROM tenure.batch_enqueue('enq', 'B', 'two', p_id => pg_temp.u(102))$$,
    $$VALUES (pg_temp.u(102), 'B', 1::bigint, true)$$,
    'each key has its own sequence');
SELECT results_eq(
    $$SELECT * FROM tenure.batch_enqueue('enq', 'A', 'three', p_id => pg_temp.u(103))$$,
    $$VALUES (pg_temp.u(103), 'A', 2::bigint, true)$$,
    'the second batch of a key gets 2');
SELECT results_eq(
    $$SELECT * FROM tenure.batch_enqueue_many('enq', jsonb_build_array(
        jsonb_build_object('key', 'A', 'payload', 'eA==', 'id', pg_temp.u(104)),
        jsonb_build_object('key', 'B', 'payload', 'eA==', 'id', pg_temp.u(105)),
        jsonb_build_object('key', 'A', 'payload', 'eA==', 'id', pg_temp.u(106)),
        jsonb_build_object('key', 'C', 'payload', 'eA==', 'id', pg_temp.u(107))))$$,
    $$VALUES (pg_temp.u(104), 'A', 3::bigint, true), (pg_temp.u(105), 'B', 2::bigint, true),
             (pg_temp.u(106), 'A', 4::bigint, true), (pg_temp.u(107), 'C', 1::bigint, true)$$,
    'enqueue_many numbers per key in input order and returns rows in input order');
SELECT results_eq(
    $$SELECT * FROM tenure.batch_enqueue('enq', 'A', 'again', p_id => pg_temp.u(103))$$,
    $$VALUES (pg_temp.u(103), 'A', 2::bigint, false)$$,
    'a caller-given id that exists: created = false, its own sequence number');
SELECT results_eq(
    $$SELECT * FROM tenure.batch_enqueue_many('enq', jsonb_build_array(
        jsonb_build_object('key', 'A', 'payload', 'eA==', 'id', pg_temp.u(104)),
        jsonb_build_object('key', 'A', 'payload', 'eA==', 'id', pg_temp.u(108))))$$,
    $$VALUES (pg_temp.u(104), 'A', 3::bigint, false), (pg_temp.u(108), 'A', 5::bigint, true)$$,
    'an existing id takes no sequence number: the next new batch follows on');
SELECT results_eq(
    $$SELECT * FROM tenure.batch_enqueue_many('enq', jsonb_build_array(
        jsonb_build_object('key', 'A', 'payload', 'eA==', 'id', pg_temp.u(109)),
        jsonb_build_object('key', 'A', 'payload', 'eA==', 'id', pg_temp.u(109))))$$,
    $$VALUES (pg_temp.u(109), 'A', 6::bigint, true), (pg_temp.u(109), 'A', 6::bigint, false)$$,
    'an id given twice in one call is created once');
SELECT results_eq(
    $$SELECT seq FROM tenure.batch_enqueue('enq', 'A', 'x', p_id => pg_temp.u(110))$$,
    $$VALUES (7::bigint)$$,
    'an id given twice in one call takes one sequence number: no gap');
SELECT results_eq(
    $$SELECT key, array_agg(seq ORDER BY seq), bool_and(status = 'queued' AND attempts = 0)
        FROM tenure.batch WHERE keyspace = 'enq' GROUP BY key ORDER BY key$$,
    $$VALUES ('A', '{1,2,3,4,5,6,7}'::bigint[], true), ('B', '{1,2}'::bigint[], true), ('C', '{1}'::bigint[], true)$$,
    'every key has a gapless sequence of queued batches');
SELECT results_eq(
    $$SELECT payload, state_keys, depends_on FROM tenure.batch WHERE id = pg_temp.u(101)$$,
    $$VALUES ('one'::bytea, '{}'::text[], '{}'::uuid[])$$,
    'the payload is stored as given');
SELECT results_eq(
    $$SELECT key, claimant FROM tenure.claim_key WHERE keyspace = 'enq' ORDER BY key$$,
    $$VALUES ('A', NULL::uuid), ('B', NULL::uuid), ('C', NULL::uuid)$$,
    'enqueue registers its keys for claims');
SELECT results_eq(
    $$SELECT key, seq, created FROM tenure.batch_enqueue('enq', 'B', 'y', ARRAY['s1', 's2'], ARRAY[pg_temp.u(101)],
                                                         pg_temp.u(111))$$,
    $$VALUES ('B', 3::bigint, true)$$,
    'a batch with state keys and a dependency');
SELECT results_eq(
    $$SELECT state_keys, depends_on FROM tenure.batch WHERE id = pg_temp.u(111)$$,
    $$VALUES ('{s1,s2}'::text[], ARRAY[pg_temp.u(101)])$$,
    'state keys and dependencies are stored');

-- Bad input: TN001, nothing enqueued.
SELECT throws_ok($$SELECT * FROM tenure.batch_enqueue('', 'A', 'x')$$, 'TN001', NULL, 'enqueue refuses an empty keyspace');
SELECT throws_ok($$SELECT * FROM tenure.batch_enqueue('enq', NULL, 'x')$$, 'TN001', NULL, 'enqueue refuses a NULL key');
SELECT throws_ok($$SELECT * FROM tenure.batch_enqueue('enq', ' ', 'x')$$, 'TN001', NULL, 'enqueue refuses a blank key');
SELECT throws_ok($$SELECT * FROM tenure.batch_enqueue('enq', 'A', NULL)$$, 'TN001', NULL, 'enqueue refuses a NULL payload');
SELECT throws_ok($$SELECT * FROM tenure.batch_enqueue('enq', 'A', 'x', ARRAY['s', ''])$$, 'TN001', NULL,
    'enqueue refuses an empty state key');
SELECT throws_ok($$SELECT * FROM tenure.batch_enqueue('enq', 'A', 'x', p_depends_on => ARRAY[pg_temp.u(199)])$$,
    'TN001', NULL, 'enqueue refuses an unknown dependency');
SELECT throws_ok($$SELECT * FROM tenure.batch_enqueue('other', 'A', 'x', p_depends_on => ARRAY[pg_temp.u(101)])$$,
    'TN001', NULL, 'enqueue refuses a dependency in another queue');
SELECT throws_ok($$SELECT * FROM tenure.batch_enqueue_many('enq', '{"key": "A", "payload": "eA=="}')$$, 'TN001', NULL,
    'enqueue_many refuses a JSON object instead of an array');
SELECT throws_ok($$SELECT * FROM tenure.batch_enqueue_many('enq', NULL)$$, 'TN001', NULL, 'enqueue_many refuses NULL');
SELECT throws_ok($$SELECT * FROM tenure.batch_enqueue_many('enq', '[{"key": "D", "payload": "eA=="}, {"payload": "eA=="}]')$$,
    'TN001', NULL, 'enqueue_many refuses a batch without a key');
SELECT throws_ok($$SELECT * FROM tenure.batch_enqueue_many('enq', '[{"key": "D", "payload": "eA=="}, {"key": "D"}]')$$,
    'TN001', NULL, 'enqueue_many refuses a batch without a payload');
SELECT throws_ok($$SELECT * FROM tenure.batch_enqueue_many('enq', '[{"key": "D", "payload": "eA=="}, {"key": "D", "payload": "!!not base64"}]')$$,
    'TN001', NULL, 'enqueue_many refuses a payload that is not base64');
SELECT throws_ok($$SELECT * FROM tenure.batch_enqueue_many('enq', '[{"key": "D", "payload": "eA=="}, 42]')$$,
    'TN001', NULL, 'enqueue_many refuses an element that is not an object');
SELECT throws_ok($$SELECT * FROM tenure.batch_enqueue_many('enq', '[{"key": "D", "payload": "eA==", "id": "nope"}]')$$,
    'TN001', NULL, 'enqueue_many refuses an id that is not a uuid');
SELECT throws_ok($$SELECT * FROM tenure.batch_enqueue_many('enq', '[{"key": "D", "payload": "eA=="}, {"key": "D", "payload": "eA==", "depends_on": ["00000000-0000-0000-0000-000000000199"]}]')$$,
    'TN001', NULL, 'enqueue_many refuses an unknown dependency');
SELECT results_eq(
    $$SELECT (SELECT count(*) FROM tenure.batch WHERE keyspace IN ('enq', 'other')),
             (SELECT count(*) FROM tenure.batch_key WHERE keyspace IN ('enq', 'other')),
             (SELECT bool_and(k.next_seq = (SELECT max(b.seq) + 1 FROM tenure.batch b
                                             WHERE b.keyspace = k.keyspace AND b.key = k.key))
                FROM tenure.batch_key k WHERE k.keyspace = 'enq')$$,
    $$VALUES (11::bigint, 3::bigint, true)$$,
    'bad input enqueued nothing, registered no key and took no sequence number');

-- Multi-round selection, unconstrained ('rounds', T = 2001-01-02) ---------------------------
SELECT lives_ok($$SELECT tenure._batch_configure('rounds', 'unconstrained', true, NULL, '2001-01-02 00:00:00+00')$$,
    'batch_configure sets a queue to unconstrained');
SELECT is(
    ARRAY[pg_temp.enq('rounds', 'A', 201, '2001-01-02 00:00:01+00'), pg_temp.enq('rounds', 'A', 202, '2001-01-02 00:00:02+00'),
          pg_temp.enq('rounds', 'A', 203, '2001-01-02 00:00:03+00'), pg_temp.enq('rounds', 'B', 204, '2001-01-02 00:00:04+00'),
          pg_temp.enq('rounds', 'B', 205, '2001-01-02 00:00:05+00'), pg_temp.enq('rounds', 'B', 206, '2001-01-02 00:00:06+00'),
          pg_temp.enq('rounds', 'C', 207, '2001-01-02 00:00:07+00')],
    ARRAY[1, 2, 3, 1, 2, 3, 1]::bigint[],
    'three batches of A, three of B, one of C');
SELECT is(
    ARRAY(SELECT key FROM tenure._claim_take('rounds', '00000000-0000-0000-0000-00000000000a', '1 day', NULL,
                                             '2001-01-02 00:01:00+00') ORDER BY key),
    ARRAY['A', 'B', 'C'], 'instance a takes A, B and C');
SELECT is(pg_temp.sel('rounds', '00000000-0000-0000-0000-00000000000a', 100, 3, '2001-01-02 01:00:00+00'),
    'A1/1 B1/1 C1/1 A2/2 B2/2 A3/3 B3/3',
    'depth 3: rounds [A, B, C], [A, B], [A, B], keys oldest first within a round');
SELECT results_eq(
    $$SELECT key, seq, attempts, claim_epoch FROM tenure._batch_pending('rounds', '00000000-0000-0000-0000-00000000000a',
                                                                      '2001-01-02 01:00:00+00')$$,
    $$VALUES ('A', 1::bigint, 1, 1::bigint), ('A', 2::bigint, 1, 1::bigint), ('A', 3::bigint, 1, 1::bigint),
             ('B', 1::bigint, 1, 1::bigint), ('B', 2::bigint, 1, 1::bigint), ('B', 3::bigint, 1, 1::bigint),
             ('C', 1::bigint, 1, 1::bigint)$$,
    'all are pending, first attempt, under epoch 1; batch_pending lists them in key and sequence order');
SELECT is(pg_temp.sel('rounds', '00000000-0000-0000-0000-00000000000a', 100, 3, '2001-01-02 01:00:00+00'), '',
    'pending batches are not selected again');

-- One round ('oneround', T = 2001-01-03) -------------------------------------------------
SELECT lives_ok($$SELECT tenure._batch_configure('oneround', 'unconstrained', true, NULL, '2001-01-03 00:00:00+00')$$,
    'batch_configure sets another queue to unconstrained');
SELECT is(
    ARRAY[pg_temp.enq('oneround', 'A', 301, '2001-01-03 00:00:01+00'), pg_temp.enq('oneround', 'A', 302, '2001-01-03 00:00:02+00'),
          pg_temp.enq('oneround', 'A', 303, '2001-01-03 00:00:03+00'), pg_temp.enq('oneround', 'B', 304, '2001-01-03 00:00:04+00'),
          pg_temp.enq('oneround', 'B', 305, '2001-01-03 00:00:05+00'), pg_temp.enq('oneround', 'B', 306, '2001-01-03 00:00:06+00'),
          pg_temp.enq('oneround', 'C', 307, '2001-01-03 00:00:07+00')],
    ARRAY[1, 2, 3, 1, 2, 3, 1]::bigint[],
    'the same seven batches in another queue');
SELECT is(
    ARRAY(SELECT key FROM tenure._claim_take('oneround', '00000000-0000-0000-0000-00000000000a', '1 day', NULL,
                                             '2001-01-03 00:01:00+00') ORDER BY key),
    ARRAY['A', 'B', 'C'], 'instance a takes A, B and C');
SELECT is(pg_temp.sel('oneround', '00000000-0000-0000-0000-00000000000a', 100, 1, '2001-01-03 01:00:00+00'),
    'A1/1 B1/1 C1/1', 'one round: the oldest batch of every key');
SELECT is(pg_temp.commit_all('oneround', '00000000-0000-0000-0000-00000000000a', '2001-01-03 01:00:01+00'), 3::bigint,
    'the three are committed');
SELECT is(pg_temp.enq('oneround', 'C', 308, '2001-01-03 01:00:02+00'), 2::bigint, 'a new batch for C after round one');
SELECT is(pg_temp.sel('oneround', '00000000-0000-0000-0000-00000000000a', 100, 1, '2001-01-03 01:00:03+00'),
    'A2/1 B2/1 C2/1', 'second round: A, B and the new C batch, oldest waiting first');
SELECT is(pg_temp.commit_all('oneround', '00000000-0000-0000-0000-00000000000a', '2001-01-03 01:00:04+00'), 3::bigint,
    'the three are committed');
SELECT is(pg_temp.sel('oneround', '00000000-0000-0000-0000-00000000000a', 100, 1, '2001-01-03 01:00:05+00'),
    'A3/1 B3/1', 'third round: A and B');
SELECT is(pg_temp.commit_all('oneround', '00000000-0000-0000-0000-00000000000a', '2001-01-03 01:00:06+00'), 2::bigint,
    'the two are committed');
SELECT is(pg_temp.sel('oneround', '00000000-0000-0000-0000-00000000000a', 100, 1, '2001-01-03 01:00:07+00'), '',
    'then nothing is left');

-- p_limit and the order of keys ('limit', T = 2001-01-04) --------------------------------
SELECT lives_ok($$SELECT tenure._batch_configure('limit', 'unconstrained', true, NULL, '2001-01-04 00:00:00+00')$$,
    'limit queue is unconstrained');
SELECT is(
    ARRAY[pg_temp.enq('limit', 'C', 401, '2001-01-04 00:00:01+00'), pg_temp.enq('limit', 'A', 402, '2001-01-04 00:00:02+00'),
          pg_temp.enq('limit', 'B', 403, '2001-01-04 00:00:03+00'), pg_temp.enq('limit', 'C', 404, '2001-01-04 00:00:04+00')],
    ARRAY[1, 1, 1, 2]::bigint[], 'C, A, B, C enqueued in that order');
SELECT is(
    ARRAY(SELECT key FROM tenure._claim_take('limit', '00000000-0000-0000-0000-00000000000a', '1 day', NULL,
                                             '2001-01-04 00:01:00+00') ORDER BY key),
    ARRAY['A', 'B', 'C'], 'instance a takes A, B and C');
SELECT is(pg_temp.sel('limit', '00000000-0000-0000-0000-00000000000a', 2, 1, '2001-01-04 01:00:00+00'),
    'C1/1 A1/1', 'p_limit caps the count; the key with the oldest waiting batch first, not by name');
SELECT is(pg_temp.sel('limit', '00000000-0000-0000-0000-00000000000a', 10, 1, '2001-01-04 01:00:01+00'),
    'B1/1 C2/1', 'then B (waiting since 3 s) before C (its next batch waiting since 4 s)');

-- Fair turns under a flood ('flood', T = 2001-01-21) -------------------------------------------
SELECT lives_ok($$SELECT tenure._batch_configure('flood', 'unconstrained', true, NULL, '2001-01-21 00:00:00+00')$$,
    'flood queue is unconstrained');
SELECT is(
    ARRAY[pg_temp.enq('flood', 'F', 1401, '2001-01-21 00:00:01+00'), pg_temp.enq('flood', 'F', 1402, '2001-01-21 00:00:02+00'),
          pg_temp.enq('flood', 'F', 1403, '2001-01-21 00:00:03+00'), pg_temp.enq('flood', 'A', 1404, '2001-01-21 00:00:04+00'),
          pg_temp.enq('flood', 'B', 1405, '2001-01-21 00:00:05+00')],
    ARRAY[1, 2, 3, 1, 1]::bigint[], 'F floods three batches, then A and B send one each');
SELECT is(
    ARRAY(SELECT key FROM tenure._claim_take('flood', '00000000-0000-0000-0000-00000000000a', '1 day', NULL,
                                             '2001-01-21 00:01:00+00') ORDER BY key),
    ARRAY['A', 'B', 'F'], 'instance a takes A, B and F');
SELECT is(pg_temp.sel('flood', '00000000-0000-0000-0000-00000000000a', 1, 1, '2001-01-21 01:00:00+00'), 'F1/1',
    'one submitter: first the key waiting longest, F');
SELECT is(pg_temp.sel('flood', '00000000-0000-0000-0000-00000000000a', 1, 1, '2001-01-21 01:00:01+00'), 'A1/1',
    'then A, though F''s next batch waits longer: F was just served');
SELECT is(pg_temp.sel('flood', '00000000-0000-0000-0000-00000000000a', 1, 1, '2001-01-21 01:00:02+00'), 'B1/1',
    'then B');
SELECT is(pg_temp.sel('flood', '00000000-0000-0000-0000-00000000000a', 1, 1, '2001-01-21 01:00:03+00'), 'F2/1',
    'and only then F again');

-- Serial mode, the default ('serial', T = 2001-01-05) --------------------------------------
SELECT is(
    ARRAY[pg_temp.enq('serial', 'A', 501, '2001-01-05 00:00:01+00'), pg_temp.enq('serial', 'A', 502, '2001-01-05 00:00:02+00'),
          pg_temp.enq('serial', 'B', 503, '2001-01-05 00:00:03+00')],
    ARRAY[1, 2, 1]::bigint[], 'A twice, B once, in a queue that was never configured');
SELECT is(
    ARRAY(SELECT key FROM tenure._claim_take('serial', '00000000-0000-0000-0000-00000000000a', '1 day', NULL,
                                             '2001-01-05 00:01:00+00') ORDER BY key),
    ARRAY['A', 'B'], 'instance a takes A and B');
SELECT results_eq($$SELECT key, mode, implicit_deps FROM tenure.batch_keys WHERE keyspace = 'serial' ORDER BY key$$,
    $$VALUES ('A', 'serial', true), ('B', 'serial', true)$$, 'an unconfigured queue is serial with implicit dependencies');
SELECT is(pg_temp.sel('serial', '00000000-0000-0000-0000-00000000000a', 100, 3, '2001-01-05 01:00:00+00'),
    'A1/1 B1/1', 'serial: one batch per key, whatever the depth');
SELECT is(pg_temp.sel('serial', '00000000-0000-0000-0000-00000000000a', 100, 3, '2001-01-05 01:00:01+00'), '',
    'serial: the second batch of A is not selected while the first is pending');
SELECT is(pg_temp.res('serial', '00000000-0000-0000-0000-00000000000a', 501, 'committed', '2001-01-05 01:00:02+00'),
    'committed', 'batch_resolve returns the new status');
SELECT is(pg_temp.sel('serial', '00000000-0000-0000-0000-00000000000a', 100, 3, '2001-01-05 01:00:03+00'), 'A2/1',
    'serial: once the first is committed, the second is selected');

-- Parallel mode ('parallel', T = 2001-01-06) ------------------------------------------------
SELECT lives_ok($$SELECT tenure._batch_configure('parallel', 'parallel', true, NULL, '2001-01-06 00:00:00+00')$$,
    'parallel queue');
SELECT is(
    ARRAY[pg_temp.enq('parallel', 'A', 601, '2001-01-06 00:00:01+00', '{x}'),
          pg_temp.enq('parallel', 'A', 602, '2001-01-06 00:00:02+00', '{y}'),
          pg_temp.enq('parallel', 'A', 603, '2001-01-06 00:00:03+00', '{x,z}'),
          pg_temp.enq('parallel', 'A', 604, '2001-01-06 00:00:04+00', '{w}'),
          pg_temp.enq('parallel', 'A', 605, '2001-01-06 00:00:05+00')],
    ARRAY[1, 2, 3, 4, 5]::bigint[], 'A: {x}, {y}, {x,z}, {w}, no state keys');
SELECT is(
    ARRAY(SELECT key FROM tenure._claim_take('parallel', '00000000-0000-0000-0000-00000000000a', '1 day', NULL,
                                             '2001-01-06 00:01:00+00')),
    ARRAY['A'], 'instance a takes A');
SELECT is(pg_temp.sel('parallel', '00000000-0000-0000-0000-00000000000a', 100, 10, '2001-01-06 01:00:00+00'),
    'A1/1 A2/2 A4/3', 'parallel: disjoint state keys go together; {x,z} waits for {x}; none waits for all');
SELECT is(pg_temp.res('parallel', '00000000-0000-0000-0000-00000000000a', 601, 'committed', '2001-01-06 01:00:01+00'),
    'committed', '{x} is committed');
SELECT is(pg_temp.sel('parallel', '00000000-0000-0000-0000-00000000000a', 100, 10, '2001-01-06 01:00:02+00'),
    'A3/1', '{x,z} goes once {x} is committed; no state keys still waits');
SELECT is(pg_temp.res('parallel', '00000000-0000-0000-0000-00000000000a', 602, 'committed', '2001-01-06 01:00:03+00')
          || pg_temp.res('parallel', '00000000-0000-0000-0000-00000000000a', 603, 'committed', '2001-01-06 01:00:03+00'),
    'committedcommitted', '{y} and {x,z} are committed');
SELECT is(pg_temp.sel('parallel', '00000000-0000-0000-0000-00000000000a', 100, 10, '2001-01-06 01:00:04+00'), '',
    'a batch without state keys waits while any earlier one is uncommitted');
SELECT is(pg_temp.res('parallel', '00000000-0000-0000-0000-00000000000a', 604, 'committed', '2001-01-06 01:00:05+00'),
    'committed', '{w} is committed');
SELECT is(pg_temp.sel('parallel', '00000000-0000-0000-0000-00000000000a', 100, 10, '2001-01-06 01:00:06+00'), 'A5/1',
    'then the batch without state keys goes');

-- Unknown ('unknown', T = 2001-01-07) ---------------------------------------------------------
SELECT lives_ok($$SELECT tenure._batch_configure('unknown', 'unconstrained', true, NULL, '2001-01-07 00:00:00+00')$$,
    'unknown queue is unconstrained');
SELECT is(
    ARRAY[pg_temp.enq('unknown', 'A', 701, '2001-01-07 00:00:01+00'), pg_temp.enq('unknown', 'A', 702, '2001-01-07 00:00:02+00')],
    ARRAY[1, 2]::bigint[], 'A twice');
SELECT is(
    ARRAY(SELECT key FROM tenure._claim_take('unknown', '00000000-0000-0000-0000-00000000000a', '1 day', NULL,
                                             '2001-01-07 00:01:00+00')),
    ARRAY['A'], 'instance a takes A');
SELECT is(pg_temp.sel('unknown', '00000000-0000-0000-0000-00000000000a', 1, 1, '2001-01-07 01:00:00+00'), 'A1/1',
    'the first batch is selected');
SELECT is(pg_temp.res('unknown', '00000000-0000-0000-0000-00000000000a', 701, 'unknown', '2001-01-07 01:00:01+00'),
    'unknown', 'the external system lost it');
SELECT results_eq($$SELECT queued, pending, unknown FROM tenure.batch_keys WHERE keyspace = 'unknown'$$,
    $$VALUES (1::bigint, 0::bigint, 1::bigint)$$, 'batch_keys counts it as unknown');
SELECT results_eq(
    $$SELECT key, seq, attempts, round FROM tenure._batch_select('unknown', '00000000-0000-0000-0000-00000000000a', 10, 5,
                                                                 '2001-01-07 01:00:02+00')$$,
    $$VALUES ('A', 1::bigint, 2, 1)$$,
    'the unknown batch is selected again (attempt 2), and no later batch of its key with it');
SELECT is(pg_temp.res('unknown', '00000000-0000-0000-0000-00000000000a', 701, 'committed', '2001-01-07 01:00:03+00'),
    'committed', 'this time it is committed');
SELECT results_eq(
    $$SELECT key, seq, attempts FROM tenure._batch_select('unknown', '00000000-0000-0000-0000-00000000000a', 10, 5,
                                                          '2001-01-07 01:00:04+00')$$,
    $$VALUES ('A', 2::bigint, 1)$$,
    'then the later batch goes');

-- Invalid with implicit dependencies ('halt', serial, T = 2001-01-08) --------------------------
SELECT is(
    ARRAY[pg_temp.enq('halt', 'A', 801, '2001-01-08 00:00:01+00'), pg_temp.enq('halt', 'A', 802, '2001-01-08 00:00:02+00'),
          pg_temp.enq('halt', 'A', 803, '2001-01-08 00:00:03+00'), pg_temp.enq('halt', 'B', 804, '2001-01-08 00:00:04+00')],
    ARRAY[1, 2, 3, 1]::bigint[], 'A three times, B once');
SELECT is(
    ARRAY(SELECT key FROM tenure._claim_take('halt', '00000000-0000-0000-0000-00000000000a', '1 day', NULL,
                                             '2001-01-08 00:01:00+00') ORDER BY key),
    ARRAY['A', 'B'], 'instance a takes A and B');
SELECT is(pg_temp.sel('halt', '00000000-0000-0000-0000-00000000000a', 10, 1, '2001-01-08 01:00:00+00'), 'A1/1 B1/1',
    'A1 and B1 are selected');
SELECT is(pg_temp.res('halt', '00000000-0000-0000-0000-00000000000a', 801, 'invalid', '2001-01-08 01:00:01+00'),
    'invalid', 'A1 is invalid');
SELECT is(pg_temp.sel('halt', '00000000-0000-0000-0000-00000000000a', 10, 3, '2001-01-08 01:00:02+00'), '',
    'the key halts: nothing of A is selected');
SELECT results_eq($$SELECT key, halted, invalid FROM tenure.batch_keys WHERE keyspace = 'halt' ORDER BY key$$,
    $$VALUES ('A', true, 1::bigint), ('B', false, 0::bigint)$$, 'batch_keys shows A halted');
SELECT is(tenure.batch_skip('halt', pg_temp.u(801)), true, 'batch_skip skips the invalid batch');
SELECT is(pg_temp.status(801), 'skipped', 'it is skipped');
SELECT is(tenure.batch_skip('halt', pg_temp.u(801)), false, 'batch_skip of a batch that is not invalid: false');
SELECT is(pg_temp.sel('halt', '00000000-0000-0000-0000-00000000000a', 10, 3, '2001-01-08 01:00:03+00'), 'A2/1',
    'after the skip the key flows again');
SELECT is(pg_temp.res('halt', '00000000-0000-0000-0000-00000000000a', 802, 'invalid', '2001-01-08 01:00:04+00'),
    'invalid', 'A2 is invalid');
SELECT is(pg_temp.sel('halt', '00000000-0000-0000-0000-00000000000a', 10, 3, '2001-01-08 01:00:05+00'), '',
    'the key halts again');
SELECT is(tenure.batch_retry('halt', pg_temp.u(802)), true, 'batch_retry queues the invalid batch again');
SELECT is(tenure.batch_retry('halt', pg_temp.u(802)), false, 'batch_retry of a batch that is not invalid: false');
SELECT results_eq($$SELECT halted FROM tenure.batch_keys WHERE keyspace = 'halt' AND key = 'A'$$,
    $$VALUES (false)$$, 'A is no longer halted');
SELECT results_eq(
    $$SELECT key, seq, attempts FROM tenure._batch_select('halt', '00000000-0000-0000-0000-00000000000a', 10, 3,
                                                          '2001-01-08 01:00:06+00')$$,
    $$VALUES ('A', 2::bigint, 2)$$, 'the retried batch is selected again, before A3');
SELECT is(pg_temp.res('halt', '00000000-0000-0000-0000-00000000000a', 802, 'committed', '2001-01-08 01:00:07+00')
          || pg_temp.sel('halt', '00000000-0000-0000-0000-00000000000a', 10, 3, '2001-01-08 01:00:08+00'),
    'committedA3/1', 'once committed, A3 follows');

-- Invalid without implicit dependencies ('nohalt', T = 2001-01-09) -------------------------------
SELECT lives_ok($$SELECT tenure._batch_configure('nohalt', 'unconstrained', false, NULL, '2001-01-09 00:00:00+00')$$,
    'nohalt queue: unconstrained without implicit dependencies');
SELECT is(
    ARRAY[pg_temp.enq('nohalt', 'A', 901, '2001-01-09 00:00:01+00'), pg_temp.enq('nohalt', 'A', 902, '2001-01-09 00:00:02+00'),
          pg_temp.enq('nohalt', 'A', 903, '2001-01-09 00:00:03+00')],
    ARRAY[1, 2, 3]::bigint[], 'A three times');
SELECT is(
    ARRAY(SELECT key FROM tenure._claim_take('nohalt', '00000000-0000-0000-0000-00000000000a', '1 day', NULL,
                                             '2001-01-09 00:01:00+00')),
    ARRAY['A'], 'instance a takes A');
SELECT is(pg_temp.sel('nohalt', '00000000-0000-0000-0000-00000000000a', 10, 1, '2001-01-09 01:00:00+00'), 'A1/1',
    'A1 is selected');
SELECT is(pg_temp.res('nohalt', '00000000-0000-0000-0000-00000000000a', 901, 'invalid', '2001-01-09 01:00:01+00'),
    'invalid', 'A1 is invalid');
SELECT is(pg_temp.sel('nohalt', '00000000-0000-0000-0000-00000000000a', 10, 3, '2001-01-09 01:00:02+00'), 'A2/1 A3/2',
    'without implicit dependencies the key goes on past it');
SELECT is(pg_temp.commit_all('nohalt', '00000000-0000-0000-0000-00000000000a', '2001-01-09 01:00:03+00'), 2::bigint,
    'A2 and A3 are committed');
SELECT is(pg_temp.sel('nohalt', '00000000-0000-0000-0000-00000000000a', 10, 3, '2001-01-09 01:00:04+00'), '',
    'the invalid batch is never selected again');
SELECT results_eq($$SELECT halted, invalid, committed FROM tenure.batch_keys WHERE keyspace = 'nohalt'$$,
    $$VALUES (false, 1::bigint, 2::bigint)$$, 'batch_keys: not halted, one invalid, two committed');

-- Explicit dependencies ('deps', unconstrained, T = 2001-01-10) -----------------------------------
SELECT lives_ok($$SELECT tenure._batch_configure('deps', 'unconstrained', true, NULL, '2001-01-10 00:00:00+00')$$,
    'deps queue is unconstrained');
SELECT is(pg_temp.enq('deps', 'A', 1001, '2001-01-10 00:00:01+00'), 1::bigint, 'A1');
SELECT results_eq(
    $$SELECT * FROM tenure._batch_enqueue_many('deps', jsonb_build_array(
        jsonb_build_object('key', 'B', 'payload', 'eA==', 'id', pg_temp.u(1002), 'depends_on', ARRAY[pg_temp.u(1001)]),
        jsonb_build_object('key', 'C', 'payload', 'eA==', 'id', pg_temp.u(1003), 'depends_on', ARRAY[pg_temp.u(1002)]),
        jsonb_build_object('key', 'D', 'payload', 'eA==', 'id', pg_temp.u(1004), 'depends_on', ARRAY[pg_temp.u(1003)]),
        jsonb_build_object('key', 'E', 'payload', 'eA==', 'id', pg_temp.u(1005), 'depends_on', ARRAY[pg_temp.u(1001)]),
        jsonb_build_object('key', 'F', 'payload', 'eA==', 'id', pg_temp.u(1006))),
        '2001-01-10 00:00:02+00', 'batch_enqueue_many')$$,
    $$VALUES (pg_temp.u(1002), 'B', 1::bigint, true), (pg_temp.u(1003), 'C', 1::bigint, true),
             (pg_temp.u(1004), 'D', 1::bigint, true), (pg_temp.u(1005), 'E', 1::bigint, true),
             (pg_temp.u(1006), 'F', 1::bigint, true)$$,
    'B on A1, C on B1, D on C1, E on A1, F on nothing; a dependency may be an earlier batch of the same call');
SELECT is(
    ARRAY(SELECT key FROM tenure._claim_take('deps', '00000000-0000-0000-0000-00000000000a', '1 day', NULL,
                                             '2001-01-10 00:01:00+00') ORDER BY key),
    ARRAY['A', 'B', 'C', 'D', 'E', 'F'], 'instance a takes all six keys');
SELECT is(pg_temp.sel('deps', '00000000-0000-0000-0000-00000000000a', 100, 3, '2001-01-10 01:00:00+00'), 'A1/1 F1/1',
    'batches with uncommitted dependencies wait');
SELECT is(pg_temp.sel('deps', '00000000-0000-0000-0000-00000000000a', 100, 3, '2001-01-10 01:00:01+00'), '',
    'a pending dependency is not committed');
SELECT is(pg_temp.res('deps', '00000000-0000-0000-0000-00000000000a', 1001, 'committed', '2001-01-10 01:00:02+00'),
    'committed', 'A1 is committed');
SELECT is(pg_temp.sel('deps', '00000000-0000-0000-0000-00000000000a', 100, 3, '2001-01-10 01:00:03+00'), 'B1/1 E1/1',
    'its dependents go');
SELECT is(pg_temp.res('deps', '00000000-0000-0000-0000-00000000000a', 1002, 'invalid', '2001-01-10 01:00:04+00'),
    'invalid', 'B1 is invalid');
SELECT results_eq(
    $$SELECT key, status, detail FROM tenure.batch WHERE keyspace = 'deps' AND key IN ('C', 'D', 'E') ORDER BY key$$,
    $$VALUES ('C', 'invalid', format('dependency %s is invalid', pg_temp.u(1002))),
             ('D', 'invalid', format('dependency %s is invalid', pg_temp.u(1002))),
             ('E', 'pending', NULL)$$,
    'its dependents turn invalid, and theirs; others are untouched');
SELECT results_eq(
    $$SELECT key, seq, created FROM tenure._batch_enqueue_many('deps',
        jsonb_build_array(jsonb_build_object('key', 'G', 'payload', 'eA==', 'id', pg_temp.u(1007),
                                             'depends_on', ARRAY[pg_temp.u(1003)])),
        '2001-01-10 01:00:05+00', 'batch_enqueue_many')$$,
    $$VALUES ('G', 1::bigint, true)$$,
    'a batch with an invalid dependency can be enqueued');
SELECT results_eq(
    $$SELECT status, detail, resolved_at FROM tenure.batch WHERE id = pg_temp.u(1007)$$,
    $$VALUES ('invalid', format('dependency %s is invalid', pg_temp.u(1003)), '2001-01-10 01:00:05+00'::timestamptz)$$,
    'it is enqueued as invalid');
SELECT is(pg_temp.sel('deps', '00000000-0000-0000-0000-00000000000a', 100, 3, '2001-01-10 01:00:06+00'), '',
    'no invalid batch is selected, and the halted keys C, D, G give nothing');
SELECT results_eq(
    $$SELECT key, ready FROM tenure.batch_key WHERE keyspace = 'deps' AND key IN ('C', 'D', 'G') ORDER BY key$$,
    $$VALUES ('C', false), ('D', false), ('G', false)$$,
    'keys a dependency doomed leave the walk once a selection has looked at them (G at once: enqueued invalid)');

-- Two instances, errors, pending ('two', serial, T = 2001-01-11) ----------------------------------
SELECT is(
    ARRAY[pg_temp.enq('two', 'A', 1101, '2001-01-11 00:00:01+00'), pg_temp.enq('two', 'B', 1102, '2001-01-11 00:00:02+00'),
          pg_temp.enq('two', 'A', 1103, '2001-01-11 00:00:03+00')],
    ARRAY[1, 1, 2]::bigint[], 'A, B, A');
SELECT is(
    ARRAY(SELECT key FROM tenure._claim_take('two', '00000000-0000-0000-0000-00000000000a', '1 day', 1,
                                             '2001-01-11 00:01:00+00')),
    ARRAY['A'], 'instance a takes A');
SELECT is(
    ARRAY(SELECT key FROM tenure._claim_take('two', '00000000-0000-0000-0000-00000000000b', '1 day', NULL,
                                             '2001-01-11 00:01:01+00')),
    ARRAY['B'], 'instance b takes B');
SELECT is(pg_temp.sel('two', '00000000-0000-0000-0000-00000000000a', 100, 3, '2001-01-11 01:00:00+00'), 'A1/1',
    'a gets only batches of its key A');
SELECT is(pg_temp.sel('two', '00000000-0000-0000-0000-00000000000b', 100, 3, '2001-01-11 01:00:01+00'), 'B1/1',
    'b gets only batches of its key B');
SELECT results_eq(
    $$SELECT id, key, seq, claim_epoch FROM tenure._batch_pending('two', '00000000-0000-0000-0000-00000000000a',
                                                                  '2001-01-11 01:00:02+00')$$,
    $$VALUES (pg_temp.u(1101), 'A', 1::bigint, 1::bigint)$$, 'batch_pending lists the pending batches of held keys only');
SELECT is_empty(
    $$SELECT * FROM tenure._batch_pending('two', '00000000-0000-0000-0000-00000000000c', '2001-01-11 01:00:02+00')$$,
    'batch_pending of an instance that holds nothing is empty');
SELECT is(
    tenure._batch_check('two', '00000000-0000-0000-0000-00000000000a', ARRAY['A', 'B', 'A', 'Z', NULL],
                        ARRAY[1, 1, 2, 1, 1]::bigint[], '2001-01-11 01:00:02+00'),
    ARRAY[true, false, false, false, false],
    'batch_check: true only for a key the caller holds in that epoch (not B of b, not epoch 2, not an unknown key)');
SELECT is(
    tenure._batch_check('two', '00000000-0000-0000-0000-00000000000a', ARRAY['A'], ARRAY[1]::bigint[],
                        '2001-01-12 00:01:01+00'),
    ARRAY[false], 'batch_check: false once the claim expired');
SELECT is(tenure.batch_check('two', '00000000-0000-0000-0000-00000000000a', '{}', '{}'), '{}'::boolean[],
    'batch_check of no keys: no answers');
SELECT throws_ok(
    $$SELECT tenure.batch_check('two', '00000000-0000-0000-0000-00000000000a', ARRAY['A', 'B'], ARRAY[1]::bigint[])$$,
    'TN001', NULL, 'batch_check with fewer epochs than keys: TN001');
SELECT throws_ok($$SELECT tenure.batch_check('two', NULL, ARRAY['A'], ARRAY[1]::bigint[])$$, 'TN001', NULL,
    'batch_check of a NULL instance: TN001');
SELECT throws_ok(
    $$SELECT tenure._batch_resolve('two', '00000000-0000-0000-0000-00000000000b', pg_temp.u(1101), 1, 'committed', NULL,
                                   '2001-01-11 01:00:03+00')$$,
    'TN103', NULL, 'batch_resolve by an instance that does not hold the key: TN103');
SELECT throws_ok(
    $$SELECT tenure._batch_resolve('two', '00000000-0000-0000-0000-00000000000a', pg_temp.u(1101), 2, 'committed', NULL,
                                   '2001-01-11 01:00:03+00')$$,
    'TN103', NULL, 'batch_resolve in the wrong epoch: TN103');
SELECT throws_ok(
    $$SELECT tenure._batch_resolve('two', '00000000-0000-0000-0000-00000000000a', pg_temp.u(1101), 1, 'committed', NULL,
                                   '2001-01-12 01:00:03+00')$$,
    'TN103', NULL, 'batch_resolve after the claim expired: TN103');
SELECT is(pg_temp.status(1101), 'pending', 'the batch is still pending');
SELECT is(pg_temp.res('two', '00000000-0000-0000-0000-00000000000a', 1101, 'committed', '2001-01-11 01:00:04+00'),
    'committed', 'the holder resolves it');
SELECT throws_ok(
    $$SELECT pg_temp.res('two', '00000000-0000-0000-0000-00000000000a', 1101, 'committed', '2001-01-11 01:00:05+00')$$,
    'TN301', NULL, 'resolving a committed batch: TN301');
SELECT throws_ok(
    $$SELECT pg_temp.res('two', '00000000-0000-0000-0000-00000000000a', 1103, 'committed', '2001-01-11 01:00:05+00')$$,
    'TN301', NULL, 'resolving a queued batch: TN301');
SELECT throws_ok(
    $$SELECT tenure._batch_resolve('two', '00000000-0000-0000-0000-00000000000a', pg_temp.u(1199), 1, 'committed', NULL,
                                   '2001-01-11 01:00:05+00')$$,
    'TN201', NULL, 'resolving an unknown batch: TN201');
SELECT throws_ok(
    $$SELECT tenure._batch_resolve('deps', '00000000-0000-0000-0000-00000000000a', pg_temp.u(1102), 1, 'committed', NULL,
                                   '2001-01-11 01:00:05+00')$$,
    'TN201', NULL, 'resolving a batch of another queue: TN201');
SELECT throws_ok(
    $$SELECT tenure._batch_resolve('two', '00000000-0000-0000-0000-00000000000b', pg_temp.u(1102), 1, 'done', NULL,
                                   '2001-01-11 01:00:05+00')$$,
    'TN001', NULL, 'resolving with an unknown status: TN001');
SELECT throws_ok($$SELECT tenure.batch_skip('two', pg_temp.u(1199))$$, 'TN201', NULL, 'batch_skip of an unknown batch: TN201');
SELECT throws_ok($$SELECT tenure.batch_retry('two', pg_temp.u(1199))$$, 'TN201', NULL, 'batch_retry of an unknown batch: TN201');
SELECT throws_ok($$SELECT tenure.batch_skip('two', NULL)$$, 'TN001', NULL, 'batch_skip of NULL: TN001');
SELECT throws_ok($$SELECT tenure.batch_configure('two', 'fast')$$, 'TN001', NULL, 'batch_configure of an unknown mode: TN001');
SELECT throws_ok($$SELECT tenure.batch_configure('two', 'serial', NULL)$$, 'TN001', NULL,
    'batch_configure with a NULL p_implicit_deps: TN001');
SELECT throws_ok($$SELECT * FROM tenure.batch_select('two', NULL, 1)$$, 'TN001', NULL, 'batch_select of a NULL instance: TN001');
SELECT throws_ok($$SELECT * FROM tenure.batch_select('two', '00000000-0000-0000-0000-00000000000a', 0)$$, 'TN001', NULL,
    'batch_select with p_limit 0: TN001');
SELECT throws_ok($$SELECT * FROM tenure.batch_select('two', '00000000-0000-0000-0000-00000000000a', 1, 0)$$, 'TN001', NULL,
    'batch_select with p_depth 0: TN001');

-- Resolving many at once, all or none ('many', serial, T = 2001-01-20) ----------------------------------
CREATE FUNCTION pg_temp.res_many(p_items jsonb, p_at timestamptz) RETURNS integer
LANGUAGE sql
AS $$ SELECT tenure._batch_resolve_many('many', '00000000-0000-0000-0000-00000000000a', p_items, p_at) $$;
SELECT is(
    ARRAY[pg_temp.enq('many', 'M', 1301, '2001-01-20 00:00:01+00'), pg_temp.enq('many', 'N', 1302, '2001-01-20 00:00:02+00'),
          pg_temp.enq('many', 'M', 1303, '2001-01-20 00:00:03+00')],
    ARRAY[1, 1, 2]::bigint[], 'M, N, M');
SELECT is(
    ARRAY(SELECT key FROM tenure._claim_take('many', '00000000-0000-0000-0000-00000000000a', '1 day', NULL,
                                             '2001-01-20 00:01:00+00') ORDER BY key),
    ARRAY['M', 'N'], 'instance a takes M and N');
SELECT is(pg_temp.sel('many', '00000000-0000-0000-0000-00000000000a', 100, 3, '2001-01-20 01:00:00+00'), 'M1/1 N1/1',
    'serial: the first batch of each key');
SELECT throws_ok(
    format($$SELECT pg_temp.res_many('[{"id": "%s", "epoch": 1, "status": "committed"},
                                       {"id": "%s", "epoch": 9, "status": "committed"}]', '2001-01-20 01:00:01+00')$$,
           pg_temp.u(1301), pg_temp.u(1302)),
    'TN103', NULL, 'batch_resolve_many with one stale epoch: TN103');
SELECT is(ARRAY[pg_temp.status(1301), pg_temp.status(1302)], ARRAY['pending', 'pending'],
    'and nothing was resolved');
SELECT throws_ok($$SELECT pg_temp.res_many('{"id": 1}', '2001-01-20 01:00:01+00')$$, 'TN001', NULL,
    'batch_resolve_many of an object, not an array: TN001');
SELECT throws_ok(
    format($$SELECT pg_temp.res_many('[{"id": "%s", "epoch": 1, "status": "committed"}, 7]', '2001-01-20 01:00:01+00')$$,
           pg_temp.u(1301)),
    'TN001', 'tenure.batch_resolve_many: resolution 2 needs an object with id and epoch',
    'batch_resolve_many names the resolution that is not an object');
SELECT throws_ok($$SELECT pg_temp.res_many('[{"id": "nope", "epoch": 1, "status": "committed"}]', '2001-01-20 01:00:01+00')$$,
    'TN001', NULL, 'batch_resolve_many with an id that is not a uuid: TN001');
SELECT throws_ok(
    format($$SELECT pg_temp.res_many('[{"id": "%s", "epoch": 1, "status": "done"}]', '2001-01-20 01:00:01+00')$$,
           pg_temp.u(1301)),
    'TN001', NULL, 'batch_resolve_many with an unknown status: TN001');
SELECT is(pg_temp.status(1301), 'pending', 'still pending after the bad calls');
SELECT is(
    pg_temp.res_many(format('[{"id": "%s", "epoch": 1, "status": "committed"},
                              {"id": "%s", "epoch": 1, "status": "invalid", "detail": "rejected"}]',
                            pg_temp.u(1301), pg_temp.u(1302))::jsonb, '2001-01-20 01:00:02+00'),
    2, 'batch_resolve_many resolves both');
SELECT results_eq(
    $$SELECT status, detail FROM tenure.batch WHERE keyspace = 'many' ORDER BY id$$,
    $$VALUES ('committed', NULL), ('invalid', 'rejected'), ('queued', NULL)$$,
    'each as told; M2 still queued');
SELECT is(pg_temp.res_many('[]', '2001-01-20 01:00:03+00'), 0, 'an empty array resolves nothing');
-- Resolutions as committed or unknown of batches held in the right epoch go in one set; the
-- rest of their contract is the one-by-one path's.
SELECT is(pg_temp.sel('many', '00000000-0000-0000-0000-00000000000a', 100, 3, '2001-01-20 01:00:04+00'), 'M2/1',
    'serial: M2 once M1 is committed');
SELECT throws_ok(
    format($$SELECT pg_temp.res_many('[{"id": "%s", "epoch": 1, "status": "committed"},
                                       {"id": "%1$s", "epoch": 1, "status": "committed"}]', '2001-01-20 01:00:05+00')$$,
           pg_temp.u(1303)),
    'TN301', NULL, 'batch_resolve_many with one batch twice: TN301 for the second');
SELECT is(pg_temp.status(1303), 'pending', 'and M2 is still pending');
SELECT throws_ok(
    format($$SELECT pg_temp.res_many('[{"id": "%s", "epoch": 1, "status": "committed"}]', '2001-01-21 00:01:01+00')$$,
           pg_temp.u(1303)),
    'TN103', NULL, 'batch_resolve_many after the claim expired: TN103');
SELECT is(
    pg_temp.res_many(format('[{"id": "%s", "epoch": 1, "status": "unknown", "detail": "lost"}]', pg_temp.u(1303))::jsonb,
                     '2001-01-20 01:00:06+00'),
    1, 'batch_resolve_many: M2 unknown');
SELECT results_eq(
    $$SELECT status, detail, resolved_at FROM tenure.batch WHERE id = pg_temp.u(1303)$$,
    $$VALUES ('unknown', 'lost', NULL::timestamptz)$$, 'unknown, with its detail, not resolved');
SELECT is(pg_temp.sel('many', '00000000-0000-0000-0000-00000000000a', 100, 3, '2001-01-20 01:00:07+00'), 'M2/1',
    'M2 goes again: its key''s summary was refreshed');
-- A resolution about the first attempt, landing after the second selection (sent late, or by
-- a call whose answer was lost), must not send M2 again once the second went through.
SELECT throws_ok(
    format($$SELECT pg_temp.res_many('[{"id": "%s", "epoch": 1, "status": "unknown", "attempt": 1}]',
                                     '2001-01-20 01:00:07.5+00')$$, pg_temp.u(1303)),
    'TN301', format('tenure.batch_resolve: batch %s was selected again (attempt 2) since attempt 1', pg_temp.u(1303)),
    'batch_resolve_many about an earlier attempt: TN301');
SELECT results_eq(
    $$SELECT status, attempts FROM tenure.batch WHERE id = pg_temp.u(1303)$$,
    $$VALUES ('pending', 2)$$, 'M2 is still pending in its second attempt');
SELECT throws_ok(
    format($$SELECT pg_temp.res_many('[{"id": "%s", "epoch": 1, "status": "unknown", "attempt": 0}]',
                                     '2001-01-20 01:00:07.5+00')$$, pg_temp.u(1303)),
    'TN001', 'tenure.batch_resolve_many: resolution 1 has an attempt below 1', 'an attempt of 0: TN001');
SELECT throws_ok(
    format($$SELECT pg_temp.res_many('[{"id": "%s", "epoch": 1, "status": "unknown", "attempt": "two"}]',
                                     '2001-01-20 01:00:07.5+00')$$, pg_temp.u(1303)),
    'TN001', NULL, 'an attempt that is not a number: TN001');
SELECT is(
    pg_temp.res_many(format('[{"id": "%s", "epoch": 1, "status": "committed", "attempt": 2}]', pg_temp.u(1303))::jsonb,
                     '2001-01-20 01:00:08+00'),
    1, 'batch_resolve_many: M2 committed, about its second attempt');
SELECT results_eq(
    $$SELECT status, detail, resolved_at FROM tenure.batch WHERE id = pg_temp.u(1303)$$,
    $$VALUES ('committed', 'lost', '2001-01-20 01:00:08+00'::timestamptz)$$, 'committed at the time given');

-- What selection walks: batch_key.ready and head_at ('ready', serial, T = 2001-01-22) -------------------
CREATE FUNCTION pg_temp.ready(p_ks text) RETURNS text
LANGUAGE sql
AS $$
    SELECT string_agg(key || ':' || CASE WHEN ready THEN 'ready' ELSE '-' END || ':'
                      || coalesce(to_char(head_at AT TIME ZONE 'UTC', 'SS'), '-'), ' ' ORDER BY key)
      FROM tenure.batch_key WHERE keyspace = p_ks
$$;
SELECT is(
    ARRAY[pg_temp.enq('ready', 'A', 1501, '2001-01-22 00:00:01+00'), pg_temp.enq('ready', 'A', 1502, '2001-01-22 00:00:02+00'),
          pg_temp.enq('ready', 'B', 1503, '2001-01-22 00:00:03+00')],
    ARRAY[1, 2, 1]::bigint[], 'A twice, B once');
SELECT is(pg_temp.ready('ready'), 'A:ready:01 B:ready:03',
    'an enqueue makes its key ready, with when its first waiting batch was enqueued');
SELECT is(
    ARRAY(SELECT key FROM tenure._claim_take('ready', '00000000-0000-0000-0000-00000000000a', '1 day', NULL,
                                             '2001-01-22 00:01:00+00') ORDER BY key),
    ARRAY['A', 'B'], 'instance a takes A and B');
SELECT is(pg_temp.sel('ready', '00000000-0000-0000-0000-00000000000a', 10, 1, '2001-01-22 01:00:00+00'), 'A1/1 B1/1',
    'A1 and B1 are selected');
SELECT is(pg_temp.ready('ready'), 'A:-:02 B:-:-',
    'serial: a key with a batch pending is not ready; its head moves on (B has nothing waiting)');
SELECT results_eq($$SELECT key, last_selected FROM tenure.batch_key WHERE keyspace = 'ready' ORDER BY key$$,
    $$VALUES ('A', '2001-01-22 01:00:00+00'::timestamptz), ('B', '2001-01-22 01:00:00.000001+00')$$,
    'both keys were served then, a microsecond apart in the order they were selected');
SELECT is(pg_temp.res('ready', '00000000-0000-0000-0000-00000000000a', 1501, 'committed', '2001-01-22 01:00:01+00'),
    'committed', 'A1 is committed');
SELECT is(pg_temp.ready('ready'), 'A:ready:02 B:-:-', 'a commit makes a serial key ready again');
SELECT is(pg_temp.res('ready', '00000000-0000-0000-0000-00000000000a', 1503, 'unknown', '2001-01-22 01:00:02+00'),
    'unknown', 'the ledger lost B1');
SELECT is(pg_temp.ready('ready'), 'A:ready:02 B:ready:03', 'a batch marked unknown waits again: its key is ready');
SELECT lives_ok($$SELECT tenure._batch_configure('ready', 'unconstrained', true, NULL, '2001-01-22 01:00:03+00')$$,
    'the queue turns unconstrained');
SELECT is(pg_temp.sel('ready', '00000000-0000-0000-0000-00000000000a', 10, 1, '2001-01-22 01:00:04+00'), 'A2/1 B1/1',
    'A2 and B1 again (A served first at 01:00:00, B a microsecond later)');
SELECT is(pg_temp.enq('ready', 'A', 1504, '2001-01-22 00:00:05+00'), 3::bigint, 'A3 is enqueued');
SELECT is(pg_temp.ready('ready'), 'A:ready:05 B:-:-', 'unconstrained: a key with a batch pending is still ready');
SELECT lives_ok($$SELECT tenure._batch_configure('ready', 'serial', true, 'A', '2001-01-22 01:00:06+00')$$,
    'key A alone turns serial');
SELECT is(pg_temp.ready('ready'), 'A:-:05 B:-:-', 'a mode change is reflected at once: A has A2 pending');
SELECT is(pg_temp.res('ready', '00000000-0000-0000-0000-00000000000a', 1502, 'committed', '2001-01-22 01:00:07+00'),
    'committed', 'A2 is committed');
SELECT is(pg_temp.sel('ready', '00000000-0000-0000-0000-00000000000a', 10, 1, '2001-01-22 01:00:08+00'), 'A3/1',
    'A3 is selected');
SELECT is(pg_temp.enq('ready', 'A', 1505, '2001-01-22 00:00:09+00'), 4::bigint, 'A4 is enqueued');
SELECT is(pg_temp.res('ready', '00000000-0000-0000-0000-00000000000a', 1504, 'invalid', '2001-01-22 01:00:10+00'),
    'invalid', 'A3 is invalid');
SELECT is(pg_temp.ready('ready'), 'A:-:09 B:-:-', 'an invalid batch halts its key: not ready');
SELECT ok(tenure.batch_skip('ready', pg_temp.u(1504)), 'an operator skips A3');
SELECT is(pg_temp.ready('ready'), 'A:ready:09 B:-:-', 'a skip makes the key ready again');
SELECT is(pg_temp.sel('ready', '00000000-0000-0000-0000-00000000000a', 10, 1, '2001-01-22 01:00:11+00'), 'A4/1',
    'and A4 goes');
SELECT is(pg_temp.res('ready', '00000000-0000-0000-0000-00000000000a', 1505, 'invalid', '2001-01-22 01:00:12+00'),
    'invalid', 'A4 is invalid too');
SELECT ok(tenure.batch_retry('ready', pg_temp.u(1505)), 'an operator queues A4 again');
SELECT is(pg_temp.ready('ready'), 'A:ready:09 B:-:-', 'a retry makes the key ready again');

-- A resolution recomputes its key's summary only when it can make the key more selectable ('lazy', T = 2001-01-22) --
SELECT lives_ok($$SELECT tenure._batch_configure('lazy', 'unconstrained', true, NULL, '2001-01-22 02:00:00+00')$$,
    'lazy queue is unconstrained');
SELECT is(ARRAY[pg_temp.enq('lazy', 'L', 1701, '2001-01-22 00:00:01+00'), pg_temp.enq('lazy', 'L', 1702, '2001-01-22 00:00:02+00')],
    ARRAY[1, 2]::bigint[], 'L1 and L2 are enqueued');
SELECT is(ARRAY(SELECT key FROM tenure._claim_take('lazy', '00000000-0000-0000-0000-00000000000a', '1 day', NULL,
                                                   '2001-01-22 02:00:01+00')), ARRAY['L'], 'a takes L');
SELECT is(pg_temp.sel('lazy', '00000000-0000-0000-0000-00000000000a', 10, 1, '2001-01-22 02:00:02+00'), 'L1/1', 'a gets L1');
CREATE TEMP TABLE lazy_row AS SELECT ctid::text AS x FROM tenure.batch_key WHERE keyspace = 'lazy';
SELECT is(pg_temp.res('lazy', '00000000-0000-0000-0000-00000000000a', 1701, 'committed', '2001-01-22 02:00:03+00'),
    'committed', 'L1 is committed');
SELECT is((SELECT ctid::text FROM tenure.batch_key WHERE keyspace = 'lazy'), (SELECT x FROM lazy_row),
    'unconstrained: a pending batch committed leaves its key''s summary unwritten (it cannot change)');
SELECT is(pg_temp.ready('lazy'), 'L:ready:02', 'and the summary is still right: L2 waits');
SELECT is(pg_temp.sel('lazy', '00000000-0000-0000-0000-00000000000a', 10, 1, '2001-01-22 02:00:04+00'), 'L2/1', 'a gets L2');
SELECT is(pg_temp.enq('lazy', 'L', 1703, '2001-01-22 00:00:05+00'), 3::bigint, 'L3 is enqueued');
SELECT is(pg_temp.res('lazy', '00000000-0000-0000-0000-00000000000a', 1702, 'invalid', '2001-01-22 02:00:06+00'),
    'invalid', 'L2 is invalid');
SELECT is(pg_temp.ready('lazy'), 'L:ready:05',
    'an invalid batch can only make its key less selectable: the summary is left for the next selection');
SELECT is(pg_temp.sel('lazy', '00000000-0000-0000-0000-00000000000a', 10, 1, '2001-01-22 02:00:07+00'), '',
    'which finds L halted and hands out nothing');
SELECT is(pg_temp.ready('lazy'), 'L:-:05', 'and corrects the summary: L is not ready');

-- Keys take turns however a selection's size divides them ('turns', unconstrained, T = 2001-01-24) --------
SELECT lives_ok($$SELECT tenure._batch_configure('turns', 'unconstrained', true, NULL, '2001-01-24 00:00:00+00')$$,
    'turns queue is unconstrained');
SELECT is(ARRAY(SELECT pg_temp.enq('turns', k, (1800 + 10 * n + b)::integer, '2001-01-24 00:00:00+00'::timestamptz + n * interval '1 s')
                  FROM unnest(ARRAY['A', 'B', 'C']) WITH ORDINALITY AS x(k, n), generate_series(1, 3) b ORDER BY n, b),
    ARRAY[1, 2, 3, 1, 2, 3, 1, 2, 3]::bigint[], 'three batches of A, B and C, A waiting longest');
SELECT is(ARRAY(SELECT key FROM tenure._claim_take('turns', '00000000-0000-0000-0000-00000000000a', '1 day', NULL,
                                                   '2001-01-24 00:01:00+00') ORDER BY key),
    ARRAY['A', 'B', 'C'], 'instance a takes A, B and C');
SELECT is(
    ARRAY[pg_temp.sel('turns', '00000000-0000-0000-0000-00000000000a', 2, 1, '2001-01-24 01:00:00+00'),
          pg_temp.sel('turns', '00000000-0000-0000-0000-00000000000a', 2, 1, '2001-01-24 01:00:01+00'),
          pg_temp.sel('turns', '00000000-0000-0000-0000-00000000000a', 2, 1, '2001-01-24 01:00:02+00')],
    ARRAY['A1/1 B1/1', 'C1/1 A2/1', 'B2/1 C2/1'],
    'two keys a selection, in turn: A (served before B) comes before B, so every key goes twice in three selections');

-- Selection reads the keys it returns ('crowd', unconstrained, T = 2001-01-23) ---------------------------
SELECT lives_ok($$SELECT tenure._batch_configure('crowd', 'unconstrained', true, NULL, '2001-01-23 00:00:00+00')$$,
    'crowd queue is unconstrained');
SELECT is(
    (SELECT count(*) FROM generate_series(1, 150) n,
         LATERAL tenure._batch_enqueue_many('crowd',
             jsonb_build_array(jsonb_build_object('key', format('K%s', lpad(n::text, 3, '0')), 'payload', 'eA==')),
             '2001-01-23 00:00:00+00'::timestamptz + n * interval '1 s', 'batch_enqueue_many')),
    150::bigint, 'one batch for each of 150 keys, K001 oldest');
SELECT is(
    (SELECT count(*) FROM tenure._claim_take('crowd', '00000000-0000-0000-0000-00000000000a', '1 day', NULL,
                                             '2001-01-23 00:01:00+00')),
    150::bigint, 'instance a takes all 150');
SELECT is(pg_temp.enq('crowd', 'Z', 1601, '2001-01-23 00:02:00+00'), 1::bigint, 'a 151st key, Z, waits latest');
SELECT is(
    ARRAY(SELECT key FROM tenure._claim_take('crowd', '00000000-0000-0000-0000-00000000000b', '1 day', NULL,
                                             '2001-01-23 00:03:00+00')),
    ARRAY['Z'], 'instance b takes Z, the only key left');
-- statistics as autovacuum keeps them (without any, the planner takes 150 keys for 2)
ANALYZE tenure.batch, tenure.batch_key, tenure.claim_key;
-- On tables this small a sequential scan of claim_key (every keyspace of this file) is as cheap
-- as the index to the planner; on a large table it is not. Count what the indexed plan reads.
SET LOCAL enable_seqscan = off;
CREATE TEMP TABLE reads AS
SELECT relname, coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) AS n
  FROM pg_stat_xact_user_tables WHERE schemaname = 'tenure' AND relname IN ('batch', 'claim_key');
SELECT is(pg_temp.sel('crowd', '00000000-0000-0000-0000-00000000000a', 1, 1, '2001-01-23 01:00:00+00'), 'K0011/1',
    'a gets its key waiting longest');
SELECT cmp_ok(
    (SELECT sum(t.coalesce_n) FROM (SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) - r.n AS coalesce_n
                                      FROM pg_stat_xact_user_tables s JOIN reads r USING (relname)
                                     WHERE s.schemaname = 'tenure' AND relname IN ('batch', 'claim_key')) t),
    '<', 150::numeric,
    'a selection of one batch among 150 ready keys probes fewer batches and claims than there are keys');
RESET enable_seqscan;
SELECT is(pg_temp.sel('crowd', '00000000-0000-0000-0000-00000000000b', 1, 1, '2001-01-23 01:00:01+00'), 'Z1/1',
    'b gets Z though 150 keys of a come before it in the walk (b''s own keys are read instead)');
SELECT is(pg_temp.sel('crowd', '00000000-0000-0000-0000-00000000000b', 1, 1, '2001-01-23 01:00:02+00'), '',
    'then nothing for b');

-- Least privilege: the worker role calls functions and reads the view, nothing else -------------------
SET LOCAL ROLE tenure_worker;
SELECT results_eq(
    $$SELECT key, seq, created FROM tenure.batch_enqueue('worker', 'W', 'w', p_id => '00000000-0000-0000-0000-000000001201')$$,
    $$VALUES ('W', 1::bigint, true)$$, 'tenure_worker can call batch_enqueue');
SELECT results_eq(
    $$SELECT key FROM tenure.claim_take('worker', '00000000-0000-0000-0000-00000000000c', '1 hour')$$,
    $$VALUES ('W')$$, 'tenure_worker takes the key');
SELECT results_eq(
    $$SELECT id, attempts, claim_epoch FROM tenure.batch_select('worker', '00000000-0000-0000-0000-00000000000c', 10)$$,
    $$VALUES ('00000000-0000-0000-0000-000000001201'::uuid, 1, 1::bigint)$$, 'tenure_worker can call batch_select');
SELECT results_eq(
    $$SELECT key, claimant, claimed, pending FROM tenure.batch_keys WHERE keyspace = 'worker'$$,
    $$VALUES ('W', '00000000-0000-0000-0000-00000000000c'::uuid, true, 1::bigint)$$,
    'tenure_worker can read tenure.batch_keys');
SELECT results_eq(
    $$SELECT key, seq, status, payload_bytes, attempts, claim_epoch FROM tenure.batches WHERE keyspace = 'worker'$$,
    $$VALUES ('W', 1::bigint, 'pending', 1, 1, 1::bigint)$$,
    'tenure_worker can read tenure.batches');
SELECT is(tenure.batch_check('worker', '00000000-0000-0000-0000-00000000000c', ARRAY['W'], ARRAY[1]::bigint[]),
    ARRAY[true], 'tenure_worker can call batch_check');
SELECT throws_ok($$SELECT * FROM tenure.batch$$, '42501', NULL, 'tenure_worker cannot read tenure.batch');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
