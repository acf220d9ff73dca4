//! An executor stopped gracefully (SIGTERM) under load: it takes no new task, lets its
//! running calls finish and writes their outcomes, so nothing is repeated when it (or
//! another) goes on; and the stop is bounded by `PUNCTUAL_DRAIN_TIMEOUT_MS`, even with
//! calls that would run for a minute, which are then abandoned and run again.

use std::time::{Duration, Instant};

use punctual_testkit::load::{until, Load};
use punctual_testkit::{Behaviour, Sink, Stack};

const TIMERS: i64 = 200;
const SECONDS: i64 = 15;
/// Long enough for the calls in flight (300 ms each) and their write-back to end on a
/// machine busy with the whole suite: with 2 s, 229 calls were abandoned and repeated.
const DRAIN: Duration = Duration::from_secs(5);
/// What a stop may take beyond the drain timeout: the final offset commit and the exit
/// (2.5 s seen with the whole suite running beside it).
const STOP_MARGIN: Duration = Duration::from_secs(3);

/// Stops the executor at the load's fifth second, restarts it, and returns how long the
/// stop took and whether it exited successfully.
async fn stop_under_load(stack: &mut Stack, load: &Load) -> (Duration, bool) {
    until(load, 5).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    let started = Instant::now();
    let clean = stack.executor.stop(Duration::from_secs(30));
    let took = started.elapsed();
    stack.executor.restart();
    println!("the graceful stop took {:.2} s (drain timeout {:?}); clean exit: {clean}", took.as_secs_f64(), DRAIN);
    (took, clean)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_repeats_no_call_and_exits_within_its_bound() {
    let sink = Sink::start().await;
    sink.behave("/load", Behaviour::slow(Duration::from_millis(300)));
    let mut stack = Stack::start(&[("PUNCTUAL_DRAIN_TIMEOUT_MS", DRAIN.as_millis().to_string())]).await;
    let load = Load::start(&stack, &sink, TIMERS, SECONDS).await;
    let (took, clean) = stop_under_load(&mut stack, &load).await;
    let audit = load.audit(&stack, &sink, Duration::from_secs(60)).await;
    assert!(clean, "the executor did not exit successfully");
    assert!(took <= DRAIN + STOP_MARGIN, "the stop took {took:?}");
    assert_eq!((audit.lost, audit.duplicated, audit.unexpected), (0, 0, 0), "{audit:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_abandons_calls_that_outlast_the_drain_timeout() {
    let sink = Sink::start().await;
    // Calls that would take a minute: the stop cannot wait for them.
    sink.behave("/load", Behaviour::slow(Duration::from_secs(60)));
    let mut stack = Stack::start(&[
        ("PUNCTUAL_DRAIN_TIMEOUT_MS", DRAIN.as_millis().to_string()),
        ("PUNCTUAL_KAFKA_SESSION_TIMEOUT_MS", "3000".into()),
    ])
    .await;
    let load = Load::start(&stack, &sink, 20, SECONDS).await;
    let (took, clean) = stop_under_load(&mut stack, &load).await;
    assert!(clean, "the executor did not exit successfully");
    assert!(took <= DRAIN + STOP_MARGIN, "the stop took {took:?}, though bounded by {DRAIN:?}");
    // The abandoned calls run again (same Idempotency-Key): nothing is lost.
    sink.behave("/load", Behaviour::slow(Duration::from_millis(10)));
    let audit = load.audit(&stack, &sink, Duration::from_secs(120)).await;
    assert_eq!((audit.lost, audit.unexpected), (0, 0), "{audit:?}");
}
