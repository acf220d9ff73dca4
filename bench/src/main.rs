//! punctual-bench: physical baselines measured on the machine that runs Punctual.
//!
//! `claim-baseline`: how many task rows per second Postgres can claim with the scanner's
//! own statement (batched `UPDATE … FOR UPDATE SKIP LOCKED … RETURNING`, same schema and
//! indexes), against a database of its own. Punctual's end-to-end rate is judged as a
//! share of this.

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, Subcommand};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection};

#[derive(Parser)]
#[command(about = "Punctual's benchmark harness")]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Subcommand)]
enum Scenario {
    /// Raw claim throughput of Postgres with Punctual's schema and claim statement.
    ClaimBaseline {
        /// Postgres server URL (without database); a database of its own is created.
        #[arg(long, env = "PUNCTUAL_BENCH_DATABASE_URL")]
        server: String,
        /// Task rows to claim.
        #[arg(long, default_value_t = 200_000)]
        rows: i64,
        /// Rows per claim statement (the scanner's PUNCTUAL_CLAIM_BATCH).
        #[arg(long, default_value_t = 5_000)]
        batch: i64,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().scenario {
        Scenario::ClaimBaseline { server, rows, batch } => claim_baseline(&server, rows, batch).await,
    }
}

async fn claim_baseline(server: &str, rows: i64, batch: i64) -> anyhow::Result<()> {
    let name = format!("bench_{}", uuid::Uuid::new_v4().simple());
    let mut admin = PgConnection::connect(&format!("{server}/postgres")).await.context("connecting")?;
    sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin).await?;
    let pool = PgPoolOptions::new().max_connections(2).connect(&format!("{server}/{name}")).await?;
    punctual_shared::db::MIGRATOR.run(&pool).await?;
    let timer: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO timers (name, schedule_kind, cron_expr, http_url, plan_status)
         VALUES ('bench', 'cron', '* * * * * *', 'http://127.0.0.1:9/', 'planned') RETURNING id",
    )
    .fetch_one(&pool)
    .await?;
    // All due now, as at the peak of a burst.
    sqlx::query(
        "INSERT INTO tasks (timer_id, scheduled_at, due_at, timer_version, bucket)
         SELECT $1, t, t, 1, 0
           FROM generate_series(now() - interval '1 hour', now() - interval '1 hour' + ($2 - 1) * interval '1 millisecond',
                                interval '1 millisecond') AS t",
    )
    .bind(timer)
    .bind(rows)
    .execute(&pool)
    .await?;
    sqlx::query("VACUUM ANALYZE tasks").execute(&pool).await?;
    let started = Instant::now();
    let mut claimed = 0usize;
    loop {
        let got = punctual_shared::task::claim(&pool, "bench", Duration::from_secs(5), Duration::from_secs(30), batch)
            .await?;
        if got.is_empty() {
            break;
        }
        claimed += got.len();
    }
    let elapsed = started.elapsed();
    println!(
        "claim-baseline: {claimed} rows in {:.2} s with batches of {batch}: {:.0} rows/s",
        elapsed.as_secs_f64(),
        claimed as f64 / elapsed.as_secs_f64()
    );
    pool.close().await;
    sqlx::query(&format!("DROP DATABASE {name}")).execute(&mut admin).await?;
    Ok(())
}
