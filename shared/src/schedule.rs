//! When a timer fires: the four schedule kinds and the arithmetic of their occurrences.
//!
//! A [`Schedule`] is parsed once (from the API's JSON or from a `timers` row) and is valid
//! afterwards. Every occurrence is a UTC instant truncated to the millisecond, because the
//! occurrence time is part of the task identity (`<timer_id>:<scheduled_at>`), which is
//! written with millisecond precision.

use std::str::FromStr;

use chrono::{DateTime, Duration, DurationRound, TimeZone, Utc};
use chrono_tz::Tz;

/// The smallest interval accepted for `interval` timers (and checked by the schema too).
pub const MIN_INTERVAL_MS: i64 = 1_000;

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
        }
    }
}

/// A parsed cron expression with its zone.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    expr: String,
    parsed: cron::Schedule,
    tz: Tz,
}

impl PartialEq for CronSchedule {
    fn eq(&self, other: &Self) -> bool {
        self.expr == other.expr && self.tz == other.tz
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
        Ok(Self { expr: expr.trim().to_owned(), parsed, tz })
    }

    pub fn expr(&self) -> &str {
        &self.expr
    }

    pub fn timezone(&self) -> Tz {
        self.tz
    }

    fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = self.tz.from_utc_datetime(&t.naive_utc());
        self.parsed.after(&local).next().map(|d| d.with_timezone(&Utc))
    }
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
            ScheduleKind::Delay { delay_ms } if *delay_ms < 0 => return Err(ScheduleError::NegativeDelay(*delay_ms)),
            _ => {}
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
            ScheduleKind::Delay { delay_ms } => created_at + Duration::milliseconds(delay_ms),
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
        self.next_after(created_at, from - Duration::milliseconds(1))
    }

    /// The earliest occurrence strictly after `t`, or `None` if there is none.
    pub fn next_after(&self, created_at: DateTime<Utc>, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let t = match self.start_at {
            // Occurrences start at start_at: search from just before it.
            Some(start) if start > t => start - Duration::milliseconds(1),
            _ => t,
        };
        let next = match &self.kind {
            ScheduleKind::Once { .. } | ScheduleKind::Delay { .. } => self.one_shot_at(created_at).filter(|at| *at > t),
            ScheduleKind::Interval { every_ms } => {
                let anchor = to_millis(self.start_at.unwrap_or(created_at + Duration::milliseconds(*every_ms)));
                if t < anchor {
                    Some(anchor)
                } else {
                    let elapsed = (t - anchor).num_milliseconds();
                    let k = elapsed / every_ms + 1;
                    Some(anchor + Duration::milliseconds(k * every_ms))
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

    #[test]
    fn too_short_interval_is_rejected() {
        let e = Schedule::new(ScheduleKind::Interval { every_ms: 10 }, None, None).unwrap_err();
        assert_eq!(e.field(), "schedule.every_ms");
    }
}
