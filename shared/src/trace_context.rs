//! The W3C Trace Context header every callback carries (`traceparent`), so that a target's
//! tracing joins each call to the occurrence it belongs to: the trace id is the
//! occurrence's (the same for every attempt of it, and derived from its identity, so no
//! state is kept), the parent id is the attempt's own.

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// `00-<trace id>-<parent id>-01` (version 00, sampled).
pub fn traceparent(timer_id: Uuid, scheduled_at: DateTime<Utc>, span_id: u64) -> String {
    format!("00-{:032x}-{:016x}-01", trace_id(timer_id, scheduled_at), span_id.max(1))
}

/// The occurrence's trace id: the timer id's 128 bits with the scheduled time's
/// microseconds mixed into the low half. Never zero (an invalid trace id).
pub fn trace_id(timer_id: Uuid, scheduled_at: DateTime<Utc>) -> u128 {
    let mixed = timer_id.as_u128() ^ u128::from(scheduled_at.timestamp_micros() as u64);
    if mixed == 0 {
        1
    } else {
        mixed
    }
}

/// A new attempt's span id: random, never zero (an invalid span id).
pub fn new_span_id() -> u64 {
    rand::random::<u64>().max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_trace_per_occurrence_one_span_per_attempt() {
        let timer = Uuid::new_v4();
        let at = Utc::now();
        let first = traceparent(timer, at, new_span_id());
        let second = traceparent(timer, at, new_span_id());
        let parts: Vec<&str> = first.split('-').collect();
        assert_eq!(parts.len(), 4);
        assert_eq!((parts[0], parts[1].len(), parts[2].len(), parts[3]), ("00", 32, 16, "01"));
        assert!(parts[1..3].iter().all(|p| p.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())));
        assert_eq!(first[..35], second[..35], "the same trace id for every attempt");
        assert_ne!(first, second, "a span id of its own");
        let next = traceparent(timer, at + chrono::Duration::seconds(1), 7);
        assert_ne!(next[3..35], first[3..35], "each occurrence a trace of its own");
        assert!(traceparent(Uuid::nil(), DateTime::UNIX_EPOCH, 0).ends_with("-0000000000000001-01"));
        assert!(!traceparent(Uuid::nil(), DateTime::UNIX_EPOCH, 0).contains(&"0".repeat(32)));
    }
}
