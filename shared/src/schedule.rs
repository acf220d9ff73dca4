//! When a timer fires: the four schedule kinds and the arithmetic of their occurrences.
//!
//! A [`Schedule`] is parsed once (from the API's JSON or from a `timers` row) and is valid
//! afterwards. Every occurrence is a UTC instant truncated to the millisecond, because the
//! occurrence time is part of the task identity (`<timer_id>:<scheduled_at>`), which is
//! written with millisecond precision.

use std::str::FromStr;

use chrono::{DateTime, Duration, DurationRound, Utc};
use chrono_tz::Tz;

/// The smallest interval accepted for `interval` timers (and checked by the schema too).
pub const MIN_INTERVAL_MS: i64 = 1_000;
/// The longest delay, interval or catch-up window: 100 years (of 365.25 days). Together
/// with [`EARLIEST_MS`] and [`LATEST_MS`] it keeps every occurrence far inside the range of
/// chrono and Postgres, so no arithmetic on a stored timer can overflow.
pub const MAX_SPAN_MS: i64 = 3_155_760_000_000;
/// The earliest instant a schedule may name: 1970-01-01T00:00:00Z.
pub const EARLIEST_MS: i64 = 0;
/// The latest instant a schedule may name: 9999-12-31T23:59:59.999Z.
pub const LATEST_MS: i64 = 253_402_300_799_999;
const DAY_MS: i64 = 86_400_000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("invalid cron expression {expr:?}: {reason}")]
    Cron { expr: String, reason: String },
    #[error("unknown time zone {0:?}: use an IANA name such as \"Europe/Berlin\"")]
    TimeZone(String),
    #[error("interval must be at least {MIN_INTERVAL_MS} ms, got {0}")]
    IntervalTooShort(i64),
    #[error("delay must not be negative, got {0}")]
    NegativeDelay(i64),
    #[error("{0} is required for a {1} schedule")]
    Missing(&'static str, &'static str),
    #[error("end_at must be after start_at")]
    EmptyBounds,
    #[error("must be between {min} and {max}, got {value}")]
    OutOfRange { field: &'static str, min: String, max: String, value: String },
}

impl ScheduleError {
    /// The timer field the error is about, as named in the API and in the schema.
    pub fn field(&self) -> &'static str {
        match self {
            ScheduleError::Cron { .. } => "schedule.cron",
            ScheduleError::TimeZone(_) => "schedule.timezone",
            ScheduleError::IntervalTooShort(_) => "schedule.every_ms",
            ScheduleError::NegativeDelay(_) => "schedule.delay_ms",
            ScheduleError::Missing(field, _) => field,
            ScheduleError::EmptyBounds => "schedule.end_at",
            ScheduleError::OutOfRange { field, .. } => field,
        }
    }
}

/// What a cron occurrence whose local time does not exist (the hour skipped when clocks
/// spring forward) becomes.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize, sqlx::Type, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "text", rename_all = "snake_case")]
pub enum DstGap {
    /// Fires once, at the first valid instant after the gap (e.g. 03:00 for 02:30).
    #[default]
    NextValid,
    /// Does not fire.
    Skip,
}

impl DstGap {
    pub fn parse(s: &str) -> Option<DstGap> {
        match s {
            "next_valid" => Some(DstGap::NextValid),
            "skip" => Some(DstGap::Skip),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DstGap::NextValid => "next_valid",
            DstGap::Skip => "skip",
        }
    }
}

/// A parsed cron expression with its zone: crontab's meaning, evaluated by the `croner`
/// crate (docs/semantics.md, "Cron", states it field by field).
///
/// DST, as Vixie/Debian cron has it: a job at a fixed time (a single value in each of the
/// second, minute and hour fields) fires once when its local time repeats as clocks fall
/// back, and fires at the first instant after the gap when clocks spring forward over it
/// (or not at all, with [`DstGap::Skip`]); a job with a wildcard, range, list or step in
/// one of those fields runs on real time: through both passes of a repeated hour, and not
/// in a skipped one.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    expr: String,
    parsed: croner::Cron,
    tz: Tz,
    dst_gap: DstGap,
}

impl PartialEq for CronSchedule {
    fn eq(&self, other: &Self) -> bool {
        self.expr == other.expr && self.tz == other.tz && self.dst_gap == other.dst_gap
    }
}

/// How far ahead an expression must match at least once to be accepted.
pub const CRON_MUST_MATCH_WITHIN_YEARS: u32 = 5;

