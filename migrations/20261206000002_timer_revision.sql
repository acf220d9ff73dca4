-- `revision` counts every change a user can make to a timer: its definition (which also
-- bumps `version`), its name, retry policy, misfire and overlap policies, and its state.
-- The admin API's PATCH is conditional on it, so two concurrent edits of any of these
-- cannot both win (before, a PATCH was conditional on `version`, which a change of name or
-- policy leaves as it is). One function still: the state change of every one-shot that
-- finishes runs it, and a second trigger would cost a second call each.
ALTER TABLE timers ADD COLUMN revision bigint NOT NULL DEFAULT 1;

CREATE OR REPLACE FUNCTION punctual_timers_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.schedule_kind, NEW.run_at, NEW.delay_ms, NEW.interval_ms, NEW.cron_expr, NEW.timezone,
        NEW.start_at, NEW.end_at, NEW.dst_gap, NEW.action_kind, NEW.http_method, NEW.http_url,
        NEW.http_headers, NEW.http_body, NEW.http_timeout_ms,
        NEW.kafka_topic, NEW.kafka_key, NEW.kafka_headers, NEW.kafka_value)
       IS DISTINCT FROM
       (OLD.schedule_kind, OLD.run_at, OLD.delay_ms, OLD.interval_ms, OLD.cron_expr, OLD.timezone,
        OLD.start_at, OLD.end_at, OLD.dst_gap, OLD.action_kind, OLD.http_method, OLD.http_url,
        OLD.http_headers, OLD.http_body, OLD.http_timeout_ms,
        OLD.kafka_topic, OLD.kafka_key, OLD.kafka_headers, OLD.kafka_value)
    THEN
        NEW.version := OLD.version + 1;
        NEW.revision := OLD.revision + 1;
        NEW.plan_status := 'new';
        NEW.next_plan_at := NULL;
        NEW.invalid_reason := NULL;
        NEW.updated_at := now();
    END IF;
    IF NEW.state IS DISTINCT FROM OLD.state THEN
        NEW.revision := OLD.revision + 1;
        NEW.updated_at := now();
        IF OLD.state = 'paused' AND NEW.state = 'active' AND NEW.plan_status = 'planned' THEN
            NEW.plan_status := 'new';
        END IF;
    END IF;
    IF (NEW.namespace, NEW.name, NEW.retry_max_attempts, NEW.retry_initial_ms, NEW.retry_multiplier,
        NEW.retry_max_ms, NEW.misfire_policy, NEW.catchup_window_ms, NEW.overlap_policy)
       IS DISTINCT FROM
       (OLD.namespace, OLD.name, OLD.retry_max_attempts, OLD.retry_initial_ms, OLD.retry_multiplier,
        OLD.retry_max_ms, OLD.misfire_policy, OLD.catchup_window_ms, OLD.overlap_policy)
    THEN
        NEW.revision := OLD.revision + 1;
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END;
$$;

-- Fires only for updates that name a column it reads (the planner's own updates of the
-- plan columns do not).
DROP TRIGGER timers_before_update ON timers;
CREATE TRIGGER timers_before_update
    BEFORE UPDATE OF schedule_kind, run_at, delay_ms, interval_ms, cron_expr, timezone,
                     start_at, end_at, dst_gap, action_kind, http_method, http_url,
                     http_headers, http_body, http_timeout_ms,
                     kafka_topic, kafka_key, kafka_headers, kafka_value, state,
                     namespace, name, retry_max_attempts, retry_initial_ms, retry_multiplier,
                     retry_max_ms, misfire_policy, catchup_window_ms, overlap_policy
    ON timers
    FOR EACH ROW EXECUTE FUNCTION punctual_timers_before_update();
