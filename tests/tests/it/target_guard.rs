//! The callback target guard on the real stack: timers inserted with SQL (which no API
//! check sees) aimed at addresses the executor may not reach are marked dead with the
//! rule that refused them (not the addresses a name resolved to), and never called.

use std::time::Duration;

use punctual_testkit::{Sink, Stack};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_timers_aimed_at_private_addresses_are_marked_dead_and_never_called() {
    let sink = Sink::start().await;
    // Loopback is not allowed here: only an unrelated network.
    let stack = Stack::start(&[("PUNCTUAL_CALLBACK_ALLOW", "10.99.0.0/16".to_owned())]).await;
    let port = sink.addr.port();
    let urls = [
        format!("http://127.0.0.1:{port}/literal"),
        format!("http://localhost:{port}/name"),
        format!("http://[::ffff:127.0.0.1]:{port}/mapped"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
    ];
    for (i, url) in urls.iter().enumerate() {
        sqlx::query(
            "INSERT INTO timers (name, schedule_kind, run_at, http_url, retry_max_attempts)
             VALUES ($1, 'once', now() + interval '2 seconds', $2, 5)",
        )
        .bind(format!("refused-{i}"))
        .bind(url)
        .execute(&stack.db.pool)
        .await
        .unwrap();
    }
    let dead: Vec<(String, String)> = punctual_testkit::eventually(Duration::from_secs(30), "all dead", || async {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT tm.http_url, t.error FROM tasks t JOIN timers tm ON tm.id = t.timer_id WHERE t.status = 'dead'",
        )
        .fetch_all(&stack.db.pool)
        .await
        .unwrap();
        (rows.len() == urls.len()).then_some(rows)
    })
    .await;
    for (url, error) in &dead {
        assert!(error.contains("no public address") && error.contains("PUNCTUAL_CALLBACK_ALLOW"), "{url}: {error}");
    }
    // What a name resolved to is the service's network, not the tenant's to read.
    let (_, by_name) = dead.iter().find(|(url, _)| url.contains("localhost")).unwrap();
    assert!(!by_name.contains("127.0.0.1") && !by_name.contains("::1"), "{by_name}");
    let attempts: Vec<i32> = sqlx::query_scalar("SELECT attempt FROM tasks").fetch_all(&stack.db.pool).await.unwrap();
    assert!(attempts.iter().all(|a| *a == 1), "refused at once, not retried: {attempts:?}");
    assert!(sink.calls().is_empty(), "nothing was called: {:?}", sink.calls());
}
