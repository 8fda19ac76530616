BEGIN;

DROP VIEW tenure.batches;
DROP VIEW tenure.batch_keys;
DROP TYPE tenure.batch_enqueued;
DROP TYPE tenure.batch_grant;
DROP TYPE tenure._batch_input;
DROP TABLE tenure.batch_tombstone;
DROP TABLE tenure.batch;
DROP TABLE tenure.batch_key;
DROP TABLE tenure.batch_queue;

COMMIT;
