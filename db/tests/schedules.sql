-- Schedules: the cron evaluator (every field form, names, the day rule, time zones, both
-- daylight saving time changes in Europe/Zurich and America/New_York, leap days), the
-- schedule functions and the tick with its catch-up policies, and bad input. The tick
-- reads the database's clock (now() stays authoritative): the tests move a schedule's
-- cursor (next_slot) into the past instead. Yearly and daily slots keep the expected
-- values independent of the time the test runs at.
BEGIN;
SELECT plan(140);

-- Signatures -------------------------------------------------------------------------
SELECT has_function('tenure', 'cron_next', ARRAY['text', 'timestamp with time zone', 'text']);
SELECT function_returns('tenure', 'cron_next', ARRAY['text', 'timestamp with time zone', 'text'], 'timestamp with time zone');
SELECT has_function('tenure', 'schedule_set', ARRAY['text', 'text', 'text', 'interval', 'text', 'jsonb', 'integer', 'text', 'integer']);
SELECT function_returns('tenure', 'schedule_set', ARRAY['text', 'text', 'text', 'interval', 'text', 'jsonb', 'integer', 'text', 'integer'], 'tenure.schedule_info');
SELECT function_returns('tenure', 'schedule_tick', ARRAY[]::text[], 'setof tenure.schedule_slot');
SELECT function_returns('tenure', 'schedule_pause', ARRAY['text'], 'tenure.schedule_info');
SELECT function_returns('tenure', 'schedule_resume', ARRAY['text'], 'tenure.schedule_info');
SELECT function_returns('tenure', 'schedule_drop', ARRAY['text'], 'tenure.schedule_info');
SELECT function_returns('tenure', 'schedule_run_now', ARRAY['text'], 'uuid');
SELECT has_view('tenure', 'schedules', 'operator view schedules exists');

