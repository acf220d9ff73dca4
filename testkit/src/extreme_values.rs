//! Values at the edge of each column's type, each of which once reached arithmetic that
//! overflowed: the planner panicked on every pass, and no timer fired again.

/// (the column, the columns to insert, their values); `name` and `http_url` are added by
/// [`insert_statement`].
pub const EXTREME_ROWS: [(&str, &str, &str); 6] = [
    ("delay_ms", "schedule_kind, delay_ms", "'delay', 9223372036854775807"),
    ("interval_ms", "schedule_kind, interval_ms", "'interval', 9223372036854775807"),
    ("catchup_window_ms", "schedule_kind, cron_expr, catchup_window_ms", "'cron', '* * * * * *', 9223372036854775807"),
    ("run_at", "schedule_kind, run_at", "'once', '294276-01-01Z'"),
    ("start_at", "schedule_kind, interval_ms, start_at", "'interval', 1000, '4713-01-01 BC'"),
    ("end_at", "schedule_kind, cron_expr, end_at", "'cron', '* * * * * *', '200000-01-01Z'"),
];

/// An `INSERT` of one of [`EXTREME_ROWS`], named `sql <random>`, calling `url`.
pub fn insert_statement(columns: &str, values: &str, url: &str) -> String {
    format!("INSERT INTO timers (name, http_url, {columns}) VALUES ('sql ' || gen_random_uuid(), '{url}', {values})")
}
