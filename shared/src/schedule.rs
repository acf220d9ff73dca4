//! When a timer fires: the four schedule kinds and the arithmetic of their occurrences.
//!
//! A [`Schedule`] is parsed once (from the API's JSON or from a `timers` row) and is valid
//! afterwards. Every occurrence is a UTC instant truncated to the millisecond, because the
//! occurrence time is part of the task identity (`<timer_id>:<scheduled_at>`), which is
//! written with millisecond precision.

use std::str::FromStr;

use chrono::{DateTime, Duration, DurationRound, LocalResult, NaiveDateTime, TimeZone, Utc};
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
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

/// A parsed cron expression with its zone.
///
/// Evaluated on local wall-clock time, then mapped to UTC, which gives a DST policy that
/// can be stated: a local time repeated when clocks fall back fires once (at its first
/// instance); a local time skipped when they spring forward fires once at the first valid
/// instant after the gap, or not at all ([`DstGap`]).
#[derive(Debug, Clone)]
pub struct CronSchedule {
    expr: String,
    parsed: cron::Schedule,
    tz: Tz,
    dst_gap: DstGap,
}

impl PartialEq for CronSchedule {
    fn eq(&self, other: &Self) -> bool {
        self.expr == other.expr && self.tz == other.tz && self.dst_gap == other.dst_gap
    }
}

impl CronSchedule {
    /// Accepts 5-field (minute resolution, crontab), 6-field (with seconds) and 7-field
    /// (with seconds and year) expressions.
    pub fn parse(expr: &str, timezone: &str) -> Result<Self, ScheduleError> {
        let tz = Tz::from_str(timezone).map_err(|_| ScheduleError::TimeZone(timezone.to_owned()))?;
        let normalized = normalize_cron(expr);
        let parsed = cron::Schedule::from_str(&normalized)
            .map_err(|e| ScheduleError::Cron { expr: expr.to_owned(), reason: e.to_string() })?;
        Ok(Self { expr: expr.trim().to_owned(), parsed, tz, dst_gap: DstGap::default() })
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

    fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Nothing is searched outside the instants a schedule may name (with a day's
        // margin for the zone's offset): near chrono's limits both the local time and the
        // cron crate's own arithmetic would overflow.
        if !(EARLIEST_MS - DAY_MS..=LATEST_MS).contains(&t.timestamp_millis()) {
            return None;
        }
        // Matches are searched on the local wall clock (a naive time, carried in a Utc
        // value as a zone without transitions), then mapped back through the zone.
        let mut wall = self.tz.from_utc_datetime(&t.naive_utc()).naive_local();
        // Bounded: only a repeated or skipped hour makes the search go round more than once.
        for _ in 0..100_000 {
            let candidate = self.parsed.after(&Utc.from_utc_datetime(&wall)).next()?.naive_utc();
            let instant = match self.tz.from_local_datetime(&candidate) {
                LocalResult::Single(d) => Some(d.with_timezone(&Utc)),
                // Fall-back: the first instance only; the repeat is earlier than t, or
                // will be reached as "earlier than t" once the first has been planned.
                LocalResult::Ambiguous(first, _) => Some(first.with_timezone(&Utc)),
                LocalResult::None => match self.dst_gap {
                    DstGap::NextValid => first_valid_after(self.tz, candidate),
                    DstGap::Skip => None,
                },
            };
            match instant {
                Some(at) if at > t => return Some(at),
                _ => wall = candidate,
            }
        }
        None
    }
}

/// The first instant whose local time exists, after a local time that does not (a DST gap).
fn first_valid_after(tz: Tz, missing: NaiveDateTime) -> Option<DateTime<Utc>> {
    let mut wall = missing.duration_trunc(Duration::minutes(1)).ok()?;
    for _ in 0..(48 * 60) {
        wall = wall.checked_add_signed(Duration::minutes(1))?;
        match tz.from_local_datetime(&wall) {
            LocalResult::Single(d) | LocalResult::Ambiguous(d, _) => return Some(d.with_timezone(&Utc)),
            LocalResult::None => {}
        }
    }
    None
}

/// A crontab line has five fields (minute hour day-of-month month day-of-week) and numbers
/// days of the week 0–7 with Sunday as 0 and 7; the `cron` crate wants a seconds field
/// first and numbers days 1–7 from Sunday. Translate, so that `0 9 * * 1-5` means what it
/// means in crontab: 09:00 Monday to Friday.
fn normalize_cron(expr: &str) -> String {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    if fields.len() != 5 {
        return fields.join(" ");
    }
    let dow = crontab_dow_to_names(fields[4]);
    format!("0 {} {} {} {} {}", fields[0], fields[1], fields[2], fields[3], dow)
}

fn crontab_dow_to_names(field: &str) -> String {
    const NAMES: [&str; 8] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"];
    field
        .split(',')
        .map(|item| {
            // Digits after a '/' are a step, not a day.
            let (range, step) = match item.split_once('/') {
                Some((r, s)) => (r, Some(s)),
                None => (item, None),
            };
            let range = range
                .split('-')
                .map(|part| match part.parse::<usize>() {
                    Ok(n) if n < NAMES.len() => NAMES[n].to_owned(),
                    _ => part.to_owned(),
                })
                .collect::<Vec<_>>()
                .join("-");
            match step {
                Some(s) => format!("{range}/{s}"),
                None => range,
            }
        })
        .collect::<Vec<_>>()
        .join(",")
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
    fn fall_back_fires_the_repeated_hour_once() {
        // Berlin, 2026-10-25: 03:00 CEST becomes 02:00 CET; 02:30 happens twice.
        let daily = cron_dst("0 30 2 * * *", "Europe/Berlin", DstGap::NextValid);
        assert_eq!(
            fires(&daily, "2026-10-24T12:00:00Z", 2),
            vec![utc("2026-10-25T00:30:00Z"), utc("2026-10-26T01:30:00Z")]
        );
        // New York, 2026-11-01: 02:00 EDT becomes 01:00 EST; every 20 minutes through it.
        let ny = cron_dst("0 */20 1 * * *", "America/New_York", DstGap::NextValid);
        assert_eq!(
            fires(&ny, "2026-11-01T04:30:00Z", 4),
            // 01:00, 01:20, 01:40 EDT, then not again in the repeated hour: next day 01:00 EST.
            vec![
                utc("2026-11-01T05:00:00Z"),
                utc("2026-11-01T05:20:00Z"),
                utc("2026-11-01T05:40:00Z"),
                utc("2026-11-02T06:00:00Z")
            ]
        );
        // Planning that starts inside the repeated hour does not fire it again.
        assert_eq!(fires(&ny, "2026-11-01T06:10:00Z", 1), vec![utc("2026-11-02T06:00:00Z")]);
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
