-- Where a session starts looking for due tasks: _task_lease keeps the front of the due
-- tasks it found (tenure.task_front) and for a second starts its range scan there, after
-- a look at the priorities above alone, instead of walking the index from its front (the
-- entries of every task leased since the last VACUUM). A task due behind the kept front
-- waits for the next look from the front: a second later, or a call that finds fewer
-- than it asked for where the front was kept. For one kind, several kinds and any kind.
-- Times: T = 2001-01-01 12:00:00.
BEGIN;
SELECT plan(22);

CREATE FUNCTION pg_temp.add(p_name text, p_kind text, p_seconds integer, p_priority integer DEFAULT 0)
RETURNS void
LANGUAGE sql
AS $$
    INSERT INTO tenure.task (id, kind, state, created_at, last_change, last_action, next_action, priority)
    VALUES (md5(p_name)::uuid, p_kind, 'new', '2001-01-01 11:00+00', '2001-01-01 11:00+00', '2001-01-01 11:00+00',
            '2001-01-01 12:00+00'::timestamptz + p_seconds * interval '1 s', p_priority)
$$;

-- The names of the tasks one acquisition leases (kept: later ones see them leased).
CREATE FUNCTION pg_temp.take(p_kinds text[], p_limit integer, p_at text)
RETURNS text[]
LANGUAGE sql
AS $$
    SELECT ARRAY(SELECT n.name FROM tenure._task_take('00000000-0000-0000-0000-00000000000a', '30 s', p_limit,
                                                      p_kinds, p_at::timestamptz) WITH ORDINALITY l
                   JOIN (VALUES ('A'), ('B'), ('C'), ('D'), ('E'), ('F'), ('G'), ('H')) n (name)
                     ON md5(n.name)::uuid = l.id
                  ORDER BY l.ordinality)
$$;

-- One kind ---------------------------------------------------------------------------------
SELECT pg_temp.add('A', 'f', -30), pg_temp.add('B', 'f', -20), pg_temp.add('C', 'f', -10), pg_temp.add('H', 'g', -60);
SELECT is(pg_temp.take(ARRAY['f'], 1, '2001-01-01 12:00:00+00'), ARRAY['A'], 'the first lease is the oldest due');
SELECT ok(current_setting('tenure.task_front', true) LIKE '{%', 'the session keeps where it found the front');

-- D becomes due behind the kept front (as a task whose lease rolled back would).
SELECT pg_temp.add('D', 'f', -40);
SELECT is(pg_temp.take(ARRAY['f'], 1, '2001-01-01 12:00:00.5+00'), ARRAY['B'],
    'within the second, the scan starts at the kept front: a task due behind it waits');
SELECT is(pg_temp.take(ARRAY['f'], 1, '2001-01-01 12:00:01.5+00'), ARRAY['D'],
    'a second later the front is looked for again: the task behind is leased first');

SELECT pg_temp.add('F', 'f', -50);
SELECT is(pg_temp.take(ARRAY['f'], 5, '2001-01-01 12:00:01.6+00'), ARRAY['C', 'F'],
    'fewer due from the kept front than asked for: the rest from the front, the task behind it included');

SELECT pg_temp.add('E', 'f', -1, 5);
SELECT is(pg_temp.take(ARRAY['f'], 1, '2001-01-01 12:00:01.7+00'), ARRAY['E'],
    'a higher priority due since the front was kept is leased at once');
SELECT is(pg_temp.take(ARRAY['f'], 5, '2001-01-01 12:00:01.8+00'), '{}', 'nothing of the kind is left due');

-- The front kept for one kind is not another's.
SELECT is(pg_temp.take(ARRAY['g'], 1, '2001-01-01 12:00:01.9+00'), ARRAY['H'], 'another kind looks from its own front');

-- Any kind ---------------------------------------------------------------------------------
DELETE FROM tenure.task;
SELECT pg_temp.add('A', 'f', 30), pg_temp.add('B', 'g', 40), pg_temp.add('C', 'f', 50);
SELECT is(pg_temp.take(NULL, 1, '2001-01-01 12:01:00+00'), ARRAY['A'], 'any kind: the oldest due first');
SELECT pg_temp.add('D', 'g', 10);
SELECT is(pg_temp.take(NULL, 1, '2001-01-01 12:01:00.5+00'), ARRAY['B'],
    'any kind: within the second, from the kept front');
SELECT pg_temp.add('E', 'g', 20, 1);
SELECT is(pg_temp.take(NULL, 1, '2001-01-01 12:01:00.6+00'), ARRAY['E'], 'any kind: a higher priority at once');
SELECT is(pg_temp.take(NULL, 1, '2001-01-01 12:01:01.7+00'), ARRAY['D'], 'any kind: a second later, from the front');
SELECT is(pg_temp.take(NULL, 5, '2001-01-01 12:01:01.8+00'), ARRAY['C'], 'any kind: the rest');

-- Several kinds ----------------------------------------------------------------------------
DELETE FROM tenure.task;
SELECT pg_temp.add('A', 'g', 30), pg_temp.add('B', 'f', 40), pg_temp.add('C', 'h', 45), pg_temp.add('D', 'g', 50),
       pg_temp.add('E', 'f', 60);
SELECT is(pg_temp.take(ARRAY['f', 'g'], 1, '2001-01-01 12:01:10+00'), ARRAY['A'],
    'several kinds: the oldest due of any of them first');
SELECT pg_temp.add('F', 'f', 10);
SELECT is(pg_temp.take(ARRAY['f', 'g'], 1, '2001-01-01 12:01:10.5+00'), ARRAY['B'],
    'several kinds: within the second, from the kept front');
SELECT pg_temp.add('G', 'g', 20, 1);
SELECT is(pg_temp.take(ARRAY['f', 'g'], 1, '2001-01-01 12:01:10.6+00'), ARRAY['G'],
    'several kinds: a higher priority of either at once');
SELECT is(pg_temp.take(ARRAY['g', 'f'], 1, '2001-01-01 12:01:10.7+00'), ARRAY['F'],
    'several kinds: the front kept for them in another order is not used');
SELECT is(pg_temp.take(ARRAY['f', 'g'], 5, '2001-01-01 12:01:10.8+00'), ARRAY['D', 'E'],
    'several kinds: the rest, never a kind not asked for');
SELECT is(pg_temp.take(ARRAY['h'], 5, '2001-01-01 12:01:10.9+00'), ARRAY['C'], 'the kind not asked for is still due');

-- What it keeps is a hint: a value it did not write, or one from later, is not used.
DELETE FROM tenure.task;
SELECT pg_temp.add('F', 'f', 0), pg_temp.add('G', 'f', 5);
SELECT set_config('tenure.task_front', 'not json', false);
SELECT is(pg_temp.take(ARRAY['f'], 1, '2001-01-01 12:02:00+00'), ARRAY['F'], 'a kept value it cannot read is ignored');
SELECT set_config('tenure.task_front', jsonb_build_object('kinds', ARRAY['f']::text, 'priority', 0,
    'next_action', '2001-01-01 12:00:05+00'::timestamptz, 'found_at', '2001-01-01 12:03:00+00'::timestamptz)::text,
    false);
SELECT pg_temp.add('H', 'f', 1);
SELECT is(pg_temp.take(ARRAY['f'], 1, '2001-01-01 12:02:00.5+00'), ARRAY['H'],
    'a front kept at a time after the call''s is not used');
SELECT is(pg_temp.take(ARRAY['f'], 1, '2001-01-01 12:02:00.6+00'), ARRAY['G'], 'and the last one is leased');

SELECT finish();
ROLLBACK;
