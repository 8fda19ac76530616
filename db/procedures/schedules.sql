-- Schedules: the cron evaluator, schedule_set / pause / resume / drop / run_now, and
-- schedule_tick, which turns every due slot into exactly one task.

-- The cron evaluator -----------------------------------------------------------------

-- One field of a cron expression: the sorted values it allows. p_names are the names of
-- the field's values from p_min on (JAN.. for months, SUN.. for weekdays), or NULL.
CREATE OR REPLACE FUNCTION tenure._cron_field(
    p_function text, p_argument text, p_field text, p_label text, p_min integer, p_max integer, p_names text[]
) RETURNS integer[]
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_item  text;
    v_parts text[];
    v_lo    integer;
    v_hi    integer;
    v_step  integer;
    v_token text;
    v_value integer;
    v_bounds integer[];
    v_values integer[] := '{}'::integer[];
    v_problem text;
BEGIN
    FOREACH v_item IN ARRAY string_to_array(p_field, ',') LOOP
        -- '*', a value, or a range lo-hi, each with an optional /step.
        v_parts := regexp_match(v_item, '^(\*|([0-9]{1,4}|[A-Za-z]{3})(-([0-9]{1,4}|[A-Za-z]{3}))?)(/([0-9]{1,4}))?$');
        IF v_parts IS NULL THEN
            v_problem := format('has %s in its %s field, which is not *, a value, a range or a step', quote_literal(v_item), p_label);
            EXIT;
        END IF;
        v_bounds := '{}'::integer[];
        FOREACH v_token IN ARRAY ARRAY[v_parts[2], v_parts[4]] LOOP
            CONTINUE WHEN v_token IS NULL;
            IF v_token ~ '^[0-9]+$' THEN
                v_value := v_token::integer;
            ELSE
                v_value := array_position(p_names, upper(v_token)) - 1 + p_min;
                IF v_value IS NULL THEN
                    v_problem := format('has the unknown name %s in its %s field', quote_literal(v_token), p_label);
                    EXIT;
                END IF;
            END IF;
            IF v_value NOT BETWEEN p_min AND p_max THEN
                v_problem := format('has %s in its %s field, outside %s-%s', v_value, p_label, p_min, p_max);
                EXIT;
            END IF;
            v_bounds := v_bounds || v_value;
        END LOOP;
        EXIT WHEN v_problem IS NOT NULL;
        IF v_parts[1] = '*' THEN
            v_lo := p_min; v_hi := p_max;
        ELSE
            v_lo := v_bounds[1];
            -- A single value with a step (5/15) runs from it to the field's end (for the
            -- weekday, Saturday: 7 is only another name of Sunday, 0).
            v_hi := coalesce(v_bounds[2], CASE WHEN v_parts[6] IS NULL THEN v_lo
                                               WHEN p_max = 7 THEN greatest(v_lo, 6) ELSE p_max END);
        END IF;
        IF v_lo > v_hi THEN
            v_problem := format('has the range %s in its %s field, which runs backwards', quote_literal(v_item), p_label);
            EXIT;
        END IF;
        v_step := coalesce(v_parts[6]::integer, 1);
        IF v_step NOT BETWEEN 1 AND p_max - p_min + 1 THEN
            v_problem := format('has the step %s in its %s field, outside 1-%s', v_step, p_label, p_max - p_min + 1);
            EXIT;
        END IF;
        v_values := v_values || ARRAY(SELECT generate_series(v_lo, v_hi, v_step));
    END LOOP;
    IF v_problem IS NULL AND cardinality(v_values) = 0 THEN
        v_problem := format('has an empty %s field', p_label);
    END IF;
    IF v_problem IS NOT NULL THEN
        PERFORM tenure._invalid_argument(p_function, p_argument, v_problem, quote_literal(p_field),
            'Fields allow *, values, ranges (1-5), lists (1,15), steps (*/15, 1-30/5), month names JAN-DEC and'
            || ' weekday names SUN-SAT (0 and 7 are both Sunday).');
    END IF;
    RETURN ARRAY(SELECT DISTINCT v FROM unnest(v_values) v ORDER BY v);
END
$$;

-- A 5-field cron expression (minute hour day-of-month month day-of-week), or one of
-- @yearly @annually @monthly @weekly @daily @midnight @hourly, parsed; TN001 naming
-- p_argument of p_function when it is malformed or can never match.
CREATE OR REPLACE FUNCTION tenure._cron_parse(p_function text, p_argument text, p_expr text)
RETURNS tenure._cron
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_expr   text := btrim(p_expr, E' \t\n\r');
    v_fields text[];
    v_cron   tenure._cron;
    v_hint   text := 'Pass five fields separated by spaces: minute hour day-of-month month day-of-week, such as'
                     || ' ''0 3 * * *'' (every day at 03:00) or ''*/15 * * * MON-FRI''.';
