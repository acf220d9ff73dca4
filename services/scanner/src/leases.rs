//! The scanner's bucket leases: which buckets it holds, kept in step with the database.
//!
//! Every heartbeat the lease keeper renews this scanner's membership, works out its fair
//! share from the live members, hands extra buckets back and acquires missing ones (those
//! of no one, or of a member whose lease expired). Buckets it acquires from another owner
//! have their claimed tasks claimed again at the new epoch at once, so a dead or frozen
//! scanner's work moves within a lease period rather than waiting for each task's claim
//! to expire. When it stops gracefully it hands every bucket back.
//!
//! [`Ownership`] is what the rest of the scanner sees: the held buckets and their epochs,
//! and a deadline by the scanner's own monotonic clock (the renewal's send time plus the
//! lease, never later than the database's expiry), past which it holds nothing. The
//! publisher drops a task whose bucket it no longer holds at the task's epoch.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use punctual_shared::bucket::{self, Held, BUCKETS, NO_EPOCH};
use punctual_shared::task::{self, ClaimedTask};
use sqlx::PgPool;
use tokio::sync::{mpsc, RwLock, RwLockReadGuard};
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// The buckets this scanner holds, as far as it knows.
pub struct Ownership {
    owner: String,
    epochs: Vec<AtomicI64>,
    origin: Instant,
    /// Nanoseconds after `origin` until which the holdings are surely this scanner's.
    valid_until_ns: AtomicU64,
    /// Read by every pass that writes for the held buckets, written while buckets are
    /// handed back: a bucket is released only when no statement that may still write for
    /// it is in flight.
    writes: RwLock<()>,
}

impl Ownership {
    pub fn new(owner: String) -> Self {
        Self {
            owner,
            epochs: (0..BUCKETS).map(|_| AtomicI64::new(NO_EPOCH)).collect(),
            origin: Instant::now(),
            valid_until_ns: AtomicU64::new(0),
            writes: RwLock::new(()),
        }
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    fn valid(&self) -> bool {
        (self.origin.elapsed().as_nanos() as u64) < self.valid_until_ns.load(Ordering::Acquire)
    }

    /// Whether `bucket` is held at `epoch` now.
    pub fn holds(&self, bucket: i16, epoch: i64) -> bool {
        let held = self.epochs.get(bucket as usize).is_some_and(|e| e.load(Ordering::Acquire) == epoch);
        held && self.valid()
    }

    /// Whether `bucket` is held now, at whatever epoch.
    pub fn holds_bucket(&self, bucket: i16) -> bool {
        let held = self.epochs.get(bucket as usize).is_some_and(|e| e.load(Ordering::Acquire) != NO_EPOCH);
        held && self.valid()
    }

    /// Whether this scanner's membership is live, by its own clock.
    pub fn is_member(&self) -> bool {
        self.valid()
    }

    /// The buckets held at their epochs, and a guard to hold while writing for them.
    pub async fn for_writing(&self) -> (RwLockReadGuard<'_, ()>, Held) {
        let guard = self.writes.read().await;
        (guard, self.held())
    }

    /// The buckets held now, at their epochs (none once the lease has run out).
    pub fn held(&self) -> Held {
        if !self.valid() {
            return Held::none(self.owner.clone());
        }
        Held::from_epochs(self.owner.clone(), self.epochs.iter().map(|e| e.load(Ordering::Acquire)))
    }

    /// Every bucket this scanner thinks it holds, valid or not.
    fn grants(&self) -> Vec<(i16, i64)> {
        self.epochs
            .iter()
            .enumerate()
            .filter_map(|(b, e)| {
                let epoch = e.load(Ordering::Acquire);
                (epoch != NO_EPOCH).then_some((b as i16, epoch))
            })
            .collect()
    }

    fn grant(&self, grants: &[bucket::Grant]) {
        for g in grants {
            self.epochs[g.bucket as usize].store(g.epoch, Ordering::Release);
        }
    }

    fn revoke(&self, buckets: &[(i16, i64)]) {
        for (b, _) in buckets {
            self.epochs[*b as usize].store(NO_EPOCH, Ordering::Release);
        }
    }

    fn revoke_all(&self) {
        for e in &self.epochs {
            e.store(NO_EPOCH, Ordering::Release);
        }
    }

    fn extend_until(&self, deadline: Instant) {
        let ns = deadline.saturating_duration_since(self.origin).as_nanos() as u64;
        self.valid_until_ns.store(ns, Ordering::Release);
    }
}

/// What the lease keeper needs.
pub struct LeaseKeeper {
    pub pool: PgPool,
    pub ownership: Arc<Ownership>,
    /// How long a membership lasts unless renewed (`PUNCTUAL_BUCKET_LEASE_MS`).
    pub lease: Duration,
    /// How often it is renewed (`PUNCTUAL_BUCKET_HEARTBEAT_MS`).
    pub heartbeat: Duration,
    /// The task claim lease, for the tasks claimed again on takeover.
    pub claim_lease: Duration,
    /// How late a task claimed again on takeover may be before its misfire policy applies.
    pub misfire_threshold: Duration,
    pub metrics: Metrics,
    /// Tasks claimed again on takeover go to the wheel driver.
    pub claimed_tx: mpsc::Sender<Vec<ClaimedTask>>,
    /// Buckets acquired wake the scan loop: their timers and due tasks are its to plan and
    /// claim now.
    pub wakes: Arc<crate::pace::Wakes>,
}

/// How long a graceful hand-over may take before the scanner exits anyway (its buckets
/// then move when its lease expires).
const LEAVE_TIMEOUT: Duration = Duration::from_secs(2);

impl LeaseKeeper {
    /// Keeps the leases until `token` is cancelled, then hands every bucket back.
    pub async fn run(self, token: CancellationToken) {
        let mut tick = tokio::time::interval(self.heartbeat);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // Buckets acquired whose tasks are still to be claimed again (a failed statement
        // is tried again at the next heartbeat).
        let mut to_reclaim: Vec<(i16, i64)> = Vec::new();
        loop {
            tokio::select! {
                _ = token.cancelled() => break,
                _ = tick.tick() => {}
            }
            let kept = tokio::select! {
                _ = token.cancelled() => break,
                kept = self.keep(&mut to_reclaim) => kept,
            };
            if let Err(e) = kept {
                self.metrics.lease_errors.inc();
                tracing::warn!(error = %e, "keeping bucket leases failed; will retry");
            }
            self.metrics.buckets_held.set(self.ownership.held().len() as i64);
        }
        let _writes = self.ownership.writes.write().await;
        self.ownership.revoke_all();
        self.metrics.buckets_held.set(0);
        match tokio::time::timeout(LEAVE_TIMEOUT, bucket::leave(&self.pool, self.ownership.owner())).await {
            Ok(Ok(released)) => tracing::info!(released, "handed every bucket back"),
            Ok(Err(e)) => tracing::warn!(error = %e, "handing buckets back failed; they move when the lease expires"),
            Err(_) => tracing::warn!("handing buckets back timed out; they move when the lease expires"),
        }
    }