-- cron_next: field forms, names, the day rule, leap days, zones, DST ----------------------
SELECT is(tenure.cron_next('* * * * *', '2026-01-01 00:00:30+00', 'UTC'), '2026-01-01 00:01:00+00'::timestamptz, $d$* * * * * (UTC): every minute: the next whole minute$d$);
SELECT is(tenure.cron_next('* * * * *', '2026-01-01 00:01:00+00', 'UTC'), '2026-01-01 00:02:00+00'::timestamptz, $d$* * * * * (UTC): strictly after: a slot at p_after is not returned$d$);
SELECT is(tenure.cron_next('*/15 * * * *', '2026-01-01 00:16:00+00', 'UTC'), '2026-01-01 00:30:00+00'::timestamptz, $d$*/15 * * * * (UTC): step */15$d$);
SELECT is(tenure.cron_next('1-30/5 * * * *', '2026-01-01 00:27:00+00', 'UTC'), '2026-01-01 01:01:00+00'::timestamptz, $d$1-30/5 * * * * (UTC): range with step 1-30/5 (1, 6, ..., 26) wraps to the next hour$d$);
SELECT is(tenure.cron_next('5/15 * * * *', '2026-01-01 00:51:00+00', 'UTC'), '2026-01-01 01:05:00+00'::timestamptz, $d$5/15 * * * * (UTC): 5/15 runs 5, 20, 35, 50$d$);
SELECT is(tenure.cron_next('0 0 * * 1/3', '2026-01-01 00:00:00+00', 'UTC'), '2026-01-05 00:00:00+00'::timestamptz, $d$0 0 * * 1/3 (UTC): 1/3 runs Monday and Thursday, not Sunday (7 is no day of its own)$d$);
SELECT is(tenure.cron_next('5,10,55 * * * *', '2026-01-01 00:10:00+00', 'UTC'), '2026-01-01 00:55:00+00'::timestamptz, $d$5,10,55 * * * * (UTC): list of minutes$d$);
SELECT is(tenure.cron_next('0 9-17 * * *', '2026-01-01 17:30:00+00', 'UTC'), '2026-01-02 09:00:00+00'::timestamptz, $d$0 9-17 * * * (UTC): hour range: after the last hour, the first of the next day$d$);
SELECT is(tenure.cron_next('0 0 1 JAN,jul *', '2026-01-01 00:00:00+00', 'UTC'), '2026-07-01 00:00:00+00'::timestamptz, $d$0 0 1 JAN,jul * (UTC): month names in any case$d$);
SELECT is(tenure.cron_next('0 0 1 Feb-Apr/2 *', '2026-02-02 00:00:00+00', 'UTC'), '2026-04-01 00:00:00+00'::timestamptz, $d$0 0 1 Feb-Apr/2 * (UTC): month name range with a step$d$);
SELECT is(tenure.cron_next('0 0 * * MON-FRI', '2026-01-02 12:00:00+00', 'UTC'), '2026-01-05 00:00:00+00'::timestamptz, $d$0 0 * * MON-FRI (UTC): weekday names: after Friday noon, Monday$d$);
SELECT is(tenure.cron_next('0 0 * * 7', '2026-01-01 00:00:00+00', 'UTC'), '2026-01-04 00:00:00+00'::timestamptz, $d$0 0 * * 7 (UTC): 7 is Sunday$d$);
SELECT is(tenure.cron_next('0 0 * * 0', '2026-01-01 00:00:00+00', 'UTC'), '2026-01-04 00:00:00+00'::timestamptz, $d$0 0 * * 0 (UTC): 0 is Sunday$d$);
SELECT is(tenure.cron_next('0 0 * * sun', '2026-01-01 00:00:00+00', 'UTC'), '2026-01-04 00:00:00+00'::timestamptz, $d$0 0 * * sun (UTC): sun is Sunday$d$);
SELECT is(tenure.cron_next('0 0 * * 5-7', '2026-01-03 12:00:00+00', 'UTC'), '2026-01-04 00:00:00+00'::timestamptz, $d$0 0 * * 5-7 (UTC): the range 5-7 ends on Sunday$d$);
SELECT is(tenure.cron_next('0 0 13 * FRI', '2026-01-01 00:00:00+00', 'UTC'), '2026-01-02 00:00:00+00'::timestamptz, $d$0 0 13 * FRI (UTC): both days restricted: either matches (Friday 2 January)$d$);
SELECT is(tenure.cron_next('0 0 13 * FRI', '2026-01-10 00:00:00+00', 'UTC'), '2026-01-13 00:00:00+00'::timestamptz, $d$0 0 13 * FRI (UTC): both days restricted: either matches (Tuesday 13 January)$d$);
SELECT is(tenure.cron_next('0 0 */2 * FRI', '2026-01-01 00:00:00+00', 'UTC'), '2026-01-09 00:00:00+00'::timestamptz, $d$0 0 */2 * FRI (UTC): day of month starting with *: both must match (odd day and Friday)$d$);
SELECT is(tenure.cron_next('0 0 31 2 MON', '2026-01-01 00:00:00+00', 'UTC'), '2026-02-02 00:00:00+00'::timestamptz, $d$0 0 31 2 MON (UTC): 31 February or Monday: the Mondays of February$d$);
SELECT is(tenure.cron_next('0 0 31 * *', '2026-01-31 00:00:00+00', 'UTC'), '2026-03-31 00:00:00+00'::timestamptz, $d$0 0 31 * * (UTC): the 31st skips months without one$d$);
SELECT is(tenure.cron_next('0 0 29 2 *', '2026-03-01 00:00:00+00', 'UTC'), '2028-02-29 00:00:00+00'::timestamptz, $d$0 0 29 2 * (UTC): leap day: the next 29 February$d$);
SELECT is(tenure.cron_next('0 0 29 2 *', '2096-03-01 00:00:00+00', 'UTC'), '2104-02-29 00:00:00+00'::timestamptz, $d$0 0 29 2 * (UTC): leap day: 2100 is no leap year$d$);
SELECT is(tenure.cron_next('@daily', '2026-01-01 10:00:00+00', 'UTC'), '2026-01-02 00:00:00+00'::timestamptz, $d$@daily (UTC): @daily$d$);
SELECT is(tenure.cron_next('@hourly', '2026-01-01 10:00:00+00', 'UTC'), '2026-01-01 11:00:00+00'::timestamptz, $d$@hourly (UTC): @hourly$d$);
SELECT is(tenure.cron_next('  0   3 * *' || E'\t' || '*  ', '2026-01-01 10:00:00+00', 'UTC'), '2026-01-02 03:00:00+00'::timestamptz, $d$  0   3 * *	*   (UTC): spaces and tabs between and around fields$d$);
SELECT is(tenure.cron_next('0 3 * * *', '2026-01-10 12:00:00+00', 'Europe/Zurich'), '2026-01-11 02:00:00+00'::timestamptz, $d$0 3 * * * (Europe/Zurich): 03:00 Zurich in winter is 02:00 UTC$d$);
SELECT is(tenure.cron_next('0 3 * * *', '2026-07-10 12:00:00+00', 'Europe/Zurich'), '2026-07-11 01:00:00+00'::timestamptz, $d$0 3 * * * (Europe/Zurich): 03:00 Zurich in summer is 01:00 UTC$d$);
SELECT is(tenure.cron_next('0 3 * * *', '2026-07-10 12:00:00+00', 'America/New_York'), '2026-07-11 07:00:00+00'::timestamptz, $d$0 3 * * * (America/New_York): 03:00 New York in summer is 07:00 UTC$d$);
SELECT is(tenure.cron_next('0 0 * * *', '2026-01-01 12:00:00+00', 'Asia/Kolkata'), '2026-01-01 18:30:00+00'::timestamptz, $d$0 0 * * * (Asia/Kolkata): a half-hour zone: midnight Kolkata is 18:30 UTC$d$);
SELECT is(tenure.cron_next('30 2 * * *', '2026-03-28 12:00:00+00', 'Europe/Zurich'), '2026-03-29 01:00:00+00'::timestamptz, $d$30 2 * * * (Europe/Zurich): Zurich spring: 02:30 does not exist and runs at the jump (03:00 CEST)$d$);
SELECT is(tenure.cron_next('30 2 * * *', '2026-03-29 01:00:00+00', 'Europe/Zurich'), '2026-03-30 00:30:00+00'::timestamptz, $d$30 2 * * * (Europe/Zurich): Zurich spring: and once only, then 02:30 CEST the next day$d$);
SELECT is(tenure.cron_next('0 3 * * *', '2026-03-28 12:00:00+00', 'Europe/Zurich'), '2026-03-29 01:00:00+00'::timestamptz, $d$0 3 * * * (Europe/Zurich): Zurich spring: 03:00 runs at 03:00 CEST$d$);
SELECT is(tenure.cron_next('*/30 * * * *', '2026-03-29 00:30:00+00', 'Europe/Zurich'), '2026-03-29 01:00:00+00'::timestamptz, $d$*/30 * * * * (Europe/Zurich): Zurich spring: 02:00, 02:30 and 03:00 run once, at the jump$d$);
SELECT is(tenure.cron_next('*/30 * * * *', '2026-03-29 01:00:00+00', 'Europe/Zurich'), '2026-03-29 01:30:00+00'::timestamptz, $d$*/30 * * * * (Europe/Zurich): Zurich spring: then 03:30 CEST$d$);
SELECT is(tenure.cron_next('30 2 * * *', '2026-10-24 12:00:00+00', 'Europe/Zurich'), '2026-10-25 00:30:00+00'::timestamptz, $d$30 2 * * * (Europe/Zurich): Zurich autumn: 02:30 occurs twice and runs at its first occurrence (CEST)$d$);
SELECT is(tenure.cron_next('30 2 * * *', '2026-10-25 00:30:00+00', 'Europe/Zurich'), '2026-10-26 01:30:00+00'::timestamptz, $d$30 2 * * * (Europe/Zurich): Zurich autumn: not again at 02:30 CET$d$);
SELECT is(tenure.cron_next('0 * * * *', '2026-10-25 00:00:00+00', 'Europe/Zurich'), '2026-10-25 02:00:00+00'::timestamptz, $d$0 * * * * (Europe/Zurich): Zurich autumn: hourly, the repeated 02:00 runs once, then 03:00 CET$d$);
SELECT is(tenure.cron_next('15 2 * * *', '2026-10-25 01:20:00+00', 'Europe/Zurich'), '2026-10-26 01:15:00+00'::timestamptz, $d$15 2 * * * (Europe/Zurich): Zurich autumn: from inside the repeated hour, 02:15 is past$d$);
SELECT is(tenure.cron_next('30 2 * * *', '2026-03-07 12:00:00+00', 'America/New_York'), '2026-03-08 07:00:00+00'::timestamptz, $d$30 2 * * * (America/New_York): New York spring: 02:30 runs at the jump (03:00 EDT)$d$);
SELECT is(tenure.cron_next('30 1 * * *', '2026-10-31 12:00:00+00', 'America/New_York'), '2026-11-01 05:30:00+00'::timestamptz, $d$30 1 * * * (America/New_York): New York autumn: 01:30 runs at its first occurrence (EDT)$d$);
SELECT is(tenure.cron_next('30 1 * * *', '2026-11-01 05:30:00+00', 'America/New_York'), '2026-11-02 06:30:00+00'::timestamptz, $d$30 1 * * * (America/New_York): New York autumn: not again at 01:30 EST$d$);
SELECT is(tenure.cron_next('0 0 29 2 */2', '2026-01-01 00:00:00+00'),
    (SELECT min(d)::timestamp AT TIME ZONE 'UTC' FROM generate_series('2026-01-01'::date, '2200-01-01', '1 day') d
      WHERE extract(month FROM d) = 2 AND extract(day FROM d) = 29 AND extract(dow FROM d) IN (0, 2, 4, 6)),
    '29 February on an even weekday (the rarest kind of slot, years apart) is found');