BEGIN
    IF tenure._blank(p_expr) THEN
        PERFORM tenure._invalid_argument(p_function, p_argument, 'must be a cron expression', quote_nullable(p_expr), v_hint);
    ELSIF length(p_expr) > 1000 THEN
        PERFORM tenure._invalid_argument(p_function, p_argument, 'must be at most 1000 characters',
            format('%s characters long', length(p_expr)), v_hint);
    END IF;
    v_expr := CASE lower(v_expr)
                  WHEN '@yearly' THEN '0 0 1 1 *' WHEN '@annually' THEN '0 0 1 1 *'
                  WHEN '@monthly' THEN '0 0 1 * *' WHEN '@weekly' THEN '0 0 * * 0'
                  WHEN '@daily' THEN '0 0 * * *' WHEN '@midnight' THEN '0 0 * * *'
                  WHEN '@hourly' THEN '0 * * * *' ELSE v_expr END;
    v_fields := regexp_split_to_array(v_expr, '[ \t]+');
    IF cardinality(v_fields) <> 5 THEN
        PERFORM tenure._invalid_argument(p_function, p_argument,
            format('must have 5 fields, not %s', cardinality(v_fields)), quote_literal(p_expr), v_hint);
    END IF;
    v_cron.minutes := tenure._cron_field(p_function, p_argument, v_fields[1], 'minute', 0, 59, NULL);
    v_cron.hours := tenure._cron_field(p_function, p_argument, v_fields[2], 'hour', 0, 23, NULL);
    v_cron.doms := tenure._cron_field(p_function, p_argument, v_fields[3], 'day-of-month', 1, 31, NULL);
    v_cron.months := tenure._cron_field(p_function, p_argument, v_fields[4], 'month', 1, 12,
        '{JAN,FEB,MAR,APR,MAY,JUN,JUL,AUG,SEP,OCT,NOV,DEC}');
    v_cron.dows := ARRAY(SELECT DISTINCT d % 7 FROM unnest(tenure._cron_field(p_function, p_argument, v_fields[5],
                             'day-of-week', 0, 7, '{SUN,MON,TUE,WED,THU,FRI,SAT}')) d ORDER BY 1);
    v_cron.dom_star := left(v_fields[3], 1) = '*';
    v_cron.dow_star := left(v_fields[5], 1) = '*';
    -- When the days must match both fields, some chosen day of month must exist in some
    -- chosen month (29 February does; every date falls on every weekday over the years).
    IF (v_cron.dom_star OR v_cron.dow_star)
       AND NOT EXISTS (SELECT FROM unnest(v_cron.months) m, unnest(v_cron.doms) d
                        WHERE d <= CASE WHEN m = 2 THEN 29 WHEN m IN (4, 6, 9, 11) THEN 30 ELSE 31 END) THEN
        PERFORM tenure._invalid_argument(p_function, p_argument,
            'can never match: no chosen day of the month exists in a chosen month', quote_literal(p_expr), v_hint);
    END IF;
    RETURN v_cron;
END
$$;

-- The first local wall-clock time at or after p_from (a whole minute) that p_cron
-- matches, or NULL when there is none within 50 years (a valid expression always
-- matches within 29 years: 29 February on one weekday is the rarest).
CREATE OR REPLACE FUNCTION tenure._cron_match(p_cron tenure._cron, p_from timestamp)
RETURNS timestamp
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_at    timestamp := date_trunc('minute', p_from);
    v_limit timestamp := p_from + interval '50 years';
    v_month integer;
    v_next  integer;
    v_day   date;
    v_dom   boolean;
    v_dow   boolean;
BEGIN
    WHILE v_at <= v_limit LOOP
        v_month := extract(month FROM v_at)::integer;
        IF NOT v_month = ANY (p_cron.months) THEN
            v_next := (SELECT min(m) FROM unnest(p_cron.months) m WHERE m > v_month);
            -- By interval arithmetic, not by year numbers: a zone behind UTC reads the first
            -- instants of year 1 as local times of 1 BC, whose next year is 1 AD (no year 0).
            v_at := CASE WHEN v_next IS NULL
                         THEN date_trunc('year', v_at) + make_interval(years => 1, months => p_cron.months[1] - 1)
                         ELSE date_trunc('year', v_at) + make_interval(months => v_next - 1) END;
            CONTINUE;
        END IF;
        v_day := v_at::date;
        v_dom := extract(day FROM v_day)::integer = ANY (p_cron.doms);
        v_dow := extract(dow FROM v_day)::integer = ANY (p_cron.dows);
        IF NOT (CASE WHEN p_cron.dom_star OR p_cron.dow_star THEN v_dom AND v_dow ELSE v_dom OR v_dow END) THEN
            v_at := (v_day + 1)::timestamp;
            CONTINUE;
        END IF;
        v_next := (SELECT min(h) FROM unnest(p_cron.hours) h WHERE h >= extract(hour FROM v_at));
        IF v_next IS NULL THEN
            v_at := (v_day + 1)::timestamp;
            CONTINUE;
        ELSIF v_next > extract(hour FROM v_at) THEN
            v_at := v_day + make_interval(hours => v_next);
        END IF;
        v_next := (SELECT min(m) FROM unnest(p_cron.minutes) m WHERE m >= extract(minute FROM v_at));
        IF v_next IS NULL THEN
            v_at := date_trunc('hour', v_at) + interval '1 hour';
            CONTINUE;
        END IF;
        RETURN date_trunc('hour', v_at) + make_interval(mins => v_next);
    END LOOP;
    RETURN NULL;
