//! The planner and the claimer against a real Postgres.

use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use punctual_scanner::planner::Planner;
use punctual_shared::task;
use punctual_testkit::extreme_values::{insert_statement, EXTREME_ROWS};
use punctual_testkit::TestDb;
use uuid::Uuid;

fn planner() -> Planner {
    Planner { horizon: Duration::from_secs(10), misfire_threshold: Duration::from_secs(60) }
}

async fn insert_sql(db: &TestDb, columns: &str, values: &str) -> Uuid {
    let (id,): (Uuid,) = sqlx::query_as(&format!("INSERT INTO timers ({columns}) VALUES ({values}) RETURNING id"))
        .fetch_one(&db.pool)
        .await
        .unwrap_or_else(|e| panic!("insert ({columns}) VALUES ({values}): {e}"));
    id
}

/// A timer firing every second, inserted with SQL.
async fn every_second_timer(db: &TestDb, url: &str) -> Uuid {
    insert_sql(
        db,
        "name, schedule_kind, cron_expr, http_url",
        &format!("'every-second', 'cron', '* * * * * *', '{url}'"),
    )
    .await
}

async fn plan_state(db: &TestDb, id: Uuid) -> (String, Option<String>, Option<DateTime<Utc>>) {
    sqlx::query_as("SELECT plan_status, invalid_reason, next_plan_at FROM timers WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

async fn task_times(db: &TestDb, id: Uuid) -> Vec<DateTime<Utc>> {
    sqlx::query_scalar("SELECT scheduled_at FROM tasks WHERE timer_id = $1 ORDER BY scheduled_at")
        .bind(id)
        .fetch_all(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn sql_rows_the_planner_cannot_understand_are_marked_invalid_with_the_reason() {
    let db = TestDb::create().await;
    let cols = "name, schedule_kind, cron_expr, timezone, http_url";
    let bad_cron =
        insert_sql(&db, cols, "'bad-cron', 'cron', 'every day at noon', 'UTC', 'http://127.0.0.1:1/x'").await;
    let bad_zone =
        insert_sql(&db, cols, "'bad-zone', 'cron', '* * * * * *', 'Mars/Olympus', 'http://127.0.0.1:1/x'").await;
    let bad_url = insert_sql(&db, cols, "'bad-url', 'cron', '* * * * * *', 'UTC', 'not a url'").await;
    let no_url = insert_sql(&db, "name, schedule_kind, cron_expr", "'no-url', 'cron', '* * * * * *'").await;
    let no_run_at =
        insert_sql(&db, "name, schedule_kind, http_url", "'no-run-at', 'once', 'http://127.0.0.1:1/x'").await;
    let good = insert_sql(&db, cols, "'good', 'cron', '0 9 * * 1-5', 'Europe/Berlin', 'http://127.0.0.1:1/x'").await;

    let report = planner().validate_new(&db.pool, Utc::now(), &db.hold_buckets("scanner-a").await, None).await.unwrap();
    assert_eq!(report.timers, 6);
    assert_eq!(report.invalid, 5);
    for (id, column) in [
        (bad_cron, "cron_expr"),
        (bad_zone, "timezone"),
        (bad_url, "http_url"),
        (no_url, "http_url"),
        (no_run_at, "run_at"),
    ] {
        let (status, reason, next) = plan_state(&db, id).await;
        assert_eq!(status, "invalid");
        let reason = reason.expect("a reason");
        assert!(reason.starts_with(&format!("{column}:")), "reason {reason:?} should name {column}");
        assert_eq!(next, None);
    }
    let (status, reason, next) = plan_state(&db, good).await;
    assert_eq!((status.as_str(), reason), ("planned", None));
    assert!(next.unwrap() > Utc::now());

    // Invalid rows are never planned, and the schema itself rejects what it can.
    planner()
        .plan_due(&db.pool, Utc::now() + chrono::Duration::days(7), &db.hold_buckets("scanner-a").await, None)
        .await
        .unwrap();
    for id in [bad_cron, bad_zone, bad_url, no_url, no_run_at] {
        assert!(task_times(&db, id).await.is_empty());
    }
    let rejected = sqlx::query(
        "INSERT INTO timers (name, schedule_kind, interval_ms, http_url) VALUES ('x', 'interval', 5, 'http://a/')",
    )
    .execute(&db.pool)
    .await
    .unwrap_err();
    assert!(rejected.to_string().contains("interval_ms"), "{rejected}");
}

#[tokio::test]
async fn occurrences_are_planned_a_horizon_ahead_once() {
    let db = TestDb::create().await;
    let id = every_second_timer(&db, "http://127.0.0.1:1/x").await;
    let now = Utc::now();
    // A new timer is planned as soon as it is validated, in the same pass.
    let report = planner().validate_new(&db.pool, now, &db.hold_buckets("scanner-a").await, None).await.unwrap();
    let times = task_times(&db, id).await;
    // Planned up to twice the horizon (20 s) ahead: about 20 occurrences, one per second.
    assert!((19..=21).contains(&times.len()), "{} occurrences", times.len());
    assert_eq!(report.tasks_planned as usize, times.len());
    assert!(times.windows(2).all(|w| w[1] - w[0] == chrono::Duration::seconds(1)));
    assert!(times[0] >= now - chrono::Duration::seconds(1));
    // Nothing more to plan until the plan comes within the horizon again.
    let again = planner().plan_due(&db.pool, now, &db.hold_buckets("scanner-a").await, None).await.unwrap();
    assert_eq!(again.timers, 0);
    let later = planner()
        .plan_due(&db.pool, now + chrono::Duration::seconds(15), &db.hold_buckets("scanner-a").await, None)
        .await
        .unwrap();
    assert_eq!(later.timers, 1);
    let extended = task_times(&db, id).await;
    assert_eq!(extended.len(), times.len() + later.tasks_planned as usize);
    assert!(extended.windows(2).all(|w| w[1] - w[0] == chrono::Duration::seconds(1)), "no gap, no duplicate");
}

#[tokio::test]
async fn occurrences_due_within_the_lookahead_are_written_claimed_and_claimed_by_no_one_else() {
    let db = TestDb::create().await;
    let id = every_second_timer(&db, "http://127.0.0.1:1/x").await;
    let now = Utc::now();
    let held = db.hold_buckets("scanner-a").await;
    let claim =
        task::PlanClaim { held: &held, due_before: now + chrono::Duration::seconds(5), lease: Duration::from_secs(30) };
    let report =
        planner().validate_new(&db.pool, now, &db.hold_buckets("scanner-a").await, Some(&claim)).await.unwrap();

    // About 5 of the ~20 occurrences fall within the 5 s lookahead: those come back
    // claimed by the planning scanner, in the same write that inserted them.
    let (claimed_rows, pending_rows): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE status = 'claimed' AND claim_owner = 'scanner-a' AND lease_until > now() + interval '25 seconds'),
                count(*) FILTER (WHERE status = 'pending' AND claim_owner IS NULL AND lease_until IS NULL)
           FROM tasks WHERE timer_id = $1",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!((4..=6).contains(&report.claimed.len()), "{} claimed", report.claimed.len());
    assert_eq!(claimed_rows as usize, report.claimed.len());
    assert_eq!((claimed_rows + pending_rows) as u64, report.tasks_planned, "every row claimed or pending");
    assert!(report.claimed.iter().all(|t| t.scheduled_at < claim.due_before && !t.reclaimed && t.attempt == 1));

    // A claim finds nothing of them to claim again, only the pending ones further out.
    let other = task::claim(&db.pool, &held, Duration::from_secs(10), Duration::from_secs(30), 1000).await.unwrap();
    let held: Vec<i64> = report.claimed.iter().map(|t| t.id).collect();
    assert!(other.iter().all(|t| !held.contains(&t.id)), "a task claimed twice");
    assert!(other.iter().all(|t| t.scheduled_at >= claim.due_before));
}

#[tokio::test]
async fn an_edit_re_plans_held_claims_in_place_and_never_claims_them_twice() {
    let db = TestDb::create().await;
    let id = every_second_timer(&db, "http://127.0.0.1:1/old").await;
    let now = Utc::now();
    let held = db.hold_buckets("scanner-a").await;
    let claim =
        task::PlanClaim { held: &held, due_before: now + chrono::Duration::seconds(5), lease: Duration::from_secs(30) };
    let held_by_a = planner().validate_new(&db.pool, now, &held, Some(&claim)).await.unwrap().claimed;
    assert!(!held_by_a.is_empty());

    // A change of definition, same schedule: the occurrences are planned again from the
    // new version.
    sqlx::query("UPDATE timers SET http_url = 'http://127.0.0.1:1/new' WHERE id = $1")
        .bind(id)
        .execute(&db.pool)
        .await
        .unwrap();
    let report = planner().validate_new(&db.pool, now, &held, Some(&claim)).await.unwrap();
    assert!(report.tasks_planned > 0);
    let held: Vec<i64> = held_by_a.iter().map(|t| t.id).collect();
    assert!(report.claimed.iter().all(|t| !held.contains(&t.id)), "a held claim handed out a second time");
    // What scanner-a holds stays its own: it publishes it once. From the edit on, at the new
    // version (it runs with the new definition); an occurrence due before the edit (a slow
    // machine's test reaches the edit seconds after `now`) was not planned again.
    let edited: DateTime<Utc> =
        sqlx::query_scalar("SELECT updated_at FROM timers WHERE id = $1").bind(id).fetch_one(&db.pool).await.unwrap();
    type HeldRow = (i64, String, Option<String>, i64, DateTime<Utc>);
    let rows: Vec<HeldRow> = sqlx::query_as(
        "SELECT id, status, claim_owner, timer_version, scheduled_at FROM tasks WHERE id = ANY($1) ORDER BY id",
    )
    .bind(&held)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), held.len());
    assert!(rows.iter().any(|r| r.4 >= edited), "a held claim due after the edit");
    for (task_id, status, owner, version, at) in rows {
        let expected = if at >= edited { 2 } else { 1 };
        assert_eq!(
            (status.as_str(), owner.as_deref(), version),
            ("claimed", Some("scanner-a"), expected),
            "task {task_id} at {at}, edited at {edited}"
        );
    }
}

#[tokio::test]
async fn a_timer_inserted_paused_is_validated_but_not_planned() {
    let db = TestDb::create().await;
    let id = insert_sql(
        &db,
        "name, schedule_kind, cron_expr, http_url, state",
        "'paused', 'cron', '* * * * * *', 'http://127.0.0.1:1/x', 'paused'",
    )
    .await;
    let report = planner().validate_new(&db.pool, Utc::now(), &db.hold_buckets("scanner-a").await, None).await.unwrap();
    assert_eq!((report.timers, report.tasks_planned), (1, 0));
    assert_eq!(plan_state(&db, id).await.0, "planned");
    assert!(task_times(&db, id).await.is_empty());
}

/// A scanner that gets to a new or edited timer late (busy, or down) plans it from when it
/// was written: what fell due meanwhile fires late, not silently never.
#[tokio::test]
async fn a_timer_validated_late_is_planned_from_when_it_was_written() {
    let db = TestDb::create().await;
    let cron = every_second_timer(&db, "http://127.0.0.1:1/x").await;
    let interval = insert_sql(
        &db,
        "name, schedule_kind, interval_ms, http_url",
        "'interval', 'interval', 1000, 'http://127.0.0.1:1/x'",
    )
    .await;
    let written: DateTime<Utc> =
        sqlx::query_scalar("SELECT max(updated_at) FROM timers").fetch_one(&db.pool).await.unwrap();
    let held = db.hold_buckets("scanner-a").await;
    let late = written + chrono::Duration::seconds(5);
    planner().validate_new(&db.pool, late, &held, None).await.unwrap();
    for id in [cron, interval] {
        let times = task_times(&db, id).await;
        let meanwhile = times.iter().filter(|t| **t > written && **t < late).count();
        assert!((4..=5).contains(&meanwhile), "{meanwhile} of the occurrences due in the 5 s before validation");
        assert!(times[0] <= written + chrono::Duration::seconds(1), "first {} written {written}", times[0]);
    }

    // An edit is a new definition: planned from the edit, nothing of it before.
    sqlx::query("UPDATE timers SET interval_ms = 2000 WHERE id = $1").bind(interval).execute(&db.pool).await.unwrap();
    let (edited, version): (DateTime<Utc>, i64) =
        sqlx::query_as("SELECT updated_at, version FROM timers WHERE id = $1")
            .bind(interval)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let late = edited + chrono::Duration::seconds(6);
    planner().validate_new(&db.pool, late, &held, None).await.unwrap();
    let times: Vec<DateTime<Utc>> =
        sqlx::query_scalar("SELECT scheduled_at FROM tasks WHERE timer_id = $1 AND timer_version = $2 ORDER BY 1")
            .bind(interval)
            .bind(version)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert!(
        times[0] >= edited && times[0] <= edited + chrono::Duration::seconds(2),
        "first {} edited {edited}",
        times[0]
    );
    let meanwhile = times.iter().filter(|t| **t < late).count();
    assert!((2..=3).contains(&meanwhile), "{meanwhile} of the edited timer's occurrences due before validation");
}

#[tokio::test]
async fn occurrences_missed_beyond_the_misfire_threshold_fire_once() {
    let db = TestDb::create().await;
    let hour_ago = Utc::now() - chrono::Duration::hours(1);
    let id = insert_sql(
        &db,
        "name, schedule_kind, cron_expr, http_url, plan_status, next_plan_at",
        &format!("'behind', 'cron', '* * * * * *', 'http://127.0.0.1:1/x', 'planned', '{}'", hour_ago.to_rfc3339()),
    )
    .await;
    let now = Utc::now();
    planner().plan_due(&db.pool, now, &db.hold_buckets("scanner-a").await, None).await.unwrap();
    let times = task_times(&db, id).await;
    let missed: Vec<_> = times.iter().filter(|t| **t < now - chrono::Duration::seconds(60)).collect();
    assert_eq!(missed.len(), 1, "an hour of missed occurrences collapses into one");
    let recent = times.iter().filter(|t| **t >= now - chrono::Duration::seconds(60)).count();
    assert!((75..=82).contains(&recent), "the last minute (within the threshold) and the next 20 s: {recent}");
}

#[tokio::test]
async fn claims_are_exclusive_and_expired_leases_are_claimed_again() {
    let db = TestDb::create().await;
    let id = insert_sql(
        &db,
        "name, schedule_kind, cron_expr, http_url",
        "'c', 'cron', '* * * * * *', 'http://127.0.0.1:1/x'",
    )
    .await;
    let soon: Vec<task::PlannedTask> = (0..200)
        .map(|i| task::PlannedTask {
            timer_id: id,
            scheduled_at: Utc::now() + chrono::Duration::milliseconds(i),
            timer_version: 1,
            shard: punctual_shared::fan_out::Shard::WHOLE,
        })
        .collect();
    assert_eq!(task::plan(&db.pool, &soon, None).await.unwrap().written, 200);
    // Planning the same occurrences again inserts nothing.
    assert_eq!(task::plan(&db.pool, &soon, None).await.unwrap().written, 0);

    let lookahead = Duration::from_secs(5);
    let held = db.hold_buckets("a").await;
    let (a, b) = tokio::join!(
        task::claim(&db.pool, &held, lookahead, Duration::from_millis(300), 150),
        task::claim(&db.pool, &held, lookahead, Duration::from_millis(300), 150),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.len() + b.len(), 200, "every task claimed once");
    let mut ids: Vec<i64> = a.iter().chain(&b).map(|t| t.id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 200, "no task claimed by both");

    // Nothing left to claim until the leases expire (300 ms past each task's due time, the
    // last due 200 ms from the start); then they are claimed again.
    assert!(task::claim(&db.pool, &held, lookahead, Duration::from_secs(30), 1000).await.unwrap().is_empty());
    tokio::time::sleep(Duration::from_millis(600)).await;
    let c = task::claim(&db.pool, &held, lookahead, Duration::from_secs(30), 1000).await.unwrap();
    assert_eq!(c.len(), 200);
    assert!(c.iter().all(|t| t.reclaimed), "claimed again after the leases expired");
    assert!(a.iter().chain(&b).all(|t| !t.reclaimed), "first claims");
    // A task marked running is no longer claimable, whatever its lease says (one started
    // without a mark is protected by its lease alone, which outlives its callback).
    let ids: Vec<task::StartRequest> =
        c.iter().map(|t| task::StartRequest { task_id: t.id, attempt: t.attempt, epoch: t.epoch }).collect();
    let started = task::start_marked(&db.pool, "exec", &ids).await.unwrap();
    assert_eq!(started.tasks.len(), 200);
    tokio::time::sleep(Duration::from_millis(100)).await;
    sqlx::query("UPDATE tasks SET lease_until = now() - interval '1 second'").execute(&db.pool).await.unwrap();
    assert!(task::claim(&db.pool, &held, lookahead, Duration::from_secs(30), 1000).await.unwrap().is_empty());
}

#[tokio::test]
async fn each_misfire_policy_plans_what_it_says_after_an_hour_behind() {
    let db = TestDb::create().await;
    let hour_ago = (Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    let mut ids = Vec::new();
    for (policy, window) in [("skip", 3_600_000), ("fire_once", 3_600_000), ("fire_all", 600_000)] {
        ids.push(
            insert_sql(
                &db,
                "name, schedule_kind, cron_expr, http_url, plan_status, next_plan_at, misfire_policy, catchup_window_ms",
                &format!("'{policy}', 'cron', '* * * * * *', 'http://127.0.0.1:1/x', 'planned', '{hour_ago}', '{policy}', {window}"),
            )
            .await,
        );
    }
    let now = Utc::now();
    let report = planner().plan_due(&db.pool, now, &db.hold_buckets("scanner-a").await, None).await.unwrap();
    let missed =
        |times: Vec<DateTime<Utc>>| times.into_iter().filter(|t| *t < now - chrono::Duration::seconds(60)).count();
    assert_eq!(missed(task_times(&db, ids[0]).await), 0, "skip");
    assert_eq!(missed(task_times(&db, ids[1]).await), 1, "fire_once");
    // fire_all within a 10-minute catch-up window: the 9 minutes of it beyond the threshold.
    let all = missed(task_times(&db, ids[2]).await);
    assert!((539..=541).contains(&all), "fire_all: {all}");
    // What each policy left unplanned is counted (punctual_tasks_misfired_total): an hour
    // less the minute within the threshold, one less for fire_once, the window's less for fire_all.
    let m = report.misfired;
    assert!((3539..=3541).contains(&m.skip), "{m:?}");
    assert_eq!(m.fire_once, m.skip - 1, "{m:?}");
    assert_eq!(m.fire_all, m.skip - all as u64, "{m:?}");
}

/// The statements docs/sql.md gives for pruning history, read from the doc so the two
/// cannot part: the SQL blocks of the section after the comment naming this test. The
/// first prunes recurring timers' runs, the second finished one-shot timers.
fn documented_prune_statements() -> Vec<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/sql.md")).unwrap();
    let section = doc
        .split_once("pruning_old_occurrences_of_recurring_timers_never_lets_one_fire_again")
        .expect("docs/sql.md names this test before its prune statements")
        .1;
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .split("```sql")
        .skip(1)
        .map(|b| b.split_once("```").expect("the SQL block ends").0.trim().to_owned())
        .collect()
}

/// A one-shot timer at `run_at`, its run already planned (as the planner leaves it).
async fn planned_one_shot(db: &TestDb, name: &str, run_at: &str) -> Uuid {
    insert_sql(
        db,
        "name, schedule_kind, run_at, http_url, plan_status",
        &format!("'{name}', 'once', '{run_at}', 'http://127.0.0.1:1/x', 'done'"),
    )
    .await
}

/// Pruning with the documented statements: the first removes old finished occurrences of
/// recurring timers (and their attempts) and nothing else, and no occurrence it removed is
/// planned again when its timer is edited. A one-shot timer's row must survive it: an edit
/// sends the timer back to the planner at its fixed `run_at`, where only that row keeps it
/// from firing a second time (with the row deleted, it is planned again). The second
/// removes one-shot timers whose run finished long ago, and no other.
#[tokio::test]
async fn pruning_old_occurrences_of_recurring_timers_never_lets_one_fire_again() {
    let db = TestDb::create().await;
    // Whole seconds, so the times read back compare equal to those written.
    let now = Utc::now().trunc_subsecs(0);
    let days_ago = |d: i64| (now - chrono::Duration::days(d)).to_rfc3339();
    let hourly = insert_sql(
        &db,
        "name, schedule_kind, cron_expr, http_url, plan_status, next_plan_at",
        &format!("'hourly', 'cron', '0 0 * * * *', 'http://127.0.0.1:1/x', 'planned', '{}'", days_ago(-1)),
    )
    .await;
    let once = planned_one_shot(&db, "once", &days_ago(40)).await;
    // One-shot timers the second statement must keep: one that ran a day ago, one whose
    // run is planned but not yet finished.
    let once_recent = planned_one_shot(&db, "once-recent", &days_ago(1)).await;
    let once_waiting = planned_one_shot(&db, "once-waiting", &days_ago(40)).await;
    // (timer, occurrence, status, finished): old finished, old dead with an attempt,
    // recent finished, old unfinished; and the one-shots' runs.
    let rows = [
        (hourly, days_ago(40), "succeeded", Some(days_ago(40))),
        (hourly, days_ago(39), "dead", Some(days_ago(39))),
        (hourly, days_ago(38), "cancelled", Some(days_ago(38))),
        (hourly, days_ago(1), "succeeded", Some(days_ago(1))),
        (hourly, days_ago(37), "pending", None),
        (once, days_ago(40), "succeeded", Some(days_ago(40))),
        (once_recent, days_ago(1), "succeeded", Some(days_ago(1))),
        (once_waiting, days_ago(40), "pending", None),
    ];
    for (timer, at, status, finished) in &rows {
        sqlx::query(
            "INSERT INTO tasks (timer_id, scheduled_at, due_at, timer_version, bucket, status, finished_at)
             VALUES ($1, $2::timestamptz, $2::timestamptz, 1, 0, $3, $4::timestamptz)",
        )
        .bind(timer)
        .bind(at)
        .bind(status)
        .bind(finished)
        .execute(&db.pool)
        .await
        .unwrap();
    }
    sqlx::query(
        "INSERT INTO task_attempts (task_id, attempt, error) SELECT id, 1, 'failed' FROM tasks WHERE status = 'dead'",
    )
    .execute(&db.pool)
    .await
    .unwrap();

    let statements = documented_prune_statements();
    assert_eq!(statements.len(), 2, "{statements:?}");
    let pruned = sqlx::query(&statements[0]).execute(&db.pool).await.unwrap().rows_affected();
    assert_eq!(pruned, 3, "the three finished occurrences of the recurring timer older than 30 days");
    let hourly_left = task_times(&db, hourly).await;
    let hourly_expected: Vec<DateTime<Utc>> = [37, 1].iter().map(|d| now - chrono::Duration::days(*d)).collect();
    assert_eq!(hourly_left, hourly_expected, "the old unfinished and the recent occurrences are kept");
    assert_eq!(task_times(&db, once).await.len(), 1, "a one-shot timer's run is kept");
    let attempts: i64 = sqlx::query_scalar("SELECT count(*) FROM task_attempts").fetch_one(&db.pool).await.unwrap();
    assert_eq!(attempts, 0, "the pruned dead task's attempt went with it");

    // Edit both timers: each goes back to the planner.
    sqlx::query("UPDATE timers SET http_url = 'http://127.0.0.1:2/y'").execute(&db.pool).await.unwrap();
    planner().validate_new(&db.pool, Utc::now(), &db.hold_buckets("scanner-a").await, None).await.unwrap();
    let once_statuses: Vec<String> = sqlx::query_scalar("SELECT status FROM tasks WHERE timer_id = $1")
        .bind(once)
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(once_statuses, ["succeeded"], "the one-shot's one run, not planned again");
    let old_again = task_times(&db, hourly).await.into_iter().filter(|t| *t < now - chrono::Duration::days(37)).count();
    assert_eq!(old_again, 0, "no pruned occurrence of the recurring timer is planned again");

    let deleted = sqlx::query(&statements[1]).execute(&db.pool).await.unwrap().rows_affected();
    assert_eq!(deleted, 1, "only the one-shot timer whose run finished 40 days ago");
    let left: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM timers ORDER BY name").fetch_all(&db.pool).await.unwrap();
    assert_eq!(left, vec![hourly, once_recent, once_waiting]);
    assert!(task_times(&db, once).await.is_empty(), "its run went with it");
}

#[tokio::test]
async fn a_cron_expression_that_never_matches_is_marked_invalid_not_done() {
    let db = TestDb::create().await;
    let cols = "name, schedule_kind, cron_expr, http_url";
    let never = insert_sql(&db, cols, "'30-feb', 'cron', '0 0 30 2 *', 'http://127.0.0.1:1/x'").await;
    let leap_day = insert_sql(&db, cols, "'29-feb', 'cron', '0 0 29 2 *', 'http://127.0.0.1:1/x'").await;
    planner().validate_new(&db.pool, Utc::now(), &db.hold_buckets("scanner-a").await, None).await.unwrap();
    let (status, reason, _) = plan_state(&db, never).await;
    assert_eq!(status, "invalid");
    assert!(reason.unwrap_or_default().starts_with("cron_expr: "), "names the column");
    assert_eq!(plan_state(&db, leap_day).await.0, "planned");
}

#[tokio::test]
async fn the_schema_refuses_values_out_of_range() {
    let db = TestDb::create().await;
    for (column, columns, values) in EXTREME_ROWS {
        let err = sqlx::query(&insert_statement(columns, values, "http://127.0.0.1:1/x"))
            .execute(&db.pool)
            .await
            .expect_err(column);
        assert!(err.to_string().contains("timers_values_in_range"), "{column}: {err}");
    }
    // An edit to such a value is refused too.
    let id = every_second_timer(&db, "http://127.0.0.1:1/x").await;
    let err = sqlx::query("UPDATE timers SET catchup_window_ms = 9223372036854775807 WHERE id = $1")
        .bind(id)
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("timers_values_in_range"), "{err}");
}

