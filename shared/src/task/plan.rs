//! Planning: occurrences inserted, pending or claimed at once within the lookahead.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

use super::claim::ClaimedTask;
use crate::bucket::{owned_join, Held, MEMBER};
use crate::fan_out::Shard;

/// An occurrence to insert.
#[derive(Debug, Clone)]
pub struct PlannedTask {
    pub timer_id: Uuid,
    pub scheduled_at: DateTime<Utc>,
    pub timer_version: i64,
    /// Which call of the occurrence ([`Shard::WHOLE`] unless fanned out).
    pub shard: Shard,
}

impl PlannedTask {
    /// The task of each shard of an occurrence with `shards` of them.
    pub fn shards_of(
        timer_id: Uuid,
        scheduled_at: DateTime<Utc>,
        timer_version: i64,
        shards: i16,
    ) -> impl Iterator<Item = PlannedTask> {
        Shard::all(shards).map(move |shard| PlannedTask { timer_id, scheduled_at, timer_version, shard })
    }
}

/// Which of the occurrences a plan writes are written claimed, and by whom: a scanner
/// that plans occurrences due within its lookahead claims them in the same write, rather
/// than inserting them pending and claiming them with a second write moments later. Only
/// the occurrences of buckets it still holds (the statement checks) are written claimed.
#[derive(Debug, Clone)]
pub struct PlanClaim<'a> {
    pub held: &'a Held,
    /// Occurrences due before this are written claimed.
    pub due_before: DateTime<Utc>,
    /// Past each occurrence's due time, as in [`claim`].
    pub lease: Duration,
}

/// What [`plan`] wrote.
#[derive(Debug, Default)]
pub struct Planned {
    /// Rows inserted or re-planned.
    pub written: u64,
    /// Those written claimed, for the claimer to hold and publish.
    pub claimed: Vec<ClaimedTask>,
}

/// A row written by [`plan`].
#[derive(sqlx::FromRow)]
struct PlannedRow {
    id: i64,
    timer_id: Uuid,
    scheduled_at: DateTime<Utc>,
    due_at: DateTime<Utc>,
    bucket: i16,
    shard: i16,
    shards: i16,
    attempt: i32,
    lease_until: Option<DateTime<Utc>>,
    epoch: Option<i64>,
}

/// Inserts occurrences; an occurrence that exists already is left alone, unless it was
/// planned from an older version of its timer and has not started, in which case it is
/// re-planned from the new version (if a scanner holds its claim, it keeps it). With
/// `claim`, those due before `claim.due_before` are written claimed by `claim.held`'s
/// owner, at their buckets' epochs (one write instead of an insert and a claim).
pub async fn plan(
    db: impl PgExecutor<'_>,
    tasks: &[PlannedTask],
    claim: Option<&PlanClaim<'_>>,
) -> Result<Planned, sqlx::Error> {
    if tasks.is_empty() {
        return Ok(Planned::default());
    }
    let timer_ids: Vec<Uuid> = tasks.iter().map(|t| t.timer_id).collect();
    let scheduled: Vec<DateTime<Utc>> = tasks.iter().map(|t| t.scheduled_at).collect();
    let versions: Vec<i64> = tasks.iter().map(|t| t.timer_version).collect();
    let buckets: Vec<i16> = tasks.iter().map(|t| t.shard.bucket(t.timer_id)).collect();
    let shard_index: Vec<i16> = tasks.iter().map(|t| t.shard.index).collect();
    let shards: Vec<i16> = tasks.iter().map(|t| t.shard.total).collect();
    let nobody = Held::none("");
    let held = claim.map_or(&nobody, |c| c.held);
    // With no claim, `owned` is empty and `s < NULL` never true: every row is written
    // pending. A row comes back with its lease only if this statement claimed it (`now()`
    // is the transaction's start, so `claimed_at = now()` tells this claim from an earlier
    // one). A re-planned occurrence whose claim is still held stays with its holder, which
    // publishes it once, and runs from the new version; giving it a second claim would
    // have two scanners publish it, and both messages would run.
    let still_held = "tasks.status = 'claimed' AND tasks.lease_until > now()";
    let keep_if_held = |col: &str| format!("{col} = CASE WHEN {still_held} THEN tasks.{col} ELSE EXCLUDED.{col} END");
    let keep: Vec<String> = ["status", "attempt", "due_at", "claim_owner", "claim_epoch", "claimed_at", "lease_until"]
        .map(keep_if_held)
        .into();
    let rows: Vec<PlannedRow> = sqlx::query_as(&format!(
        "WITH {MEMBER}
         INSERT INTO tasks (timer_id, scheduled_at, due_at, timer_version, bucket, shard, shards,
                            status, claim_owner, claim_epoch, claimed_at, lease_until)
         SELECT t, s, s, v, b, i, n,
                CASE WHEN c THEN 'claimed' ELSE 'pending' END,
                CASE WHEN c THEN $1 END,
                CASE WHEN c THEN epoch END,
                CASE WHEN c THEN now() END,
                CASE WHEN c THEN GREATEST(s, now()) + $8::interval END
           FROM (SELECT u.*, ob.epoch, s < $7 AND ob.epoch IS NOT NULL AS c
                   FROM UNNEST($3::uuid[], $4::timestamptz[], $5::bigint[], $6::smallint[], $9::smallint[],
                               $10::smallint[]) AS u(t, s, v, b, i, n)
                   LEFT {}) AS x
         ON CONFLICT (timer_id, scheduled_at, shard) DO UPDATE
            SET timer_version = EXCLUDED.timer_version, shards = EXCLUDED.shards, address = NULL, {}, error = NULL,
                finished_at = NULL
          WHERE tasks.timer_version < EXCLUDED.timer_version
            AND tasks.status IN ('pending', 'claimed', 'cancelled')
         RETURNING id, timer_id, scheduled_at, due_at, bucket, shard, shards, attempt,
                   CASE WHEN status = 'claimed' AND claim_owner = $1 AND claimed_at = now() THEN lease_until END
                     AS lease_until,
                   claim_epoch AS epoch",
        owned_join("ob", "u.b"),
        keep.join(", ")
    ))
    .bind(&held.owner)
    .bind(held.epochs_by_bucket())
    .bind(&timer_ids)
    .bind(&scheduled)
    .bind(&versions)
    .bind(&buckets)
    .bind(claim.map(|c| c.due_before))
    .bind(claim.map_or(Duration::ZERO, |c| c.lease))
    .bind(&shard_index)
    .bind(&shards)
    .fetch_all(db)
    .await?;
    let written = rows.len() as u64;
    let claimed = rows
        .into_iter()
        .filter_map(|r| {
            Some(ClaimedTask {
                lease_until: r.lease_until?,
                epoch: r.epoch?,
                id: r.id,
                timer_id: r.timer_id,
                scheduled_at: r.scheduled_at,
                due_at: r.due_at,
                bucket: r.bucket,
                shard: Shard { index: r.shard, total: r.shards },
                attempt: r.attempt,
                reclaimed: false,
            })
        })
        .collect();
    Ok(Planned { written, claimed })
}