END
$$;

-- The instant at which the local wall-clock time p_local of zone p_tz runs, as cron users
-- expect across daylight saving time changes:
-- - a local time that does not exist (in the gap when clocks jump forward) runs at the
--   jump, the first instant after the gap;
-- - a local time that occurs twice (when clocks fall back) runs at its first occurrence.
-- PostgreSQL's own reading (AT TIME ZONE) is neither: it reads a time in the gap with
-- the offset before the jump (02:30 becomes 03:30) and a repeated time with the offset
-- after it (the second occurrence).
CREATE OR REPLACE FUNCTION tenure._cron_instant(p_local timestamp, p_tz text)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_at     timestamptz := p_local AT TIME ZONE p_tz;
    v_offset interval;
    v_before interval;
    v_lo     timestamptz;
    v_mid    timestamptz;
    v_first  timestamptz;
BEGIN
    v_offset := (v_at AT TIME ZONE p_tz) - (v_at AT TIME ZONE 'UTC');
    IF (v_at AT TIME ZONE p_tz) <> p_local THEN
        -- In a gap: v_at lies after the jump. The jump is the first instant with the
        -- offset of v_at; two days before, the offset was the earlier one.
        v_lo := v_at - interval '2 days';
        WHILE v_at - v_lo > interval '1 microsecond' LOOP
            v_mid := v_lo + (v_at - v_lo) / 2;
            IF (v_mid AT TIME ZONE p_tz) - (v_mid AT TIME ZONE 'UTC') = v_offset THEN
                v_at := v_mid;
            ELSE
                v_lo := v_mid;
            END IF;
        END LOOP;
        RETURN v_at;
    END IF;
    -- Repeated: the offset a day before is the one of the first occurrence.
    v_before := ((v_at - interval '1 day') AT TIME ZONE p_tz) - ((v_at - interval '1 day') AT TIME ZONE 'UTC');
    IF v_before > v_offset THEN
        v_first := (p_local - v_before) AT TIME ZONE 'UTC';
        IF v_first < v_at AND (v_first AT TIME ZONE p_tz) = p_local THEN
            RETURN v_first;
        END IF;
    END IF;
    RETURN v_at;
END
$$;

-- The first instant strictly after p_after at which p_cron runs in zone p_tz: the
-- matching local times are walked in order and each is turned into its instant. That
-- mapping never goes backwards (a gap's times all run at the jump; a repeated time runs
-- at its first occurrence), so the first instant after p_after is found by walking on
-- from p_after's own local time; only in a repeated hour may some be at or before it.
CREATE OR REPLACE FUNCTION tenure._cron_next(p_cron tenure._cron, p_after timestamptz, p_tz text)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_local timestamp := date_trunc('minute', p_after AT TIME ZONE p_tz) + interval '1 minute';
    v_at    timestamptz;
BEGIN
    v_local := tenure._cron_match(p_cron, v_local);
    WHILE v_local IS NOT NULL LOOP
        v_at := tenure._cron_instant(v_local, p_tz);
        IF v_at > p_after THEN
            RETURN v_at;
        END IF;
        v_local := tenure._cron_match(p_cron, v_local + interval '1 minute');
    END LOOP;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION tenure._check_time_zone(p_function text, p_argument text, p_tz text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_tz IS NOT NULL AND length(p_tz) <= 100 THEN
        IF EXISTS (SELECT FROM tenure.schedule_time_zone z WHERE z.name = p_tz) THEN
            RETURN;
        END IF;
        -- Not known at deploy time: a zone the server's tz database gained since (slow: it
        -- reads the whole tz directory, so only for names not in schedule_time_zone).
        IF EXISTS (SELECT FROM pg_timezone_names n WHERE n.name = p_tz)
           AND NOT EXISTS (SELECT FROM pg_timezone_abbrevs a WHERE upper(a.abbrev) = upper(p_tz)) THEN
            RETURN;
        END IF;
    END IF;
    PERFORM tenure._invalid_argument(p_function, p_argument, 'must be a time zone name of pg_timezone_names',
        quote_nullable(left(p_tz, 100)),
        'Pass a region name such as ''Europe/Zurich'', ''America/New_York'' or ''UTC'' (spelled as in'
        || ' pg_timezone_names; abbreviations such as ''CET'' are fixed offsets and are refused).');
