//! Fair share between namespaces: what one namespace does must not delay or drop another
//! namespace's occurrences.

use std::time::Duration;

use punctual_testkit::load::{until, Load};
use punctual_testkit::{eventually, Sink, Stack};

/// Plans a second ahead and misfires past a second late, so that planning held up for
/// more than a second shows as occurrences lost.
fn tight_planning() -> Vec<(&'static str, String)> {
    vec![
        ("PUNCTUAL_PLAN_HORIZON_MS", "1000".into()),
        ("PUNCTUAL_LOOKAHEAD_MS", "2000".into()),
        ("PUNCTUAL_MISFIRE_THRESHOLD_MS", "1000".into()),
    ]
}

/// Enough that validating them all takes seconds in a debug build (20,000 took less than
/// the second that plans reach ahead, and showed nothing).
const IMPORTED: i64 = 200_000;

/// Another namespace imports 200,000 one-shot timers with one statement while a steady
/// namespace fires every second: the import is validated a pass at a time between the
/// scans that keep the steady timers planned, so none of theirs is missed, and the
/// import is still all planned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_import_in_another_namespace_misses_none_of_a_steady_namespaces_occurrences() {
    let sink = Sink::start().await;
    let stack = Stack::start(&tight_planning()).await;
    let load = Load::start(&stack, &sink, 50, 15).await;
    until(&load, 3).await;
    sqlx::query(
        "INSERT INTO timers (namespace, name, schedule_kind, run_at, http_url)
         SELECT 'bulk', 'import-' || g, 'once', now() + interval '10 minutes' + g * interval '1 ms', $1
           FROM generate_series(1, $2) AS g",
    )
    .bind(sink.url("/bulk"))
    .bind(IMPORTED)
    .execute(&stack.db.pool)
    .await
    .expect("the import");
    let imported_at = std::time::Instant::now();
    let audit = load.audit(&stack, &sink, Duration::from_secs(60)).await;
    let latest = sink
        .calls_to("/load")
        .iter()
        .filter_map(|c| Some((c.received_at - c.scheduled_at()?).num_milliseconds()))
        .max()
        .unwrap_or_default();
    println!("the steady namespace's latest call came {latest} ms after its time");
    assert_eq!((audit.lost, audit.duplicated, audit.unexpected), (0, 0, 0), "{audit:?}");
    eventually(Duration::from_secs(60), "the import validated", || async {
        let new: i64 =
            sqlx::query_scalar("SELECT count(*) FROM timers WHERE namespace = 'bulk' AND plan_status = 'new'")
                .fetch_one(&stack.db.pool)
                .await
                .ok()?;
        (new == 0).then_some(())
    })
    .await;
    println!("the import was validated {:.1} s after it was written", imported_at.elapsed().as_secs_f64());
}
