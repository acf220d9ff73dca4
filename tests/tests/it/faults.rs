//! Fault tests: a steady load (cron timers firing every second within a bounded window),
//! a fault injected into a real process mid-window, recovery, then an audit of every
//! callback the sink received against every occurrence that was due. Each test prints its
//! counts of lost and duplicated occurrences.
//!
//! They share the `faults` test group of .config/nextest.toml: each one's timing assumes
//! the machine is not also busy with another fault.

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use punctual_shared::timer::{identity_scheduled_at, task_identity};
use punctual_testkit::load::{until, Load};
use punctual_testkit::repeats::{Repeats, SINK_DELAY, WRITE_BACK};
use punctual_testkit::servers::{Broker, PgServer};
use punctual_testkit::stack::dump_logs;
use punctual_testkit::{eventually, eventually_or, kafka_brokers, Behaviour, Sink, Stack};
use uuid::Uuid;

/// Settings that make recovery quick enough to test: short leases and session timeouts.
fn fast_recovery() -> Vec<(&'static str, String)> {
    vec![
        ("PUNCTUAL_LEASE_MS", "4000".into()),
        ("PUNCTUAL_LOOKAHEAD_MS", "1500".into()),
        ("PUNCTUAL_KAFKA_SESSION_TIMEOUT_MS", "6000".into()),
    ]
}

/// For the broker tests: a broker restarted on a machine busy with the rest of the suite
/// takes 30–40 s to answer again, and occurrences due meanwhile must not pass the misfire
/// threshold (the misfire policies have tests of their own).
fn broker_recovery() -> Vec<(&'static str, String)> {
    let mut env = fast_recovery();
    env.push(("PUNCTUAL_MISFIRE_THRESHOLD_MS", "600000".into()));
    env
}