SELECT is(
    (SELECT count(DISTINCT tenure.cron_next('* * * * *', '2026-03-29 00:00:00+00'::timestamptz + g * interval '1 minute', 'Europe/Zurich'))
       FROM generate_series(0, 119) g)::integer, 120,
    'every minute across the Zurich spring gap: 120 distinct slots in two hours of UTC');
SELECT is(
    (SELECT count(*) FROM generate_series(0, 239) g
      WHERE tenure.cron_next('* * * * *', '2026-10-25 00:00:00+00'::timestamptz + g * interval '1 minute', 'Europe/Zurich')
            = '2026-10-25 00:00:00+00'::timestamptz + (g + 1) * interval '1 minute')::integer, 180,
    'every minute across the Zurich autumn change: the repeated hour (60 minutes of UTC) has no slot');

-- cron_next: bad input --------------------------------------------------------------------
SELECT throws_ok($$SELECT tenure.cron_next('0 0 31 2 *', now())$$, 'TN001', NULL, '31 February never comes: TN001');
SELECT throws_ok($$SELECT tenure.cron_next('0 0 30-31 2 *', now())$$, 'TN001', NULL, '30 or 31 February never comes: TN001');
SELECT throws_like($$SELECT tenure.cron_next('60 * * * *', now())$$, '%60 in its minute field, outside 0-59%', 'minute 60 is refused, naming the field');
SELECT throws_like($$SELECT tenure.cron_next('* 24 * * *', now())$$, '%hour field%', 'hour 24 is refused');
SELECT throws_like($$SELECT tenure.cron_next('* * 0 * *', now())$$, '%day-of-month field%', 'day 0 is refused');
SELECT throws_like($$SELECT tenure.cron_next('* * * 13 *', now())$$, '%month field%', 'month 13 is refused');
SELECT throws_like($$SELECT tenure.cron_next('* * * * 8', now())$$, '%day-of-week field%', 'weekday 8 is refused');
SELECT throws_like($$SELECT tenure.cron_next('* * * *', now())$$, '%must have 5 fields, not 4%', 'four fields are refused');
SELECT throws_like($$SELECT tenure.cron_next('0 * * * * *', now())$$, '%must have 5 fields, not 6%', 'six fields (seconds) are refused');
SELECT throws_like($$SELECT tenure.cron_next('*/0 * * * *', now())$$, '%step 0%', 'step 0 is refused');
SELECT throws_like($$SELECT tenure.cron_next('30-10 * * * *', now())$$, '%runs backwards%', 'a backwards range is refused');
SELECT throws_like($$SELECT tenure.cron_next('* * * FOO *', now())$$, '%unknown name ''FOO''%', 'an unknown month name is refused');
SELECT throws_like($$SELECT tenure.cron_next('* * ? * MON', now())$$, '%not \*, a value, a range or a step%', 'Quartz ? is refused');
SELECT throws_ok($$SELECT tenure.cron_next('0 0 L * *', now())$$, 'TN001', NULL, 'Quartz L is refused');
SELECT throws_ok($$SELECT tenure.cron_next('1,,2 * * * *', now())$$, 'TN001', NULL, 'an empty list item is refused');
SELECT throws_ok($$SELECT tenure.cron_next('   ', now())$$, 'TN001', NULL, 'a blank expression is refused');
SELECT throws_ok($$SELECT tenure.cron_next(NULL, now())$$, 'TN001', NULL, 'a NULL expression is refused');
SELECT throws_like($$SELECT tenure.cron_next('* * * * *', now(), 'Mars/Olympus')$$, '%p_timezone must be a time zone name%', 'an unknown zone is refused');
SELECT throws_ok($$SELECT tenure.cron_next('* * * * *', now(), 'CET')$$, 'TN001', NULL, 'a zone abbreviation (a fixed offset) is refused');
SELECT throws_ok($$SELECT tenure.cron_next('* * * * *', now(), 'europe/zurich')$$, 'TN001', NULL, 'a zone name in another spelling is refused');
SELECT throws_ok($$SELECT tenure.cron_next('* * * * *', 'infinity')$$, 'TN001', NULL, 'an infinite p_after is refused');
SELECT throws_ok($$SELECT tenure.cron_next('* * * * *', NULL)$$, 'TN001', NULL, 'a NULL p_after is refused');

