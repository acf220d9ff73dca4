//! One namespace's misbehaviour against another namespace's occurrences, on the real stack:
//! what the noisy namespace does may cost its own occurrences, never the steady one's.

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use punctual_testkit::black_hole::BlackHole;
use punctual_testkit::stack::{dump_logs, metric_value};
use punctual_testkit::{eventually, eventually_or, Sink, Stack};
use sqlx::PgPool;
use uuid::Uuid;

/// Inserts `count` timers of `namespace` firing every second from `start` until `end` at
/// `url`, each allowed one attempt of at most `timeout_ms`.
async fn every_second(
    pool: &PgPool,
    namespace: &str,
    count: i32,
    (start, end): (DateTime<Utc>, DateTime<Utc>),
    url: &str,
    timeout_ms: i32,
) -> Vec<Uuid> {
    sqlx::query_scalar(
        "INSERT INTO timers (namespace, name, schedule_kind, interval_ms, start_at, end_at, http_url,
                             http_timeout_ms, retry_max_attempts)
         SELECT $1, $1 || '-' || gen_random_uuid(), 'interval', 1000, $3, $4, $5, $6, 1 FROM generate_series(1, $2)
         RETURNING id",
    )
    .bind(namespace)
    .bind(count)
    .bind(start)
    .bind(end)
    .bind(url)
    .bind(timeout_ms)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// A stack whose executor has 200 slots, 8 to 16 calls a target and a turn wait of 1 s,
/// and whose scanner judges occurrences 5 s late misfired: a neighbour that took the slots
/// over would make the others' occurrences misfire.
async fn small_executor() -> Stack {
    Stack::start(&[
        ("PUNCTUAL_MAX_IN_FLIGHT", "200".into()),
        ("PUNCTUAL_MIN_CALLS_PER_TARGET", "8".into()),
        ("PUNCTUAL_MAX_CALLS_PER_TARGET", "16".into()),
        ("PUNCTUAL_TURN_WAIT_MS", "1000".into()),
        ("PUNCTUAL_MISFIRE_THRESHOLD_MS", "5000".into()),
    ])
    .await
}

/// Sets `namespace`'s limits, and returns when every executor applies them: it reads
/// them every 5 s.
async fn limit_namespace(stack: &Stack, namespace: &str, limits: serde_json::Value) -> DateTime<Utc> {
    let limited = stack
        .http
        .patch(stack.admin.url(&format!("/v1/namespaces/{namespace}")))
        .json(&serde_json::json!({ "limits": limits }))
        .send()
        .await
        .unwrap();
    assert_eq!(limited.status(), 200);
    Utc::now() + chrono::Duration::seconds(6)
}

/// The steady namespace's occurrences: 10 timers firing every second for 10 s.
const STEADY_OCCURRENCES: i64 = 100;

/// A status, how many tasks have it, and the first and last of their scheduled times.
type StatusCount = (String, i64, Option<DateTime<Utc>>, Option<DateTime<Utc>>);

/// Waits until every occurrence of `timers` scheduled before `end` has finished, and
/// returns how many there were. Their rows too: an occurrence not planned yet (a planner
/// behind an import) has none, and is not finished. On a timeout, says where each stands.
async fn all_finished(stack: &Stack, timers: &[Uuid], end: DateTime<Utc>) -> i64 {
    let pool = &stack.db.pool;
    let finished = eventually_or(Duration::from_secs(60), || async {
        let (open, finished): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE status NOT IN ('succeeded', 'dead', 'cancelled')),
                    count(*) FILTER (WHERE status IN ('succeeded', 'dead', 'cancelled'))
               FROM tasks WHERE timer_id = ANY($1) AND scheduled_at < $2",
        )
        .bind(timers)
        .bind(end)
        .fetch_one(pool)
        .await
        .ok()?;
        (Utc::now() > end && open == 0 && finished >= STEADY_OCCURRENCES).then_some(finished)
    })
    .await;
    if let Some(finished) = finished {
        return finished;
    }
    let tasks: Vec<StatusCount> = sqlx::query_as(
        "SELECT status, count(*), min(scheduled_at), max(scheduled_at) FROM tasks
          WHERE timer_id = ANY($1) AND scheduled_at < $2 GROUP BY status",
    )
    .bind(timers)
    .bind(end)
    .fetch_all(pool)
    .await
    .unwrap_or_default();
    let plans: Vec<(String, Option<DateTime<Utc>>, i64)> =
        sqlx::query_as("SELECT plan_status, max(next_plan_at), count(*) FROM timers WHERE id = ANY($1) GROUP BY 1")
            .bind(timers)
            .fetch_all(pool)
            .await
            .unwrap_or_default();
    panic!(
        "the steady occurrences not all finished 60 s after their last was due (until {end}): \
         their tasks by status (count, first and last scheduled) {tasks:?}; their timers by plan \
         status (latest next plan, count) {plans:?}\n{}",
        dump_logs(stack)
    )
}

