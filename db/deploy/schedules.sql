-- Periodic schedules: a cron expression in a named time zone, or a fixed interval,
-- turned into exactly one task per slot by schedule_tick (issue 15). Unreleased:
-- this script is edited in place until the next release tag.
BEGIN;

SET LOCAL ROLE tenure_owner;

-- One row per schedule. next_slot is the cursor: the first slot not yet turned into a
-- task (or skipped by the catch-up policy). It only moves forward, under the row lock,
-- in the transaction that creates the slot's tasks; see schedule_tick.
CREATE TABLE tenure.schedule (
    name           text        PRIMARY KEY CHECK (btrim(name) <> ''),
    kind           text        NOT NULL CHECK (btrim(kind) <> ''),
    cron           text,
    every          interval,
    timezone       text        NOT NULL,
    data           jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(data) = 'object'),
    max_attempts   integer     NOT NULL CHECK (max_attempts >= 1),
    catch_up       text        NOT NULL CHECK (catch_up IN ('latest', 'all')),
    catch_up_limit integer     NOT NULL CHECK (catch_up_limit BETWEEN 1 AND 1000),
    paused_at      timestamptz,
    next_slot      timestamptz NOT NULL,
    last_slot      timestamptz,
    last_task_id   uuid,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    CHECK ((cron IS NULL) <> (every IS NULL))
);
COMMENT ON TABLE tenure.schedule IS
    'Periodic schedules: a 5-field cron expression in a time zone, or a fixed interval (every). next_slot is the cursor: the first slot not yet turned into a task; last_slot and last_task_id what the schedule last created. paused_at is set while paused.';

-- schedule_tick finds the due schedules by this index.
CREATE INDEX schedule_due ON tenure.schedule (next_slot) WHERE paused_at IS NULL;

-- The time zone names a schedule may use: pg_timezone_names at deploy time, without the
-- names that are also zone abbreviations (AT TIME ZONE reads 'CET' as the fixed
-- abbreviation +01, not as the zone CET with its summer time), except the UTC ones. A
-- zone added to the server's tz database later is looked up in pg_timezone_names.
CREATE TABLE tenure.schedule_time_zone (
    name text PRIMARY KEY
);
COMMENT ON TABLE tenure.schedule_time_zone IS
    'Time zone names known at deploy time (pg_timezone_names without the names that are also zone abbreviations, UTC, UCT, GMT and Zulu excepted), so that checking a name does not read the tz database.';
INSERT INTO tenure.schedule_time_zone (name)
SELECT n.name FROM pg_timezone_names n
 WHERE n.name IN ('UTC', 'UCT', 'GMT', 'Zulu')
    OR NOT EXISTS (SELECT FROM pg_timezone_abbrevs a WHERE upper(a.abbrev) = upper(n.name));

-- A parsed cron expression: the values each field allows, sorted; dom_star and dow_star
-- tell whether the day-of-month and day-of-week fields started with '*' (Vixie cron's
-- rule: a day matches both fields when either starts with '*', else either field).
CREATE TYPE tenure._cron AS (
    minutes  integer[],
    hours    integer[],
    doms     integer[],
    months   integer[],
    dows     integer[],
    dom_star boolean,
    dow_star boolean
);

CREATE TYPE tenure.schedule_info AS (
    name           text,
    kind           text,
    cron           text,
    every          interval,
    timezone       text,
    data           jsonb,
    max_attempts   integer,
    catch_up       text,
    catch_up_limit integer,
    paused         boolean,
    next_slot      timestamptz,
    last_slot      timestamptz,
    last_task_id   uuid,
    created_at     timestamptz,
    updated_at     timestamptz
);
COMMENT ON TYPE tenure.schedule_info IS
    'A schedule as schedule_set, schedule_pause, schedule_resume and schedule_drop return it: its definition, whether it is paused, its next slot (the first not yet turned into a task; in the past when overdue) and what it last created.';
COMMENT ON COLUMN tenure.schedule_info.name IS 'the schedule';
COMMENT ON COLUMN tenure.schedule_info.kind IS 'the kind of the tasks it creates';
COMMENT ON COLUMN tenure.schedule_info.cron IS 'its 5-field cron expression, or NULL for a fixed interval';
COMMENT ON COLUMN tenure.schedule_info.every IS 'its fixed interval (slots at whole multiples of it since 1970-01-01 00:00 UTC), or NULL for a cron expression';
COMMENT ON COLUMN tenure.schedule_info.timezone IS 'the time zone the cron expression is read in (not used by a fixed interval)';
COMMENT ON COLUMN tenure.schedule_info.data IS 'the data of its tasks, before "schedule" and "slot" are added';
COMMENT ON COLUMN tenure.schedule_info.max_attempts IS 'max_attempts of its tasks';
COMMENT ON COLUMN tenure.schedule_info.catch_up IS '`latest`: of the slots missed, only the latest runs; `all`: each missed slot runs, the latest catch_up_limit of them';
COMMENT ON COLUMN tenure.schedule_info.catch_up_limit IS 'with catch_up `all`, the most slots one tick creates for the schedule';
COMMENT ON COLUMN tenure.schedule_info.paused IS 'true while paused: schedule_tick creates nothing for it';
COMMENT ON COLUMN tenure.schedule_info.next_slot IS 'the first slot not yet turned into a task; NULL while paused';
COMMENT ON COLUMN tenure.schedule_info.last_slot IS 'the latest slot turned into a task; NULL before the first';
COMMENT ON COLUMN tenure.schedule_info.last_task_id IS 'the task it created last (for a slot or by schedule_run_now)';
COMMENT ON COLUMN tenure.schedule_info.created_at IS 'when the schedule was first set';
COMMENT ON COLUMN tenure.schedule_info.updated_at IS 'when it was last set, paused or resumed';

CREATE TYPE tenure.schedule_slot AS (
    name    text,
    slot    timestamptz,
    task_id uuid
);
COMMENT ON TYPE tenure.schedule_slot IS
    'A task schedule_tick created: the schedule, the slot and the task.';
COMMENT ON COLUMN tenure.schedule_slot.name IS 'the schedule';
COMMENT ON COLUMN tenure.schedule_slot.slot IS 'the slot the task is for (also in the task''s data as "slot")';
COMMENT ON COLUMN tenure.schedule_slot.task_id IS 'the task';

\ir ../procedures/schedules@v0.2.0.sql

COMMIT;
