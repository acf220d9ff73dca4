//! Buckets and their leases: how scanners share the work.
//!
//! Occurrences are spread over [`BUCKETS`] buckets by timer id. A scanner is a member
//! while its row in `scanners` is live, renewed every heartbeat (one row write per scanner
//! and heartbeat, never per bucket or task). Each bucket has one owner among the members
//! and an epoch that grows by one at every change of owner. Every write a scanner makes for
//! a bucket is conditional, in the same statement, on its membership and on the bucket's
//! owner and epoch ([`owned_join`]); tasks record the epoch they were claimed under, and their
//! messages carry it, so the executor never runs an occurrence from a superseded epoch.
//! The migration `20261205000001_bucket_leases.sql` describes the locking.

use std::time::Duration;

use sqlx::PgExecutor;
use uuid::Uuid;

/// Occurrences are spread over this many buckets by timer id; a bucket maps to a Kafka
/// partition (bucket mod partitions) and is the unit leased among scanners. Fixed:
/// changing it would move timers between buckets. It bounds the number of scanners.
pub const BUCKETS: u16 = 1024;

/// The bucket of a timer: stable, spread evenly for random (v4) ids. The schema's
/// `punctual_bucket(uuid)` computes the same.
pub fn bucket_of(timer_id: Uuid) -> i16 {
    let b = timer_id.as_bytes();
    (u16::from_be_bytes([b[14], b[15]]) % BUCKETS) as i16
}

/// The buckets one scanner holds, each at its epoch: what its writes are conditional on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub owner: String,
    /// The epoch of every bucket, indexed by bucket; [`NO_EPOCH`] for those not held: the
    /// form statements take holdings in ([`owned_join`]).
    epochs_by_bucket: Vec<i64>,
}

/// The epoch of a bucket not held, in [`Held::epochs_by_bucket`]; real epochs start at 1.
pub const NO_EPOCH: i64 = -1;

impl Held {
    pub fn new(owner: impl Into<String>, grants: &[(i16, i64)]) -> Self {
        let mut epochs_by_bucket = vec![NO_EPOCH; BUCKETS as usize];
        for (bucket, epoch) in grants {
            if let Some(e) = epochs_by_bucket.get_mut(*bucket as usize) {
                *e = *epoch;
            }
        }
        Self { owner: owner.into(), epochs_by_bucket }
    }

    /// From the epoch of every bucket in turn ([`NO_EPOCH`] for those not held); buckets
    /// past [`BUCKETS`] are ignored, and missing ones are not held.
    pub fn from_epochs(owner: impl Into<String>, epochs: impl IntoIterator<Item = i64>) -> Self {
        let mut epochs_by_bucket: Vec<i64> = epochs.into_iter().take(BUCKETS as usize).collect();
        epochs_by_bucket.resize(BUCKETS as usize, NO_EPOCH);
        Self { owner: owner.into(), epochs_by_bucket }
    }

    /// Holding nothing.
    pub fn none(owner: impl Into<String>) -> Self {
        Self::new(owner, &[])
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn len(&self) -> usize {
        self.epochs_by_bucket.iter().filter(|e| **e != NO_EPOCH).count()
    }

    pub fn holds(&self, bucket: i16) -> bool {
        self.epochs_by_bucket.get(bucket as usize).is_some_and(|e| *e != NO_EPOCH)
    }

    /// Each bucket held, with its epoch, in the order of the buckets.
    pub fn grants(&self) -> impl Iterator<Item = (i16, i64)> + '_ {
        self.epochs_by_bucket.iter().enumerate().filter(|(_, e)| **e != NO_EPOCH).map(|(b, e)| (b as i16, *e))
    }

    /// The epoch of every bucket, indexed by bucket; [`NO_EPOCH`] for those not held.
    pub fn epochs_by_bucket(&self) -> &[i64] {
        &self.epochs_by_bucket
    }
}

