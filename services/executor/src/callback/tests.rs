use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use chrono::Utc;
use prometheus::IntGauge;
use punctual_shared::retry::RetryPolicy;
use punctual_shared::target_guard::TargetGuard;
use punctual_shared::task::{Action, DeferReason, Next, Outcome, StartedTask};
use serde_json::Value;

use super::*;

/// Calls wait for their turns as long as it takes, unless a test says otherwise.
fn limits(min: usize, max: usize) -> CallLimits {
    CallLimits { min, max, turn_wait: Duration::from_secs(3600) }
}

/// The tests' targets listen on loopback.
fn local() -> TargetGuard {
    "127.0.0.1".parse().unwrap()
}

#[test]
fn which_answers_are_retried() {
    let d = Duration::ZERO;
    for (status, retryable) in
        [(500, true), (503, true), (429, true), (408, true), (404, false), (400, false), (422, false)]
    {
        assert_eq!(Attempt::from_status(status, String::new(), None, d).retryable, retryable, "{status}");
    }
    let ok = Attempt::from_status(204, String::new(), None, d);
    assert_eq!(ok.error, None);
}

fn task_calling(url: &str) -> StartedTask {
    StartedTask {
        id: 1,
        timer_id: uuid::Uuid::new_v4(),
        scheduled_at: Utc::now(),
        shard: punctual_shared::fan_out::Shard::WHOLE,
        address: None,
        attempt: 1,
        due_at: Utc::now(),
        started_at: Utc::now(),
        action: Arc::new(Action {
            namespace: "default".into(),
            action_kind: "http".into(),
            http_method: "POST".into(),
            http_url: Some(url.into()),
            http_headers: Value::Object(Default::default()),
            http_body: None,
            http_timeout_ms: 10_000,
            kafka_topic: None,
            kafka_key: None,
            kafka_headers: Value::Null,
            kafka_value: None,
            fan_out_urls: None,
            fan_out_dns: false,
        }),
        retry: RetryPolicy { max_attempts: 1, initial_ms: 1_000, multiplier: 2.0, max_ms: 60_000 },
    }
}

/// `n` calls to `url`, each in a task of its own.
fn spawn_calls(caller: &Arc<Caller>, url: &str, n: usize) -> Vec<tokio::task::JoinHandle<Attempt>> {
    (0..n)
        .map(|_| {
            let (caller, task) = (caller.clone(), task_calling(url));
            tokio::spawn(async move { call(&caller, &task).await })
        })
        .collect()
}