impl CronSchedule {
    /// Accepts 5-field (crontab: minute resolution), 6-field (seconds first) and 7-field
    /// (seconds first, year last) expressions, with the same weekday numbers in all (0 and
    /// 7 Sunday, 1 Monday), and the macros `@yearly`, `@annually`, `@monthly`, `@weekly`,
    /// `@daily`, `@midnight` and `@hourly`.
    pub fn parse(expr: &str, timezone: &str) -> Result<Self, ScheduleError> {
        let tz = Tz::from_str(timezone).map_err(|_| ScheduleError::TimeZone(timezone.to_owned()))?;
        let trimmed = expr.trim();
        let refuse = |reason: &str| ScheduleError::Cron { expr: expr.to_owned(), reason: reason.to_owned() };
        if trimmed.len() > 256 || trimmed.chars().any(|c| c.is_control() && c != '\t') {
            return Err(refuse("must be at most 256 characters, without control characters"));
        }
        let pattern =
            match trimmed.to_ascii_lowercase().as_str() {
                "@midnight" => "@daily",
                "@reboot" => return Err(refuse(
                    "@reboot is not a schedule: a timer has no boot to run at; use {\"delay_ms\": 0} to fire once now",
                )),
                _ => trimmed,
            };
        let parsed = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Optional)
            .year(croner::parser::Year::Optional)
            // `0/10` as Quartz and the `cron` crate read it (from 0, every 10): expressions
            // stored before Punctual moved to croner keep their meaning.
            .sloppy_ranges(true)
            .build()
            .parse(pattern)
            .map_err(|e| refuse(&e.to_string()))?;
        Ok(Self { expr: trimmed.to_owned(), parsed, tz, dst_gap: DstGap::default() })
    }

    pub fn with_dst_gap(mut self, dst_gap: DstGap) -> Self {
        self.dst_gap = dst_gap;
        self
    }

    pub fn dst_gap(&self) -> DstGap {
        self.dst_gap
    }

    pub fn expr(&self) -> &str {
        &self.expr
    }

    pub fn timezone(&self) -> Tz {
        self.tz
    }

    /// Whether the expression fixes a single second, minute and hour of the day (the jobs
    /// that fire once in a repeated hour and after a skipped one).
    pub fn is_fixed_time(&self) -> bool {
        self.parsed.determine_job_type() == croner::JobType::FixedTime
    }

    /// Refuses an expression that matches nothing in the [`CRON_MUST_MATCH_WITHIN_YEARS`]
    /// after `from` (30 February, 31 April, a year gone by): a timer that would silently
    /// never fire.
    pub fn check_matches_from(&self, from: DateTime<Utc>) -> Result<(), ScheduleError> {
        let limit = from.checked_add_months(chrono::Months::new(12 * CRON_MUST_MATCH_WITHIN_YEARS));
        match (self.next_after(from), limit) {
            (Some(at), Some(limit)) if at <= limit => Ok(()),
            _ => Err(ScheduleError::Cron {
                expr: self.expr.clone(),
                reason: format!(
                    "matches no time in the {CRON_MUST_MATCH_WITHIN_YEARS} years after {}",
                    from.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                ),
            }),
        }
    }

    fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Nothing is searched outside the instants a schedule may name (with a day's
        // margin for the zone's offset): near chrono's limits the local time overflows.
        if !(EARLIEST_MS - DAY_MS..=LATEST_MS).contains(&t.timestamp_millis()) {
            return None;
        }
        // croner works in whole seconds; an exclusive search from t's second is after t.
        let mut from = t.with_timezone(&self.tz).duration_trunc(Duration::seconds(1)).ok()?;
        // Bounded: only a run of skipped gaps makes the search go round more than once.
        for _ in 0..1_000 {
            let at = self.parsed.find_next_occurrence(&from, false).ok()?;
            // croner moves a fixed-time occurrence whose local time was skipped to the
            // first instant after the gap, where the expression does not match.
            let moved = self.dst_gap == DstGap::Skip && !self.parsed.is_time_matching(&at).unwrap_or(true);
            if !moved {
                return Some(at.with_timezone(&Utc));
            }
            from = at;
        }
        None
    }
}

/// The kinds of schedule, as the `schedule_kind` column names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum KindName {
    Once,
    Delay,
    Interval,
    Cron,
}