/// Common table expression `me`, for statements whose first two parameters are a
/// [`Held`]'s owner and [`Held::epochs_by_bucket`]: the owner's membership row if it is a
/// live member, locked (KEY SHARE) until the transaction ends, so that no other scanner
/// can take its buckets meanwhile: taking a dead member's buckets starts by deleting its
/// row, and skips a row that is locked ([`remove_expired`]).
pub const MEMBER: &str = "me AS (SELECT id FROM scanners WHERE id = $1 AND lease_until > now() FOR KEY SHARE)";

/// A join keeping the rows whose bucket (the SQL expression `bucket`) the owner ($1)
/// holds at the epoch it believes ($2, [`Held::epochs_by_bucket`]), while it is a live
/// member ([`MEMBER`] must be in the statement); the bucket's row is `alias`. It reads
/// `buckets` by key, so it costs a key lookup or a hash probe per row, whatever the plan.
pub fn owned_join(alias: &str, bucket: &str) -> String {
    format!(
        "JOIN buckets {alias} ON {alias}.bucket = {bucket} AND {alias}.owner = $1
                             AND {alias}.epoch = ($2::bigint[])[{bucket} + 1] AND EXISTS (SELECT 1 FROM me)"
    )
}

/// Renews the membership of `owner` for `lease`; false if it was not a live member (its
/// lease expired, or it never joined): then it holds nothing and must [`join`] again.
pub async fn renew(db: impl PgExecutor<'_>, owner: &str, lease: Duration) -> Result<bool, sqlx::Error> {
    let renewed = sqlx::query!(
        "UPDATE scanners SET lease_until = now() + $2::interval, heartbeat_at = now()
          WHERE id = $1 AND lease_until > now()",
        owner,
        lease as _
    )
    .execute(db)
    .await?;
    Ok(renewed.rows_affected() == 1)
}

/// Makes `owner` a live member for `lease`, as a newcomer: the buckets it held in an
/// earlier life (a restart under the same id) must be acquired again, at new epochs.
pub async fn join(db: impl PgExecutor<'_>, owner: &str, lease: Duration) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO scanners (id, lease_until) VALUES ($1, now() + $2::interval)
         ON CONFLICT (id) DO UPDATE SET lease_until = EXCLUDED.lease_until, heartbeat_at = now(), joined_at = now()",
        owner,
        lease as _
    )
    .execute(db)
    .await?;
    Ok(())
}

/// The live members, in the order shares are handed out.
pub async fn live_members(db: impl PgExecutor<'_>) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!("SELECT id FROM scanners WHERE lease_until > now() ORDER BY id").fetch_all(db).await
}

/// Deletes the rows of members whose lease has expired, so that their buckets can be
/// taken; a member with a statement in flight (its row locked) is left for a later try.
pub async fn remove_expired(db: impl PgExecutor<'_>) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        "DELETE FROM scanners WHERE id IN (
            SELECT id FROM scanners WHERE lease_until < now() FOR UPDATE SKIP LOCKED)
         RETURNING id",
    )
    .fetch_all(db)
    .await
}

/// A bucket newly acquired, at its new epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct Grant {
    pub bucket: i16,
    pub epoch: i64,
    /// Whether another scanner held it before (a takeover), rather than no one.
    pub taken_over: bool,
}

