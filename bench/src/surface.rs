//! `surface`: what requests without a key cost everyone else. The latency of an
//! authenticated API request (reading one timer), idle and while bursts of `/readyz` calls
//! are in flight, each burst many calls at once, as anyone who reaches the port may send.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use crate::env::Env;

/// How big the flood is, and how many authenticated requests are timed.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Surface {
    /// `/readyz` calls in flight at once in each burst, each on a connection of its own.
    pub readyz_clients: u32,
    /// Authenticated requests timed, one after another, idle and then under the flood.
    pub requests: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SurfaceResult {
    pub surface: Surface,
    pub idle: Latency,
    pub flooded: Latency,
    /// `/readyz` answers during the flood, a second.
    pub readyz_per_s: f64,
    /// Transactions the database committed a second during the flood (every service's:
    /// the scanner and executor commit a few of their own).
    pub db_xacts_per_s: f64,
}

impl SurfaceResult {
    pub fn markdown(&self) -> String {
        format!(
            "Surface: bursts of {} /readyz calls at once; {} authenticated GET /v1/timers/{{id}} timed one after another, idle and while a burst is in flight.\n\n\
             | | p50 | p99 | max |\n|---|---|---|---|\n\
             | idle | {:.1} ms | {:.1} ms | {:.1} ms |\n\
             | during the flood | {:.1} ms | {:.1} ms | {:.1} ms |\n\n\
             /readyz answered {:.0} a second; the database committed {:.0} transactions a second meanwhile.\n",
            self.surface.readyz_clients,
            self.surface.requests,
            self.idle.p50_ms,
            self.idle.p99_ms,
            self.idle.max_ms,
            self.flooded.p50_ms,
            self.flooded.p99_ms,
            self.flooded.max_ms,
            self.readyz_per_s,
            self.db_xacts_per_s,
        )
    }
}

fn latency(mut samples: Vec<f64>) -> Latency {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    Latency { p50_ms: at(0.5), p99_ms: at(0.99), max_ms: at(1.0) }
}

/// `n` GETs of `url`, one after another; each must succeed.
pub async fn timed(http: &reqwest::Client, url: &str, n: u32) -> anyhow::Result<Latency> {
    let mut samples = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let began = Instant::now();
        let answer = http.get(url).send().await?;
        anyhow::ensure!(answer.status().is_success(), "GET {url}: {}", answer.status());
        answer.bytes().await?;
        samples.push(began.elapsed().as_secs_f64() * 1e3);
    }
    Ok(latency(samples))
}

async fn committed(pool: &sqlx::PgPool) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        .fetch_one(pool)
        .await?)
}

pub async fn surface(env: &Env, s: Surface) -> anyhow::Result<SurfaceResult> {
    // The authenticated requests are timed back to back: above a key's default rate.
    let stack = env.stack(&[("PUNCTUAL_API_RATE_LIMIT", "0".into())]).await;
    let timer = stack
        .create_timer(&json!({"name": "read-me", "schedule": {"every_ms": 3_600_000},
                              "action": {"http": {"url": "https://hooks.example.com/"}}}))
        .await;
    let url = stack.admin.url(&format!("/v1/timers/{}", timer["id"].as_str().unwrap_or_default()));
    // Warm: the key's lookup and the pool's connections.
    timed(&stack.http, &url, 50).await?;
    let idle = timed(&stack.http, &url, s.requests).await?;

    // Bursts of `readyz_clients` calls at once, each on a connection of its own (opened
    // by the first burst, kept for the next); the authenticated requests are timed while
    // each burst is in flight.
    let readyz = stack.admin.url("/readyz");
    let flood_client = reqwest::Client::builder().pool_max_idle_per_host(s.readyz_clients as usize).build()?;
    let answered = Arc::new(AtomicU64::new(0));
    let (from_xacts, began) = (committed(&stack.db.pool).await?, Instant::now());
    let mut samples = Vec::new();
    while samples.len() < s.requests as usize {
        let burst: Vec<_> = (0..s.readyz_clients)
            .map(|_| {
                let (client, readyz, answered) = (flood_client.clone(), readyz.clone(), answered.clone());
                tokio::spawn(async move {
                    if let Ok(answer) = client.get(&readyz).send().await {
                        if answer.bytes().await.is_ok() {
                            answered.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        let in_flight = Arc::new(AtomicBool::new(true));
        let watcher = {
            let in_flight = in_flight.clone();
            tokio::spawn(async move {
                futures::future::join_all(burst).await;
                in_flight.store(false, Ordering::Relaxed);
            })
        };
        // Once the burst is under way.
        tokio::time::sleep(Duration::from_millis(50)).await;
        while in_flight.load(Ordering::Relaxed) && samples.len() < s.requests as usize {
            let began = Instant::now();
            let answer = stack.http.get(&url).send().await?;
            anyhow::ensure!(answer.status().is_success(), "GET {url}: {}", answer.status());
            answer.bytes().await?;
            samples.push(began.elapsed().as_secs_f64() * 1e3);
        }
        watcher.await?;
    }
    let seconds = began.elapsed().as_secs_f64();
    let flooded = latency(samples);
    let readyz_per_s = answered.load(Ordering::Relaxed) as f64 / seconds;
    let db_xacts_per_s = (committed(&stack.db.pool).await? - from_xacts) as f64 / seconds;
    let result = SurfaceResult { surface: s, idle, flooded, readyz_per_s, db_xacts_per_s };
    println!("{}", result.markdown());
    Ok(result)
}