impl KindName {
    pub const fn as_str(self) -> &'static str {
        match self {
            KindName::Once => "once",
            KindName::Delay => "delay",
            KindName::Interval => "interval",
            KindName::Cron => "cron",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum ScheduleKind {
    /// Fires once at `at`.
    Once { at: DateTime<Utc> },
    /// Fires once, `delay_ms` after the timer was created.
    Delay { delay_ms: i64 },
    /// Fires every `every_ms`, from `start_at` if given, else one interval after creation.
    Interval { every_ms: i64 },
    /// Fires at each match of a cron expression in its zone (boxed: it is much larger
    /// than the other kinds).
    Cron(Box<CronSchedule>),
}

/// A schedule with its optional bounds: no occurrence before `start_at`, none at or after
/// `end_at`.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    pub kind: ScheduleKind,
    pub start_at: Option<DateTime<Utc>>,
    pub end_at: Option<DateTime<Utc>>,
}

/// Checks that a delay, interval or catch-up window is at most [`MAX_SPAN_MS`] (and not
/// negative).
pub fn check_span(field: &'static str, ms: i64) -> Result<(), ScheduleError> {
    if (0..=MAX_SPAN_MS).contains(&ms) {
        Ok(())
    } else {
        Err(ScheduleError::OutOfRange { field, min: "0".into(), max: MAX_SPAN_MS.to_string(), value: ms.to_string() })
    }
}

/// Checks that an instant lies within [`EARLIEST_MS`]..=[`LATEST_MS`].
pub fn check_instant(field: &'static str, t: DateTime<Utc>) -> Result<(), ScheduleError> {
    if (EARLIEST_MS..=LATEST_MS).contains(&t.timestamp_millis()) {
        return Ok(());
    }
    let show = |ms| DateTime::from_timestamp_millis(ms).map(|d| d.to_rfc3339()).unwrap_or_default();
    Err(ScheduleError::OutOfRange { field, min: show(EARLIEST_MS), max: show(LATEST_MS), value: t.to_rfc3339() })
}

fn millis(ms: i64) -> Option<Duration> {
    Duration::try_milliseconds(ms)
}

/// Truncates to the millisecond: occurrences are identified at that precision.
pub fn to_millis(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(Duration::milliseconds(1)).unwrap_or(t)
}

impl Schedule {
    pub fn new(
        kind: ScheduleKind,
        start_at: Option<DateTime<Utc>>,
        end_at: Option<DateTime<Utc>>,
    ) -> Result<Self, ScheduleError> {
        match &kind {
            ScheduleKind::Interval { every_ms } if *every_ms < MIN_INTERVAL_MS => {
                return Err(ScheduleError::IntervalTooShort(*every_ms))
            }
            ScheduleKind::Interval { every_ms } => check_span("schedule.every_ms", *every_ms)?,
            ScheduleKind::Delay { delay_ms } if *delay_ms < 0 => return Err(ScheduleError::NegativeDelay(*delay_ms)),
            ScheduleKind::Delay { delay_ms } => check_span("schedule.delay_ms", *delay_ms)?,
            ScheduleKind::Once { at } => check_instant("schedule.at", *at)?,
            ScheduleKind::Cron(_) => {}
        }
        for (field, bound) in [("schedule.start_at", start_at), ("schedule.end_at", end_at)] {
            if let Some(t) = bound {
                check_instant(field, t)?;
            }
        }
        if let (Some(s), Some(e)) = (start_at, end_at) {
            if e <= s {
                return Err(ScheduleError::EmptyBounds);
            }
        }
        Ok(Self { kind, start_at: start_at.map(to_millis), end_at: end_at.map(to_millis) })
    }

    /// Whether the schedule has a single occurrence (once, delay).
    pub fn is_one_shot(&self) -> bool {
        matches!(self.kind, ScheduleKind::Once { .. } | ScheduleKind::Delay { .. })
    }

    /// The single occurrence of a one-shot schedule, wherever it lies in time. A one-shot
    /// timer whose time has passed (created late, or while the system was down) still fires
    /// once.
    pub fn one_shot_at(&self, created_at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let at = match self.kind {
            ScheduleKind::Once { at } => at,
            ScheduleKind::Delay { delay_ms } => created_at.checked_add_signed(millis(delay_ms)?)?,
            _ => return None,
        };
        Some(to_millis(at)).filter(|at| self.end_at.is_none_or(|end| *at < end))
    }

    /// The earliest occurrence at or after `from`, or `None` if there is none.
    pub fn first_from(&self, created_at: DateTime<Utc>, from: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let from = match self.start_at {
            Some(start) if start > from => start,
            _ => from,
        };
        self.next_after(created_at, from.checked_sub_signed(Duration::milliseconds(1))?)
    }

