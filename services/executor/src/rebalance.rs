//! What the executor does when the group moves partitions.

use std::sync::Arc;
use std::time::Duration;

use prometheus::IntGaugeVec;
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::statistics::Statistics;
use rdkafka::TopicPartitionList;

use crate::commits::CommitClock;
use crate::in_flight::InFlight;

/// Before partitions are revoked, lets the calls in flight on them finish and their
/// outcomes be written (at most `revoke_wait`), and commits the offsets stored so far, so
/// their new owner starts after them and repeats no call that had finished. Logs
/// assignments, so a group that does not settle can be seen.
/// Also counts the client's errors, offset commits, and each partition's lag.
pub struct ExecutorContext {
    pub in_flight: Arc<InFlight>,
    pub revoke_wait: Duration,
    /// The tasks topic, whose partitions' lag is reported.
    pub topic: String,
    pub consumer_lag: IntGaugeVec,
    pub commits: Arc<CommitClock>,
}

impl ClientContext for ExecutorContext {
    fn error(&self, error: KafkaError, reason: &str) {
        punctual_runtime::kafka::count_error(&error);
        tracing::error!("librdkafka: {error}: {reason}");
    }

    /// The lag of the partitions this consumer fetches; those it no longer holds drop out.
    fn stats(&self, statistics: Statistics) {
        self.consumer_lag.reset();
        let Some(topic) = statistics.topics.get(&self.topic) else {
            return;
        };
        for (partition, p) in &topic.partitions {
            if *partition >= 0 && p.fetch_state == "active" && p.consumer_lag >= 0 {
                self.consumer_lag.with_label_values(&[partition.to_string().as_str()]).set(p.consumer_lag);
            }
        }
    }
}

fn partitions(tpl: &TopicPartitionList) -> Vec<i32> {
    tpl.elements().iter().map(|e| e.partition()).collect()
}

impl ConsumerContext for ExecutorContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(tpl) = rebalance else {
            return;
        };
        let revoked = partitions(tpl);
        // Called on the thread that polls the consumer, a runtime worker: the calls and the
        // write-back go on on the others meanwhile (block_in_place hands this worker's
        // queued tasks to another thread).
        let wait = || self.in_flight.wait_until_written(&revoked, self.revoke_wait);
        let left = match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(wait)
            }
            _ => wait(),
        };
        if left > 0 {
            tracing::warn!(left, partitions = ?revoked, "calls still running as their partitions are revoked: they may run again");
        }
        self.commits.requested();
        if let Err(e) = consumer.commit_consumer_state(CommitMode::Sync) {
            tracing::debug!(error = %e, "commit before the revocation");
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, _offsets: &TopicPartitionList) {
        self.commits.answered(&result);
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => tracing::info!(partitions = ?partitions(tpl), "partitions assigned"),
            Rebalance::Revoke(tpl) => tracing::info!(partitions = ?partitions(tpl), "partitions revoked"),
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance failed"),
        }
    }
}
