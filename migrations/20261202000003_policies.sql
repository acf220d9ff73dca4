-- Per-timer time policies.
--   misfire_policy: what becomes of occurrences missed by more than the scanner's misfire
--     threshold (system down or far behind): 'skip' them, fire the latest once
--     ('fire_once'), or fire each one missed within catchup_window_ms ('fire_all').
--   overlap_policy: for a recurring timer whose previous run is still running when the
--     next is due: run both ('allow'), drop the new one ('skip'), or hold at most one
--     until the running one ends ('buffer_one').
--   dst_gap: a cron occurrence whose local time does not exist (spring forward) fires at
--     the first valid instant after the gap ('next_valid') or not at all ('skip').
ALTER TABLE timers
    ADD COLUMN misfire_policy    text   NOT NULL DEFAULT 'fire_once'  CHECK (misfire_policy IN ('skip', 'fire_once', 'fire_all')),
    ADD COLUMN catchup_window_ms bigint NOT NULL DEFAULT 3600000      CHECK (catchup_window_ms >= 0),
    ADD COLUMN overlap_policy    text   NOT NULL DEFAULT 'allow'      CHECK (overlap_policy IN ('allow', 'skip', 'buffer_one')),
    ADD COLUMN dst_gap           text   NOT NULL DEFAULT 'next_valid' CHECK (dst_gap IN ('next_valid', 'skip'));

-- The executor's overlap check: is another occurrence of this timer running?
CREATE INDEX tasks_running_timer ON tasks (timer_id) WHERE status = 'running';

-- dst_gap decides occurrences: a change re-plans like any change of definition.
CREATE OR REPLACE FUNCTION punctual_timers_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.schedule_kind, NEW.run_at, NEW.delay_ms, NEW.interval_ms, NEW.cron_expr, NEW.timezone,
        NEW.start_at, NEW.end_at, NEW.dst_gap, NEW.action_kind, NEW.http_method, NEW.http_url,
        NEW.http_headers, NEW.http_body, NEW.http_timeout_ms)
       IS DISTINCT FROM
       (OLD.schedule_kind, OLD.run_at, OLD.delay_ms, OLD.interval_ms, OLD.cron_expr, OLD.timezone,
        OLD.start_at, OLD.end_at, OLD.dst_gap, OLD.action_kind, OLD.http_method, OLD.http_url,
        OLD.http_headers, OLD.http_body, OLD.http_timeout_ms)
    THEN
        NEW.version := OLD.version + 1;
        NEW.plan_status := 'new';
        NEW.next_plan_at := NULL;
        NEW.invalid_reason := NULL;
        NEW.updated_at := now();
    END IF;
    IF NEW.state IS DISTINCT FROM OLD.state THEN
        NEW.updated_at := now();
        IF OLD.state = 'paused' AND NEW.state = 'active' AND NEW.plan_status = 'planned' THEN
            NEW.plan_status := 'new';
        END IF;
    END IF;
    RETURN NEW;
END;
$$;