/// Acquires up to `count` buckets for `owner` (a live member): buckets without an owner,
/// buckets of members no longer in `scanners`, and buckets that the database still gives
/// `owner` from an earlier life but that are not in `held` (what it holds now). Each
/// acquired bucket's epoch grows by one.
///
/// A bucket acquired by another member since this statement began is never taken: its
/// row is re-read when locked, but the statement's view of `scanners` is as of its start,
/// when that member may not have joined yet, and would count it as gone (seen under load:
/// a member took 255 buckets that a newcomer had acquired 90 ms before). A member joins in
/// a statement of its own before it acquires, so a member this statement cannot see
/// acquired its buckets after this statement began.
pub async fn acquire(
    db: impl PgExecutor<'_>,
    owner: &str,
    held: &[i16],
    count: usize,
) -> Result<Vec<Grant>, sqlx::Error> {
    if count == 0 {
        return Ok(Vec::new());
    }
    sqlx::query_as!(
        Grant,
        "WITH me AS (
            SELECT id FROM scanners WHERE id = $1 AND lease_until > now() FOR KEY SHARE
         ), free AS (
            SELECT b.bucket, b.owner IS NOT NULL AND b.owner <> $1 AS taken_over
              FROM buckets b
             WHERE EXISTS (SELECT 1 FROM me)
               AND (b.owner IS NULL
                    OR (b.owner = $1 AND NOT b.bucket = ANY($2))
                    OR (NOT EXISTS (SELECT 1 FROM scanners s WHERE s.id = b.owner)
                        AND b.acquired_at < statement_timestamp()))
             ORDER BY b.bucket
             LIMIT $3
             FOR UPDATE OF b SKIP LOCKED
         )
         UPDATE buckets b SET owner = $1, epoch = b.epoch + 1, acquired_at = now()
           FROM free f
          WHERE b.bucket = f.bucket
         RETURNING b.bucket, b.epoch, f.taken_over AS \"taken_over!\"",
        owner,
        held,
        count as i64
    )
    .fetch_all(db)
    .await
}

/// Gives up buckets `owner` holds at the given epochs, for others to acquire at once.
pub async fn release(db: impl PgExecutor<'_>, owner: &str, grants: &[(i16, i64)]) -> Result<u64, sqlx::Error> {
    let buckets: Vec<i16> = grants.iter().map(|g| g.0).collect();
    let epochs: Vec<i64> = grants.iter().map(|g| g.1).collect();
    let released = sqlx::query!(
        "UPDATE buckets b SET owner = NULL
           FROM UNNEST($2::smallint[], $3::bigint[]) AS h(bucket, epoch)
          WHERE b.bucket = h.bucket AND b.epoch = h.epoch AND b.owner = $1",
        owner,
        &buckets,
        &epochs
    )
    .execute(db)
    .await?;
    Ok(released.rows_affected())
}

/// Leaves the membership: every bucket of `owner` is released and its row deleted.
pub async fn leave(db: impl PgExecutor<'_>, owner: &str) -> Result<u64, sqlx::Error> {
    let released = sqlx::query!(
        "WITH gone AS (DELETE FROM scanners WHERE id = $1)
         UPDATE buckets SET owner = NULL WHERE owner = $1",
        owner
    )
    .execute(db)
    .await?;
    Ok(released.rows_affected())
}

/// Joins as `owner` and acquires up to `count` free buckets, for tools and tests that
/// write as a scanner would (a scanner's lease keeper does this step by step).
pub async fn join_and_acquire(
    db: &sqlx::PgPool,
    owner: &str,
    lease: Duration,
    count: usize,
) -> Result<Held, sqlx::Error> {
    join(db, owner, lease).await?;
    let grants = acquire(db, owner, &[], count).await?;
    let grants: Vec<(i16, i64)> = grants.iter().map(|g| (g.bucket, g.epoch)).collect();
    Ok(Held::new(owner, &grants))
}

/// How many buckets the member at `rank` (in [`live_members`] order) of `members` should
/// hold: an even share, the first ones taking one more each while some remain.
pub fn fair_share(members: usize, rank: usize) -> usize {
    if members == 0 || rank >= members {
        return 0;
    }
    let buckets = BUCKETS as usize;
    buckets / members + usize::from(rank < buckets % members)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_in_range_and_stable() {
        for _ in 0..1000 {
            let id = Uuid::new_v4();
            let b = bucket_of(id);
            assert!((0..BUCKETS as i16).contains(&b));
            assert_eq!(b, bucket_of(id));
        }
    }

    #[test]
    fn fair_shares_cover_every_bucket_once() {
        for members in 1..=40 {
            let total: usize = (0..members).map(|rank| fair_share(members, rank)).sum();
            assert_eq!(total, BUCKETS as usize, "{members} members");
            let shares: Vec<usize> = (0..members).map(|rank| fair_share(members, rank)).collect();
            assert!(shares.iter().max().unwrap() - shares.iter().min().unwrap() <= 1);
        }
        assert_eq!(fair_share(3, 3), 0);
        assert_eq!(fair_share(0, 0), 0);
    }
}
