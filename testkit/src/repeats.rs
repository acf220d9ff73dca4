//! Calls made more than once, judged against a kill. Delivery is at least once: an
//! executor killed while calling leaves those calls to be made again by the partition's
//! next owner, and that is the only repeat allowed. So each repeated key's first call must
//! have begun shortly before the kill.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::Call;

/// How long after it was sent a call may reach the sink's clock: a call the killed
/// executor made just before its death can be recorded just after it (57–61 ms seen on a
/// machine busy with the whole suite).
pub const SINK_DELAY: Duration = Duration::from_millis(250);

/// How long after a call ended its outcome may still be unwritten (the write-back goes in
/// batches and waits for Postgres; 1.2 s seen beside the whole suite): a call repeated
/// after a kill may have begun this long plus its own length before it.
pub const WRITE_BACK: Duration = Duration::from_secs(2);

#[derive(Debug)]
pub struct Repeats {
    /// Each key called more than once, with how long before the kill its first call
    /// arrived, in ms (negative: after).
    pub before_kill_ms: Vec<(String, i64)>,
}

impl Repeats {
    pub fn of(calls: &[Call], killed_at: DateTime<Utc>) -> Repeats {
        let mut first: HashMap<&str, (DateTime<Utc>, usize)> = HashMap::new();
        for c in calls {
            let Some(key) = c.idempotency_key.as_deref() else { continue };
            match first.entry(key) {
                Entry::Occupied(mut e) => e.get_mut().1 += 1,
                Entry::Vacant(e) => {
                    e.insert((c.received_at, 1));
                }
            }
        }
        let before_kill_ms = first
            .into_iter()
            .filter(|(_, (_, calls))| *calls > 1)
            .map(|(key, (at, _))| (key.to_owned(), (killed_at - at).num_milliseconds()))
            .collect();
        Repeats { before_kill_ms }
    }

    pub fn len(&self) -> usize {
        self.before_kill_ms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.before_kill_ms.is_empty()
    }

    /// The repeats a kill does not explain: their first call began more than `in_flight`
    /// before it, or after it (beyond [`SINK_DELAY`]). At most five, for a message.
    pub fn not_in_flight(&self, in_flight: Duration) -> Vec<&(String, i64)> {
        let (after, before) = (SINK_DELAY.as_millis() as i64, in_flight.as_millis() as i64);
        self.before_kill_ms.iter().filter(|(_, ms)| *ms < -after || *ms > before).take(5).collect()
    }

    /// Prints how many there are and when their first calls began, then asserts that the
    /// kill explains each.
    pub fn assert_in_flight(&self, in_flight: Duration) {
        let earliest = self.before_kill_ms.iter().map(|(_, ms)| *ms).max();
        let latest = self.before_kill_ms.iter().map(|(_, ms)| *ms).min();
        println!("repeated: {} (their first calls began {latest:?} to {earliest:?} ms before the kill)", self.len());
        let outside = self.not_in_flight(in_flight);
        assert!(outside.is_empty(), "repeated calls that were not in flight at the kill: {outside:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(key: &str, at: DateTime<Utc>) -> Call {
        Call {
            received_at: at,
            method: "POST".into(),
            path: "/".into(),
            idempotency_key: Some(key.into()),
            headers: Default::default(),
            body: Default::default(),
        }
    }

    #[test]
    fn a_repeat_is_judged_by_when_its_first_call_began() {
        let kill = Utc::now();
        let ms = chrono::Duration::milliseconds;
        let calls = [
            call("once", kill - ms(5_000)),
            call("in-flight", kill - ms(200)),
            call("in-flight", kill + ms(3_000)),
            call("stale", kill - ms(2_000)),
            call("stale", kill + ms(3_000)),
            call("late", kill + ms(500)),
            call("late", kill + ms(600)),
        ];
        let repeats = Repeats::of(&calls, kill);
        assert_eq!(repeats.len(), 3);
        let mut outside: Vec<&str> =
            repeats.not_in_flight(Duration::from_secs(1)).iter().map(|(k, _)| k.as_str()).collect();
        outside.sort_unstable();
        assert_eq!(outside, ["late", "stale"]);
    }
}
