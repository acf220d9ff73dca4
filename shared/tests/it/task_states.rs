//! The task state machine against a real Postgres: each transition applies once, and only
//! from the states it names.

use std::time::Duration;

use chrono::Utc;
use punctual_shared::task::{self, Next, Outcome, PlannedTask};
use punctual_testkit::TestDb;
use uuid::Uuid;

async fn timer(db: &TestDb) -> Uuid {
    sqlx::query_scalar(
        "INSERT INTO timers (name, schedule_kind, cron_expr, http_url, plan_status)
         VALUES ($1, 'cron', '* * * * * *', 'http://127.0.0.1:9/x', 'planned') RETURNING id",
    )
    .bind(Uuid::new_v4().to_string())
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

async fn row(db: &TestDb, id: i64) -> (String, i32) {
    sqlx::query_as("SELECT status, attempt FROM tasks WHERE id = $1").bind(id).fetch_one(&db.pool).await.unwrap()
}

async fn claimed_tasks(db: &TestDb, timer_id: Uuid, n: i64) -> Vec<i64> {
    let planned: Vec<PlannedTask> = (0..n)
        .map(|i| PlannedTask {
            timer_id,
            scheduled_at: Utc::now() + chrono::Duration::milliseconds(i),
            timer_version: 1,
            shard: punctual_shared::fan_out::Shard::WHOLE,
        })
        .collect();
    task::plan(&db.pool, &planned, None).await.unwrap();
    let held = db.hold_buckets("owner").await;
    let claimed = task::claim(&db.pool, &held, Duration::from_secs(5), Duration::from_secs(30), 1000).await.unwrap();
    claimed.into_iter().filter(|t| t.timer_id == timer_id).map(|t| t.id).collect()
}

/// Start requests for the first attempts of `ids`, as their messages would carry them.
async fn first_attempts(db: &TestDb, ids: &[i64]) -> Vec<task::StartRequest> {
    let attempts: Vec<(i64, i32)> = ids.iter().map(|id| (*id, 1)).collect();
    requests(db, &attempts).await
}

/// Start requests for `(task id, attempt)`s, at the epochs their tasks are claimed at.
async fn requests(db: &TestDb, attempts: &[(i64, i32)]) -> Vec<task::StartRequest> {
    let mut requests = Vec::new();
    for (id, attempt) in attempts {
        let epoch: Option<i64> = sqlx::query_scalar("SELECT claim_epoch FROM tasks WHERE id = $1")
            .bind(id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
        requests.push(task::StartRequest { task_id: *id, attempt: *attempt, epoch: epoch.unwrap_or(0) });
    }
    requests
}

/// One task of a timer of its own, claimed and started by `exec-1` as attempt 1.
async fn started_task(db: &TestDb) -> i64 {
    let t = timer(db).await;
    let id = claimed_tasks(db, t, 1).await[0];
    task::start(&db.pool, "exec-1", &requests(db, &[(id, 1)]).await, &task::ActionCache::default()).await.unwrap();
    id
}

fn outcome(id: i64, attempt: i32, next: Next) -> Outcome {
    Outcome {
        task_id: id,
        attempt,
        started_at: Utc::now(),
        next,
        http_status: Some(503),
        response_excerpt: Some("busy".into()),
        error: Some("target answered HTTP 503".into()),
        duration_ms: 12,
    }
}

#[tokio::test]
async fn a_marked_task_starts_once_and_finishes_once() {
    let db = TestDb::create().await;
    let t = timer(&db).await;
    let ids = claimed_tasks(&db, t, 3).await;

    let started = task::start_marked(&db.pool, "exec-1", &first_attempts(&db, &ids).await).await.unwrap().tasks;
    assert_eq!(started.len(), 3);
    assert!(started.iter().all(|s| s.action.http_url.as_deref() == Some("http://127.0.0.1:9/x")));
    assert_eq!(started[0].retry, punctual_shared::retry::RetryPolicy::default());
    // A redelivered message to the same executor starts nothing, and cancels nothing.
    assert!(task::start_marked(&db.pool, "exec-1", &first_attempts(&db, &ids).await).await.unwrap().tasks.is_empty());
    assert!(task::start(&db.pool, "exec-1", &first_attempts(&db, &ids).await, &task::ActionCache::default())
        .await
        .unwrap()
        .tasks
        .is_empty());
    assert_eq!(row(&db, ids[0]).await.0, "running");

    let mut ok = outcome(ids[0], 1, Next::Succeeded);
    ok.http_status = Some(200);
    ok.error = None;
    let outcomes = vec![ok, outcome(ids[1], 1, Next::Dead)];
    assert_eq!(task::finish(&db.pool, &outcomes).await.unwrap(), 2);
    assert_eq!(task::finish(&db.pool, &outcomes).await.unwrap(), 0, "finishing twice changes nothing");
    assert_eq!(row(&db, ids[0]).await.0, "succeeded");
    assert_eq!(row(&db, ids[1]).await.0, "dead");
    assert_eq!(row(&db, ids[2]).await.0, "running");
    let (code, duration): (Option<i16>, Option<i32>) =
        sqlx::query_as("SELECT http_status, duration_ms FROM tasks WHERE id = $1")
            .bind(ids[0])
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!((code, duration), (Some(200), Some(12)));
    // Only failed attempts are written to the history.
    let history: i64 = sqlx::query_scalar("SELECT count(*) FROM task_attempts").fetch_one(&db.pool).await.unwrap();
    assert_eq!(history, 1);
}

#[tokio::test]
async fn a_claim_that_outlives_the_callback_starts_without_a_write() {
    let db = TestDb::create().await;
    let t = timer(&db).await;
    // Claimed for 30 s; the callback times out after 10 s (the default): no mark needed.
    let ids = claimed_tasks(&db, t, 2).await;
    let started = task::start(&db.pool, "exec-1", &first_attempts(&db, &ids).await, &task::ActionCache::default())
        .await
        .unwrap()
        .tasks;
    assert_eq!(started.len(), 2);
    assert_eq!(row(&db, ids[0]).await.0, "claimed", "started without a write");
    assert_eq!(task::finish(&db.pool, &[outcome(ids[0], 1, Next::Succeeded)]).await.unwrap(), 1);
    assert_eq!(row(&db, ids[0]).await.0, "succeeded");
    // A message redelivered after the outcome is written starts nothing.
    assert!(task::start(&db.pool, "exec-2", &first_attempts(&db, &ids[..1]).await, &task::ActionCache::default())
        .await
        .unwrap()
        .tasks
        .is_empty());
    // An outcome of another attempt changes nothing.
    assert_eq!(task::finish(&db.pool, &[outcome(ids[1], 2, Next::Succeeded)]).await.unwrap(), 0);

    // A callback that may outlast the claim is marked running, so that nothing claims it
    // again while it runs.
    let slow = timer_with(&db, "http_timeout_ms", "60000").await;
    let slow_ids = claimed_tasks(&db, slow, 1).await;
    assert_eq!(
        task::start(&db.pool, "exec-1", &first_attempts(&db, &slow_ids).await, &task::ActionCache::default())
            .await
            .unwrap()
            .tasks
            .len(),
        1
    );
    assert_eq!(row(&db, slow_ids[0]).await.0, "running");
}

/// The executor reads a timer's action once per version: later starts share it, a new
/// version is read again, and the retry policy (which changes no version) is read with
/// every start.
#[tokio::test]
async fn a_timers_action_is_read_once_per_version() {
    let db = TestDb::create().await;
    let t = timer(&db).await;
    let actions = task::ActionCache::default();
    let first = task::start(&db.pool, "exec-1", &first_attempts(&db, &claimed_tasks(&db, t, 2).await).await, &actions)
        .await
        .unwrap()
        .tasks;
    assert_eq!(first.len(), 2);
    assert!(std::sync::Arc::ptr_eq(&first[0].action, &first[1].action), "one action for the batch");
    assert_eq!(actions.len(), 1);

    sqlx::query("UPDATE timers SET retry_max_attempts = 7 WHERE id = $1").bind(t).execute(&db.pool).await.unwrap();
    let later = task::start(&db.pool, "exec-1", &first_attempts(&db, &claimed_tasks(&db, t, 1).await).await, &actions)
        .await
        .unwrap()
        .tasks;
    assert!(std::sync::Arc::ptr_eq(&first[0].action, &later[0].action), "the version's action is not read again");
    assert_eq!(later[0].retry.max_attempts, 7, "the retry policy is read with each start");

    // A new version: tasks planned from the old one are cancelled, those of the new one
    // run the new action.
    sqlx::query("UPDATE timers SET http_url = 'http://127.0.0.1:9/new' WHERE id = $1")
        .bind(t)
        .execute(&db.pool)
        .await
        .unwrap();
    let stale = claimed_tasks(&db, t, 1).await;
    assert!(task::start(&db.pool, "exec-1", &first_attempts(&db, &stale).await, &actions)
        .await
        .unwrap()
        .tasks
        .is_empty());
    assert_eq!(row(&db, stale[0]).await.0, "cancelled");
    let planned = PlannedTask {
        timer_id: t,
        scheduled_at: Utc::now() + chrono::Duration::seconds(1),
        timer_version: 2,
        shard: punctual_shared::fan_out::Shard::WHOLE,
    };
    task::plan(&db.pool, &[planned], None).await.unwrap();
    let claimed =
        task::claim(&db.pool, &db.hold_buckets("owner").await, Duration::from_secs(5), Duration::from_secs(30), 1000)
            .await
            .unwrap();
    let current =
        task::start(&db.pool, "exec-1", &first_attempts(&db, &[claimed[0].id]).await, &actions).await.unwrap().tasks;
    assert_eq!(current[0].action.http_url.as_deref(), Some("http://127.0.0.1:9/new"));

    // A one-shot timer's version never fires again: its action is not kept.
    let once: Uuid = sqlx::query_scalar(
        "INSERT INTO timers (name, schedule_kind, run_at, http_url, plan_status)
         VALUES ('once', 'once', now() + interval '1 s', 'http://127.0.0.1:9/once', 'planned') RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let kept = actions.len();
    let ran = task::start(&db.pool, "exec-1", &first_attempts(&db, &claimed_tasks(&db, once, 1).await).await, &actions)
        .await
        .unwrap()
        .tasks;
    assert_eq!(ran[0].action.http_url.as_deref(), Some("http://127.0.0.1:9/once"));
    assert_eq!(actions.len(), kept);
}

#[tokio::test]
async fn a_lease_runs_from_the_due_time_however_early_the_task_was_claimed() {
    let db = TestDb::create().await;
    let t = timer(&db).await;
    let lease = Duration::from_secs(30);
    let now: chrono::DateTime<Utc> = sqlx::query_scalar("SELECT now()").fetch_one(&db.pool).await.unwrap();
    let at = |s: i64| now + chrono::Duration::seconds(s);
    // Planned claimed 8 s ahead; claimed pending 4 s ahead; claimed 60 s overdue.
    let held = db.hold_buckets("scanner-1").await;
    let claim = task::PlanClaim { held: &held, due_before: at(10), lease };
    let planned = PlannedTask {
        timer_id: t,
        scheduled_at: at(8),
        timer_version: 1,
        shard: punctual_shared::fan_out::Shard::WHOLE,
    };
    let written = task::plan(&db.pool, &[planned], Some(&claim)).await.unwrap();
    let pending = [at(4), at(-60)].map(|s| PlannedTask {
        timer_id: t,
        scheduled_at: s,
        timer_version: 1,
        shard: punctual_shared::fan_out::Shard::WHOLE,
    });
    task::plan(&db.pool, &pending, None).await.unwrap();
    let claimed = task::claim(&db.pool, &held, Duration::from_secs(5), lease, 10).await.unwrap();
    assert_eq!(claimed.len(), 2);

    let lease = chrono::Duration::seconds(30);
    assert_eq!(written.claimed[0].lease_until, at(8) + lease, "planned ahead: 30 s past its due time");
    let ahead = claimed.iter().find(|c| c.due_at == at(4)).unwrap();
    assert_eq!(ahead.lease_until, ahead.due_at + lease, "claimed ahead: 30 s past its due time");
    // An overdue task has its lease from the claim: it may be started the moment it arrives.
    let overdue = claimed.iter().find(|c| c.due_at == at(-60)).unwrap();
    assert!(overdue.lease_until >= Utc::now() + chrono::Duration::seconds(29), "overdue: 30 s from now");
}

#[tokio::test]
async fn a_deferred_attempt_goes_back_to_pending_as_the_same_attempt_without_history() {
    let db = TestDb::create().await;
    let id = started_task(&db).await;
    let due_at = Utc::now() + chrono::Duration::seconds(2);
    assert_eq!(
        task::finish(&db.pool, &[outcome(id, 1, Next::Defer { due_at, reason: task::DeferReason::RetryAfter })])
            .await
            .unwrap(),
        1
    );
    assert_eq!(row(&db, id).await, ("pending".to_owned(), 1));
    let history: i64 = sqlx::query_scalar("SELECT count(*) FROM task_attempts WHERE task_id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(history, 0, "a deferral is no failed attempt");
    // Claimed again at its new due time, as attempt 1, and it then starts as attempt 1.
    let claimed =
        task::claim(&db.pool, &db.hold_buckets("owner").await, Duration::from_secs(5), Duration::from_secs(30), 10)
            .await
            .unwrap();
    assert_eq!((claimed[0].attempt, claimed[0].due_at.timestamp_millis()), (1, due_at.timestamp_millis()));
    let started =
        task::start(&db.pool, "exec-1", &requests(&db, &[(id, 1)]).await, &task::ActionCache::default()).await.unwrap();
    assert_eq!(started.tasks.len(), 1);
    task::finish(&db.pool, &[outcome(id, 1, Next::Succeeded)]).await.unwrap();
    assert_eq!(row(&db, id).await, ("succeeded".to_owned(), 1));
}

#[tokio::test]
async fn a_failed_attempt_goes_back_to_pending_and_keeps_its_history() {
    let db = TestDb::create().await;
    let id = started_task(&db).await;
    let due_at = Utc::now() + chrono::Duration::seconds(2);
    assert_eq!(task::finish(&db.pool, &[outcome(id, 1, Next::Retry { due_at })]).await.unwrap(), 1);
    assert_eq!(row(&db, id).await, ("pending".to_owned(), 2));

    // Not claimable before its new due time comes within the lookahead.
    let early =
        task::claim(&db.pool, &db.hold_buckets("owner").await, Duration::from_millis(500), Duration::from_secs(30), 10)
            .await
            .unwrap();
    assert!(early.is_empty());
    let claimed =
        task::claim(&db.pool, &db.hold_buckets("owner").await, Duration::from_secs(5), Duration::from_secs(30), 10)
            .await
            .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!((claimed[0].attempt, claimed[0].due_at.timestamp_millis()), (2, due_at.timestamp_millis()));
    // A stale message of attempt 1 does not start attempt 2.
    assert!(task::start(&db.pool, "exec-1", &requests(&db, &[(id, 1)]).await, &task::ActionCache::default())
        .await
        .unwrap()
        .tasks
        .is_empty());
    assert_eq!(
        task::start(&db.pool, "exec-1", &requests(&db, &[(id, 2)]).await, &task::ActionCache::default())
            .await
            .unwrap()
            .tasks
            .len(),
        1
    );
    task::finish(&db.pool, &[outcome(id, 2, Next::Dead)]).await.unwrap();
    let attempts: Vec<(i32, Option<i16>)> =
        sqlx::query_as("SELECT attempt, http_status FROM task_attempts WHERE task_id = $1 ORDER BY attempt")
            .bind(id)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(attempts, vec![(1, Some(503)), (2, Some(503))]);

    // Replay: dead → pending, now, as attempt 3; a task that is not dead is not replayed.
    assert_eq!(task::replay(&db.pool, &[id]).await.unwrap(), vec![id]);
    assert_eq!(row(&db, id).await, ("pending".to_owned(), 3));
    assert!(task::replay(&db.pool, &[id]).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_task_running_under_a_crashed_executor_runs_again_on_redelivery() {
    let db = TestDb::create().await;
    let t = timer(&db).await;
    let id = claimed_tasks(&db, t, 1).await[0];
    assert_eq!(task::start_marked(&db.pool, "exec-1", &requests(&db, &[(id, 1)]).await).await.unwrap().tasks.len(), 1);
    // exec-1 dies mid-callback; its uncommitted message goes to exec-2.
    let again = task::start_marked(&db.pool, "exec-2", &requests(&db, &[(id, 1)]).await).await.unwrap().tasks;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].attempt, 1, "the same attempt, with the same identity");
    assert!(task::start_marked(&db.pool, "exec-2", &requests(&db, &[(id, 1)]).await).await.unwrap().tasks.is_empty());
}

#[tokio::test]
async fn tasks_of_paused_deleted_or_edited_timers_are_cancelled_not_run() {
    let db = TestDb::create().await;
    let paused = timer(&db).await;
    let deleted = timer(&db).await;
    let edited = timer(&db).await;
    let kept = timer(&db).await;
    let mut ids = Vec::new();
    for t in [paused, deleted, edited, kept] {
        ids.push(claimed_tasks(&db, t, 1).await[0]);
    }
    sqlx::query("UPDATE timers SET state = 'paused' WHERE id = $1").bind(paused).execute(&db.pool).await.unwrap();
    sqlx::query("UPDATE timers SET state = 'deleted' WHERE id = $1").bind(deleted).execute(&db.pool).await.unwrap();
    sqlx::query("UPDATE timers SET cron_expr = '*/2 * * * * *' WHERE id = $1")
        .bind(edited)
        .execute(&db.pool)
        .await
        .unwrap();
    let version: i64 =
        sqlx::query_scalar("SELECT version FROM timers WHERE id = $1").bind(edited).fetch_one(&db.pool).await.unwrap();
    assert_eq!(version, 2, "an edit bumps the version");

    let report =
        task::start(&db.pool, "exec-1", &first_attempts(&db, &ids).await, &task::ActionCache::default()).await.unwrap();
    assert_eq!(report.not_started, task::NotStarted { cancelled: 3, ..Default::default() });
    let started = report.tasks;
    assert_eq!(started.iter().map(|s| s.timer_id).collect::<Vec<_>>(), vec![kept]);
    for id in &ids[..3] {
        assert_eq!(row(&db, *id).await.0, "cancelled");
    }
}

async fn timer_with(db: &TestDb, column: &str, value: &str) -> Uuid {
    sqlx::query_scalar(&format!(
        "INSERT INTO timers (name, schedule_kind, cron_expr, http_url, plan_status, {column})
         VALUES ($1, 'cron', '* * * * * *', 'http://127.0.0.1:9/x', 'planned', '{value}') RETURNING id"
    ))
    .bind(Uuid::new_v4().to_string())
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn late_tasks_follow_their_timers_misfire_policy() {
    let db = TestDb::create().await;
    let mut timers = Vec::new();
    for policy in ["skip", "fire_once", "fire_all"] {
        let t = timer_with(&db, "misfire_policy", policy).await;
        // Ten occurrences an hour late (the scanners were down), and one due now.
        let planned: Vec<PlannedTask> = (0..10)
            .map(|i| Utc::now() - chrono::Duration::hours(1) + chrono::Duration::seconds(i))
            .chain([Utc::now()])
            .map(|at| PlannedTask {
                timer_id: t,
                scheduled_at: at,
                timer_version: 1,
                shard: punctual_shared::fan_out::Shard::WHOLE,
            })
            .collect();
        task::plan(&db.pool, &planned, None).await.unwrap();
        timers.push(t);
    }
    sqlx::query("UPDATE timers SET catchup_window_ms = 3595500 WHERE misfire_policy = 'fire_all'")
        .execute(&db.pool)
        .await
        .unwrap();
    let cancelled =
        task::cancel_misfired(&db.pool, &db.hold_buckets("owner").await, Duration::from_secs(60)).await.unwrap();
    let pending = |t: Uuid| {
        let pool = db.pool.clone();
        async move {
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks WHERE timer_id = $1 AND status = 'pending'")
                .bind(t)
                .fetch_one(&pool)
                .await
                .unwrap();
            n
        }
    };
    assert_eq!(pending(timers[0]).await, 1, "skip: only the one not late");
    assert_eq!(pending(timers[1]).await, 2, "fire_once: the latest late one, and the one not late");
    // fire_all, window 3595.5 s: of the late ones (3600 s to 3591 s ago), the 5 newest are inside.
    assert_eq!(pending(timers[2]).await, 5 + 1, "fire_all: those within the catch-up window");
    assert_eq!(cancelled, task::Misfired { skip: 10, fire_once: 9, fire_all: 5 });
    assert_eq!(
        task::cancel_misfired(&db.pool, &db.hold_buckets("owner").await, Duration::from_secs(60)).await.unwrap(),
        task::Misfired::default()
    );
}

#[tokio::test]
async fn overlapping_runs_follow_their_timers_overlap_policy() {
    let db = TestDb::create().await;
    // With `allow` all three run, started without a write (so still claimed); with the
    // others, each start is marked, so that the next one sees the run.
    for (policy, second, third) in
        [("allow", "claimed", "claimed"), ("skip", "cancelled", "cancelled"), ("buffer_one", "pending", "cancelled")]
    {
        let t = timer_with(&db, "overlap_policy", policy).await;
        let ids = claimed_tasks(&db, t, 3).await;
        assert_eq!(
            task::start(&db.pool, "exec-1", &requests(&db, &[(ids[0], 1)]).await, &task::ActionCache::default())
                .await
                .unwrap()
                .tasks
                .len(),
            1
        );
        let second_start =
            task::start(&db.pool, "exec-1", &requests(&db, &[(ids[1], 1)]).await, &task::ActionCache::default())
                .await
                .unwrap();
        let third_start =
            task::start(&db.pool, "exec-1", &requests(&db, &[(ids[2], 1)]).await, &task::ActionCache::default())
                .await
                .unwrap();
        let n = second_start.tasks.len() + third_start.tasks.len();
        assert_eq!(n, if policy == "allow" { 2 } else { 0 }, "{policy}: later occurrences started");
        let (skipped, deferred) = match policy {
            "allow" => (0, 0),
            "skip" => (2, 0),
            _ => (1, 1),
        };
        let not_started = [second_start.not_started, third_start.not_started];
        assert_eq!(not_started.iter().map(|n| n.overlap_skipped).sum::<u64>(), skipped, "{policy}: skipped");
        assert_eq!(not_started.iter().map(|n| n.overlap_deferred).sum::<u64>(), deferred, "{policy}: deferred");
        assert_eq!(row(&db, ids[1]).await.0, second, "{policy}: the second occurrence");
        assert_eq!(row(&db, ids[2]).await.0, third, "{policy}: the third occurrence");
        if policy == "buffer_one" {
            // The buffered one runs once the first has finished.
            let mut done = outcome(ids[0], 1, Next::Succeeded);
            done.error = None;
            task::finish(&db.pool, &[done]).await.unwrap();
            tokio::time::sleep(Duration::from_millis(250)).await;
            let again = task::claim(
                &db.pool,
                &db.hold_buckets("owner").await,
                Duration::from_secs(5),
                Duration::from_secs(30),
                100,
            )
            .await
            .unwrap();
            assert_eq!(again.iter().map(|c| c.id).collect::<Vec<_>>(), vec![ids[1]]);
            assert_eq!(
                task::start(&db.pool, "exec-1", &requests(&db, &[(ids[1], 1)]).await, &task::ActionCache::default())
                    .await
                    .unwrap()
                    .tasks
                    .len(),
                1
            );
        }
    }
}

/// Occurrences of one timer that reach an executor in one batch (their messages bunched up
/// behind a slow consumer) are judged as if they had come one after the other: with `skip`
/// or `buffer_one` only the first runs (two calls 170 ms apart were seen under a loaded
/// suite, when each was judged against the rows as they were before the batch).
#[tokio::test]
async fn occurrences_of_one_timer_in_one_batch_do_not_run_side_by_side() {
    let db = TestDb::create().await;
    for (policy, statuses) in [
        ("allow", ["claimed", "claimed", "claimed"]),
        ("skip", ["running", "cancelled", "cancelled"]),
        ("buffer_one", ["running", "pending", "cancelled"]),
    ] {
        let t = timer_with(&db, "overlap_policy", policy).await;
        let ids = claimed_tasks(&db, t, 3).await;
        let batch = requests(&db, &[(ids[0], 1), (ids[1], 1), (ids[2], 1)]).await;
        let started = task::start(&db.pool, "exec-1", &batch, &task::ActionCache::default()).await.unwrap();
        let expected = if policy == "allow" { 3 } else { 1 };
        assert_eq!(started.tasks.len(), expected, "{policy}: started together");
        assert_eq!(started.tasks.iter().map(|s| s.id).min(), Some(ids[0]), "{policy}: the first in time");
        for (id, status) in ids.iter().zip(statuses) {
            assert_eq!(row(&db, *id).await.0, status, "{policy}: task {id}");
        }
    }
}

/// The shards of one occurrence are not each other's previous run: under `skip` and
/// `buffer_one` the first occurrence's shards all run side by side, and the next
/// occurrence's shards are held back while they run (docs/semantics.md, "Fan-out").
#[tokio::test]
async fn an_occurrences_shards_run_side_by_side_under_an_overlap_policy() {
    let db = TestDb::create().await;
    for (policy, held_back) in [("skip", "cancelled"), ("buffer_one", "pending")] {
        let t = timer_with(&db, "overlap_policy", policy).await;
        let first = Utc::now();
        let planned: Vec<PlannedTask> = [first, first + chrono::Duration::seconds(1)]
            .into_iter()
            .flat_map(|at| PlannedTask::shards_of(t, at, 1, 3))
            .collect();
        task::plan(&db.pool, &planned, None).await.unwrap();
        let held = db.hold_buckets("owner").await;
        let claimed =
            task::claim(&db.pool, &held, Duration::from_secs(5), Duration::from_secs(30), 1000).await.unwrap();
        let mut mine: Vec<_> = claimed.into_iter().filter(|c| c.timer_id == t).collect();
        mine.sort_by_key(|c| (c.scheduled_at, c.shard.index));
        let ids: Vec<i64> = mine.iter().map(|c| c.id).collect();
        assert_eq!(ids.len(), 6, "{policy}: two occurrences of three shards");
        let actions = task::ActionCache::default();
        let started = task::start(&db.pool, "exec-1", &first_attempts(&db, &ids[..3]).await, &actions).await.unwrap();
        let mut shards: Vec<i16> = started.tasks.iter().map(|s| s.shard.index).collect();
        shards.sort();
        assert_eq!(shards, [0, 1, 2], "{policy}: the first occurrence's shards run side by side");
        assert!(started.tasks.iter().all(|s| s.identity().ends_with(&format!("/{}", s.shard.index))));
        let next = task::start(&db.pool, "exec-1", &first_attempts(&db, &ids[3..]).await, &actions).await.unwrap();
        assert!(next.tasks.is_empty(), "{policy}: the next occurrence waits for the first");
        for id in &ids[3..] {
            assert_eq!(row(&db, *id).await.0, held_back, "{policy}: task {id}");
        }
    }
}

/// Rows and index entries read from `tasks` and `timers` so far, as the server counts them.
async fn rows_read(db: &TestDb) -> i64 {
    sqlx::query_scalar(
        "SELECT ((SELECT sum(seq_tup_read) FROM pg_stat_user_tables WHERE relname IN ('tasks', 'timers'))
               + (SELECT sum(idx_tup_read) FROM pg_stat_user_indexes WHERE relname IN ('tasks', 'timers')))::bigint",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// The executor's statements read about as much as the batch, whatever the planner
/// thinks of tables it never analysed (a fresh database under load). A plan chosen
/// without statistics once took three equality tests on `timers` to match a single row,
/// walked every claimed task's lease entry for each timer, and stalled deliveries for
/// 37 s a batch at 10,000 fires/s. (A full scan of either table is allowed: the planner
/// may rightly prefer it while tables are this small.)
#[tokio::test]
async fn a_batch_starts_and_finishes_without_reading_tables_over_and_over() {
    const TIMERS: i64 = 2_000;
    const TASKS_PER_TIMER: i64 = 30;
    let db = TestDb::create().await;
    for table in ["timers", "tasks"] {
        sqlx::query(&format!("ALTER TABLE {table} SET (autovacuum_enabled = false)")).execute(&db.pool).await.unwrap();
    }
    sqlx::query(
        "INSERT INTO timers (name, schedule_kind, cron_expr, http_url, plan_status)
         SELECT 'load-' || i, 'cron', '* * * * * *', 'http://127.0.0.1:9/x', 'planned'
           FROM generate_series(1, $1) AS i",
    )
    .bind(TIMERS)
    .execute(&db.pool)
    .await
    .unwrap();
    // Occurrences that scanners planned and claimed ahead, as under load.
    let claimed: Vec<(i64, i32, i64)> = sqlx::query_as(
        "INSERT INTO tasks (timer_id, scheduled_at, due_at, timer_version, bucket, status, claim_owner,
                            claim_epoch, claimed_at, lease_until)
         SELECT tm.id, s.at, s.at, tm.version, 0, 'claimed', 'scanner-1', 1, now(), now() + interval '1 minute'
           FROM timers tm, LATERAL (SELECT now() + g * interval '1 second' AS at FROM generate_series(1, $1) g) s
         RETURNING id, attempt, claim_epoch",
    )
    .bind(TASKS_PER_TIMER)
    .fetch_all(&db.pool)
    .await
    .unwrap();

    // One connection, so that its statistics can be flushed on demand before reading
    // them; a plan that reads the tables over and over fails by its timeout.
    let options: sqlx::postgres::PgConnectOptions = db.url.parse().unwrap();
    let one = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options.options([("statement_timeout", "10s")]))
        .await
        .unwrap();
    let flush = || sqlx::query("SELECT pg_stat_force_next_flush()").execute(&one);
    flush().await.unwrap();
    let before = rows_read(&db).await;
    let batch: Vec<task::StartRequest> = claimed
        .iter()
        .step_by(7)
        .take(500)
        .map(|&(task_id, attempt, epoch)| task::StartRequest { task_id, attempt, epoch })
        .collect();
    let started = task::start(&one, "exec-1", &batch, &task::ActionCache::default()).await.unwrap().tasks;
    assert_eq!(started.len(), 500);
    let outcomes: Vec<Outcome> =
        started.iter().map(|s| Outcome { started_at: s.started_at, ..outcome(s.id, 1, Next::Succeeded) }).collect();
    assert_eq!(task::finish(&one, &outcomes).await.unwrap(), 500);
    flush().await.unwrap();
    let read = rows_read(&db).await - before;
    let rows = TIMERS * (1 + TASKS_PER_TIMER);
    assert!(read <= 4 * rows, "start and finish of 500 tasks read {read} rows and index entries ({rows} stored)");
}