const TIMERS: i64 = 100;
const SECONDS: i64 = 15;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scanner_killed_mid_window_loses_nothing_and_duplicates_nothing() {
    let sink = Sink::start().await;
    let mut stack = Stack::start(&fast_recovery()).await;
    let load = Load::start(&stack, &sink, TIMERS, SECONDS).await;
    // Mid-window: the scanner holds claims for the next lookahead (1.5 s).
    until(&load, 5).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stack.scanner.kill();
    until(&load, 7).await;
    stack.scanner.restart();
    let audit = load.audit(&stack, &sink, Duration::from_secs(60)).await;
    assert_eq!((audit.lost, audit.duplicated, audit.unexpected), (0, 0, 0), "{audit:?}");
    assert_eq!(audit.expected, (TIMERS * SECONDS) as usize);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executor_killed_during_callbacks_repeats_only_what_was_in_flight() {
    let sink = Sink::start().await;
    // Slow callbacks: when the executor dies, some are in flight.
    sink.behave("/load", Behaviour::slow(Duration::from_millis(300)));
    let mut stack = Stack::start(&fast_recovery()).await;
    let load = Load::start(&stack, &sink, TIMERS, SECONDS).await;
    // Mid-callback: the second's calls go out a few ms after it starts and take 300 ms.
    until(&load, 5).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    stack.executor.kill();
    let killed_at = Utc::now();
    // Restarted once the group has noticed the death (session timeout 6 s): how soon a
    // quick restart gets the partitions back is the broker's group protocol at work, not
    // Punctual's; what matters here is what the new member does with the redeliveries.
    until(&load, 13).await;
    stack.executor.restart();
    let audit = load.audit(&stack, &sink, Duration::from_secs(90)).await;
    // What may be repeated: the calls the dead executor had started and not written back
    // (each takes 300 ms, and its outcome is written in a batch), and nothing else.
    let repeats = Repeats::of(&sink.calls(), killed_at);
    let repeated = repeats.len();
    assert_eq!((audit.lost, audit.unexpected), (0, 0), "{audit:?}");
    repeats.assert_in_flight(Duration::from_millis(300) + WRITE_BACK);
    assert_eq!(audit.duplicated, repeated, "each at most twice");
}

/// A run is marked `running` by the process that makes it. An executor killed mid-call and
/// restarted at once comes back under the same static membership (same owner), and gets
/// the same messages again: it must not take its predecessor's runs for its own, or they
/// stay `running` for ever (and, with the overlap policy `skip`, every later occurrence of
/// their timers is skipped behind them). Each run in flight at the kill is made again once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_marked_by_a_killed_executor_run_again_under_the_same_owner() {
    let sink = Sink::start().await;
    // Long enough that the calls seen at the sink are still unanswered at the kill however
    // slowly a busy machine notices them and kills (300 ms was once too short: every call of
    // the second was repeated, so in flight, but had come 250 ms before the kill returned).
    const HOLD_MS: i64 = 600;
    sink.behave("/load", Behaviour::slow(Duration::from_millis(HOLD_MS as u64)));
    let mut stack = Stack::start(&fast_recovery()).await;
    // `skip` marks every run, so each one in flight at the kill is a `running` row.
    let load = Load::start_with_overlap(&stack, &sink, 20, 10, "skip").await;
    until(&load, 4).await;
    // Killed as soon as second 4's first call has reached the sink, which holds each for
    // HOLD_MS: calls are in flight then however late the busy machine delivers that second
    // (a fixed 150 ms after it came too early once: nothing had been called yet).
    let second_4 = load.at(4);
    eventually(Duration::from_secs(30), "a call of second 4", || async {
        let keys = sink.calls().into_iter().filter_map(|c| c.idempotency_key);
        keys.filter_map(|k| identity_scheduled_at(&k)).any(|at| at == second_4).then_some(())
    })
    .await;
    stack.executor.kill();
    let killed_at = Utc::now();
    stack.executor.restart();
    // Every occurrence ends: run, or skipped behind a run of its timer still running.
    let total = 20 * 10;
    let finished = eventually_or(Duration::from_secs(90), || async {
        let (done, unfinished): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE status IN ('succeeded', 'cancelled')),
                    count(*) FILTER (WHERE status NOT IN ('succeeded', 'cancelled'))
               FROM tasks WHERE timer_id = ANY($1)",
        )
        .bind(&load.timers)
        .fetch_one(&stack.db.pool)
        .await
        .unwrap();
        println!("{done} of {total} finished, {unfinished} not");
        (done == total).then_some(())
    })
    .await;
    assert!(finished.is_some(), "occurrences never finished\n{}", dump_logs(&stack));
    let calls = sink.calls();
    let received_within = |from_ms: i64, to_ms: i64| -> HashSet<String> {
        calls
            .iter()
            .filter(|c| {
                c.received_at > killed_at + chrono::Duration::milliseconds(from_ms)
                    && c.received_at <= killed_at + chrono::Duration::milliseconds(to_ms)
            })
            .filter_map(|c| c.idempotency_key.clone())
            .collect()
    };
    // Received in the HOLD_MS (less 50) before the kill: still unanswered when it came.
    let unanswered = received_within(-(HOLD_MS - 50), 0);
    // What may run again: calls made before the kill (some may reach the sink a little
    // after it) whose outcome was not written yet.
    let may_repeat = received_within(-(HOLD_MS + WRITE_BACK.as_millis() as i64), SINK_DELAY.as_millis() as i64);
    let mut counts = std::collections::HashMap::<String, usize>::new();
    for key in calls.iter().filter_map(|c| c.idempotency_key.clone()) {
        *counts.entry(key).or_default() += 1;
    }
    let repeated: HashSet<String> = counts.iter().filter(|(_, n)| **n > 1).map(|(k, _)| k.clone()).collect();
    println!("unanswered at the kill: {}, repeated: {}", unanswered.len(), repeated.len());
    assert!(!unanswered.is_empty(), "calls were in flight at the kill");
    assert!(counts.values().all(|n| *n <= 2), "each at most twice");
    assert!(repeated.is_subset(&may_repeat), "only calls in flight at the kill are repeated");
    let not_again: Vec<&String> = unanswered.difference(&repeated).collect();
    assert!(not_again.is_empty(), "every run in flight at the kill is made again: not {not_again:?}");
}

/// The executor's static member can come back from the broker's restart fenced by its own
/// rejoin (librdkafka: "Static consumer fenced by other consumer with same
/// group.instance.id", fatal), and it exits to be started again; this test plays the
/// supervisor, as the next one does, and forgives only that exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_restarted_with_durable_storage_loses_nothing() {
    let broker = Broker::start(true);
    let sink = Sink::start().await;
    let server = std::env::var("PUNCTUAL_TEST_DATABASE_URL").unwrap();
    let mut stack = Stack::start_on(&server, &broker.brokers(), &broker_recovery()).await;
    let load = Load::start(&stack, &sink, TIMERS, SECONDS).await;
    until(&load, 5).await;
    broker.kill();
    until(&load, 7).await;
    broker.restart();
    let restarted = load.supervise(&mut stack, &sink, Duration::from_secs(90)).await;
    println!("restarted by the supervisor: {restarted:?}");
    assert!(
        restarted.iter().all(|(name, status)| name.starts_with("executor") && status.code() == Some(1)),
        "a service exited: {restarted:?}\n{}",
        dump_logs(&stack)
    );
    assert!(restarted.len() <= 1, "restarted again and again: {restarted:?}");
    let audit = load.audit(&stack, &sink, Duration::from_secs(10)).await;
    assert_eq!((audit.lost, audit.duplicated, audit.unexpected), (0, 0, 0), "{audit:?}");
}