    /// The earliest occurrence strictly after `t`, or `None` if there is none.
    pub fn next_after(&self, created_at: DateTime<Utc>, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let t = match self.start_at {
            // Occurrences start at start_at: search from just before it.
            Some(start) if start > t => start.checked_sub_signed(Duration::milliseconds(1))?,
            _ => t,
        };
        let next = match &self.kind {
            ScheduleKind::Once { .. } | ScheduleKind::Delay { .. } => self.one_shot_at(created_at).filter(|at| *at > t),
            ScheduleKind::Interval { every_ms } => {
                let every = millis(*every_ms).filter(|_| *every_ms > 0)?;
                let anchor = match self.start_at {
                    Some(start) => start,
                    None => created_at.checked_add_signed(every)?,
                };
                let anchor = to_millis(anchor);
                if t < anchor {
                    Some(anchor)
                } else {
                    let elapsed = t.signed_duration_since(anchor).num_milliseconds();
                    let k = (elapsed / every_ms).checked_add(1)?;
                    anchor.checked_add_signed(millis(k.checked_mul(*every_ms)?)?)
                }
            }
            ScheduleKind::Cron(cron) => cron.next_after(t),
        };
        next.map(to_millis).filter(|at| self.end_at.is_none_or(|end| *at < end))
    }

