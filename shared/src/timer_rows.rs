//! The statements that read whole `timers` rows as [`TimerRow`](crate::timer::TimerRow)s,
//! checked at compile time against one list of the row's columns.

/// `sqlx::query_as!` of [`TimerRow`](crate::timer::TimerRow)s: the string literal
/// `$before`, the row's columns (its states typed), the string literal `$after`, then the
/// statement's arguments.
#[macro_export]
macro_rules! query_timer_rows {
    ($before:tt, $after:tt $(, $arg:expr)* $(,)?) => {
        ::sqlx::query_as!(
            $crate::timer::TimerRow,
            $before
                + r#" id, namespace, name, schedule_kind, run_at, delay_ms, interval_ms, cron_expr, timezone,
                    start_at, end_at, action_kind, http_method, http_url, http_headers, http_body, http_timeout_ms,
                    kafka_topic, kafka_key, kafka_headers, kafka_value,
                    retry_max_attempts, retry_initial_ms, retry_multiplier, retry_max_ms,
                    misfire_policy AS "misfire_policy: punctual_shared::policy::MisfirePolicy", catchup_window_ms,
                    overlap_policy AS "overlap_policy: punctual_shared::policy::OverlapPolicy",
                    dst_gap AS "dst_gap: punctual_shared::schedule::DstGap", fan_out_shards, fan_out_urls, fan_out_dns,
                    state AS "state: punctual_shared::timer_state::TimerState", state_note, version, revision,
                    created_at, updated_at,
                    plan_status AS "plan_status: punctual_shared::timer_state::PlanStatus", next_plan_at,
                    invalid_reason, pruned_through "#
                + $after
            $(, $arg)*
        )
    };
}