-- schedule_set ----------------------------------------------------------------------------
-- clock_timestamp(), read after schedule_set ran: now() is the transaction's start, and a
-- minute may have turned since then.
SELECT ok((SELECT next_slot > now() AND next_slot <= clock_timestamp() + interval '1 minute' AND NOT paused
             FROM tenure.schedule_set('minutely', 'report', '* * * * *')),
    'a new schedule''s first slot is its first after now');
SELECT is((SELECT next_slot FROM tenure.schedule_set('ten-s', 'ping', p_every => '10 seconds')),
    to_timestamp((floor(extract(epoch FROM clock_timestamp()) / 10) + 1) * 10),
    'every 10 seconds: slots at whole multiples of 10 s since the epoch, the first after now');
SELECT is((SELECT next_slot FROM tenure.schedule_set('nightly', 'backup', '0 3 * * *', p_timezone => 'Europe/Zurich')),
    tenure.cron_next('0 3 * * *', clock_timestamp(), 'Europe/Zurich'),
    'every day at 03:00 Zurich time: the next 03:00 in Zurich');
UPDATE tenure.schedule SET next_slot = '2026-01-01 02:00:00+00' WHERE name = 'nightly';
SELECT is((SELECT next_slot FROM tenure.schedule_set('nightly', 'backup', '0 3 * * *', p_timezone => 'Europe/Zurich',
                                                      p_data => '{"level": 1}', p_max_attempts => 3)),
    '2026-01-01 02:00:00+00'::timestamptz,
    'setting the same definition again keeps the schedule''s progress (its cursor)');
