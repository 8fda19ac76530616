-- Announcing due tasks only to waiting workers: task_cycle with p_wait registers its
-- owner when it leaves slots free, a full cycle ends the registration, and a task that
-- becomes due is announced (NOTIFY tenure_task) only to a live registration for its
-- kind, once per registration (told). _task_announce returns the kinds it announced. The race between registering and
-- announcing is in the isolation spec task-wait-announce.
-- Instances: a = ...0a, b = ...0b. Times: T = 2001-01-01 00:00:00.
BEGIN;
SELECT plan(22);

CREATE FUNCTION pg_temp.cycle(p_owner text, p_limit integer, p_kinds text[], p_wait interval, p_at text)
RETURNS SETOF tenure.task_cycled
LANGUAGE sql
AS $$ SELECT * FROM tenure._task_cycle(format('00000000-0000-0000-0000-0000000000%s', p_owner)::uuid, '30 s', p_limit,
                                       p_kinds, '[]', p_wait, p_at::timestamptz) $$;

CREATE FUNCTION pg_temp.announced(p_kinds text[], p_at text)
RETURNS text[]
LANGUAGE sql
AS $$ SELECT ARRAY(SELECT k FROM unnest(tenure._task_announce(p_kinds, p_at::timestamptz)) k ORDER BY k) $$;

SELECT has_table('tenure', 'task_waiter', 'the registry of waiting workers exists');
SELECT is(pg_temp.announced(ARRAY['mail'], '2001-01-01 00:00:00+00'), '{}', 'no one waits: nothing is announced');

-- Registering --------------------------------------------------------------------------
SELECT is_empty($$SELECT * FROM pg_temp.cycle('0a', 2, ARRAY['mail'], NULL, '2001-01-01 00:00:00+00')$$,
    'a cycle without p_wait leases nothing here...');
SELECT is_empty($$SELECT * FROM tenure.task_waiter$$, '... and registers nothing');
SELECT is_empty($$SELECT * FROM pg_temp.cycle('0a', 2, ARRAY['mail', 'sms'], '10 s', '2001-01-01 00:00:00+00')$$,
    'a cycle with p_wait that finds nothing due leases nothing...');
SELECT results_eq($$SELECT owner::text, kinds, until FROM tenure.task_waiter$$,
    $$VALUES ('00000000-0000-0000-0000-00000000000a', ARRAY['mail', 'sms'], '2001-01-01 00:00:10+00'::timestamptz)$$,
    '... and registers its owner for its kinds until now + p_wait');
SELECT is(pg_temp.announced(ARRAY['sms', 'mail', 'push', 'mail'], '2001-01-01 00:00:05+00'), ARRAY['mail', 'sms'],
    'the kinds a live registration waits for are announced, each once; other kinds are not');
SELECT is(pg_temp.announced(ARRAY['mail'], '2001-01-01 00:00:10+00'), '{}',
    'a registration that ran out announces nothing: a worker that died stops costing announcements');

-- Announcements by the writes that make a task due now ---------------------------------
SELECT is_empty($$SELECT * FROM pg_temp.cycle('0b', 1, NULL, '1 min', '2001-01-01 00:00:20+00')$$,
    'a cycle of any kind registers with kinds NULL...');
SELECT is(pg_temp.announced(ARRAY['push'], '2001-01-01 00:00:30+00'), ARRAY['push'],
    '... and every kind is announced to it');
SELECT is((SELECT told FROM tenure.task_waiter WHERE owner = '00000000-0000-0000-0000-00000000000b'), true,
    'an announcement marks the registration told...');
SELECT is(pg_temp.announced(ARRAY['push', 'mail'], '2001-01-01 00:00:30+00'), '{}',
    '... and it is announced to once: later tasks send nothing until it registers again');
SELECT is(pg_temp.announced('{}', '2001-01-01 00:00:30+00'), '{}', 'no kind, no announcement');

-- Ending the registration ----------------------------------------------------------------
SELECT tenure._task_enqueue('mail', '{}', 'new', '0', NULL, NULL, 5, 0, NULL, NULL, '2001-01-01 00:00:30+00')
  FROM generate_series(1, 3);
SELECT is((SELECT count(*)::int FROM pg_temp.cycle('0b', 2, NULL, '1 min', '2001-01-01 00:00:31+00')), 2,
    'a cycle that fills every slot...');
SELECT is_empty($$SELECT * FROM tenure.task_waiter WHERE owner = '00000000-0000-0000-0000-00000000000b'$$,
    '... ends its owner''s registration');
SELECT is((SELECT count(*)::int FROM pg_temp.cycle('0b', 2, NULL, '1 min', '2001-01-01 00:00:32+00')), 1,
    'a cycle that leaves a slot free leases what is due...');
SELECT results_eq($$SELECT kinds, until FROM tenure.task_waiter WHERE owner = '00000000-0000-0000-0000-00000000000b'$$,
    $$VALUES (NULL::text[], '2001-01-01 00:01:32+00'::timestamptz)$$,
    '... and registers again');
SELECT is((SELECT told FROM tenure.task_waiter WHERE owner = '00000000-0000-0000-0000-00000000000b'), false,
    'registering again clears told...');
SELECT is(pg_temp.announced(ARRAY['mail'], '2001-01-01 00:00:33+00'), ARRAY['mail'],
    '... so the next task is announced to it again');

-- Bad input ------------------------------------------------------------------------------
SELECT lives_ok($$SELECT * FROM pg_temp.cycle('0a', 1, NULL, '0 s', '2001-01-01 00:00:40+00')$$,
    'p_wait of 0 is allowed, as documented (a registration that ends at once)');
SELECT throws_ok($$SELECT * FROM pg_temp.cycle('0a', 1, NULL, '-1 s', '2001-01-01 00:00:40+00')$$,
    'TN001', NULL, 'a negative p_wait is refused with TN001');
SELECT throws_ok($$SELECT * FROM tenure.task_cycle('00000000-0000-0000-0000-00000000000a', '30 s', 1, NULL, '[]', '2 days')$$,
    'TN001', NULL, 'p_wait over a day is refused with TN001');

SELECT * FROM finish();
ROLLBACK;
