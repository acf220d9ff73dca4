-- The before-update trigger of timers (version bump, re-planning, updated_at) now fires
-- only for updates that name a column it reads. The planner rewrites each recurring
-- timer's plan columns once per plan horizon and each one-shot's once: before, every such
-- row ran the PL/pgSQL function and compared nineteen columns for nothing
-- (docs/BENCHMARKS.md, item 15). Updates through SQL and the admin API that set any of
-- these columns behave exactly as before; a column added to the definition must be added
-- here as well as to the function.
DROP TRIGGER timers_before_update ON timers;
CREATE TRIGGER timers_before_update
    BEFORE UPDATE OF schedule_kind, run_at, delay_ms, interval_ms, cron_expr, timezone,
                     start_at, end_at, dst_gap, action_kind, http_method, http_url,
                     http_headers, http_body, http_timeout_ms,
                     kafka_topic, kafka_key, kafka_headers, kafka_value, state
    ON timers
    FOR EACH ROW EXECUTE FUNCTION punctual_timers_before_update();