SELECT is((SELECT (data, max_attempts)::text FROM tenure.schedules WHERE name = 'nightly'), '("{""level"": 1}",3)',
    'and takes the new data and max_attempts');
SELECT ok((SELECT next_slot > now() FROM tenure.schedule_set('nightly', 'backup', '0 4 * * *', p_timezone => 'Europe/Zurich')),
    'a changed expression starts again with its first slot after now');
SELECT is((SELECT count(*) FROM tenure.schedule WHERE name = 'nightly')::integer, 1, 'still one schedule of that name');

CREATE TEMP TABLE before AS SELECT * FROM tenure.schedule;
SELECT throws_like($$SELECT tenure.schedule_set('x', 'k', '* * * * *', '1 minute')$$, '%p_cron and p_every are both given%', 'both cron and every: TN001');
SELECT throws_like($$SELECT tenure.schedule_set('x', 'k')$$, '%p_cron and p_every are both NULL%', 'neither cron nor every: TN001');
SELECT throws_ok($$SELECT tenure.schedule_set('x', 'k', p_every => '0')$$, 'TN001', NULL, 'an interval of 0: TN001');
SELECT throws_ok($$SELECT tenure.schedule_set('x', 'k', p_every => '-10 seconds')$$, 'TN001', NULL, 'a negative interval: TN001');
SELECT throws_ok($$SELECT tenure.schedule_set('x', 'k', p_every => '1.5 seconds')$$, 'TN001', NULL, 'a fraction of a second: TN001');
SELECT throws_ok($$SELECT tenure.schedule_set('x', 'k', p_every => '1 month')$$, 'TN001', NULL, 'an interval in months: TN001');
SELECT throws_ok($$SELECT tenure.schedule_set('x', 'k', p_every => '200 years')$$, 'TN001', NULL, 'an interval over 36500 days: TN001');
SELECT throws_like($$SELECT tenure.schedule_set('x', 'k', '0 0 31 2 *')$$, '%p_cron can never match%', 'an impossible expression: TN001');
SELECT throws_like($$SELECT tenure.schedule_set('x', 'k', '61 * * * *')$$, 'tenure.schedule_set: p_cron has 61 in its minute field%', 'a bad expression: TN001 naming the argument and field');
SELECT throws_like($$SELECT tenure.schedule_set('x', 'k', '* * * * *', p_timezone => 'Nowhere/Land')$$, '%p_timezone%', 'an unknown time zone: TN001');
SELECT throws_ok($$SELECT tenure.schedule_set('x', 'k', '* * * * *', p_timezone => NULL)$$, 'TN001', NULL, 'a NULL time zone: TN001');
SELECT throws_like($$SELECT tenure.schedule_set('x', 'k', '* * * * *', p_data => '[1]')$$, '%p_data must be a JSON object%', 'data that is no object: TN001');
SELECT throws_ok($$SELECT tenure.schedule_set('x', 'k', '* * * * *', p_data => NULL)$$, 'TN001', NULL, 'NULL data: TN001');
SELECT throws_ok($$SELECT tenure.schedule_set('x', 'k', '* * * * *', p_max_attempts => 0)$$, 'TN001', NULL, 'max_attempts 0: TN001');
SELECT throws_like($$SELECT tenure.schedule_set('x', 'k', '* * * * *', p_catch_up => 'some')$$, '%p_catch_up must be%', 'an unknown catch-up policy: TN001');
SELECT throws_ok($$SELECT tenure.schedule_set('x', 'k', '* * * * *', p_catch_up_limit => 0)$$, 'TN001', NULL, 'a catch-up limit of 0: TN001');
SELECT throws_ok($$SELECT tenure.schedule_set('x', 'k', '* * * * *', p_catch_up_limit => 1001)$$, 'TN001', NULL, 'a catch-up limit over 1000: TN001');
SELECT throws_ok($$SELECT tenure.schedule_set(' ', 'k', '* * * * *')$$, 'TN001', NULL, 'a blank name: TN001');
SELECT throws_ok($$SELECT tenure.schedule_set('x', E'\t', '* * * * *')$$, 'TN001', NULL, 'a blank kind: TN001');
SELECT throws_ok($$SELECT tenure.schedule_set('nightly', 'backup', '0 4 * * *', p_timezone => 'Nowhere/Land')$$, 'TN001', NULL,
    'a bad change of an existing schedule: TN001');