    /// One heartbeat: renew, then move towards the fair share.
    async fn keep(&self, to_reclaim: &mut Vec<(i16, i64)>) -> Result<(), sqlx::Error> {
        let owner = self.ownership.owner();
        let sent = Instant::now();
        if !bucket::renew(&self.pool, owner, self.lease).await? {
            // Not a live member (first heartbeat, or the lease ran out): whatever it held may
            // be someone else's now.
            let lost = self.ownership.grants();
            if !lost.is_empty() {
                let _writes = self.ownership.writes.write().await;
                self.ownership.revoke_all();
                tracing::warn!(buckets = lost.len(), "lease expired: buckets dropped, to be acquired again");
            }
            to_reclaim.clear();
            bucket::join(&self.pool, owner, self.lease).await?;
        }
        self.ownership.extend_until(sent + self.lease);

        let members = bucket::live_members(&self.pool).await?;
        let share = members.iter().position(|m| m == owner).map_or(0, |rank| bucket::fair_share(members.len(), rank));
        let mut grants = self.ownership.grants();
        if grants.len() > share {
            // The highest first: the others keep theirs, so most buckets stay put.
            let extra = grants.split_off(share);
            let _writes = self.ownership.writes.write().await;
            self.ownership.revoke(&extra);
            to_reclaim.retain(|g| !extra.contains(g));
            let released = bucket::release(&self.pool, owner, &extra).await?;
            self.metrics.buckets_released.inc_by(released);
            tracing::info!(released, share, members = members.len(), "handed buckets over to newer members");
        } else if grants.len() < share {
            let expired = bucket::remove_expired(&self.pool).await?;
            if !expired.is_empty() {
                tracing::warn!(members = ?expired, "scanners whose lease expired removed: their buckets are free");
            }
            let held: Vec<i16> = grants.iter().map(|g| g.0).collect();
            let acquired = bucket::acquire(&self.pool, owner, &held, share - grants.len()).await?;
            if !acquired.is_empty() {
                self.ownership.grant(&acquired);
                let taken_over = acquired.iter().filter(|g| g.taken_over).count();
                self.metrics.bucket_takeovers.inc_by(taken_over as u64);
                tracing::info!(acquired = acquired.len(), taken_over, share, "buckets acquired");
                to_reclaim.extend(acquired.iter().map(|g| (g.bucket, g.epoch)));
                self.wakes.now.notify_one();
            }
        }
        if !to_reclaim.is_empty() {
            let (_writes, _) = self.ownership.for_writing().await;
            let acquired = Held::new(owner, to_reclaim);
            // The former owner's claims that are late past the threshold go by their
            // timers' misfire policies first, as the claims of an expired lease would.
            let misfired = task::cancel_misfired_taken(&self.pool, &acquired, self.misfire_threshold).await?;
            crate::count_misfired(&self.metrics, &misfired);
            let claimed = task::reclaim_taken(&self.pool, &acquired, self.claim_lease).await?;
            to_reclaim.clear();
            if !claimed.is_empty() {
                self.metrics.reclaimed.inc_by(claimed.len() as u64);
                tracing::info!(count = claimed.len(), "tasks of acquired buckets claimed again at the new epochs");
                let _ = self.claimed_tx.send(claimed).await;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holdings_count_only_while_the_lease_lasts() {
        let ownership = Ownership::new("s".into());
        ownership.grant(&[bucket::Grant { bucket: 5, epoch: 3, taken_over: false }]);
        assert!(!ownership.holds(5, 3), "no lease yet");
        ownership.extend_until(Instant::now() + Duration::from_secs(60));
        assert!(ownership.holds(5, 3));
        assert!(!ownership.holds(5, 2), "another epoch");
        assert!(!ownership.holds(6, 3), "another bucket");
        assert_eq!(ownership.held(), Held::new("s", &[(5, 3)]));
        ownership.extend_until(Instant::now());
        assert!(!ownership.holds(5, 3), "the lease ran out");
        assert!(ownership.held().is_empty());
        ownership.extend_until(Instant::now() + Duration::from_secs(60));
        ownership.revoke(&[(5, 3)]);
        assert!(!ownership.holds(5, 3));
    }
}
