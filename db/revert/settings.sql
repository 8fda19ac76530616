BEGIN;

SET LOCAL ROLE tenure_owner;

DROP TABLE tenure.setting;

COMMIT;