END
$$;

CREATE OR REPLACE FUNCTION tenure._check_instant(p_function text, p_argument text, p_value timestamptz)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_value IS NULL OR NOT (p_value BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59+00') THEN
        PERFORM tenure._invalid_argument(p_function, p_argument, 'must be a time from year 1 to 9999',
            quote_nullable(p_value::text), format('Pass a time such as now() as %s.', p_argument));
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION tenure.cron_next(p_cron text, p_after timestamptz, p_timezone text DEFAULT 'UTC')
RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_cron tenure._cron := tenure._cron_parse('cron_next', 'p_cron', p_cron);
BEGIN
    PERFORM tenure._check_instant('cron_next', 'p_after', p_after);
    PERFORM tenure._check_time_zone('cron_next', 'p_timezone', p_timezone);
    RETURN tenure._cron_next(v_cron, p_after, p_timezone);
END
$$;

COMMENT ON FUNCTION tenure.cron_next(text, timestamptz, text) IS
$$The first time strictly after p_after at which the 5-field cron expression p_cron (minute hour day-of-month month day-of-week) runs, read in the time zone p_timezone (default 'UTC'). This is the evaluator of schedule_set's cron schedules.
Fields allow *, values, ranges (1-5), lists (1,15,30), steps (*/15, 1-30/5, and 5/15 for 5-59/15), month names JAN-DEC and weekday names SUN-SAT in any case; 0 and 7 are both Sunday; @yearly, @annually, @monthly, @weekly, @daily, @midnight and @hourly stand for their usual expressions. As in Vixie cron, when the day-of-month and day-of-week fields both do not start with '*', a day matches if either field matches; otherwise it must match both.
Times are matched on the zone's wall clock, then converted. Daylight saving time: a local time that does not exist (the clocks jump forward over it) runs once, at the jump (the first instant after the gap); a local time that occurs twice (the clocks fall back) runs once, at its first occurrence.
Errors: TN001 on a malformed expression (naming the field), one that can never match (0 0 31 2 *), a time zone not in pg_timezone_names (or a zone abbreviation such as CET), or p_after outside years 1 to 9999.$$;

-- Slots -------------------------------------------------------------------------------

-- The first slot of a schedule strictly after p_after: the cron expression's next time,
-- or the next whole multiple of the interval since 1970-01-01 00:00 UTC (a fixed
-- interval is a number of seconds: daylight saving time does not move it).
CREATE OR REPLACE FUNCTION tenure._schedule_slot_after(
    p_cron tenure._cron, p_every interval, p_tz text, p_after timestamptz
) RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_seconds bigint;
BEGIN
    IF p_every IS NULL THEN
        RETURN tenure._cron_next(p_cron, p_after, p_tz);
    END IF;
    v_seconds := extract(epoch FROM p_every)::bigint;
    RETURN to_timestamp((floor(extract(epoch FROM p_after) / v_seconds)::bigint + 1) * v_seconds);
END
$$;

-- The slots of a schedule due at p_now, from its cursor p_next_slot on, that a tick
-- creates: the latest p_keep of them (the older ones are skipped by the catch-up
-- policy); and the first slot after p_now, the new cursor. A long backlog is not walked
-- slot by slot: the walk starts at the latest of windows growing back from p_now that
-- holds p_keep slots (or at the cursor).
CREATE OR REPLACE FUNCTION tenure._schedule_due(
    p_cron tenure._cron, p_every interval, p_tz text, p_next_slot timestamptz, p_now timestamptz, p_keep integer,
    OUT slots timestamptz[], OUT next_slot timestamptz
)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_window interval;
    v_slot   timestamptz;
BEGIN
    FOREACH v_window IN ARRAY ARRAY['1 minute', '5 minutes', '30 minutes', '3 hours', '1 day', '7 days', '40 days',
                                    '1 year', '8 years', '60 years', NULL]::interval[] LOOP
        slots := '{}';
        IF v_window IS NULL OR p_now - v_window <= p_next_slot THEN
            v_slot := p_next_slot;
        ELSE
            v_slot := tenure._schedule_slot_after(p_cron, p_every, p_tz, p_now - v_window);
        END IF;
        WHILE v_slot <= p_now LOOP
            slots := (slots || v_slot)[greatest(1, cardinality(slots) + 2 - p_keep):];
            v_slot := tenure._schedule_slot_after(p_cron, p_every, p_tz, v_slot);
        END LOOP;
        next_slot := v_slot;
        EXIT WHEN cardinality(slots) >= p_keep OR v_window IS NULL OR p_now - v_window <= p_next_slot;
    END LOOP;
END
$$;

-- Schedules -----------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION tenure._schedule_info(s tenure.schedule)
RETURNS tenure.schedule_info
LANGUAGE sql STABLE
AS $$
    SELECT (s.name, s.kind, s.cron, s.every, s.timezone, s.data, s.max_attempts, s.catch_up, s.catch_up_limit,
            s.paused_at IS NOT NULL, CASE WHEN s.paused_at IS NULL THEN s.next_slot END, s.last_slot,
            s.last_task_id, s.created_at, s.updated_at)::tenure.schedule_info
$$;

CREATE OR REPLACE FUNCTION tenure._schedule_unknown(p_function text, p_name text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'tenure.%: no schedule %', p_function, quote_literal(p_name)
        USING ERRCODE = 'TN201', DETAIL = 'It was never set, or was dropped.',
              HINT = 'Check the name (tenure.schedules lists every schedule); nothing was changed.';
END
$$;

CREATE OR REPLACE FUNCTION tenure.schedule_set(
    p_name text, p_kind text, p_cron text DEFAULT NULL, p_every interval DEFAULT NULL,
    p_timezone text DEFAULT 'UTC', p_data jsonb DEFAULT '{}', p_max_attempts integer DEFAULT 5,
    p_catch_up text DEFAULT 'latest', p_catch_up_limit integer DEFAULT 10
) RETURNS tenure.schedule_info
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_cron tenure._cron;
    v_now  timestamptz;
    v_row  tenure.schedule;
BEGIN
    PERFORM tenure._check_name('schedule_set', 'p_name', p_name);
    PERFORM tenure._check_name('schedule_set', 'p_kind', p_kind);
    IF (p_cron IS NULL) = (p_every IS NULL) THEN
        PERFORM tenure._invalid_argument('schedule_set', 'p_cron and p_every',
            CASE WHEN p_cron IS NULL THEN 'are both NULL' ELSE 'are both given' END,
            format('p_cron %s, p_every %s', quote_nullable(p_cron), quote_nullable(p_every::text)),
            'Give exactly one: a cron expression such as ''0 3 * * *'' or an interval such as ''10 seconds''.');
    END IF;
    IF p_cron IS NOT NULL THEN
        v_cron := tenure._cron_parse('schedule_set', 'p_cron', p_cron);
    ELSIF p_every < interval '1 second' OR p_every > interval '36500 days'
          OR extract(month FROM p_every) <> 0 OR extract(year FROM p_every) <> 0
          OR extract(epoch FROM p_every) <> floor(extract(epoch FROM p_every)) THEN
        PERFORM tenure._invalid_argument('schedule_set', 'p_every',
            'must be a whole number of seconds from 1 second to 36500 days, without months or years',
            quote_literal(p_every::text),
            'Pass an interval such as ''10 seconds'', ''15 minutes'' or ''1 day'' (a day is 24 hours here); for'
            || ' calendar rules such as the first of each month use p_cron.');
    END IF;
    PERFORM tenure._check_time_zone('schedule_set', 'p_timezone', p_timezone);
    IF p_data IS NULL OR jsonb_typeof(p_data) <> 'object' THEN
        PERFORM tenure._invalid_argument('schedule_set', 'p_data', 'must be a JSON object',
            quote_nullable(left(p_data::text, 100)), 'Pass the tasks'' data as an object such as ''{}''; each task gets'
            || ' "schedule" and "slot" added to it.');
    END IF;
    PERFORM tenure._check_data('schedule_set', 'p_data', p_data);
    IF p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        PERFORM tenure._invalid_argument('schedule_set', 'p_max_attempts', 'must be at least 1',
            quote_nullable(p_max_attempts), 'Pass how many attempts each task may use, such as 5.');
    END IF;
    IF p_catch_up IS NULL OR p_catch_up NOT IN ('latest', 'all') THEN
        PERFORM tenure._invalid_argument('schedule_set', 'p_catch_up', 'must be ''latest'' or ''all''',
            quote_nullable(left(p_catch_up, 100)),
            'Pass ''latest'' (of the slots missed, run the latest only) or ''all'' (run each, up to p_catch_up_limit).');
    END IF;
    IF p_catch_up_limit IS NULL OR p_catch_up_limit NOT BETWEEN 1 AND 1000 THEN
        PERFORM tenure._invalid_argument('schedule_set', 'p_catch_up_limit', 'must be from 1 to 1000',
            quote_nullable(p_catch_up_limit), 'Pass the most slots one tick may create for the schedule, such as 10.');
    END IF;

    PERFORM tenure._durable();
    v_now := clock_timestamp();
    PERFORM FROM tenure.schedule s WHERE s.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        -- A new schedule's first slot is its first after now: nothing from the past.
        INSERT INTO tenure.schedule AS s (name, kind, cron, every, timezone, data, max_attempts, catch_up,
                                          catch_up_limit, next_slot, created_at, updated_at)
        VALUES (p_name, p_kind, p_cron, p_every, p_timezone, p_data, p_max_attempts, p_catch_up, p_catch_up_limit,
                tenure._schedule_slot_after(v_cron, p_every, p_timezone, v_now), v_now, v_now)
        ON CONFLICT (name) DO NOTHING
        RETURNING * INTO v_row;
        IF NOT FOUND THEN
            -- A concurrent schedule_set created it first: ours is now an update of it.
            PERFORM FROM tenure.schedule s WHERE s.name = p_name FOR UPDATE;
        END IF;
    END IF;
    IF v_row.name IS NULL THEN
        -- The same definition keeps the schedule's progress (a registry sets its schedules
        -- at every start); a new one starts with its first slot after now (and after the
        -- last slot created). The pause is the operator's: setting keeps it.
        UPDATE tenure.schedule s
           SET kind = p_kind, data = p_data, max_attempts = p_max_attempts, catch_up = p_catch_up,
               catch_up_limit = p_catch_up_limit, cron = p_cron, every = p_every, timezone = p_timezone,
               next_slot = CASE WHEN s.cron IS NOT DISTINCT FROM p_cron AND s.every IS NOT DISTINCT FROM p_every
                                     AND s.timezone = p_timezone THEN s.next_slot
                                ELSE tenure._schedule_slot_after(v_cron, p_every, p_timezone,
                                                                 greatest(v_now, s.last_slot)) END,
               updated_at = CASE WHEN (s.kind, s.cron, s.every, s.timezone, s.data, s.max_attempts, s.catch_up,
                                       s.catch_up_limit)
                                      IS NOT DISTINCT FROM
                                      (p_kind, p_cron, p_every, p_timezone, p_data, p_max_attempts, p_catch_up,
                                       p_catch_up_limit)
                                 THEN s.updated_at ELSE v_now END
         WHERE s.name = p_name
        RETURNING * INTO v_row;
    END IF;
    RETURN tenure._schedule_info(v_row);
END
$$;

COMMENT ON FUNCTION tenure.schedule_set(text, text, text, interval, text, jsonb, integer, text, integer) IS
$$Create or change the schedule p_name, which creates tasks of kind p_kind: by the cron expression p_cron read in the time zone p_timezone (see cron_next), or every p_every (a whole number of seconds; slots at whole multiples of it since 1970-01-01 00:00 UTC, so '1 day' runs at 00:00 UTC and daylight saving time does not move it). Exactly one of p_cron and p_every.
Each task gets p_data with "schedule" (the name) and "slot" (the slot's time, ISO 8601 in UTC) added, and p_max_attempts. Catch-up for slots missed while no tick ran: 'latest' (default) creates only the latest due slot; 'all' creates each due slot, at most p_catch_up_limit (1 to 1000, default 10) per tick: the latest ones, older ones are skipped.
A new schedule's first slot is its first after now. Setting a schedule again with the same p_cron, p_every and p_timezone keeps its progress (its next slot); a changed one starts again with its first slot after now. The pause is kept either way.
Returns the schedule.
Errors: TN001 on a blank or over-long name or kind, both or neither of p_cron and p_every, a malformed or impossible cron expression (naming the field), an interval under 1 second, over 36500 days, with months or a fraction of a second, an unknown time zone, p_data that is not a JSON object or is larger than max_task_data (tenure.setting), p_max_attempts below 1, p_catch_up not 'latest' or 'all', or p_catch_up_limit outside 1 to 1000. Nothing is changed then.$$;

CREATE OR REPLACE FUNCTION tenure._schedule_pause(p_function text, p_name text, p_pause boolean)
RETURNS tenure.schedule_info
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_row  tenure.schedule;
    v_cron tenure._cron;
    v_now  timestamptz;
BEGIN
    PERFORM tenure._check_name(p_function, 'p_name', p_name);
    PERFORM tenure._durable();
    SELECT * INTO v_row FROM tenure.schedule s WHERE s.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM tenure._schedule_unknown(p_function, p_name);
    END IF;
    v_now := clock_timestamp();
    IF p_pause AND v_row.paused_at IS NULL THEN
        UPDATE tenure.schedule s SET paused_at = v_now, updated_at = v_now WHERE s.name = p_name RETURNING * INTO v_row;
    ELSIF NOT p_pause AND v_row.paused_at IS NOT NULL THEN
        -- Slots that fell due while paused are skipped: the schedule goes on with its
        -- first slot after now.
        IF v_row.cron IS NOT NULL THEN
            v_cron := tenure._cron_parse(p_function, 'cron', v_row.cron);
        END IF;
        UPDATE tenure.schedule s
           SET paused_at = NULL, updated_at = v_now,
               next_slot = tenure._schedule_slot_after(v_cron, s.every, s.timezone, greatest(v_now, s.last_slot))
         WHERE s.name = p_name
        RETURNING * INTO v_row;
    END IF;
    RETURN tenure._schedule_info(v_row);
END
$$;

CREATE OR REPLACE FUNCTION tenure.schedule_pause(p_name text)
RETURNS tenure.schedule_info
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._schedule_pause('schedule_pause', p_name, true); END $$;

COMMENT ON FUNCTION tenure.schedule_pause(text) IS
$$Pause the schedule p_name: schedule_tick creates no task for it until schedule_resume. Tasks it created before stay. Pausing a paused schedule changes nothing.
Returns the schedule.
Errors: TN001 on a blank name; TN201 for an unknown schedule.$$;

CREATE OR REPLACE FUNCTION tenure.schedule_resume(p_name text)
RETURNS tenure.schedule_info
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN tenure._schedule_pause('schedule_resume', p_name, false); END $$;

COMMENT ON FUNCTION tenure.schedule_resume(text) IS
$$Resume the paused schedule p_name. Slots that fell due while it was paused are skipped, whatever its catch-up policy: its next slot is its first after now (call schedule_run_now for one task at once). Resuming a schedule that is not paused changes nothing.
Returns the schedule.
Errors: TN001 on a blank name; TN201 for an unknown schedule.$$;

CREATE OR REPLACE FUNCTION tenure.schedule_drop(p_name text)
RETURNS tenure.schedule_info
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_row tenure.schedule;
BEGIN
    PERFORM tenure._check_name('schedule_drop', 'p_name', p_name);
    PERFORM tenure._durable();
    DELETE FROM tenure.schedule s WHERE s.name = p_name RETURNING * INTO v_row;
    IF NOT FOUND THEN
        PERFORM tenure._schedule_unknown('schedule_drop', p_name);
    END IF;
    RETURN tenure._schedule_info(v_row);
END
$$;

COMMENT ON FUNCTION tenure.schedule_drop(text) IS
$$Delete the schedule p_name. Tasks it created stay and run; a schedule set again under the name starts anew with its first slot after now.
Returns the schedule as it was.
Errors: TN001 on a blank name; TN201 for an unknown schedule.$$;

CREATE OR REPLACE FUNCTION tenure.schedule_run_now(p_name text)
RETURNS uuid
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_row  tenure.schedule;
    v_task uuid;
BEGIN
    PERFORM tenure._check_name('schedule_run_now', 'p_name', p_name);
    PERFORM tenure._durable();
    SELECT * INTO v_row FROM tenure.schedule s WHERE s.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM tenure._schedule_unknown('schedule_run_now', p_name);
    END IF;
    SELECT e.id INTO v_task
      FROM tenure.task_enqueue(v_row.kind, v_row.data || jsonb_build_object('schedule', v_row.name, 'slot', NULL),
                               p_max_attempts => v_row.max_attempts) e;
    UPDATE tenure.schedule s SET last_task_id = v_task WHERE s.name = p_name;
    RETURN v_task;
END
$$;

COMMENT ON FUNCTION tenure.schedule_run_now(text) IS
$$Create one task of the schedule p_name now, outside its slots (also when paused): its data has "schedule" and "slot": null added. The schedule's slots are not changed.
Returns the task's id.
Errors: TN001 on a blank name; TN201 for an unknown schedule.$$;

-- Tick ---------------------------------------------------------------------------------

-- Exactly one task per slot, whoever ticks and however many tick at once:
-- - A slot becomes a task only in the transaction that holds the schedule's row lock
--   and moves its cursor (next_slot) past the slot: FOR UPDATE reads the latest
--   committed cursor, so a tick that locks the row after another one committed sees the
--   moved cursor and creates nothing for those slots again; one that finds the row
--   locked skips it (SKIP LOCKED) rather than wait: the holder creates every slot due
--   by its clock, and a slot that falls due after that stays at the cursor for the next
--   tick. A rolled-back tick moves neither the cursor nor leaves a task.
-- - The task's idempotency key, derived from (schedule, slot), backs this up: a second
--   enqueue of a slot (a cursor set back by hand, a clock that went back after a
--   failover) finds the first task and creates nothing.
-- - A slot is never skipped except by the catch-up policy: the cursor only moves to the
--   first slot after the tick's clock, once every slot up to it was created or skipped
--   by the policy.
CREATE OR REPLACE FUNCTION tenure.schedule_tick()
RETURNS SETOF tenure.schedule_slot
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now  timestamptz;
    v_row  tenure.schedule;
    v_cron tenure._cron;
    v_due  record;
    v_slot timestamptz;
    v_task tenure.task_enqueued;
    v_last uuid;
BEGIN
    PERFORM tenure._durable();
    v_now := clock_timestamp();
    FOR v_row IN
        SELECT * FROM tenure.schedule s
         WHERE s.paused_at IS NULL AND s.next_slot <= v_now
         ORDER BY s.name
           FOR UPDATE SKIP LOCKED
    LOOP
        v_cron := NULL;
        IF v_row.cron IS NOT NULL THEN
            v_cron := tenure._cron_parse('schedule_tick', 'cron', v_row.cron);
        END IF;
        v_due := tenure._schedule_due(v_cron, v_row.every, v_row.timezone, v_row.next_slot, v_now,
                                      CASE v_row.catch_up WHEN 'all' THEN v_row.catch_up_limit ELSE 1 END);
        v_last := v_row.last_task_id;
        FOREACH v_slot IN ARRAY v_due.slots LOOP
            SELECT * INTO v_task
              FROM tenure.task_enqueue(
                       v_row.kind,
                       v_row.data || jsonb_build_object('schedule', v_row.name,
                                                        'slot', to_char(v_slot AT TIME ZONE 'UTC',
                                                                        'YYYY-MM-DD"T"HH24:MI:SS"Z"')),
                       p_idempotency_key => tenure._schedule_key(v_row.name, v_slot),
                       p_max_attempts => v_row.max_attempts) e;
            v_last := v_task.id;
            IF v_task.created THEN
                RETURN NEXT (v_row.name, v_slot, v_task.id)::tenure.schedule_slot;
            END IF;
        END LOOP;
        UPDATE tenure.schedule s
           SET next_slot = v_due.next_slot,
               last_slot = coalesce(v_due.slots[cardinality(v_due.slots)], s.last_slot),
               last_task_id = v_last
         WHERE s.name = v_row.name;
    END LOOP;
END
$$;

COMMENT ON FUNCTION tenure.schedule_tick() IS
$$Turn every due slot of every schedule that is not paused into exactly one task, by the database's clock: a slot is due when its time has come. Any number of instances may call it at once (tenure maintain does, periodically): a slot never becomes two tasks, and a schedule another tick is working on is skipped, not waited for; what falls due meanwhile is created by the next tick.
Each task has the schedule's kind, data with "schedule" and "slot" (ISO 8601, UTC) added, max_attempts, and the idempotency key 'tenure.schedule/<name>/<slot>'. Slots missed while no tick ran follow the schedule's catch-up policy (see schedule_set).
Returns one row per task created: schedule, slot, task id.$$;

CREATE OR REPLACE FUNCTION tenure._schedule_key(p_name text, p_slot timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT 'tenure.schedule/' || p_name || '/' || to_char(p_slot AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') $$;

-- The view ------------------------------------------------------------------------------

CREATE OR REPLACE VIEW tenure.schedules AS
SELECT s.name, s.kind, s.cron, s.every, s.timezone, s.paused_at IS NOT NULL AS paused,
       CASE WHEN s.paused_at IS NULL THEN s.next_slot END AS next_slot,
       s.last_slot, s.last_task_id, t.status AS last_task_status, s.catch_up, s.catch_up_limit,
       s.data, s.max_attempts, s.created_at, s.updated_at
  FROM tenure.schedule s
  LEFT JOIN tenure.task t ON t.id = s.last_task_id;
COMMENT ON VIEW tenure.schedules IS
    'Every schedule: its cron expression or interval and time zone, whether it is paused, its next slot (in the past when overdue; NULL while paused), its last slot, the task it created last and that task''s status (NULL once purged), and its catch-up policy.';
COMMENT ON COLUMN tenure.schedules.next_slot IS 'the first slot not yet turned into a task; before now() when overdue; NULL while paused';
COMMENT ON COLUMN tenure.schedules.last_task_status IS 'status of the last task: pending, done or dead; NULL when none or purged';

GRANT SELECT ON tenure.schedules TO tenure_worker;
GRANT EXECUTE ON FUNCTION
    tenure.cron_next(text, timestamptz, text),
    tenure.schedule_set(text, text, text, interval, text, jsonb, integer, text, integer),
    tenure.schedule_pause(text),
    tenure.schedule_resume(text),
    tenure.schedule_drop(text),
    tenure.schedule_run_now(text),
    tenure.schedule_tick()
TO tenure_worker;