    /// Up to `n` upcoming occurrences at or after `now`, for display.
    pub fn upcoming(&self, created_at: DateTime<Utc>, now: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        if self.is_one_shot() {
            return self.one_shot_at(created_at).into_iter().collect();
        }
        let mut out = Vec::with_capacity(n);
        let mut next = self.first_from(created_at, now);
        while let Some(at) = next {
            if out.len() == n {
                break;
            }
            out.push(at);
            next = self.next_after(created_at, at);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_is_named_in_json_as_in_the_column() {
        for kind in [KindName::Once, KindName::Delay, KindName::Interval, KindName::Cron] {
            assert_eq!(serde_json::to_value(kind).unwrap(), serde_json::json!(kind.as_str()));
        }
    }

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn cron(expr: &str, tz: &str) -> Schedule {
        Schedule::new(ScheduleKind::Cron(Box::new(CronSchedule::parse(expr, tz).unwrap())), None, None).unwrap()
    }

    #[test]
    fn six_field_cron_fires_every_second() {
        let s = cron("* * * * * *", "UTC");
        let t = utc("2026-12-24T18:00:00.250Z");
        assert_eq!(s.next_after(t, t), Some(utc("2026-12-24T18:00:01Z")));
        assert_eq!(s.first_from(t, utc("2026-12-24T18:00:01Z")), Some(utc("2026-12-24T18:00:01Z")));
    }

    #[test]
    fn five_field_cron_uses_crontab_day_numbers() {
        // 2026-12-26 is a Saturday: the next weekday 09:00 is Monday the 28th.
        let s = cron("0 9 * * 1-5", "UTC");
        let t = utc("2026-12-26T10:00:00Z");
        assert_eq!(s.next_after(t, t), Some(utc("2026-12-28T09:00:00Z")));
        // 0 and 7 are both Sunday.
        let sunday = cron("30 8 * * 0", "UTC");
        assert_eq!(sunday.next_after(t, t), Some(utc("2026-12-27T08:30:00Z")));
        let sunday7 = cron("30 8 * * 7", "UTC");
        assert_eq!(sunday7.next_after(t, t), Some(utc("2026-12-27T08:30:00Z")));
    }

    #[test]
    fn cron_is_evaluated_in_its_time_zone() {
        let s = cron("0 0 2 * * *", "Europe/Berlin");
        let t = utc("2026-12-24T00:00:00Z");
        // 02:00 in Berlin (UTC+1 in winter) is 01:00 UTC.
        assert_eq!(s.next_after(t, t), Some(utc("2026-12-24T01:00:00Z")));
    }

    #[test]
    fn bad_cron_and_zone_are_rejected_with_their_field() {
        let e = CronSchedule::parse("61 * * * * *", "UTC").unwrap_err();
        assert_eq!(e.field(), "schedule.cron");
        let e = CronSchedule::parse("* * * * * *", "Mars/Olympus").unwrap_err();
        assert_eq!(e.field(), "schedule.timezone");
        assert!(e.to_string().contains("Mars/Olympus"));
    }

    #[test]
    fn interval_is_anchored_at_creation_or_start() {
        let created = utc("2026-01-01T00:00:00.123456Z");
        let s = Schedule::new(ScheduleKind::Interval { every_ms: 1500 }, None, None).unwrap();
        assert_eq!(s.first_from(created, created), Some(utc("2026-01-01T00:00:01.623Z")));
        assert_eq!(s.next_after(created, utc("2026-01-01T00:00:01.623Z")), Some(utc("2026-01-01T00:00:03.123Z")));
        let start = utc("2026-02-01T00:00:00Z");
        let s = Schedule::new(ScheduleKind::Interval { every_ms: 60_000 }, Some(start), None).unwrap();
        assert_eq!(s.first_from(created, created), Some(start));
        assert_eq!(s.first_from(created, start + Duration::seconds(1)), Some(start + Duration::minutes(1)));
    }

    #[test]
    fn bounds_limit_occurrences() {
        let end = utc("2026-01-01T00:00:03Z");
        let s = Schedule::new(
            ScheduleKind::Cron(Box::new(CronSchedule::parse("* * * * * *", "UTC").unwrap())),
            None,
            Some(end),
        )
        .unwrap();
        let t = utc("2026-01-01T00:00:01Z");
        assert_eq!(s.next_after(t, t), Some(utc("2026-01-01T00:00:02Z")));
        assert_eq!(s.next_after(t, utc("2026-01-01T00:00:02Z")), None);
        assert_eq!(
            Schedule::new(ScheduleKind::Interval { every_ms: 1000 }, Some(end), Some(end)).unwrap_err(),
            ScheduleError::EmptyBounds
        );
    }

    #[test]
    fn one_shots_fire_once_even_when_late() {
        let created = utc("2026-01-01T00:00:00Z");
        let s = Schedule::new(ScheduleKind::Delay { delay_ms: 2500 }, None, None).unwrap();
        assert_eq!(s.one_shot_at(created), Some(utc("2026-01-01T00:00:02.500Z")));
        assert_eq!(s.upcoming(created, utc("2027-01-01T00:00:00Z"), 5), vec![utc("2026-01-01T00:00:02.500Z")]);
        assert_eq!(s.next_after(created, utc("2026-01-01T00:00:02.500Z")), None);
    }

    impl Schedule {
        fn kind_is_fixed_time(&self) -> bool {
            matches!(&self.kind, ScheduleKind::Cron(c) if c.is_fixed_time())
        }
    }

    fn cron_dst(expr: &str, tz: &str, gap: DstGap) -> Schedule {
        let c = CronSchedule::parse(expr, tz).unwrap().with_dst_gap(gap);
        Schedule::new(ScheduleKind::Cron(Box::new(c)), None, None).unwrap()
    }

    fn fires(s: &Schedule, from: &str, n: usize) -> Vec<DateTime<Utc>> {
        let from = utc(from);
        let mut out = Vec::new();
        let mut t = from;
        while out.len() < n {
            t = s.next_after(from, t).unwrap();
            out.push(t);
        }
        out
    }

    #[test]
    fn spring_forward_fires_once_at_the_next_valid_instant_or_skips() {
        // Berlin, 2026-03-29: 02:00 CET becomes 03:00 CEST; 02:30 does not exist.
        let daily = cron_dst("0 30 2 * * *", "Europe/Berlin", DstGap::NextValid);
        assert_eq!(
            fires(&daily, "2026-03-28T12:00:00Z", 3),
            // 02:30 CET; 03:00 CEST (the gap's end); 02:30 CEST.
            vec![utc("2026-03-29T01:00:00Z"), utc("2026-03-30T00:30:00Z"), utc("2026-03-31T00:30:00Z")]
        );
        let skipping = cron_dst("0 30 2 * * *", "Europe/Berlin", DstGap::Skip);
        assert_eq!(fires(&skipping, "2026-03-28T12:00:00Z", 1), vec![utc("2026-03-30T00:30:00Z")]);
        // Every 15 minutes across the gap: the four missing quarters fire once, at 03:00.
        let quarters = cron_dst("0 */15 * * * *", "Europe/Berlin", DstGap::NextValid);
        assert_eq!(
            fires(&quarters, "2026-03-29T00:40:00Z", 3),
            vec![utc("2026-03-29T00:45:00Z"), utc("2026-03-29T01:00:00Z"), utc("2026-03-29T01:15:00Z")]
        );
        // New York, 2026-03-08: 02:00 EST becomes 03:00 EDT.
        let ny = cron_dst("0 30 2 * * *", "America/New_York", DstGap::NextValid);
        assert_eq!(
            fires(&ny, "2026-03-07T12:00:00Z", 2),
            vec![utc("2026-03-08T07:00:00Z"), utc("2026-03-09T06:30:00Z")]
        );
    }

    #[test]
    fn fall_back_fires_a_fixed_time_once_and_a_wildcard_on_real_time() {
        // Berlin, 2026-10-25: 03:00 CEST becomes 02:00 CET; 02:30 happens twice.
        let daily = cron_dst("0 30 2 * * *", "Europe/Berlin", DstGap::NextValid);
        assert!(daily.kind_is_fixed_time());
        assert_eq!(
            fires(&daily, "2026-10-24T12:00:00Z", 2),
            vec![utc("2026-10-25T00:30:00Z"), utc("2026-10-26T01:30:00Z")]
        );
        // New York, 2026-11-01: 02:00 EDT becomes 01:00 EST. Every 20 minutes of hour 1:
        // a step in the minute field, so both passes of the repeated hour fire.
        let ny = cron_dst("0 */20 1 * * *", "America/New_York", DstGap::NextValid);
        assert!(!ny.kind_is_fixed_time());
        assert_eq!(
            fires(&ny, "2026-11-01T04:30:00Z", 7),
            vec![
                utc("2026-11-01T05:00:00Z"),
                utc("2026-11-01T05:20:00Z"),
                utc("2026-11-01T05:40:00Z"),
                utc("2026-11-01T06:00:00Z"),
                utc("2026-11-01T06:20:00Z"),
                utc("2026-11-01T06:40:00Z"),
                utc("2026-11-02T06:00:00Z"),
            ]
        );
        // Planning that starts inside the second pass goes on from there.
        assert_eq!(fires(&ny, "2026-11-01T06:10:00Z", 1), vec![utc("2026-11-01T06:20:00Z")]);
        // A fixed time in the repeated hour, planned from inside its second pass: not again.
        let fixed = cron_dst("0 10 1 * * *", "America/New_York", DstGap::NextValid);
        assert_eq!(fires(&fixed, "2026-11-01T06:20:00Z", 1), vec![utc("2026-11-02T06:10:00Z")]);
    }

    /// Defect 5 of the cron issue: the repeated hour silenced frequent timers for an hour.
    #[test]
    fn every_second_and_every_quarter_keep_firing_through_the_repeated_hour() {
        // New York, 2027-11-07: the second pass of 01:00-02:00 is 06:00Z-07:00Z.
        let every_second = cron_dst("* * * * * *", "America/New_York", DstGap::NextValid);
        let t = utc("2027-11-07T06:29:59.500Z");
        assert_eq!(every_second.next_after(t, t), Some(utc("2027-11-07T06:30:00Z")));
        let quarters = cron_dst("*/15 * * * *", "America/New_York", DstGap::NextValid);
        let in_repeated_hours: Vec<_> = fires(&quarters, "2027-11-07T04:59:00Z", 12)
            .into_iter()
            .filter(|t| *t >= utc("2027-11-07T05:00:00Z") && *t < utc("2027-11-07T07:00:00Z"))
            .collect();
        assert_eq!(in_repeated_hours.len(), 8, "{in_repeated_hours:?}");
    }

    fn fires_on_days(expr: &str, from: &str, n: usize) -> Vec<String> {
        fires(&cron_dst(expr, "UTC", DstGap::NextValid), from, n)
            .into_iter()
            .map(|t| t.format("%a %d").to_string())
            .collect()
    }

    /// Defect 1: both day fields restricted fire when either matches, as in crontab.
    #[test]
    fn day_of_month_and_day_of_week_are_ored_as_in_crontab() {
        // December 2026 starts on a Tuesday.
        assert_eq!(fires_on_days("0 0 1 * MON", "2026-11-30T12:00:00Z", 4), ["Tue 01", "Mon 07", "Mon 14", "Mon 21"]);
        assert_eq!(fires_on_days("0 0 0 1 * MON", "2026-11-30T12:00:00Z", 4), ["Tue 01", "Mon 07", "Mon 14", "Mon 21"]);
        assert_eq!(fires_on_days("0 12 13 * FRI", "2026-11-30T12:00:00Z", 3), ["Fri 04", "Fri 11", "Sun 13"]);
        // croner's `+` before the weekday asks for both (the `cron` crate's meaning).
        assert_eq!(fires_on_days("0 12 13 * +FRI", "2026-11-30T12:00:00Z", 1), ["Fri 13"]);
    }

    /// Defects 2 and 3: day-of-week numbers are crontab's in 5, 6 and 7 fields alike.
    #[test]
    fn weekday_numbers_and_ranges_ending_at_seven_mean_the_same_in_every_form() {
        let from = "2026-12-05T12:00:00Z"; // a Saturday
        let all_week = ["Sun 06", "Mon 07", "Tue 08", "Wed 09", "Thu 10", "Fri 11", "Sat 12"];
        assert_eq!(fires_on_days("0 0 * * 0-7", from, 7), all_week);
        assert_eq!(fires_on_days("0 0 * * 1-7", from, 7), all_week);
        assert_eq!(fires_on_days("0 0 * * 5-7", from, 3), ["Sun 06", "Fri 11", "Sat 12"]);
        assert_eq!(fires_on_days("0 0 * * 6-7", from, 2), ["Sun 06", "Sat 12"]);
        let weekdays = ["Mon 07", "Tue 08", "Wed 09", "Thu 10", "Fri 11"];
        assert_eq!(fires_on_days("0 9 * * 1-5", from, 5), weekdays);
        assert_eq!(fires_on_days("0 0 9 * * 1-5", from, 5), weekdays);
        assert_eq!(fires_on_days("0 0 9 * * 1-5 *", from, 5), weekdays);
        assert_eq!(fires_on_days("0 0 9 * * MON-FRI", from, 5), weekdays);
        assert_eq!(fires_on_days("0 0 12 * * 0", from, 1), ["Sun 06"]);
        assert_eq!(fires_on_days("0 0 12 * * 7", from, 1), ["Sun 06"]);
    }

    /// Defect 4: an expression that can never fire is refused, not stored silent.
    #[test]
    fn expressions_that_never_match_are_refused() {
        let now = utc("2026-12-04T00:00:00Z");
        for expr in ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 0 1 1 * 2020"] {
            let c = CronSchedule::parse(expr, "UTC").unwrap();
            let e = c.check_matches_from(now).unwrap_err();
            assert_eq!(e.field(), "schedule.cron", "{expr}");
            assert!(e.to_string().contains("matches no time"), "{e}");
        }
        // A leap day matches within five years.
        CronSchedule::parse("0 0 29 2 *", "UTC").unwrap().check_matches_from(now).unwrap();
    }

    #[test]
    fn macros_are_accepted_and_reboot_refused_with_a_reason() {
        for (m, first) in [
            ("@yearly", "2027-01-01T00:00:00Z"),
            ("@annually", "2027-01-01T00:00:00Z"),
            ("@monthly", "2027-01-01T00:00:00Z"),
            ("@weekly", "2026-12-27T00:00:00Z"),
            ("@daily", "2026-12-25T00:00:00Z"),
            ("@midnight", "2026-12-25T00:00:00Z"),
            ("@hourly", "2026-12-24T19:00:00Z"),
        ] {
            let s = cron_dst(m, "UTC", DstGap::NextValid);
            let t = utc("2026-12-24T18:30:00Z");
            assert_eq!(s.next_after(t, t), Some(utc(first)), "{m}");
        }
        let e = CronSchedule::parse("@reboot", "UTC").unwrap_err();
        assert!(e.to_string().contains("delay_ms"), "{e}");
    }

    #[test]
    fn quartz_extensions_last_weekday_and_nth() {
        let from = "2026-12-01T12:00:00Z";
        // Last day of the month; the weekday nearest the 15th (Tuesday); the second Friday;
        // the last Friday.
        assert_eq!(fires_on_days("0 0 L * *", from, 2), ["Thu 31", "Sun 31"]);
        assert_eq!(fires_on_days("0 0 15W * *", from, 1), ["Tue 15"]);
        assert_eq!(fires_on_days("0 0 * * 5#2", from, 1), ["Fri 11"]);
        assert_eq!(fires_on_days("0 0 * * 5#L", from, 1), ["Fri 25"]);
        // `?` is `*` in the day fields.
        assert_eq!(fires_on_days("0 0 0 ? * MON", from, 1), ["Mon 07"]);
    }

    #[test]
    fn values_out_of_range_are_rejected_with_their_field() {
        let end_of_time = DateTime::<Utc>::MAX_UTC;
        let cases = [
            (ScheduleKind::Delay { delay_ms: i64::MAX }, None, None, "schedule.delay_ms"),
            (ScheduleKind::Delay { delay_ms: MAX_SPAN_MS + 1 }, None, None, "schedule.delay_ms"),
            (ScheduleKind::Interval { every_ms: i64::MAX }, None, None, "schedule.every_ms"),
            (ScheduleKind::Once { at: end_of_time }, None, None, "schedule.at"),
            (ScheduleKind::Once { at: utc("1969-12-31T23:59:59.999Z") }, None, None, "schedule.at"),
            (ScheduleKind::Interval { every_ms: 1000 }, Some(DateTime::<Utc>::MIN_UTC), None, "schedule.start_at"),
            (ScheduleKind::Interval { every_ms: 1000 }, None, Some(end_of_time), "schedule.end_at"),
        ];
        for (kind, start, end, field) in cases {
            let e = Schedule::new(kind.clone(), start, end).unwrap_err();
            assert_eq!(e.field(), field, "{kind:?}: {e}");
        }
        // The bounds themselves are accepted.
        let latest = DateTime::from_timestamp_millis(LATEST_MS).unwrap();
        assert!(Schedule::new(ScheduleKind::Once { at: latest }, None, None).is_ok());
        assert!(Schedule::new(ScheduleKind::Delay { delay_ms: MAX_SPAN_MS }, None, None).is_ok());
        assert!(Schedule::new(ScheduleKind::Interval { every_ms: MAX_SPAN_MS }, None, Some(latest)).is_ok());
    }

    #[test]
    fn occurrences_past_the_end_of_time_are_none_not_a_panic() {
        // Values a row may hold (created_at is the user's to write too), reached through
        // arithmetic the planner does: each answer is "no occurrence", never an overflow.
        let at_max = DateTime::<Utc>::MAX_UTC;
        let delay = Schedule { kind: ScheduleKind::Delay { delay_ms: MAX_SPAN_MS }, start_at: None, end_at: None };
        assert_eq!(delay.one_shot_at(at_max), None);
        let every = Schedule { kind: ScheduleKind::Interval { every_ms: i64::MAX }, start_at: None, end_at: None };
        assert_eq!(every.first_from(at_max, at_max), None);
        assert_eq!(every.next_after(utc("2026-01-01T00:00:00Z"), at_max), None);
        let from_min =
            Schedule { kind: ScheduleKind::Interval { every_ms: 1000 }, start_at: Some(at_max), end_at: None };
        assert_eq!(from_min.first_from(DateTime::<Utc>::MIN_UTC, DateTime::<Utc>::MIN_UTC), Some(to_millis(at_max)));
        let c = cron("* * * * * *", "Pacific/Kiritimati");
        assert_eq!(c.next_after(at_max, at_max), None);
        assert_eq!(c.first_from(DateTime::<Utc>::MIN_UTC, DateTime::<Utc>::MIN_UTC), None);
    }

    mod never_panics {
        use super::*;
        use proptest::prelude::*;

        fn instant() -> impl Strategy<Value = DateTime<Utc>> {
            prop_oneof![
                Just(DateTime::<Utc>::MIN_UTC),
                Just(DateTime::<Utc>::MAX_UTC),
                Just(DateTime::from_timestamp_millis(LATEST_MS).unwrap()),
                (DateTime::<Utc>::MIN_UTC.timestamp()..=DateTime::<Utc>::MAX_UTC.timestamp())
                    .prop_map(|s| DateTime::from_timestamp(s, 0).unwrap()),
                (-10_000_000_000i64..300_000_000_000).prop_map(|s| DateTime::from_timestamp(s, 0).unwrap()),
            ]
        }

        fn millis() -> impl Strategy<Value = i64> {
            prop_oneof![Just(i64::MIN), Just(i64::MAX), Just(0), Just(MAX_SPAN_MS), any::<i64>(), 0..100_000_000i64]
        }

        fn cron_field() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("*".to_owned()),
                Just("*/7".to_owned()),
                Just("L".to_owned()),
                Just("?".to_owned()),
                (0u32..100).prop_map(|n| n.to_string()),
                (0u32..70, 0u32..70).prop_map(|(a, b)| format!("{a}-{b}")),
                (0u32..70, 1u32..70).prop_map(|(a, b)| format!("{a}/{b}")),
                "[A-Z0-9,#/LW*?-]{1,6}",
            ]
        }

