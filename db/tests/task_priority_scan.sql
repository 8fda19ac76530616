-- The due tasks an acquisition leases, for any kind, one kind and several kinds: the
-- highest priority first, then the oldest due, exactly as one ORDER BY priority DESC,
-- next_action over the due tasks would pick them, whatever the mix of priorities, leased
-- tasks, leases run out and tasks due later. (_task_take scans the top priority, then walks
-- the lower priorities one by one, so that tasks due later are never read; this checks it
-- leaves none out and takes none too early.) Each acquisition is rolled back, so all of
-- them see the same tasks.
BEGIN;
SELECT plan(48);

-- 600 tasks of kinds a, b, c at priorities -2 .. 7, each with its own next_action within an
-- hour either side of T = 2001-01-01 12:00; a fifth of them leased, by an owner whose lease
-- runs until next_action (so those due are leases that ran out).
INSERT INTO tenure.task (kind, state, created_at, last_change, last_action, next_action, priority, owner, leased_at,
                         epoch, max_attempts)
SELECT (ARRAY['a', 'b', 'c'])[1 + g % 3], 'new', '2001-01-01 10:00+00', '2001-01-01 10:00+00', '2001-01-01 10:00+00',
       '2001-01-01 12:00+00'::timestamptz + ((g * 7919) % 7200 - 3600) * interval '1 s' + g * interval '1 ms',
       (g * 31) % 10 - 2,
       CASE WHEN g % 5 = 1 THEN '00000000-0000-0000-0000-0000000000ff'::uuid END,
       CASE WHEN g % 5 = 1 THEN '2001-01-01 10:00+00'::timestamptz END,
       CASE WHEN g % 5 = 1 THEN 1 ELSE 0 END, 100
  FROM generate_series(1, 600) g;

-- The ids _task_take leases, in the order it returns them, then rolled back.
CREATE FUNCTION pg_temp.taken(p_kinds text[], p_limit integer, p_at text)
RETURNS uuid[]
LANGUAGE plpgsql
AS $$
DECLARE
    v_ids uuid[];
BEGIN
    BEGIN
        v_ids := ARRAY(SELECT l.id FROM tenure._task_take('00000000-0000-0000-0000-00000000000a', '30 s', p_limit,
                                                          p_kinds, p_at::timestamptz) l);
        RAISE EXCEPTION 'roll back' USING ERRCODE = 'P0099';
    EXCEPTION WHEN SQLSTATE 'P0099' THEN
        RETURN v_ids;
    END;
END
$$;

-- The same by one ORDER BY over the due tasks.
CREATE FUNCTION pg_temp.expected(p_kinds text[], p_limit integer, p_at text)
RETURNS uuid[]
LANGUAGE sql
AS $$
    SELECT ARRAY(SELECT t.id FROM tenure.task t
                  WHERE t.status = 'pending' AND (p_kinds IS NULL OR t.kind = ANY (p_kinds))
                    AND t.next_action <= p_at::timestamptz AND (t.owner IS NULL OR t.next_action < p_at::timestamptz)
                  ORDER BY t.priority DESC, t.next_action LIMIT p_limit)
$$;

-- At 12:00 no task of the top priority is due (the walk below it does all); at 13:00 every
-- task is due (the top priority's scan takes its tasks, up to 150 the walk the rest:
-- leaving out those the scan took; breaking that fails tests 11 and 23); 12:30 between.
SELECT is(pg_temp.taken(kinds, n, at), pg_temp.expected(kinds, n, at),
          format('at %s, kinds %s, up to %s: the due tasks by priority, then oldest due', at,
                 coalesce(kinds::text, 'any'), n))
  FROM (VALUES ('2001-01-01 12:00+00'), ('2001-01-01 12:30+00'), ('2001-01-01 13:00+00')) a (at)
 CROSS JOIN (VALUES (NULL::text[]), (ARRAY['a']), (ARRAY['b', 'c']), (ARRAY['c', 'x'])) k (kinds)
 CROSS JOIN (VALUES (1), (7), (150), (1000)) l (n);

SELECT finish();
ROLLBACK;
