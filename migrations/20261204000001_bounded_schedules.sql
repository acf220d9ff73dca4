-- Bounds on every value the planner computes with, so that no stored timer can make its
-- date arithmetic overflow. A delay of 2^63 ms once made the planner panic on every pass,
-- which stopped every timer; the same values made `now() - catchup_window_ms * interval
-- '1 millisecond'` fail, and with it every claim.
--   * instants (run_at, start_at, end_at, created_at): from 1970-01-01T00:00:00Z to
--     before 10000-01-01T00:00:00Z;
--   * delay_ms, interval_ms and catchup_window_ms: at most 100 years (3,155,760,000,000 ms).
-- The admin API checks the same bounds (shared/src/schedule.rs) and answers 422 naming the
-- field. A row stored before these checks that breaks them is marked invalid here, with
-- the reason; an invalid row is exempt, so that it can still be paused, deleted, or edited
-- into shape (an edit sends it back to the planner as 'new', and the check applies again).
-- The planner marks such a row invalid too, before it reads it (an instant beyond the
-- year 262143 cannot even be decoded).
-- The first value out of range, as the planner's reason ('column: what is allowed'), or
-- NULL when all are in range.
CREATE FUNCTION punctual_timer_out_of_range(
    run_at timestamptz, start_at timestamptz, end_at timestamptz, created_at timestamptz,
    delay_ms bigint, interval_ms bigint, catchup_window_ms bigint
) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN run_at < '1970-01-01Z' OR run_at >= '10000-01-01Z' THEN 'run_at'
        WHEN start_at < '1970-01-01Z' OR start_at >= '10000-01-01Z' THEN 'start_at'
        WHEN end_at < '1970-01-01Z' OR end_at >= '10000-01-01Z' THEN 'end_at'
        WHEN created_at < '1970-01-01Z' OR created_at >= '10000-01-01Z' THEN 'created_at'
    END || ': must be from 1970-01-01T00:00:00Z to before 10000-01-01T00:00:00Z'
    UNION ALL
    SELECT CASE
        WHEN delay_ms > 3155760000000 THEN 'delay_ms'
        WHEN interval_ms > 3155760000000 THEN 'interval_ms'
        WHEN catchup_window_ms > 3155760000000 THEN 'catchup_window_ms'
    END || ': must be at most 3155760000000 ms (100 years)'
    ORDER BY 1 NULLS LAST
    LIMIT 1
$$;

UPDATE timers
   SET plan_status = 'invalid', next_plan_at = NULL,
       invalid_reason = punctual_timer_out_of_range(run_at, start_at, end_at, created_at,
                                                    delay_ms, interval_ms, catchup_window_ms)
 WHERE plan_status <> 'invalid'
   AND punctual_timer_out_of_range(run_at, start_at, end_at, created_at,
                                   delay_ms, interval_ms, catchup_window_ms) IS NOT NULL;

ALTER TABLE timers ADD CONSTRAINT timers_values_in_range CHECK (
    plan_status = 'invalid'
    OR punctual_timer_out_of_range(run_at, start_at, end_at, created_at,
                                   delay_ms, interval_ms, catchup_window_ms) IS NULL);