#[tokio::test]
async fn rows_out_of_range_are_marked_invalid_and_the_others_planned() {
    let db = TestDb::create().await;
    // Rows stored before the schema checked these values (the migration marks them
    // invalid; here the check is dropped so the planner meets them as 'new' and 'planned').
    sqlx::query("ALTER TABLE timers DROP CONSTRAINT timers_values_in_range").execute(&db.pool).await.unwrap();
    let mut extreme = Vec::new();
    for (column, columns, values) in EXTREME_ROWS {
        let id =
            sqlx::query_scalar(&format!("{} RETURNING id", insert_statement(columns, values, "http://127.0.0.1:1/x")))
                .fetch_one(&db.pool)
                .await
                .unwrap();
        extreme.push((column, id));
    }
    let good = every_second_timer(&db, "http://127.0.0.1:1/x").await;
    // One that was planned before its catch-up window was made huge behind the trigger.
    let planned = insert_sql(
        &db,
        "name, schedule_kind, cron_expr, http_url",
        "'planned-before', 'cron', '* * * * * *', 'http://127.0.0.1:1/y'",
    )
    .await;
    let now = Utc::now();
    planner().validate_new(&db.pool, now, &db.hold_buckets("scanner-a").await, None).await.unwrap();
    sqlx::query("UPDATE timers SET catchup_window_ms = 9223372036854775807, next_plan_at = $2 WHERE id = $1")
        .bind(planned)
        .bind(now - chrono::Duration::hours(2))
        .execute(&db.pool)
        .await
        .unwrap();
    let report = planner()
        .plan_due(&db.pool, now + chrono::Duration::seconds(15), &db.hold_buckets("scanner-a").await, None)
        .await
        .unwrap();
    assert_eq!(report.invalid, 1, "{report:?}");

    for (column, id) in extreme.into_iter().chain([("catchup_window_ms", planned)]) {
        let (status, reason, _) = plan_state(&db, id).await;
        let reason = reason.unwrap_or_default();
        assert_eq!(status, "invalid", "{column}: {reason}");
        assert!(reason.starts_with(&format!("{column}:")), "{column}: {reason}");
    }
    assert_eq!(plan_state(&db, good).await.0, "planned");
    assert!(!task_times(&db, good).await.is_empty(), "the good timer is planned");
}
