//! Misfire and overlap policies on the real stack: the scanner stopped across scheduled
//! occurrences, and callbacks slower than the schedule.

use std::time::Duration;

use chrono::{DateTime, DurationRound, Utc};
use punctual_testkit::stack::{dump_logs, metric_value};
use punctual_testkit::{Behaviour, Call, Sink, Stack};
use serde_json::json;

fn whole_second_in(s: i64) -> DateTime<Utc> {
    (Utc::now() + chrono::Duration::seconds(s)).duration_trunc(chrono::Duration::seconds(1)).unwrap()
}

async fn sleep_until(t: DateTime<Utc>) {
    tokio::time::sleep((t - Utc::now()).to_std().unwrap_or_default()).await;
}

fn scheduled(calls: &[Call]) -> Vec<DateTime<Utc>> {
    let mut v: Vec<_> = calls.iter().filter_map(Call::scheduled_at).collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misfire_policies_after_the_scanner_was_down() {
    let sink = Sink::start().await;
    let mut stack = Stack::start(&[
        ("PUNCTUAL_MISFIRE_THRESHOLD_MS", "1000".into()),
        ("PUNCTUAL_LOOKAHEAD_MS", "1000".into()),
        ("PUNCTUAL_LEASE_MS", "2500".into()),
    ])
    .await;
    for policy in ["skip", "fire_once", "fire_all"] {
        stack
            .create_timer(&json!({"name": policy, "schedule": {"cron": "* * * * * *"}, "misfire_policy": policy,
                "action": {"http": {"url": sink.url(&format!("/{policy}"))}}}))
            .await;
    }
    let stop = whole_second_in(3);
    sleep_until(stop).await;
    assert!(stack.scanner.stop(Duration::from_secs(10)), "graceful stop");
    let restart = whole_second_in(5) + chrono::Duration::milliseconds(500);
    sleep_until(restart).await;
    stack.scanner.restart();
    stack.scanner.wait_healthy(Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(4)).await;

    // Which occurrences were late beyond the threshold is decided when the restarted
    // scanner takes its buckets back (later on a busy machine): they are the ones each
    // policy cancelled, read from the tasks table.
    let cancelled = |policy: &'static str| {
        let pool = stack.db.pool.clone();
        async move {
            let times: Vec<DateTime<Utc>> = sqlx::query_scalar(
                "SELECT t.scheduled_at FROM tasks t JOIN timers tm ON tm.id = t.timer_id
                  WHERE tm.name = $1 AND t.status = 'cancelled' AND t.error = 'misfired (' || $1 || ')'
                  ORDER BY 1",
            )
            .bind(policy)
            .fetch_all(&pool)
            .await
            .unwrap();
            times
        }
    };
    let (skipped, once_cancelled) = (cancelled("skip").await, cancelled("fire_once").await);
    let fired = |path: &str| scheduled(&sink.calls_to(path));
    let all = fired("/fire_all").into_iter().filter(|t| *t > stop && *t < restart).count();
    println!("misfired: skip {skipped:?}, fire_once {once_cancelled:?}; fire_all fired {all} of 5");
    // The first occurrence due while it was down was 4.5 s late when it came back.
    assert!(!skipped.is_empty(), "skip cancelled the missed occurrences\n{}", dump_logs(&stack));
    assert!(skipped.iter().all(|t| !fired("/skip").contains(t)), "skip fires none of the missed");
    // fire_once: all but the newest of the missed are cancelled, and that one fires.
    let newest_missed = *once_cancelled.last().expect("fire_once cancelled all but one of the missed");
    let once = fired("/fire_once");
    assert!(once_cancelled.iter().all(|t| !once.contains(t)), "fire_once fires none of those it cancelled");
    assert!(
        once.contains(&(newest_missed + chrono::Duration::seconds(1))),
        "fire_once fires the newest of the missed, after {newest_missed}: {once:?}"
    );
    assert_eq!(all, 5, "fire_all fires each missed occurrence");
    // The cancelled ones are counted by policy (the restarted scanner's counters).
    let scanner_metrics = stack.metrics(&stack.scanner).await;
    let misfired = |policy: &str| {
        metric_value(&scanner_metrics, &format!("punctual_tasks_misfired_total{{policy=\"{policy}\"}}")).unwrap_or(-1.0)
    };
    assert_eq!(misfired("skip"), skipped.len() as f64, "skip's missed occurrences counted");
    assert_eq!(misfired("fire_once"), once_cancelled.len() as f64, "fire_once's counted");
    assert_eq!(misfired("fire_all"), 0.0, "fire_all cancels none within its window");
    // And every policy keeps firing afterwards, each occurrence once.
    for path in ["/skip", "/fire_once", "/fire_all"] {
        let times = scheduled(&sink.calls_to(path));
        assert!(times.iter().any(|t| *t > restart + chrono::Duration::seconds(1)), "{path} fires again");
        let mut unique = times.clone();
        unique.dedup();
        assert_eq!(unique.len(), times.len(), "{path}: no occurrence twice");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_policies_with_callbacks_slower_than_the_schedule() {
    let sink = Sink::start().await;
    let stack = Stack::start(&[]).await;
    let start = whole_second_in(3);
    for policy in ["allow", "skip", "buffer_one"] {
        let path = format!("/{policy}");
        sink.behave(&path, Behaviour::slow(Duration::from_millis(2_500)));
        stack
            .create_timer(&json!({"name": policy, "overlap_policy": policy,
                "schedule": {"cron": "* * * * * *", "start_at": start, "end_at": start + chrono::Duration::seconds(6)},
                "action": {"http": {"url": sink.url(&path), "timeout_ms": 10000}}}))
            .await;
    }
    sleep_until(start + chrono::Duration::seconds(14)).await;
    let allow = sink.calls_to("/allow");
    let skip = sink.calls_to("/skip");
    let buffer = sink.calls_to("/buffer_one");
    println!("calls: allow {}, skip {}, buffer_one {}", allow.len(), skip.len(), buffer.len());
    assert_eq!(allow.len(), 6, "allow runs every occurrence\n{}", dump_logs(&stack));
    // skip: a run every 3 s (each takes 2.5 s): occurrences 0 and 3.
    assert_eq!(scheduled(&skip), vec![start, start + chrono::Duration::seconds(3)]);
    // buffer_one: more than skip, fewer than allow, and never two at once.
    assert!(buffer.len() > skip.len() && buffer.len() < allow.len(), "buffer_one {}", buffer.len());
    for calls in [&skip, &buffer] {
        for pair in calls.windows(2) {
            let gap = pair[1].received_at - pair[0].received_at;
            assert!(gap >= chrono::Duration::milliseconds(2_400), "runs overlapped: {gap}");
        }
    }
    let not_run: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT status, error FROM tasks WHERE status <> 'succeeded'")
            .fetch_all(&stack.db.pool)
            .await
            .unwrap();
    assert!(
        not_run.iter().all(|(s, e)| s == "cancelled" && e.as_deref().unwrap_or("").starts_with("overlap")),
        "{not_run:?}"
    );
    // The executor counted each occurrence not run by its reason.
    let executor_metrics = stack.metrics(&stack.executor).await;
    let skipped = |reason: &str| {
        metric_value(&executor_metrics, &format!("punctual_tasks_skipped_total{{reason=\"{reason}\"}}")).unwrap_or(-1.0)
    };
    assert_eq!(skipped("overlap_skipped") as usize, not_run.len(), "{executor_metrics}");
    assert!(skipped("overlap_deferred") >= 1.0, "buffer_one deferred at least one: {}", skipped("overlap_deferred"));
    assert_eq!(skipped("cancelled"), 0.0);
}
