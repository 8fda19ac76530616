-- An acquisition that a binding max_running holds back reads no task it does not need:
-- with a backlog of 20,000 due tasks, it scans tenure.task through its indexes only. (Its
-- look for rate-limited kinds holding back due tasks was an EXISTS that the generic plan
-- made a semi-join over every task, about 90 ms per call at 100,000 tasks, all of it
-- while the kind's row was locked: every acquisition of the kind waited for it.)
BEGIN;
SELECT plan(4);

INSERT INTO tenure.task (kind, state, created_at, last_change, last_action, next_action)
SELECT 'lim', 'new', '2001-01-01 10:00+00', '2001-01-01 10:00+00', '2001-01-01 10:00+00',
       '2001-01-01 11:00+00'::timestamptz + g * interval '1 ms'
  FROM generate_series(1, 20000) g;
ANALYZE tenure.task;  -- plans as on a real backlog (a cached plan is made again after it)
SELECT is((SELECT max_running FROM tenure.task_kind_set('lim', p_max_running => 2)), 2, 'kind lim at most 2 running');

SELECT is((SELECT count(*) FROM tenure._task_take('00000000-0000-0000-0000-00000000000a', '1 h', 10, ARRAY['lim'],
                                                  '2001-01-01 12:00+00')),
          2::bigint, 'the first acquisition leases the 2 the limit allows');

CREATE TEMP TABLE scans AS
SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relid = 'tenure.task'::regclass;
SELECT is((SELECT count(*) FROM tenure._task_take('00000000-0000-0000-0000-00000000000b', '1 h', 10, ARRAY['lim'],
                                                  '2001-01-01 12:00+00')),
          0::bigint, 'the next leases none: the limit binds');
SELECT is((SELECT s.seq_scan FROM pg_stat_xact_user_tables s WHERE s.relid = 'tenure.task'::regclass)
          - (SELECT seq_scan FROM scans), 0::bigint,
          'an acquisition held back by max_running reads tenure.task by its indexes, never all of it');

SELECT * FROM finish();
ROLLBACK;
