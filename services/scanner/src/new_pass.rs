//! How many new timers one planning pass validates: as many as fit in a time budget. A
//! pass holds the ownership's write guard and comes before the plans of the timers already
//! running, so one that takes seconds (2,000 rows of a bulk import, on a machine short of
//! CPU) delays their occurrences past the misfire threshold; one that fits the budget
//! leaves them on time while the import is validated pass after pass.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use crate::planner::PASS_SIZE;

/// What one pass of new timers may take.
pub const BUDGET: Duration = Duration::from_millis(200);
/// The fewest rows a pass takes, however slow: an import still moves.
pub const MIN_ROWS: i64 = 50;

#[derive(Debug)]
pub struct NewPassSize {
    rows: AtomicI64,
}

impl Default for NewPassSize {
    fn default() -> Self {
        NewPassSize { rows: AtomicI64::new(PASS_SIZE) }
    }
}

impl NewPassSize {
    /// Rows the next pass takes.
    pub fn rows(&self) -> i64 {
        self.rows.load(Ordering::Relaxed)
    }

    /// A pass of `rows` took `took`, and was `full` (found as many as it took, so more are
    /// waiting): the next pass takes what fits the budget at that pace, never more than
    /// twice as many, and only grows after a full pass.
    pub fn took(&self, rows: i64, took: Duration, full: bool) {
        let took_us = took.as_micros().max(1) as i64;
        let fits = (rows.saturating_mul(BUDGET.as_micros() as i64) / took_us).min(rows.saturating_mul(2));
        let next = if took > BUDGET || full { fits } else { rows };
        self.rows.store(next.clamp(MIN_ROWS, PASS_SIZE), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_pass_makes_the_next_one_fit_the_budget_and_a_quick_full_one_grows_it() {
        let size = NewPassSize::default();
        assert_eq!(size.rows(), PASS_SIZE);
        // 2,000 rows in 1.6 s: 250 fit in 200 ms.
        size.took(PASS_SIZE, Duration::from_millis(1_600), true);
        assert_eq!(size.rows(), 250);
        // 250 in 50 ms, with more waiting: twice as many, not the 1,000 the pace allows.
        size.took(250, Duration::from_millis(50), true);
        assert_eq!(size.rows(), 500);
        // Not full (the import is done): kept.
        size.took(500, Duration::from_millis(10), false);
        assert_eq!(size.rows(), 500);
        // Never below the floor, never above a whole pass.
        size.took(500, Duration::from_secs(60), true);
        assert_eq!(size.rows(), MIN_ROWS);
        for _ in 0..20 {
            size.took(size.rows(), Duration::from_millis(1), true);
        }
        assert_eq!(size.rows(), PASS_SIZE);
    }
}