/// A broker restarted with memory storage has lost every message, the topics, the
/// consumer group and its offsets. The scanner creates the tasks topic again and publishes
/// again, with a new producer, what was claimed and not started when the claims' leases
/// run out; the executor's new group generation reads the new log from its start.
///
/// librdkafka (2.12) can crash on a topic created again under a running client (its
/// metadata cache keeps the old topic id: librdkafka issues #4964, #4898); seen here in
/// about half the runs, in the executor. Services run under a supervisor that starts them
/// again (Compose's restart policy, systemd), and this test plays that part; it prints
/// what it restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_that_forgets_everything_loses_nothing() {
    let broker = Broker::start(false);
    let sink = Sink::start().await;
    let server = std::env::var("PUNCTUAL_TEST_DATABASE_URL").unwrap();
    let mut stack = Stack::start_on(&server, &broker.brokers(), &broker_recovery()).await;
    let load = Load::start(&stack, &sink, TIMERS, SECONDS).await;
    until(&load, 5).await;
    broker.kill();
    until(&load, 7).await;
    broker.restart();
    let restarted = load.supervise(&mut stack, &sink, Duration::from_secs(90)).await;
    println!("restarted by the supervisor: {restarted:?}");
    // Only the exits this test knows of, in the executor, are forgiven: librdkafka's crash
    // (a signal) and its exit on a fatal consumer error (status 1); any other exit, or
    // another service's, is a failure of Punctual's.
    use std::os::unix::process::ExitStatusExt;
    assert!(
        restarted
            .iter()
            .all(|(name, status)| name.starts_with("executor")
                && (status.signal().is_some() || status.code() == Some(1))),
        "a service exited: {restarted:?}\n{}",
        dump_logs(&stack)
    );
    assert!(restarted.len() <= 2, "restarted again and again: {restarted:?}");
    let audit = load.audit(&stack, &sink, Duration::from_secs(10)).await;
    assert_eq!((audit.lost, audit.duplicated, audit.unexpected), (0, 0, 0), "{audit:?}");
    let stuck: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks WHERE status <> 'succeeded'")
        .fetch_one(&stack.db.pool)
        .await
        .unwrap();
    assert_eq!(stuck, 0, "nothing stays stuck published");
}

