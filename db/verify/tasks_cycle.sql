SELECT id, epoch, outcome, refused, kind, state, data, attempts, next_action
  FROM (SELECT (NULL::tenure.task_cycled).*) t
 WHERE false;

SELECT ord, id, epoch, outcome, state, data, delay, error, retry_delay
  FROM (SELECT (NULL::tenure._task_outcome).*) o
 WHERE false;

SELECT 1 / count(*) FROM pg_indexes WHERE schemaname = 'tenure' AND indexname = 'task_idempotency_key';

SELECT owner, kinds, until FROM tenure.task_waiter WHERE false;