SELECT set_eq($$SELECT * FROM tenure.schedule$$, $$SELECT * FROM before$$, 'the refused calls changed nothing');

-- schedule_tick ------------------------------------------------------------------------------
SELECT count(tenure.schedule_drop(n)) FROM unnest(ARRAY['minutely', 'ten-s', 'nightly']) n;
SELECT is((SELECT count(*) FROM tenure.schedule)::integer, 0, 'drop removed the schedules');
SELECT is((SELECT count(*) FROM tenure.schedule_tick())::integer, 0, 'nothing due: the tick creates nothing');

SELECT tenure.schedule_set('daily', 'report', '0 0 * * *', p_data => '{"to": "ops", "slot": "theirs"}', p_max_attempts => 2);
UPDATE tenure.schedule SET next_slot = date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' WHERE name = 'daily';
CREATE TEMP TABLE ticked AS SELECT * FROM tenure.schedule_tick();
SELECT results_eq($$SELECT name, slot FROM ticked$$,
    $$VALUES ('daily', date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')$$,
    'a due slot becomes a task');
SELECT results_eq(
    $$SELECT t.kind, t.data, t.max_attempts, t.idempotency_key, t.status FROM tenure.task t JOIN ticked k ON k.task_id = t.id$$,
    $$VALUES ('report', jsonb_build_object('to', 'ops', 'schedule', 'daily',
                                           'slot', to_char(date_trunc('day', now() AT TIME ZONE 'UTC'), 'YYYY-MM-DD"T"HH24:MI:SS"Z"')),
              2, 'tenure.schedule/daily/' || to_char(date_trunc('day', now() AT TIME ZONE 'UTC'), 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
              'pending')$$,
    'the task has the schedule''s kind, data with schedule and slot (UTC), max_attempts and a key per slot');
SELECT is((SELECT count(*) FROM tenure.schedule_tick())::integer, 0, 'a second tick creates nothing (one task per slot)');
SELECT is((SELECT count(*) FROM tenure.task)::integer, 1, 'one task in all');
SELECT results_eq($$SELECT next_slot, last_slot, last_task_id, last_task_status FROM tenure.schedules WHERE name = 'daily'$$,
    $$SELECT tenure.cron_next('0 0 * * *', clock_timestamp()), slot, task_id, 'pending'::text FROM ticked$$,
    'the view: next slot after now, last slot, last task and its status');
UPDATE tenure.schedule SET next_slot = last_slot WHERE name = 'daily';
SELECT is((SELECT count(*) FROM tenure.schedule_tick())::integer, 0,
    'a cursor set back onto a slot already created: the idempotency key creates nothing');
SELECT is((SELECT count(*) FROM tenure.task)::integer, 1, 'still one task');
SELECT ok((SELECT next_slot > now() FROM tenure.schedule WHERE name = 'daily'), 'and the cursor moved on');

-- Catch-up: yearly slots (1 January, 00:00 UTC), the cursor years back.
SELECT tenure.schedule_set('yearly-latest', 'y', '0 0 1 1 *');
SELECT tenure.schedule_set('yearly-all', 'y', '0 0 1 1 *', p_catch_up => 'all', p_catch_up_limit => 3);
SELECT tenure.schedule_set('yearly-all-10', 'y', '0 0 1 1 *', p_catch_up => 'all');
UPDATE tenure.schedule SET next_slot = '2015-01-01 00:00:00+00' WHERE name LIKE 'yearly%';
UPDATE tenure.schedule SET next_slot = date_trunc('year', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '3 years'
 WHERE name = 'yearly-all-10';
CREATE TEMP TABLE caught AS SELECT * FROM tenure.schedule_tick();
SELECT results_eq($$SELECT slot FROM caught WHERE name = 'yearly-latest'$$,
    $$VALUES (date_trunc('year', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')$$,
    'catch-up latest: of the missed slots only the latest runs');
SELECT results_eq($$SELECT slot FROM caught WHERE name = 'yearly-all' ORDER BY slot$$,
    $$SELECT date_trunc('year', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - y * interval '1 year' FROM generate_series(2, 0, -1) y$$,
    'catch-up all with limit 3: the latest 3 missed slots run, the older ones are skipped');
SELECT results_eq($$SELECT slot FROM caught WHERE name = 'yearly-all-10' ORDER BY slot$$,
    $$SELECT date_trunc('year', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - y * interval '1 year' FROM generate_series(3, 0, -1) y$$,
    'catch-up all within the limit: every missed slot runs');
SELECT ok((SELECT bool_and(next_slot > now()) FROM tenure.schedule WHERE name LIKE 'yearly%'), 'every cursor is past now');
SELECT is((SELECT count(*) FROM tenure.schedule_tick())::integer, 0, 'and a second tick creates nothing');

-- A backlog of a year of 1-second slots: the latest one only, without walking the backlog.
SELECT tenure.schedule_set('second', 's', p_every => '1 second');
UPDATE tenure.schedule SET next_slot = next_slot - interval '1 year' WHERE name = 'second';
SELECT is((SELECT count(*) FROM tenure.schedule_tick() WHERE name = 'second')::integer, 1, 'a year of 1 s slots missed: one task');
SELECT tenure.schedule_set('second-all', 's', p_every => '1 second', p_catch_up => 'all', p_catch_up_limit => 1000);
UPDATE tenure.schedule SET next_slot = next_slot - interval '1 year' WHERE name = 'second-all';
SELECT is((SELECT count(DISTINCT slot) FROM tenure.schedule_tick() WHERE name = 'second-all')::integer, 1000,
    'and with catch-up all: its limit, 1000 distinct slots');
SELECT tenure.schedule_drop('second-all');
SELECT tenure.schedule_drop('second');

-- Pause, resume, run now, drop --------------------------------------------------------------
SELECT ok((SELECT paused AND next_slot IS NULL FROM tenure.schedule_pause('daily')), 'pause: paused, no next slot');
SELECT ok((SELECT paused FROM tenure.schedule_pause('daily')), 'pausing again changes nothing');
SELECT ok((SELECT paused FROM tenure.schedule_set('daily', 'report', '0 0 * * *')), 'setting a paused schedule keeps it paused');
UPDATE tenure.schedule SET next_slot = '2020-01-01 00:00:00+00' WHERE name = 'daily';
SELECT is((SELECT count(*) FROM tenure.schedule_tick() WHERE name = 'daily')::integer, 0, 'a paused schedule gets no task');
SELECT ok((SELECT NOT paused AND next_slot > now() FROM tenure.schedule_resume('daily')),
    'resume: the slots missed while paused are skipped, the next slot is the first after now');
SELECT is((SELECT count(*) FROM tenure.schedule_tick() WHERE name = 'daily')::integer, 0, 'so a tick after the resume creates nothing');
UPDATE tenure.schedule SET next_slot = '2020-01-01 00:00:00+00' WHERE name = 'daily';
SELECT is((SELECT next_slot FROM tenure.schedule_resume('daily')), '2020-01-01 00:00:00+00'::timestamptz,
    'resuming a schedule that is not paused changes nothing');
UPDATE tenure.schedule SET next_slot = tenure.cron_next('0 0 * * *', clock_timestamp()) WHERE name = 'daily';
CREATE TEMP TABLE ran AS SELECT tenure.schedule_run_now('daily') AS id;
SELECT results_eq($$SELECT t.kind, t.data, t.idempotency_key FROM tenure.task t JOIN ran r ON r.id = t.id$$,
    $$VALUES ('report', '{"schedule": "daily", "slot": null}'::jsonb, NULL::text)$$,
    'run now: one extra task, slot null, no key');
SELECT results_eq($$SELECT last_task_id, next_slot FROM tenure.schedules WHERE name = 'daily'$$,
    $$SELECT r.id, tenure.cron_next('0 0 * * *', clock_timestamp()) FROM ran r$$,
    'run now is the last task; the slots are unchanged');
SELECT throws_ok($$SELECT tenure.schedule_pause('nope')$$, 'TN201', NULL, 'pause of an unknown schedule: TN201');
SELECT throws_ok($$SELECT tenure.schedule_resume('nope')$$, 'TN201', NULL, 'resume of an unknown schedule: TN201');
SELECT throws_like($$SELECT tenure.schedule_drop('nope')$$, 'tenure.schedule_drop: no schedule ''nope''', 'drop of an unknown schedule: TN201 naming it');
SELECT throws_ok($$SELECT tenure.schedule_run_now('nope')$$, 'TN201', NULL, 'run now of an unknown schedule: TN201');
SELECT throws_ok($$SELECT tenure.schedule_pause(NULL)$$, 'TN001', NULL, 'a NULL name: TN001');
SELECT is((SELECT name FROM tenure.schedule_drop('daily')), 'daily', 'drop returns the schedule');
SELECT ok(NOT EXISTS (SELECT FROM tenure.schedules WHERE name = 'daily') AND EXISTS (SELECT FROM tenure.task t JOIN ran r ON r.id = t.id),
    'dropped: gone from the view, its tasks stay');

-- Privileges ---------------------------------------------------------------------------------
SELECT ok(has_function_privilege('tenure_worker', 'tenure.schedule_tick()', 'EXECUTE')
          AND NOT has_table_privilege('tenure_worker', 'tenure.schedule', 'UPDATE')
          AND has_table_privilege('tenure_worker', 'tenure.schedules', 'SELECT'),
    'tenure_worker may tick and read the view, not write the table');

-- The ends of the range, in every zone: a zone behind UTC reads the first instants of
-- year 1 as local times of 1 BC, one ahead reads the last of 9999 as local times of 10000.
SELECT is(tenure.cron_next('0 0 1 2 *', '0001-01-01 00:00:00+00', 'America/Los_Angeles'),
    '0001-02-01 07:52:58+00'::timestamptz,
    'cron_next from the first instant of year 1 behind UTC: 1 February, local mean time');
SELECT is((SELECT count(*) FROM tenure.schedule_time_zone z,
                  unnest(ARRAY['* * * * *', '0 0 1 2 *']) e,
                  unnest(ARRAY['0001-01-01 00:00:00+00', '9999-12-31 23:59:59+00']::timestamptz[]) a
            WHERE NOT tenure.cron_next(e, a, z.name) > a),
    0::bigint, 'cron_next answers a later time in every zone at both ends of its range');

SELECT * FROM finish();
ROLLBACK;
