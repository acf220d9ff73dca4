//! Which offsets may be committed: only those below every message still in flight.
//!
//! Messages of one partition are run concurrently and finish in any order, so the
//! committable position of a partition is the end of its completed prefix: a slow
//! callback holds back the commit of its partition, never the work.

use std::collections::{BTreeSet, HashMap};

#[derive(Debug, Default)]
struct Partition {
    in_flight: BTreeSet<i64>,
    /// Highest offset received.
    highest: i64,
    /// Last offset reported as committable.
    reported: i64,
}

#[derive(Debug, Default)]
pub struct OffsetTracker {
    partitions: HashMap<i32, Partition>,
}

impl OffsetTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a received message as in flight.
    pub fn received(&mut self, partition: i32, offset: i64) {
        let p = self.partitions.entry(partition).or_insert_with(|| Partition {
            highest: offset - 1,
            reported: offset - 1,
            ..Default::default()
        });
        p.in_flight.insert(offset);
        p.highest = p.highest.max(offset);
    }

    /// Records a message as done. Returns the last offset of the partition's completed
    /// prefix when it moved forward (the offset to store), else `None`.
    pub fn completed(&mut self, partition: i32, offset: i64) -> Option<i64> {
        let p = self.partitions.get_mut(&partition)?;
        p.in_flight.remove(&offset);
        let done_through = match p.in_flight.first() {
            Some(first) => first - 1,
            None => p.highest,
        };
        (done_through > p.reported).then(|| {
            p.reported = done_through;
            done_through
        })
    }

    /// Forgets a partition (revoked): its messages in flight will be delivered again to
    /// whoever owns it next.
    pub fn forget(&mut self, partition: i32) {
        self.partitions.remove(&partition);
    }

    pub fn in_flight(&self) -> usize {
        self.partitions.values().map(|p| p.in_flight.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_only_the_completed_prefix() {
        let mut t = OffsetTracker::new();
        for o in 10..15 {
            t.received(0, o);
        }
        // 12 finishes first: nothing below it is done, nothing to commit.
        assert_eq!(t.completed(0, 12), None);
        assert_eq!(t.completed(0, 10), Some(10));
        assert_eq!(t.completed(0, 11), Some(12));
        assert_eq!(t.completed(0, 14), None);
        assert_eq!(t.completed(0, 13), Some(14));
        assert_eq!(t.in_flight(), 0);
    }

    #[test]
    fn partitions_are_independent() {
        let mut t = OffsetTracker::new();
        t.received(0, 5);
        t.received(1, 100);
        t.received(1, 101);
        assert_eq!(t.completed(1, 101), None);
        assert_eq!(t.completed(0, 5), Some(5));
        assert_eq!(t.completed(1, 100), Some(101));
        t.forget(1);
        assert_eq!(t.completed(1, 102), None);
    }
}
