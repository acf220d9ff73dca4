//! The write-back: outcomes written in batches, dead letters first, then the offsets of their
//! messages stored.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use punctual_shared::task::{self, DeadLetter, DeferReason, Next, Outcome};
use sqlx::PgPool;
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio_util::sync::CancellationToken;

use crate::consumer::{store_done_through, Position};
use crate::dead_letters::DeadLetters;
use crate::in_flight::InFlight;
use crate::metrics::Metrics;
use crate::offsets::OffsetTracker;
use crate::TaskConsumer;

/// A finished run on its way to the status write-back.
pub(crate) struct Finished {
    pub(crate) outcome: Outcome,
    pub(crate) dead_letter: Option<DeadLetter>,
    pub(crate) position: Position,
    pub(crate) _permit: OwnedSemaphorePermit,
}

/// Most outcomes written by one statement.
pub(crate) const OUTCOME_BATCH: usize = 1_000;

/// How long the write-back waits for more outcomes before writing what it has, when it has
/// fewer than [`OUTCOME_GATHER_ENOUGH`]. Each statement is a commit: at low rates, the
/// longer the wait, the fewer (docs/BENCHMARKS.md, "Levers for a cheaper fire"). The wait
/// delays only the outcome's row and its message's offset, not the call.
pub(crate) const OUTCOME_GATHER: Duration = Duration::from_millis(50);

pub(crate) const OUTCOME_GATHER_ENOUGH: usize = 64;

/// What the write-back needs.
pub(crate) struct WriteBack {
    pub(crate) pool: PgPool,
    pub(crate) dead_letters: DeadLetters,
    pub(crate) consumer: Arc<TaskConsumer>,
    pub(crate) topic: String,
    pub(crate) offsets: Arc<Mutex<OffsetTracker>>,
    pub(crate) in_flight: Arc<InFlight>,
    pub(crate) metrics: Arc<Metrics>,
}

/// Writes outcomes in batches (dead letters first), then stores the offsets of their
/// messages; gives up what is unwritten when `abandon` is cancelled.
pub(crate) async fn write_back(
    write_back: WriteBack,
    mut finished_rx: mpsc::UnboundedReceiver<Finished>,
    abandon: CancellationToken,
) {
    let WriteBack { pool, dead_letters, consumer, topic, offsets, in_flight, metrics } = write_back;
    let mut batch = Vec::with_capacity(OUTCOME_BATCH);
    while finished_rx.recv_many(&mut batch, OUTCOME_BATCH).await > 0 {
        // Calls run at their due times, so at low rates their outcomes come one by one:
        // gathering some milliseconds' worth makes one statement and one commit of many.
        // Under load the outcomes that came during the last write are a batch already, and
        // waiting for more only holds their slots longer (gathering up to 1,000 every time,
        // three runs of three at 12,000 offered fell to 6,460-7,831 fires/s; with this
        // limit, one run of five did).
        let gathered_by = tokio::time::Instant::now() + OUTCOME_GATHER;
        while batch.len() < OUTCOME_GATHER_ENOUGH {
            let room = OUTCOME_BATCH - batch.len();
            match tokio::time::timeout_at(gathered_by, finished_rx.recv_many(&mut batch, room)).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let outcomes: Vec<Outcome> = batch.iter().map(|f| f.outcome.clone()).collect();
        let letters: Vec<&DeadLetter> = batch.iter().filter_map(|f| f.dead_letter.as_ref()).collect();
        // Keep trying until the stop's time is up: the offsets wait for the write, so a
        // crash or an abandoned write means a redelivery, never a lost outcome.
        metrics.writeback_batch_size.observe(outcomes.len() as f64);
        let writing = metrics.writeback_duration.start_timer();
        let written = abandon.run_until_cancelled(async {
            let mut delay = Duration::from_millis(100);
            while let Err(e) = dead_letters.publish(&letters).await {
                tracing::warn!(error = %e, "publishing dead letters failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            while let Err(e) = task::finish(&pool, &outcomes).await {
                metrics.db_errors.inc();
                tracing::warn!(error = %e, count = outcomes.len(), "writing outcomes failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        });
        let written = written.await;
        writing.observe_duration();
        if written.is_none() {
            tracing::warn!(count = outcomes.len(), "outcomes abandoned unwritten at the stop; their tasks run again");
            return;
        }
        // One offset stored per partition and batch, the furthest: each store builds a
        // partition list and hands it to librdkafka, and only the last one counts.
        let mut done_through: Vec<(i32, i64)> = Vec::new();
        let (mut succeeded, mut retried, mut dead, mut paused) = (0, 0, 0, 0);
        let mut deferred = [0; DeferReason::ALL.len()];
        {
            let mut offsets = offsets
                .lock()
                .expect("offsets lock poisoned: a tracker left half-changed could commit past unfinished messages");
            for f in batch.drain(..) {
                match f.outcome.next {
                    Next::Succeeded => succeeded += 1,
                    Next::Retry { .. } => retried += 1,
                    Next::Dead => dead += 1,
                    Next::Cancelled => paused += 1,
                    Next::Defer { reason, .. } => deferred[reason as usize] += 1,
                }
                if let Some(offset) = offsets.completed(f.position.partition, f.position.offset) {
                    match done_through.iter_mut().find(|(p, _)| *p == f.position.partition) {
                        Some(stored) => stored.1 = stored.1.max(offset),
                        None => done_through.push((f.position.partition, offset)),
                    }
                }
            }
        }
        for (partition, offset) in done_through {
            store_done_through(&consumer, &topic, partition, offset);
        }
        in_flight.remove_all(outcomes.iter().map(|o| o.task_id));
        for (label, count) in [("succeeded", succeeded), ("retry", retried), ("dead", dead)] {
            if count > 0 {
                metrics.executed.with_label_values(&[label]).inc_by(count);
            }
        }
        if paused > 0 {
            metrics.skipped.with_label_values(&["target_paused"]).inc_by(paused);
        }
        for (reason, count) in DeferReason::ALL.into_iter().zip(deferred) {
            if count > 0 {
                metrics.deferred.with_label_values(&[reason.as_str()]).inc_by(count);
            }
        }
    }
}