/// Every occurrence of the steady namespace's 10 timers over 10 s succeeded (none
/// misfired, none failed) and was called once.
async fn assert_steady_all_succeeded_once(
    stack: &Stack,
    sink: &Sink,
    steady: &[Uuid],
    end: DateTime<Utc>,
    finished: i64,
) {
    let failed: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT status, error FROM tasks WHERE timer_id = ANY($1) AND scheduled_at < $2 AND status <> 'succeeded'",
    )
    .bind(steady)
    .bind(end)
    .fetch_all(&stack.db.pool)
    .await
    .unwrap();
    assert!(failed.is_empty(), "every steady occurrence succeeded: {failed:?}\n{}", dump_logs(stack));
    assert!(finished >= STEADY_OCCURRENCES, "10 timers over 10 s: {finished}");
    let calls = sink.calls_to("/steady");
    let keys: HashSet<_> = calls.iter().map(|c| c.idempotency_key.clone()).collect();
    assert_eq!((calls.len(), keys.len()), (finished as usize, finished as usize), "each called once");
}

/// A target that accepts connections and never answers, aimed at by 100 timers a second
/// of one namespace (each call waiting 20 s for its timeout), would fill an executor's
/// slots (200 here) within two seconds if its calls waited for their turns there. They
/// wait at most `PUNCTUAL_TURN_WAIT_MS`; beyond that they are deferred, and another
/// namespace's occurrences, due meanwhile, all run once, none misfired (the threshold is
/// 5 s here: an occurrence stuck behind the black hole's calls would pass it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_hole_in_one_namespace_leaves_another_namespaces_occurrences_all_delivered() {
    let (black_hole, sink) = (BlackHole::start().await, Sink::start().await);
    let stack = small_executor().await;
    let start = Utc::now() + chrono::Duration::seconds(2);
    let pool = &stack.db.pool;
    let noisy_end = start + chrono::Duration::seconds(30);
    every_second(pool, "noisy", 100, (start, noisy_end), &black_hole.url("/hole"), 20_000).await;
    // The steady namespace starts once the black hole's calls have piled up.
    let steady_span = (start + chrono::Duration::seconds(3), start + chrono::Duration::seconds(13));
    let steady = every_second(pool, "steady", 10, steady_span, &sink.url("/steady"), 10_000).await;
    let finished = all_finished(&stack, &steady, steady_span.1).await;
    assert_steady_all_succeeded_once(&stack, &sink, &steady, steady_span.1, finished).await;
    // The black hole was called, and its other occurrences deferred rather than held.
    assert!(black_hole.accepted() >= 8, "the black hole's calls were made: {}", black_hole.accepted());
    let metrics = stack.metrics(&stack.executor).await;
    let deferred = metric_value(&metrics, "punctual_deferred_total{reason=\"target_limit\"}").unwrap_or(0.0);
    assert!(deferred > 0.0, "calls to the black hole beyond its turns were deferred");
}

/// A namespace limited to 20 calls at once, whose 100 timers a second call 20 targets
/// that never answer (so each call it makes stays in flight for the whole test), makes
/// exactly 20 calls: the others are deferred. Another namespace's occurrences meanwhile all
/// run once, none misfired. Without the limit (8 to 16 calls a target, waiting calls
/// besides, in the executor's 200 slots) they stalled: the test timed out waiting for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_at_its_limit_of_calls_does_not_slow_another() {
    let mut holes = Vec::new();
    for _ in 0..20 {
        holes.push(BlackHole::start().await);
    }
    let sink = Sink::start().await;
    let stack = small_executor().await;
    let start = limit_namespace(&stack, "capped", serde_json::json!({"max_concurrent_calls": 20})).await;
    let pool = &stack.db.pool;
    for hole in &holes {
        every_second(pool, "capped", 5, (start, start + chrono::Duration::seconds(30)), &hole.url("/"), 20_000).await;
    }
    let steady_span = (start + chrono::Duration::seconds(3), start + chrono::Duration::seconds(13));
    let steady = every_second(pool, "steady", 10, steady_span, &sink.url("/steady"), 10_000).await;
    let finished = all_finished(&stack, &steady, steady_span.1).await;
    assert_steady_all_succeeded_once(&stack, &sink, &steady, steady_span.1, finished).await;
    let made: usize = holes.iter().map(BlackHole::accepted).sum();
    assert_eq!(made, 20, "calls in flight at once: the namespace's limit\n{}", dump_logs(&stack));
    let metrics = stack.metrics(&stack.executor).await;
    let deferred = metric_value(&metrics, "punctual_deferred_total{reason=\"namespace_limit\"}").unwrap_or(0.0);
    assert!(deferred > 0.0, "the namespace's calls beyond its limit were deferred");
}