        fn kind() -> impl Strategy<Value = ScheduleKind> {
            let zones = prop_oneof![
                Just("UTC"),
                Just("Europe/Berlin"),
                Just("America/New_York"),
                Just("Australia/Lord_Howe"),
                Just("Pacific/Kiritimati")
            ];
            prop_oneof![
                instant().prop_map(|at| ScheduleKind::Once { at }),
                millis().prop_map(|delay_ms| ScheduleKind::Delay { delay_ms }),
                millis().prop_map(|every_ms| ScheduleKind::Interval { every_ms }),
                // Random fields rarely make an expression the parser accepts: a refused
                // one stands in for the busiest expression there is.
                (proptest::collection::vec(cron_field(), 5..=7), zones).prop_map(|(fields, zone)| {
                    let cron = CronSchedule::parse(&fields.join(" "), zone)
                        .unwrap_or_else(|_| CronSchedule::parse("* * * * * *", zone).unwrap());
                    ScheduleKind::Cron(Box::new(cron))
                }),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2_000))]

            /// Whatever a row holds, checked or not: building, and each computation the
            /// planner and the API make, either answers or refuses; none panics.
            #[test]
            fn schedule_arithmetic_never_panics(
                kind in kind(),
                start in proptest::option::of(instant()),
                end in proptest::option::of(instant()),
                created in instant(),
                t in instant(),
            ) {
                let _ = Schedule::new(kind.clone(), start, end);
                // Also unchecked, as a row stored before the checks would be.
                let s = Schedule { kind, start_at: start, end_at: end };
                let _ = s.one_shot_at(created);
                let _ = s.first_from(created, t);
                if let Some(next) = s.next_after(created, t) {
                    prop_assert!(next > t);
                }
                let _ = s.upcoming(created, t, 3);
            }
        }
    }

    #[test]
    fn too_short_interval_is_rejected() {
        let e = Schedule::new(ScheduleKind::Interval { every_ms: 10 }, None, None).unwrap_err();
        assert_eq!(e.field(), "schedule.every_ms");
    }
}
