//! The tasks this executor has started and whose outcome is not written yet, by partition.
//!
//! Two uses:
//! * a second message for one of them is skipped: a scanner that took over a bucket claims
//!   its tasks again and publishes them, and one already running here (started without a
//!   write, so the database cannot tell) must not run twice. Both messages land on the
//!   bucket's partition, so on this executor;
//! * before partitions are revoked, the rebalance waits until the tasks of those partitions
//!   are written ([`InFlight::wait_until_written`]), so that their new owner finds them
//!   finished instead of running them again.

use punctual_shared::unpoisoned;
use std::collections::HashMap;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
pub struct InFlight {
    /// Task id → its message's partition.
    tasks: Mutex<HashMap<i64, i32>>,
    written: Condvar,
}

impl InFlight {
    pub fn contains(&self, task_id: i64) -> bool {
        unpoisoned::lock(&self.tasks).contains_key(&task_id)
    }

    pub fn insert(&self, task_id: i64, partition: i32) {
        unpoisoned::lock(&self.tasks).insert(task_id, partition);
    }

    /// The outcomes of `task_ids` are written.
    pub fn remove_all(&self, task_ids: impl IntoIterator<Item = i64>) {
        let mut tasks = unpoisoned::lock(&self.tasks);
        for id in task_ids {
            tasks.remove(&id);
        }
        self.written.notify_all();
    }

    /// Forgets every task (the stop abandoned them): no rebalance waits for them.
    pub fn clear(&self) {
        unpoisoned::lock(&self.tasks).clear();
        self.written.notify_all();
    }

    /// Blocks until no task of `partitions` is in flight, or `timeout` passes; returns how
    /// many are left.
    pub fn wait_until_written(&self, partitions: &[i32], timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        let mut tasks = unpoisoned::lock(&self.tasks);
        loop {
            let left = tasks.values().filter(|p| partitions.contains(p)).count();
            let now = Instant::now();
            if left == 0 || now >= deadline {
                return left;
            }
            tasks =
                self.written.wait_timeout(tasks, deadline - now).unwrap_or_else(std::sync::PoisonError::into_inner).0;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn waits_only_for_the_partitions_asked_and_only_as_long_as_allowed() {
        let in_flight = Arc::new(InFlight::default());
        in_flight.insert(1, 0);
        in_flight.insert(2, 1);
        assert_eq!(in_flight.wait_until_written(&[0], Duration::from_millis(20)), 1, "times out");
        assert_eq!(in_flight.wait_until_written(&[2], Duration::from_secs(5)), 0, "nothing of partition 2");
        let writer = {
            let in_flight = in_flight.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                in_flight.remove_all([1]);
            })
        };
        assert_eq!(in_flight.wait_until_written(&[0], Duration::from_secs(5)), 0);
        writer.join().unwrap();
        assert!(in_flight.contains(2) && !in_flight.contains(1));
        in_flight.clear();
        assert!(!in_flight.contains(2));
    }
}