/// A target that fails every call of a namespace for long enough (here 2 s and 3 calls) is
/// paused for it: reported by the API with the reason, its occurrences cancelled without a
/// call while another target of the namespace is still called; resumed on request, it is
/// called again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_paused_for_failing_is_reported_and_resumes_on_request() {
    let (down, up) = (Sink::start().await, Sink::start().await);
    down.behave("/", punctual_testkit::Behaviour::fail_first(100_000, 500));
    let stack = Stack::start(&[
        ("PUNCTUAL_PAUSE_FAILING_TARGET_AFTER_MS", "2000".into()),
        ("PUNCTUAL_PAUSE_FAILING_TARGET_MIN_FAILURES", "3".into()),
    ])
    .await;
    let span = (Utc::now() + chrono::Duration::seconds(1), Utc::now() + chrono::Duration::seconds(120));
    let failing = every_second(&stack.db.pool, "flaky", 1, span, &down.url("/"), 5_000).await;
    every_second(&stack.db.pool, "flaky", 1, span, &up.url("/up"), 5_000).await;
    let paused_path = stack.admin.url("/v1/namespaces/flaky/paused-targets");
    let paused = eventually(Duration::from_secs(30), "the failing target paused", || async {
        let listed: serde_json::Value = stack.http.get(&paused_path).send().await.ok()?.json().await.ok()?;
        let paused = listed["paused_targets"].as_array()?.first()?.clone();
        Some(paused)
    })
    .await;
    let target = format!("http://{}", down.addr);
    assert_eq!(paused["target"], target.as_str(), "{paused}");
    let reason = paused["reason"].as_str().unwrap();
    assert!(reason.starts_with("every call failed for") && reason.contains("HTTP 500"), "{reason}");
    // Two occurrences cancelled as paused: no call was made between them.
    let cancelled = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM tasks WHERE timer_id = $1 AND status = 'cancelled' AND error LIKE 'not called: target%paused%'",
        )
        .bind(failing[0])
        .fetch_one(&stack.db.pool)
        .await
        .unwrap()
    };
    eventually(Duration::from_secs(30), "an occurrence cancelled as paused", || async {
        (cancelled().await >= 1).then_some(())
    })
    .await;
    let (calls_down, calls_up) = (down.calls().len(), up.calls().len());
    eventually(Duration::from_secs(30), "two more cancelled", || async { (cancelled().await >= 3).then_some(()) })
        .await;
    assert_eq!(down.calls().len(), calls_down, "the paused target was not called");
    assert!(up.calls().len() > calls_up, "the namespace's other target still was");

    down.behave("/", punctual_testkit::Behaviour::default());
    let resumed = stack
        .http
        .post(stack.admin.url("/v1/namespaces/flaky/paused-targets/resume"))
        .json(&serde_json::json!({"target": target}))
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), 204);
    eventually(Duration::from_secs(30), "the resumed target called and answering", || async {
        let succeeded: i64 =
            sqlx::query_scalar("SELECT count(*) FROM tasks WHERE timer_id = $1 AND status = 'succeeded'")
                .bind(failing[0])
                .fetch_one(&stack.db.pool)
                .await
                .ok()?;
        (succeeded > 0).then_some(())
    })
    .await;
    let listed: serde_json::Value = stack.http.get(&paused_path).send().await.unwrap().json().await.unwrap();
    assert_eq!(listed["paused_targets"], serde_json::json!([]), "{}", dump_logs(&stack));
}