/// A broker restarted without durable storage has lost the tasks topic, and a producer
/// only says so when its messages time out. The scanner checks every few seconds and
/// creates the topic again, so that what is claimed again can be published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_tasks_topic_is_created_again_by_the_scanner() {
    let stack = Stack::start(&[]).await;
    let brokers = kafka_brokers();
    assert!(punctual_testkit::topic_exists(&brokers, &stack.topic).await);
    punctual_testkit::delete_topic(&brokers, &stack.topic).await;
    let lost_at = std::time::Instant::now();
    eventually(Duration::from_secs(10), "the topic gone", || async {
        (!punctual_testkit::topic_exists(&brokers, &stack.topic).await).then_some(())
    })
    .await;
    eventually(Duration::from_secs(20), "the tasks topic created again", || async {
        punctual_testkit::topic_exists(&brokers, &stack.topic).await.then_some(())
    })
    .await;
    println!("tasks topic back after {:.1} s", lost_at.elapsed().as_secs_f64());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarted_services_reconnect_and_lose_nothing() {
    let pg = PgServer::start();
    let sink = Sink::start().await;
    let stack = Stack::start_on(&pg.url(), &kafka_brokers(), &fast_recovery()).await;
    let load = Load::start(&stack, &sink, TIMERS, SECONDS).await;
    until(&load, 5).await;
    pg.stop();
    until(&load, 7).await;
    pg.restart();
    let audit = load.audit(&stack, &sink, Duration::from_secs(90)).await;
    assert_eq!((audit.lost, audit.duplicated, audit.unexpected), (0, 0, 0), "{audit:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callback_target_down_for_a_while_is_retried_until_it_answers() {
    let sink = Sink::start().await;
    let addr = sink.addr;
    let stack = Stack::start(&fast_recovery()).await;
    let load = Load::start(&stack, &sink, TIMERS, SECONDS).await;
    until(&load, 4).await;
    let before = sink.stop().await; // connection refused from now on
    until(&load, 7).await;
    let sink = Sink::start_on(addr).await;
    // The calls made before the outage went to the first sink: count them too.
    let audit = load
        .audit_calls(&stack, || before.iter().cloned().chain(sink.calls()).collect(), Duration::from_secs(90))
        .await;
    assert_eq!((audit.lost, audit.duplicated, audit.unexpected), (0, 0, 0), "{audit:?}");
    let retried: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks WHERE status = 'succeeded' AND attempt > 1")
        .fetch_one(&stack.db.pool)
        .await
        .unwrap();
    let not_done: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks WHERE status <> 'succeeded'")
        .fetch_one(&stack.db.pool)
        .await
        .unwrap();
    println!("succeeded after a retry: {retried}");
    // The outage spans three seconds' occurrences; on a busy machine some of them are
    // first called after it ended. At least a second's worth met it and were retried.
    assert!(retried >= TIMERS, "the outage's occurrences were retried ({retried})");
    assert_eq!(not_done, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_scanner_loses_its_claims_and_does_not_publish_them_when_thawed() {
    let sink = Sink::start().await;
    // The load's occurrences fall on whole seconds and the lookahead is 1.5 s, so a scan
    // finds a second's claims only once a second; backed off between them (650 ms at most
    // here), the scanner claims the next second up to 0.35 s after it published the last,
    // and a freeze in that gap finds it holding nothing. Scans every 200 ms keep claims in
    // its wheel at every moment, which is what this test freezes.
    let mut env = fast_recovery();
    env.push(("PUNCTUAL_SCAN_IDLE_INTERVAL_MS", "200".into()));
    let stack = Stack::start(&env).await;
    let load = Load::start(&stack, &sink, TIMERS, SECONDS).await;
    until(&load, 4).await;
    // Frozen holding its claims for the next lookahead, and well past its lease (4 s):
    // a second scanner takes over.
    stack.scanner.freeze();
    let second = stack.start_another("punctual-scanner", "PUNCTUAL_SCANNER_ADDR").await;
    until(&load, 10).await;
    stack.scanner.thaw();
    let audit = load.audit(&stack, &sink, Duration::from_secs(60)).await;
    let fenced = |text: &str| punctual_testkit::stack::metric_value(text, "punctual_tasks_fenced_total").unwrap_or(0.0);
    let thawed_fenced = fenced(&stack.metrics(&stack.scanner).await);
    let other_claimed =
        punctual_testkit::stack::metric_value(&stack.metrics(&second).await, "punctual_tasks_claimed_total");
    println!("held tasks dropped by the thawed scanner: {thawed_fenced}; claimed by the other: {other_claimed:?}");
    assert_eq!((audit.lost, audit.duplicated, audit.unexpected), (0, 0, 0), "{audit:?}");
    assert!(thawed_fenced > 0.0, "the thawed scanner dropped what it no longer held");
}

/// A broker that loses acknowledged messages (storage lost, topic deleted and re-created)
/// leaves tasks claimed whose message no executor will see. Injected here directly: task
/// rows claimed by a scanner long gone, with no message behind them; their leases expire
/// after PUNCTUAL_LEASE_MS and they are claimed and published again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_whose_messages_the_broker_lost_are_published_again() {
    let sink = Sink::start().await;
    let stack = Stack::start(&fast_recovery()).await;
    let timer: Uuid = sqlx::query_scalar(
        "INSERT INTO timers (name, schedule_kind, run_at, http_url, plan_status)
         VALUES ('lost', 'once', now(), $1, 'done') RETURNING id",
    )
    .bind(sink.url("/lost"))
    .fetch_one(&stack.db.pool)
    .await
    .unwrap();
    // Claimed (and published) a moment ago: their leases run out about 2 s from now.
    let lost: Vec<DateTime<Utc>> = sqlx::query_scalar(
        "INSERT INTO tasks (timer_id, scheduled_at, due_at, timer_version, bucket, status, claim_owner, claimed_at, lease_until)
         SELECT $1, t, t, 1, 0, 'claimed', 'a-scanner-long-gone', now(), now() + interval '2 seconds'
           FROM generate_series(now() - interval '5 seconds', now() - interval '1 second', interval '100 milliseconds') AS t
         RETURNING scheduled_at",
    )
    .bind(timer)
    .fetch_all(&stack.db.pool)
    .await
    .unwrap();
    let expected: HashSet<String> = lost.iter().map(|t| task_identity(timer, *t)).collect();
    let seen = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let seen: HashSet<String> = sink.calls().into_iter().filter_map(|c| c.idempotency_key).collect();
            if expected.is_subset(&seen) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let calls = sink.calls();
    let reclaimed =
        punctual_testkit::stack::metric_value(&stack.metrics(&stack.scanner).await, "punctual_tasks_reclaimed_total");
    println!("lost messages: {}, calls: {}, claimed again: {reclaimed:?}", expected.len(), calls.len());
    assert!(seen.is_ok(), "every lost task ran\n{}", dump_logs(&stack));
    assert_eq!(calls.len(), expected.len(), "each once");
    let stuck: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks WHERE status <> 'succeeded'")
        .fetch_one(&stack.db.pool)
        .await
        .unwrap();
    assert_eq!(stuck, 0, "nothing stays stuck claimed");
    assert_eq!(reclaimed, Some(expected.len() as f64), "each lost task claimed again once");
}
