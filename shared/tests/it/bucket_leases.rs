//! Bucket leases and epoch fencing against a real Postgres.

use std::time::Duration;

use chrono::Utc;
use punctual_shared::bucket::{self, Held, BUCKETS};
use punctual_shared::task::{self, PlannedTask, StartRequest};
use punctual_testkit::TestDb;
use uuid::Uuid;

const LONG: Duration = Duration::from_secs(3600);

async fn owners(db: &TestDb) -> Vec<(Option<String>, i64)> {
    sqlx::query_as("SELECT owner, count(*) FROM buckets GROUP BY owner ORDER BY owner NULLS FIRST")
        .fetch_all(&db.pool)
        .await
        .unwrap()
}

async fn timer(db: &TestDb) -> Uuid {
    sqlx::query_scalar(
        "INSERT INTO timers (name, schedule_kind, cron_expr, http_url, plan_status)
         VALUES ('t', 'cron', '* * * * * *', 'http://127.0.0.1:9/x', 'planned') RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn members_share_the_buckets_and_no_bucket_has_two_owners() {
    let db = TestDb::create().await;
    let a = bucket::join_and_acquire(&db.pool, "a", LONG, BUCKETS as usize).await.unwrap();
    assert_eq!(a.len(), 1024, "one member alone holds every bucket");
    assert!(a.grants().all(|(_, e)| e == 1));
    // b joins: nothing is free until a hands over its extra share.
    let b = bucket::join_and_acquire(&db.pool, "b", LONG, 512).await.unwrap();
    assert!(b.is_empty(), "a live member's buckets are not taken");
    let members = bucket::live_members(&db.pool).await.unwrap();
    assert_eq!(members, ["a", "b"]);
    let share = bucket::fair_share(members.len(), 0);
    let extra: Vec<(i16, i64)> = a.grants().skip(share).collect();
    assert_eq!(bucket::release(&db.pool, "a", &extra).await.unwrap(), 512);
    let b = bucket::acquire(&db.pool, "b", &[], 600).await.unwrap();
    assert_eq!(b.len(), 512, "b takes what a handed over, and no more");
    assert!(b.iter().all(|g| g.epoch == 2 && !g.taken_over), "handed over, not taken: {:?}", b[0]);
    assert_eq!(owners(&db).await, [(Some("a".into()), 512), (Some("b".into()), 512)]);
    // A release at a superseded epoch changes nothing.
    assert_eq!(bucket::release(&db.pool, "a", &extra).await.unwrap(), 0);
    assert_eq!(bucket::leave(&db.pool, "b").await.unwrap(), 512);
    assert_eq!(owners(&db).await, [(None, 512), (Some("a".into()), 512)]);
}

/// A scanner whose lease expires (dead or frozen) loses its buckets to another at a new
/// epoch. Its claims are claimed again at once, it can write nothing more for them, and its
/// messages, should it still send them, run nothing.
#[tokio::test]
async fn a_lapsed_owner_is_fenced_by_the_epoch_and_its_claims_move_at_once() {
    let db = TestDb::create().await;
    let t = timer(&db).await;
    let old = bucket::join_and_acquire(&db.pool, "old", Duration::from_secs(3), BUCKETS as usize).await.unwrap();
    let planned: Vec<PlannedTask> = (1..=5)
        .map(|i| PlannedTask {
            timer_id: t,
            scheduled_at: Utc::now() + chrono::Duration::seconds(i),
            timer_version: 1,
            shard: punctual_shared::fan_out::Shard::WHOLE,
        })
        .collect();
    let claim = task::PlanClaim {
        held: &old,
        due_before: Utc::now() + chrono::Duration::seconds(20),
        lease: Duration::from_secs(30),
    };
    let claimed = task::plan(&db.pool, &planned, Some(&claim)).await.unwrap().claimed;
    assert_eq!(claimed.len(), 5);
    let stale: Vec<StartRequest> =
        claimed.iter().map(|c| StartRequest { task_id: c.id, attempt: c.attempt, epoch: c.epoch }).collect();

    // Still live: nobody else can take the buckets.
    bucket::join(&db.pool, "new", LONG).await.unwrap();
    assert!(bucket::remove_expired(&db.pool).await.unwrap().is_empty());
    assert!(bucket::acquire(&db.pool, "new", &[], 1024).await.unwrap().is_empty());

    tokio::time::sleep(Duration::from_millis(3_100)).await;
    assert_eq!(bucket::remove_expired(&db.pool).await.unwrap(), ["old"]);
    let grants = bucket::acquire(&db.pool, "new", &[], 1024).await.unwrap();
    assert_eq!(grants.len(), 1024);
    assert!(grants.iter().all(|g| g.taken_over && g.epoch == 2));
    let new = Held::new("new", &grants.iter().map(|g| (g.bucket, g.epoch)).collect::<Vec<_>>());
    let reclaimed = task::reclaim_taken(&db.pool, &new, Duration::from_secs(30)).await.unwrap();
    assert_eq!(reclaimed.len(), 5, "claimed again at once, not when their 30 s leases expire");
    assert!(reclaimed.iter().all(|c| c.epoch == 2 && c.reclaimed));

    // The old owner writes nothing more: no claim, no plan claimed, no misfire sweep.
    sqlx::query("UPDATE tasks SET status = 'pending', claim_owner = NULL, lease_until = NULL WHERE id = $1")
        .bind(claimed[0].id)
        .execute(&db.pool)
        .await
        .unwrap();
    assert!(task::claim(&db.pool, &old, Duration::from_secs(20), Duration::from_secs(30), 100)
        .await
        .unwrap()
        .is_empty());
    let more = [PlannedTask {
        timer_id: t,
        scheduled_at: Utc::now() + chrono::Duration::seconds(9),
        timer_version: 1,
        shard: punctual_shared::fan_out::Shard::WHOLE,
    }];
    let planned = task::plan(&db.pool, &more, Some(&claim)).await.unwrap();
    assert_eq!((planned.written, planned.claimed.len()), (1, 0), "written pending, not claimed by the old owner");
    // Nor does joining again give it anything back: it must acquire, at a new epoch.
    bucket::join(&db.pool, "old", LONG).await.unwrap();
    assert!(task::claim(&db.pool, &old, Duration::from_secs(20), Duration::from_secs(30), 100)
        .await
        .unwrap()
        .is_empty());

    // Its messages run nothing; the new owner's run once.
    let actions = task::ActionCache::default();
    let from_stale = task::start(&db.pool, "exec-1", &stale[1..], &actions).await.unwrap();
    assert!(from_stale.tasks.is_empty(), "stale epoch ran");
    assert_eq!(from_stale.not_started.duplicate, stale[1..].len() as u64, "counted as delivered before");
    assert!(task::start_marked(&db.pool, "exec-1", &stale[1..]).await.unwrap().tasks.is_empty(), "stale epoch ran");
    let current: Vec<StartRequest> = reclaimed
        .iter()
        .filter(|c| c.id != claimed[0].id)
        .map(|c| StartRequest { task_id: c.id, attempt: c.attempt, epoch: c.epoch })
        .collect();
    assert_eq!(task::start(&db.pool, "exec-1", &current, &actions).await.unwrap().tasks.len(), 4);
}

/// Taking a dead member's buckets starts by deleting its row, which waits for (skips) a
/// member with a statement in flight: its writes are committed before anyone takes over.
#[tokio::test]
async fn a_member_with_a_statement_in_flight_is_not_removed() {
    let db = TestDb::create().await;
    let old = bucket::join_and_acquire(&db.pool, "old", Duration::from_secs(2), 4).await.unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    // A claim inside an open transaction holds the member's row (KEY SHARE).
    task::claim(&mut *tx, &old, Duration::from_secs(5), Duration::from_secs(30), 10).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    assert!(bucket::remove_expired(&db.pool).await.unwrap().is_empty(), "removed while writing");
    tx.commit().await.unwrap();
    assert_eq!(bucket::remove_expired(&db.pool).await.unwrap(), ["old"]);
}

/// Claims taken over late are judged by their timers' misfire policies before they are
/// claimed again, as the claims of an expired lease are: a former owner's claim that is
/// minutes late does not run for a `skip` timer, however long its lease still was.
#[tokio::test]
async fn claims_taken_over_late_go_by_their_misfire_policies() {
    let db = TestDb::create().await;
    let skip = timer(&db).await;
    sqlx::query("UPDATE timers SET misfire_policy = 'skip', name = 'skip' WHERE id = $1")
        .bind(skip)
        .execute(&db.pool)
        .await
        .unwrap();
    let fire_all = timer(&db).await;
    sqlx::query("UPDATE timers SET misfire_policy = 'fire_all' WHERE id = $1")
        .bind(fire_all)
        .execute(&db.pool)
        .await
        .unwrap();
    let old = bucket::join_and_acquire(&db.pool, "old", Duration::from_secs(1), BUCKETS as usize).await.unwrap();
    let late = Utc::now() - chrono::Duration::minutes(2);
    let planned: Vec<PlannedTask> = [skip, fire_all]
        .iter()
        .map(|t| PlannedTask {
            timer_id: *t,
            scheduled_at: late,
            timer_version: 1,
            shard: punctual_shared::fan_out::Shard::WHOLE,
        })
        .collect();
    // Claimed with a lease far longer than the takeover takes.
    let claim = task::PlanClaim { held: &old, due_before: Utc::now(), lease: LONG };
    assert_eq!(task::plan(&db.pool, &planned, Some(&claim)).await.unwrap().claimed.len(), 2);

    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(bucket::remove_expired(&db.pool).await.unwrap(), ["old"]);
    bucket::join(&db.pool, "new", LONG).await.unwrap();
    let grants = bucket::acquire(&db.pool, "new", &[], 1024).await.unwrap();
    let new = Held::new("new", &grants.iter().map(|g| (g.bucket, g.epoch)).collect::<Vec<_>>());
    // The regular sweep leaves a claim whose lease stands alone ...
    let swept = task::cancel_misfired(&db.pool, &new, Duration::from_secs(60)).await.unwrap();
    assert_eq!(swept.total(), 0);
    // ... the takeover's does not.
    let misfired = task::cancel_misfired_taken(&db.pool, &new, Duration::from_secs(60)).await.unwrap();
    assert_eq!((misfired.skip, misfired.fire_all), (1, 0));
    let reclaimed = task::reclaim_taken(&db.pool, &new, Duration::from_secs(30)).await.unwrap();
    assert_eq!(reclaimed.iter().map(|c| c.timer_id).collect::<Vec<_>>(), [fire_all]);
}