async fn wait_for_calls(sink: &punctual_testkit::sink::Sink, n: usize) {
    while sink.calls().len() < n {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn calls_to_a_busy_target_wait_their_turn_and_other_targets_do_not() {
    use punctual_testkit::sink::{Behaviour, Sink};
    let (busy, other) = (Sink::start().await, Sink::start().await);
    busy.behave("/slow", Behaviour::slow(Duration::from_secs(2)));
    let caller = Arc::new(Caller::new(limits(2, 2), IntGauge::new("waiting", "test").unwrap(), local()).unwrap());
    let calls = spawn_calls(&caller, &busy.url("/slow"), 5);
    wait_for_calls(&busy, 2).await;
    // Another target is called at once, while the busy one has its two calls.
    let elsewhere = call(&caller, &task_calling(&other.url("/quick"))).await;
    assert_eq!(elsewhere.http_status, Some(200));
    assert_eq!(busy.calls().len(), 2, "the other three wait for a turn");
    for c in calls {
        assert_eq!(c.await.unwrap().http_status, Some(200));
    }
    assert_eq!(busy.calls().len(), 5);
}

#[tokio::test]
async fn a_call_given_up_while_it_waits_is_no_longer_counted_waiting() {
    use punctual_testkit::sink::{Behaviour, Sink};
    let sink = Sink::start().await;
    sink.behave("/slow", Behaviour::slow(Duration::from_secs(2)));
    let waiting = IntGauge::new("waiting", "test").unwrap();
    let caller = Arc::new(Caller::new(limits(1, 1), waiting.clone(), local()).unwrap());
    let calls = spawn_calls(&caller, &sink.url("/slow"), 3);
    wait_for_calls(&sink, 1).await;
    while waiting.get() < 2 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let target = caller.parse(&sink.url("/slow")).unwrap().1;
    assert_eq!(target.turns.waiting.load(Ordering::Relaxed), 2);
    // Abandoned, as the drain timeout abandons running callbacks.
    for c in &calls {
        c.abort();
    }
    for c in calls {
        let _ = c.await;
    }
    assert_eq!(waiting.get(), 0, "the gauge counts no call that stopped waiting");
    assert_eq!(target.turns.waiting.load(Ordering::Relaxed), 0, "nor does the target's count");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_keeps_its_pace_gets_more_calls_at_once() {
    use punctual_testkit::sink::{Behaviour, Sink};
    let sink = Sink::start().await;
    sink.behave("/steady", Behaviour::slow(Duration::from_millis(500)));
    let limits = limits(4, 64);
    let caller = Arc::new(Caller::new(limits, IntGauge::new("waiting", "test").unwrap(), local()).unwrap());
    let calls = spawn_calls(&caller, &sink.url("/steady"), 12);
    wait_for_calls(&sink, 4).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(sink.calls().len(), 4, "a new target starts at `min` calls at once");
    // Each of the first four ends at the target's pace while others wait: its turn
    // passes on and one more is added, so the other eight go together.
    wait_for_calls(&sink, 5).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(sink.calls().len(), 12, "eight at once after the first four");
    for c in calls {
        assert_eq!(c.await.unwrap().http_status, Some(200));
    }
}

/// A call whose turn does not come within the turn wait is not made but held back;
/// once the target's pace is known, a call that could not get a turn in time is held
/// back without waiting, booked after the calls held back before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_without_a_turn_soon_holds_calls_back_spread_at_its_pace() {
    use punctual_testkit::sink::{Behaviour, Sink};
    let sink = Sink::start().await;
    sink.behave("/hang", Behaviour::slow(Duration::from_secs(2)));
    let limits = CallLimits { min: 1, max: 1, turn_wait: Duration::from_millis(300) };
    let caller = Arc::new(Caller::new(limits, IntGauge::new("waiting", "test").unwrap(), local()).unwrap());
    let first = spawn_calls(&caller, &sink.url("/hang"), 1);
    wait_for_calls(&sink, 1).await;
    let started = Instant::now();
    let second = call(&caller, &task_calling(&sink.url("/hang"))).await;
    assert!(started.elapsed() >= Duration::from_millis(300), "waited its turn that long first");
    assert!(second.held_back.unwrap().0 >= MIN_HOLD_BACK, "{second:?}");
    assert!(!second.was_made() && second.error.as_deref().unwrap().starts_with("not called"), "{second:?}");
    assert_eq!(first.into_iter().next().unwrap().await.unwrap().http_status, Some(200));
    assert_eq!(sink.calls().len(), 1, "the held-back call was not made");
    // The target's pace is known now (2 s a call, one at a time): calls arriving while
    // one is in flight are held back at once, the second a turn after the first.
    let busy = spawn_calls(&caller, &sink.url("/hang"), 1);
    wait_for_calls(&sink, 2).await;
    let started = Instant::now();
    let (a, b) = (
        call(&caller, &task_calling(&sink.url("/hang"))).await,
        call(&caller, &task_calling(&sink.url("/hang"))).await,
    );
    assert!(started.elapsed() < Duration::from_millis(300), "did not wait: {:?}", started.elapsed());
    let (a, b) = (a.held_back.unwrap().0, b.held_back.unwrap().0);
    assert!(a >= Duration::from_millis(1_500), "about a call's time: {a:?}");
    assert!(b >= a + Duration::from_millis(1_500), "booked a turn after the other: {a:?} then {b:?}");
    for c in busy {
        c.await.unwrap();
    }
    assert_eq!(sink.calls().len(), 2);
}

/// A target that answered 429 with `Retry-After` gets no call before that time: the
/// calls meanwhile are held back as asked, to turns spread after it.
#[tokio::test]
async fn a_target_that_asked_to_wait_is_not_called_before_then() {
    use punctual_testkit::sink::{Behaviour, Sink};
    let sink = Sink::start().await;
    sink.behave("/busy", Behaviour { script: vec![429], retry_after: Some("3".into()), ..Default::default() });
    let caller = Caller::new(limits(2, 2), IntGauge::new("waiting", "test").unwrap(), local()).unwrap();
    let first = call(&caller, &task_calling(&sink.url("/busy"))).await;
    assert_eq!(first.http_status, Some(429));
    let (second, third) = (
        call(&caller, &task_calling(&sink.url("/busy"))).await,
        call(&caller, &task_calling(&sink.url("/busy"))).await,
    );
    assert_eq!(sink.calls().len(), 1, "no call while it asked to wait");
    let (second, third) = (second.held_back.unwrap(), third.held_back.unwrap());
    assert_eq!(second.1, DeferReason::RetryAfter);
    assert!(second.0 >= Duration::from_millis(2_500), "not before the 3 s it asked: {second:?}");
    assert!(third.0 >= second.0 + Duration::from_millis(1_000), "a turn later: {second:?} then {third:?}");
    let outcome = Attempt::asked_to_wait(second.0).into_outcome(&task_calling("http://x/"), 0.0);
    assert!(matches!(outcome.next, Next::Defer { reason: DeferReason::RetryAfter, .. }), "{outcome:?}");
    let error = outcome.error.unwrap();
    assert!(error.starts_with("not called: its target asked to wait (Retry-After): deferred"), "{error}");
}

#[test]
fn a_limit_grows_while_calls_keep_pace_and_falls_back_when_they_slow_down() {
    let target = Target::new("http://t:80", limits(16, 20));
    assert_eq!(target.limit(), 16);
    let ms = Duration::from_millis;
    // Nobody waits: no reason to grow.
    assert_eq!(target.ended(Instant::now(), ms(100), false), Change::Keep);
    target.turns.waiting.store(3, Ordering::Relaxed);
    for expected in 17..=20 {
        assert_eq!(target.ended(Instant::now(), ms(110), false), Change::Grow);
        assert_eq!(target.limit(), expected);
    }
    assert_eq!(target.ended(Instant::now(), ms(100), false), Change::Keep, "at most `max`");
    assert_eq!(target.turns.semaphore.available_permits(), 20);
    // Answers slow down (a busy target, or this executor short of CPU) while few calls are
    // aimed here: the running mean passes four times the shortest call, and the limit
    // falls back to `min`.
    let mut changes = Vec::new();
    for _ in 0..60 {
        changes.push(target.ended(Instant::now(), ms(1_000), false));
    }
    assert_eq!(changes.iter().filter(|c| **c == Change::Shrink).count(), 4, "{changes:?}");
    assert_eq!(target.limit(), 16);
    // In between (mean within two to four times the shortest): no change either way.
    let between = Target::new("http://t:80", limits(1, 64));
    between.turns.waiting.store(1, Ordering::Relaxed);
    assert_eq!(between.ended(Instant::now(), ms(100), false), Change::Grow);
    for _ in 0..60 {
        between.ended(Instant::now(), ms(280), false);
    }
    let limit = between.limit();
    assert!(limit < 64, "the growth stopped as the mean passed twice the shortest: {limit}");
    assert_eq!(between.ended(Instant::now(), ms(280), false), Change::Keep);
    assert_eq!(between.limit(), limit);
}

/// A target answering each call in 300 ms with 200 calls a second aimed at it needs 60 at
/// once, however long this executor, short of CPU, takes over each call.
#[test]
fn a_limit_grows_to_what_the_calls_aimed_at_the_target_need_at_its_pace() {
    let target = Target::new("http://t:80", limits(16, 512));
    let start = Instant::now();
    for i in 0..=200u32 {
        target.asked(start + Duration::from_millis(5 * u64::from(i)) + Duration::from_millis(1));
    }
    target.turns.waiting.store(100, Ordering::Relaxed);
    let ms = Duration::from_millis;
    assert_eq!(target.ended(Instant::now(), ms(300), false), Change::Grow);
    // The calls take 2.5 to 5 times the target's 300 ms: no longer its pace.
    let changes: Vec<Change> = (0..200).map(|i| target.ended(Instant::now(), ms(750 + 5 * i), false)).collect();
    let limit = target.limit();
    assert!((60..=61).contains(&limit), "grown to what the calls need, and no further: {limit} {changes:?}");
    assert!(!changes.contains(&Change::Shrink), "{changes:?}");
    // The target shows strain (timeouts, failed connections, 5xx): one turn fewer each.
    assert_eq!(target.ended(Instant::now(), ms(30_000), true), Change::Shrink);
    assert_eq!(target.limit(), limit - 1);
}

#[test]
fn the_limits_are_kept_within_one_and_max() {
    assert_eq!(Target::new("http://t:80", limits(0, 8)).limit(), 1);
    assert_eq!(Target::new("http://t:80", limits(32, 8)).limit(), 8);
}

#[tokio::test]
async fn a_call_slower_than_its_timeout_times_out_and_may_be_retried() {
    use punctual_testkit::sink::{Behaviour, Sink};
    let sink = Sink::start().await;
    sink.behave("/slow", Behaviour::slow(Duration::from_secs(5)));
    let caller = Caller::new(limits(2, 2), IntGauge::new("waiting", "test").unwrap(), local()).unwrap();
    let mut task = task_calling(&sink.url("/slow"));
    Arc::get_mut(&mut task.action).unwrap().http_timeout_ms = 300;
    let started = Instant::now();
    let attempt = call(&caller, &task).await;
    assert!(started.elapsed() < Duration::from_secs(2), "gave up after the timeout: {:?}", started.elapsed());
    assert!(attempt.retryable);
    assert_eq!(attempt.http_status, None);
    assert_eq!(attempt.error.as_deref(), Some("timed out: no answer within 300 ms"));
}

#[tokio::test]
async fn an_answer_is_kept_with_its_status_headers_and_body() {
    use punctual_testkit::sink::{Behaviour, Sink};
    let sink = Sink::start().await;
    sink.behave("/busy", Behaviour { script: vec![503], retry_after: Some("7".into()), ..Default::default() });
    let caller = Caller::new(limits(2, 2), IntGauge::new("waiting", "test").unwrap(), local()).unwrap();
    let mut task = task_calling(&sink.url("/busy?x=1"));
    let action = Arc::get_mut(&mut task.action).unwrap();
    action.http_method = "PUT".into();
    // As a row written with SQL may have them: the connection's and the signature's
    // headers are not the timer's to set, and are not sent.
    action.http_headers =
        serde_json::json!({"X-Env": "prod", "Host": "evil.example", "webhook-signature": "v1,forged"});
    action.http_body = Some(serde_json::json!({"k": 1}));
    let attempt = call(&caller, &task).await;
    assert_eq!(attempt.http_status, Some(503));
    assert!(attempt.retryable);
    assert_eq!(attempt.retry_after, Some(Duration::from_secs(7)));
    let received = &sink.calls()[0];
    assert_eq!((received.method.as_str(), received.path.as_str()), ("PUT", "/busy"));
    assert_eq!(received.headers["x-env"], "prod");
    assert_eq!(received.headers["host"], sink.addr.to_string().as_str());
    assert!(!received.headers.contains_key("webhook-signature"), "unsigned: no secret");
    assert_eq!(received.headers["content-type"], "application/json");
    assert_eq!(received.headers["x-punctual-attempt"], "1");
    assert!(received.headers["user-agent"].to_str().unwrap().starts_with("punctual/"));
    let trace_id = format!("{:032x}", punctual_shared::trace_context::trace_id(task.timer_id, task.scheduled_at));
    let traceparent = received.headers["traceparent"].to_str().unwrap();
    assert!(traceparent.starts_with(&format!("00-{trace_id}-")), "{traceparent}");
    assert_eq!(received.idempotency_key.as_deref(), Some(task.identity().as_str()));
    assert_eq!(serde_json::from_slice::<Value>(&received.body).unwrap(), serde_json::json!({"k": 1}));
}

#[tokio::test]
async fn a_url_that_is_not_http_fails_for_good_without_a_call() {
    let caller = Caller::new(limits(2, 2), IntGauge::new("waiting", "test").unwrap(), local()).unwrap();
    for url in ["ftp://127.0.0.1/x", "mailto:ops@example.com"] {
        let attempt = call(&caller, &task_calling(url)).await;
        assert!(!attempt.retryable, "{url}");
        assert!(attempt.error.unwrap().starts_with("invalid http_url: not an http or https URL"), "{url}");
    }
}

#[tokio::test]
async fn private_targets_are_refused_unless_allowed_and_never_called() {
    let sink = punctual_testkit::Sink::start().await;
    let port = sink.addr.port();
    let guarded = Caller::new(limits(2, 2), IntGauge::new("waiting", "test").unwrap(), TargetGuard::default()).unwrap();
    // Literal addresses, and a name that resolves to loopback.
    for url in [
        format!("http://127.0.0.1:{port}/literal"),
        format!("http://[::1]:{port}/v6"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "http://10.0.0.1/internal".to_owned(),
        format!("http://localhost:{port}/name"),
    ] {
        let attempt = call(&guarded, &task_calling(&url)).await;
        let error = attempt.error.unwrap_or_default();
        assert!(!attempt.retryable, "{url}: refused for good");
        assert!(error.contains("no public address") && error.contains("PUNCTUAL_CALLBACK_ALLOW"), "{url}: {error}");
    }
    assert!(sink.calls().is_empty(), "nothing was called");
    // Allowed by name, or by network.
    let by_name =
        Caller::new(limits(2, 2), IntGauge::new("waiting", "test").unwrap(), "localhost".parse().unwrap()).unwrap();
    assert_eq!(call(&by_name, &task_calling(&format!("http://localhost:{port}/name"))).await.http_status, Some(200));
    let by_network =
        Caller::new(limits(2, 2), IntGauge::new("waiting", "test").unwrap(), "127.0.0.0/8".parse().unwrap()).unwrap();
    assert_eq!(
        call(&by_network, &task_calling(&format!("http://127.0.0.1:{port}/literal"))).await.http_status,
        Some(200)
    );
    assert_eq!(sink.calls().len(), 2);
}

#[tokio::test]
async fn an_unparsable_url_fails_for_good_without_a_call() {
    let caller = Caller::new(limits(2, 2), IntGauge::new("waiting", "test").unwrap(), local()).unwrap();
    let attempt = call(&caller, &task_calling("not a url")).await;
    assert!(!attempt.retryable);
    assert!(attempt.error.unwrap().starts_with("invalid http_url"));
}

#[test]
fn an_answer_asking_to_wait_defers_as_the_same_attempt_within_bounds() {
    let answer = |status: u16, retry_after: Option<u64>| {
        Attempt::from_status(status, String::new(), retry_after.map(Duration::from_secs), Duration::ZERO)
    };
    let task = task_calling("http://127.0.0.1:1/");
    let waits = |outcome: Outcome| match outcome.next {
        Next::Defer { due_at, .. } => Some((due_at - Utc::now()).num_milliseconds()),
        _ => None,
    };
    for status in [429, 503] {
        let outcome = answer(status, Some(3)).into_outcome(&task, 0.0);
        assert_eq!(outcome.attempt, 1);
        assert!(outcome.error.as_deref().unwrap().contains("deferred"), "{:?}", outcome.error);
        // Read back a moment later: up to a second of slack for a machine busy with other tests.
        assert!(waits(outcome).is_some_and(|ms| (2_000..=3_000).contains(&ms)), "{status} with Retry-After: 3");
    }
    // Not asked to wait: a failed attempt (the task allows one, so dead).
    for (status, retry_after) in [(429, None), (503, None), (500, Some(3))] {
        assert_eq!(answer(status, retry_after).into_outcome(&task, 0.0).next, Next::Dead, "{status}");
    }
    // At most the retry policy's longest wait.
    let short = StartedTask { retry: RetryPolicy { max_ms: 1_000, ..task.retry }, ..task_calling("http://x/") };
    assert!(waits(answer(429, Some(30)).into_outcome(&short, 0.0)).is_some_and(|ms| ms <= 1_000));
    // Not for an occurrence that would then be more than an hour late.
    let old = StartedTask { scheduled_at: Utc::now() - chrono::Duration::minutes(59), ..task_calling("http://x/") };
    assert_eq!(answer(429, Some(120)).into_outcome(&old, 0.0).next, Next::Dead);
    assert!(waits(answer(429, Some(30)).into_outcome(&old, 0.0)).is_some());
    // A call held back waits for its target's turn as the same attempt, however long
    // its retry policy allows, while it would then be at most an hour late.
    let held = Attempt::held_back(16, Duration::from_secs(90), DeferReason::TargetLimit).into_outcome(&short, 0.0);
    assert!(matches!(held.next, Next::Defer { reason: DeferReason::TargetLimit, .. }), "{held:?}");
    assert!(waits(held.clone()).is_some_and(|ms| ms > 80_000));
    assert_eq!(held.attempt, 1);
    assert!(held.error.as_deref().unwrap().starts_with("not called"), "{:?}", held.error);
    let too_late = Attempt::held_back(16, Duration::from_secs(120), DeferReason::TargetLimit).into_outcome(&old, 0.0);
    assert_eq!(too_late.next, Next::Dead, "a failed attempt, the last one this task allows");
}

#[test]
fn retry_after_in_seconds_or_as_a_date() {
    assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
    assert_eq!(parse_retry_after("99999999"), Some(MAX_RETRY_AFTER));
    let in_a_minute = (Utc::now() + chrono::Duration::seconds(60)).to_rfc2822();
    let wait = parse_retry_after(&in_a_minute).unwrap();
    assert!(wait > Duration::from_secs(55) && wait <= Duration::from_secs(60), "{wait:?}");
    assert_eq!(parse_retry_after("soon"), None);
}

/// A DNS broadcast's addresses are those its host resolves to (here given by
/// `PUNCTUAL_HOST_ADDRESSES`) that the guard admits; a shard with an address is called
/// there, whatever else the name resolves to, and the guard still judges that address.
#[tokio::test]
async fn a_broadcasts_shard_is_called_at_its_own_address() {
    let sinks =
        punctual_testkit::Sink::start_on_each(&["127.0.0.2".parse().unwrap(), "127.0.0.1".parse().unwrap()]).await;
    let Ok([second, first]) = <[_; 2]>::try_from(sinks) else { unreachable!("a sink per address") };
    let port = second.addr.port();
    let hosts: crate::host_addresses::HostAddresses =
        "instances.test=127.0.0.2,127.0.0.1,127.0.0.2,10.9.9.9".parse().unwrap();
    let caller = Caller::new(limits(2, 2), IntGauge::new("waiting", "test").unwrap(), "127.0.0.0/8".parse().unwrap())
        .unwrap()
        .with_host_addresses(hosts)
        .unwrap();
    let url = format!("http://instances.test:{port}/flush");
    let addresses = caller.addresses("default", &url).await.unwrap();
    assert_eq!(addresses, ["127.0.0.1", "127.0.0.2"], "sorted, once each, only those the guard admits");

    let mut shard = task_calling(&url);
    shard.shard = punctual_shared::fan_out::Shard { index: 1, total: 2 };
    shard.address = Some("127.0.0.2".into());
    assert_eq!(call(&caller, &shard).await.http_status, Some(200));
    let calls = second.calls();
    assert_eq!(calls.len(), 1, "called at its address");
    assert!(first.calls().is_empty(), "and not at the name's other address");
    assert_eq!(calls[0].headers["punctual-address"], "127.0.0.2");
    assert_eq!(calls[0].headers["punctual-shard"], "1/2");
    assert_eq!(calls[0].headers["host"], format!("instances.test:{port}").as_str(), "the URL's host name");

    // An address the guard refuses is not called, whatever the row says.
    shard.address = Some("10.9.9.9".into());
    let refused = call(&caller, &shard).await;
    assert!(!refused.retryable && refused.error.unwrap_or_default().contains("no public address"));
}
