//! Executors in their consumer group, killed under load: restarted at once (static
//! membership gives the new process its predecessor's partitions without waiting for the
//! session timeout), restarted after the session timeout, or not restarted while two
//! others take its partitions over. Each prints how soon firing resumed, and audits every
//! occurrence: nothing lost, repeats only of calls in flight at the kill.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use punctual_executor::group_watch::{describe, GroupView};
use punctual_testkit::load::{until, Load};
use punctual_testkit::repeats::{Repeats, WRITE_BACK};
use punctual_testkit::stack::metric_value;
use punctual_testkit::{eventually, kafka_brokers, unique_name, Behaviour, Sink, Stack};
use rdkafka::consumer::BaseConsumer;

const TIMERS: i64 = 200;
const SECONDS: i64 = 20;
/// Each call takes this long, so that some are in flight when an executor dies.
const CALL: Duration = Duration::from_millis(300);

/// How long before a kill a call may have begun and still be in flight: its own length,
/// and the write-back of its outcome. Calls of earlier seconds of the load are outside it.
const IN_FLIGHT: Duration = Duration::from_millis(300).saturating_add(WRITE_BACK);

/// How long after `since` the sink received its first call.
async fn first_call_after(sink: &Sink, since: DateTime<Utc>) -> Duration {
    let first = eventually(Duration::from_secs(60), "a call after the restart", || async {
        sink.calls().iter().map(|c| c.received_at).filter(|t| *t > since).min()
    })
    .await;
    (first - since).to_std().unwrap_or_default()
}

/// The group as the broker describes it, read by a client outside it.
fn group_view(stack: &Stack) -> GroupView {
    let observer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("group.id", unique_name("observer"))
        .create()
        .expect("observer");
    let group = stack.env.iter().find(|(k, _)| *k == "PUNCTUAL_EXECUTOR_GROUP").map(|(_, v)| v.clone()).unwrap();
    describe(&observer, &group, &stack.topic).expect("group described")
}

/// Firing must resume this soon after a restart: half the 30 s session timeout that a
/// restarted static member must not wait out (without static membership it resumed after
/// 28.8 s). Alone it resumes within a second; with the whole suite running beside it, the
/// debug build's start and the shared broker have taken up to 6 s.
const RESUMES_WITHIN: Duration = Duration::from_secs(15);

/// Under load, kills the executor at the load's second `kill_at` and starts it again
/// `down` later, as a supervisor would; firing must resume within [`RESUMES_WITHIN`] of
/// the restart, with nothing lost and only the calls in flight at the kill repeated.
async fn kill_and_restart(settings: &[(&'static str, String)], kill_at: i64, down: Duration) {
    let sink = Sink::start().await;
    sink.behave("/load", Behaviour::slow(CALL));
    let mut stack = Stack::start(settings).await;
    let load = Load::start(&stack, &sink, TIMERS, SECONDS).await;
    until(&load, kill_at).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    stack.executor.kill();
    let killed_at = Utc::now();
    tokio::time::sleep(down).await;
    stack.executor.restart();
    let restarted_at = Utc::now();
    let resumed = first_call_after(&sink, restarted_at).await;
    println!("down {:.1} s; firing resumed {:.2} s after the restart", down.as_secs_f64(), resumed.as_secs_f64());
    let audit = load.audit(&stack, &sink, Duration::from_secs(90)).await;
    assert_eq!((audit.lost, audit.unexpected), (0, 0), "{audit:?}");
    Repeats::of(&sink.calls(), killed_at).assert_in_flight(IN_FLIGHT);
    assert!(resumed <= RESUMES_WITHIN, "resumed {resumed:?} after the restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_killed_and_restarted_within_a_second_resumes_at_once() {
    // A long session timeout (30 s): what a restart must not wait for.
    kill_and_restart(&[("PUNCTUAL_KAFKA_SESSION_TIMEOUT_MS", "30000".into())], 6, Duration::from_millis(500)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_restarted_after_the_session_timeout_resumes_at_once() {
    // Past the (default, 3 s) session timeout: the group has removed the dead member.
    kill_and_restart(&[], 4, Duration::from_secs(6)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_executors_partitions_move_to_the_live_ones_within_the_session_timeout() {
    let sink = Sink::start().await;
    sink.behave("/load", Behaviour::slow(CALL));
    // The default session timeout.
    let session = Duration::from_secs(3);
    let mut stack = Stack::start(&[]).await;
    let second = stack.start_another("punctual-executor", "PUNCTUAL_EXECUTOR_ADDR").await;
    let third = stack.start_another("punctual-executor", "PUNCTUAL_EXECUTOR_ADDR").await;
    let settled = eventually(Duration::from_secs(30), "three executors sharing every partition", || async {
        let view = group_view(&stack);
        (view.state == "Stable" && view.members.len() == 3 && view.unassigned.is_empty()).then_some(view)
    })
    .await;
    println!("before: {settled:?}");
    let load = Load::start(&stack, &sink, TIMERS, SECONDS).await;
    until(&load, 5).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    stack.executor.kill();
    let killed_at = Utc::now();
    let killed = Instant::now();
    let after = eventually(Duration::from_secs(30), "the two live executors holding every partition", || async {
        let view = group_view(&stack);
        (view.state == "Stable" && view.members.len() == 2 && view.unassigned.is_empty()).then_some(view)
    })
    .await;
    let moved = killed.elapsed();
    println!("partitions moved to the live executors {:.2} s after the kill: {after:?}", moved.as_secs_f64());
    let audit = load.audit(&stack, &sink, Duration::from_secs(90)).await;
    assert_eq!((audit.lost, audit.unexpected), (0, 0), "{audit:?}");
    Repeats::of(&sink.calls(), killed_at).assert_in_flight(IN_FLIGHT);
    // Within the session timeout, plus the rebalance itself and this test's polling.
    assert!(moved <= session + Duration::from_secs(5), "took {moved:?}");
    for live in [&second, &third] {
        let text = stack.metrics(live).await;
        assert_eq!(metric_value(&text, "punctual_partitions_unassigned"), Some(0.0), "{}", live.name);
    }
}

/// Executors joining under load take partitions from the one running their calls: the
/// rebalance lets the calls in flight on the revoked partitions finish and their outcomes
/// be written and committed before the partitions move, so no call runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executors_joining_under_load_repeat_no_call() {
    let sink = Sink::start().await;
    // Long calls: many are in flight whenever partitions move.
    sink.behave("/load", Behaviour::slow(Duration::from_millis(1_500)));
    let mut stack = Stack::start(&[]).await;
    let load = Load::start(&stack, &sink, TIMERS, SECONDS).await;
    until(&load, 4).await;
    stack.add("punctual-executor", "PUNCTUAL_EXECUTOR_ADDR").await;
    until(&load, 9).await;
    stack.add("punctual-executor", "PUNCTUAL_EXECUTOR_ADDR").await;
    let view = eventually(Duration::from_secs(30), "three executors sharing every partition", || async {
        let view = group_view(&stack);
        (view.state == "Stable" && view.members.len() == 3 && view.unassigned.is_empty()).then_some(view)
    })
    .await;
    println!("after the joins: {view:?}");
    let audit = load.audit(&stack, &sink, Duration::from_secs(90)).await;
    assert_eq!((audit.lost, audit.duplicated, audit.unexpected), (0, 0, 0), "{audit:?}");
}