/// 20,000 one-shot timers of one namespace, inserted with one statement, are validated a
/// pass at a time between the scans that plan and claim the other timers: another
/// namespace's occurrences, planned only 1 s ahead here, all run once, none misfired
/// (threshold 2 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_in_one_namespace_leaves_another_namespaces_occurrences_all_delivered() {
    let (other, sink) = (Sink::start().await, Sink::start().await);
    let stack = Stack::start(&[
        ("PUNCTUAL_PLAN_HORIZON_MS", "1000".into()),
        ("PUNCTUAL_LOOKAHEAD_MS", "1000".into()),
        ("PUNCTUAL_MISFIRE_THRESHOLD_MS", "2000".into()),
    ])
    .await;
    let pool = &stack.db.pool;
    // Far enough ahead that no occurrence is beyond the 2 s threshold when a busy scanner
    // gets to validate the new timers (fire_once would rightly collapse those into one).
    let start = Utc::now() + chrono::Duration::seconds(8);
    let steady_span = (start, start + chrono::Duration::seconds(10));
    let steady = every_second(pool, "steady", 10, steady_span, &sink.url("/steady"), 10_000).await;
    // Once the steady timers are planned, the import.
    eventually(Duration::from_secs(20), "the steady timers planned", || async {
        let new: i64 =
            sqlx::query_scalar("SELECT count(*) FROM timers WHERE plan_status = 'new'").fetch_one(pool).await.ok()?;
        (new == 0).then_some(())
    })
    .await;
    sqlx::query(
        "INSERT INTO timers (namespace, name, schedule_kind, run_at, http_url)
         SELECT 'import', 'import-' || i, 'once', now() + interval '1 hour' + i * interval '1 millisecond', $1
           FROM generate_series(1, 20000) AS i",
    )
    .bind(other.url("/import"))
    .execute(pool)
    .await
    .unwrap();
    let finished = all_finished(&stack, &steady, steady_span.1).await;
    assert_steady_all_succeeded_once(&stack, &sink, &steady, steady_span.1, finished).await;
    // One pass of new timers a scan: on a machine busy with the rest of the suite, 20,000
    // take a minute or more (50,000 took up to 191 s, close to the suite's 300 s limit of a
    // test). What this test holds to is the steady namespace, above.
    eventually(Duration::from_secs(240), "the import planned too", || async {
        let planned: i64 =
            sqlx::query_scalar("SELECT count(*) FROM timers WHERE namespace = 'import' AND plan_status <> 'new'")
                .fetch_one(pool)
                .await
                .ok()?;
        (planned == 20_000).then_some(())
    })
    .await;
}

/// A namespace limited to 5 fires a second, whose 20 timers fire every second, runs a
/// second's worth at once and then one every 200 ms: the others are deferred to their
/// slots. Another namespace's occurrences meanwhile all run once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_at_its_limit_of_fires_a_second_is_spread_and_another_is_not() {
    let (capped_sink, sink) = (Sink::start().await, Sink::start().await);
    let stack = Stack::start(&[]).await;
    let start = limit_namespace(&stack, "capped", serde_json::json!({"max_fires_per_second": 5})).await;
    let pool = &stack.db.pool;
    let capped_span = (start, start + chrono::Duration::seconds(30));
    every_second(pool, "capped", 20, capped_span, &capped_sink.url("/"), 10_000).await;
    let steady_span = (start, start + chrono::Duration::seconds(10));
    let steady = every_second(pool, "steady", 10, steady_span, &sink.url("/steady"), 10_000).await;
    let finished = all_finished(&stack, &steady, steady_span.1).await;
    assert_steady_all_succeeded_once(&stack, &sink, &steady, steady_span.1, finished).await;
    // From the first call on: at most a second's worth (5) at once, then 5 a second.
    let calls = capped_sink.calls();
    let first = calls.iter().map(|c| c.received_at).min().expect("the capped namespace ran");
    let seconds = (Utc::now() - first).num_milliseconds() as f64 / 1_000.0;
    let allowed = (5.0 * (seconds + 1.0)).ceil() as usize + 1;
    assert!(calls.len() <= allowed, "{} calls in {seconds:.1} s, at most {allowed}", calls.len());
    assert!(calls.len() >= 25, "it ran at its rate: {} calls in {seconds:.1} s", calls.len());
    let metrics = stack.metrics(&stack.executor).await;
    let deferred = metric_value(&metrics, "punctual_deferred_total{reason=\"namespace_limit\"}").unwrap_or(0.0);
    assert!(deferred > 0.0, "the fires beyond its rate were deferred");
}
