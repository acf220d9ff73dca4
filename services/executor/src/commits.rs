//! Offset commits: the stored offsets (those of work whose outcome is written) are
//! committed every second, and each commit's round trip to the group coordinator is
//! measured (`punctual_offset_commit_duration_seconds`). librdkafka's own auto-commit
//! does the same but does not say when a commit began.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::{Histogram, IntCounterVec};
use punctual_runtime::periodic::Ticks;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::types::RDKafkaErrorCode;
use tokio_util::sync::CancellationToken;

use crate::TaskConsumer;
use punctual_shared::unpoisoned;

/// How often stored offsets are committed.
pub const COMMIT_INTERVAL: Duration = Duration::from_secs(1);

/// Times commits from their request to their answer (the consumer's commit callback).
pub struct CommitClock {
    pending: Mutex<Option<Instant>>,
    duration: Histogram,
    results: IntCounterVec,
}

impl CommitClock {
    pub fn new(duration: Histogram, results: IntCounterVec) -> Self {
        Self { pending: Mutex::new(None), duration, results }
    }

    /// A commit was requested. While one is pending, a second is timed from the first.
    pub fn requested(&self) {
        unpoisoned::lock(&self.pending).get_or_insert_with(Instant::now);
    }

    /// The commit's answer (from the consumer's commit callback, or at once when the
    /// request itself failed).
    pub fn answered(&self, result: &KafkaResult<()>) {
        let started = unpoisoned::lock(&self.pending).take();
        match result {
            Ok(()) => {
                self.results.with_label_values(&["ok"]).inc();
                if let Some(started) = started {
                    self.duration.observe(started.elapsed().as_secs_f64());
                }
            }
            // Nothing stored since the last commit: answered locally, not a failure.
            Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
            Err(e) => {
                self.results.with_label_values(&["error"]).inc();
                tracing::debug!(error = %e, "offset commit failed");
            }
        }
    }
}

/// Commits the stored offsets every [`COMMIT_INTERVAL`] until cancelled (the stop then
/// makes its own final commit).
pub async fn commit_periodically(consumer: Arc<TaskConsumer>, clock: Arc<CommitClock>, token: CancellationToken) {
    let mut ticks = Ticks::every_from_now(COMMIT_INTERVAL, token);
    while ticks.next().await {
        clock.requested();
        // Asynchronous: the answer comes to the commit callback, on the polling thread.
        if let Err(e) = consumer.commit_consumer_state(CommitMode::Async) {
            clock.answered(&Err(e));
        }
    }
}

#[cfg(test)]
mod tests {
    use prometheus::{HistogramOpts, Opts};

    use super::*;

    fn clock() -> CommitClock {
        CommitClock::new(
            Histogram::with_opts(HistogramOpts::new("d", "d")).unwrap(),
            IntCounterVec::new(Opts::new("r", "r"), &["result"]).unwrap(),
        )
    }

    #[test]
    fn times_successful_commits_from_their_first_request() {
        let c = clock();
        c.requested();
        std::thread::sleep(Duration::from_millis(20));
        c.requested();
        c.answered(&Ok(()));
        assert_eq!(c.duration.get_sample_count(), 1);
        assert!(c.duration.get_sample_sum() >= 0.02);
        assert_eq!(c.results.with_label_values(&["ok"]).get(), 1);
        // An answer without a request (a commit made elsewhere) counts, untimed.
        c.answered(&Ok(()));
        assert_eq!((c.duration.get_sample_count(), c.results.with_label_values(&["ok"]).get()), (1, 2));
    }

    #[test]
    fn nothing_to_commit_is_neither_timed_nor_an_error() {
        let c = clock();
        c.requested();
        c.answered(&Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)));
        c.answered(&Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::RequestTimedOut)));
        assert_eq!(c.duration.get_sample_count(), 0);
        assert_eq!(c.results.with_label_values(&["error"]).get(), 1);
        assert_eq!(c.results.with_label_values(&["ok"]).get(), 0);
    }
}
