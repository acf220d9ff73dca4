//! `fan-out`: issue 36's load. `timers` interval timers, every second for `seconds`, each
//! occurrence split into `shards` calls (100 × 100 by default: 10,000 calls a second), into
//! the harness's sink; what arrives, how late (occurrence time to each shard's first call),
//! what repeats, what is lost, and the CPU a call.

use std::time::Duration;

use chrono::{SubsecRound, Utc};
use serde::Serialize;
use serde_json::json;

use crate::env::{CpuPerFire, Env};
use crate::measure::{repeats, LagStats};
use crate::sink::LagSink;

#[derive(Debug, Clone, Serialize)]
pub struct FanOutResult {
    pub timers: usize,
    pub shards: i32,
    pub seconds: i64,
    pub expected: usize,
    pub delivered: usize,
    pub lost: usize,
    /// Calls beyond each shard's first.
    pub repeated: u64,
    pub lag: LagStats,
    pub cpu: CpuPerFire,
}

impl FanOutResult {
    pub fn markdown(&self) -> String {
        format!(
            "Fan-out: {} timers × {} shards every second for {} s ({} calls a second).\n\n\
             | calls expected | delivered | lost | repeated | lag p50 | p99 | p99.9 | max | CPU a call (all) |\n\
             |---|---|---|---|---|---|---|---|---|\n\
             | {} | {} | {} | {} | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} ms | {:.0} µs |\n",
            self.timers,
            self.shards,
            self.seconds,
            self.timers * self.shards as usize,
            self.expected,
            self.delivered,
            self.lost,
            self.repeated,
            self.lag.p50_ms,
            self.lag.p99_ms,
            self.lag.p999_ms,
            self.lag.max_ms,
            self.cpu.total_us,
        )
    }
}

pub async fn fan_out(env: &Env, timers: usize, shards: i32, seconds: i64) -> anyhow::Result<FanOutResult> {
    let sink = LagSink::start().await?;
    let stack = env.stack(&[]).await;
    // Far enough ahead for every timer to be created and planned before the first fire.
    let start = (Utc::now() + chrono::Duration::seconds(10)).trunc_subsecs(0);
    let end = start + chrono::Duration::seconds(seconds);
    for i in 0..timers {
        stack
            .create_timer(&json!({
                "namespace": "fan-out", "name": format!("sharded-{i}"), "fan_out": {"shards": shards},
                "schedule": {"every_ms": 1000, "start_at": start, "end_at": end},
                "action": {"http": {"url": sink.url()}}
            }))
            .await;
    }
    let expected = timers * shards as usize * seconds as usize;
    let until_start = (start - Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(until_start).await;
    let before = env.cpu(&stack);
    // Every call, or 60 s past the last occurrence.
    let deadline = end + chrono::Duration::seconds(60);
    while sink.deliveries_between(start, end).len() < expected && Utc::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let deliveries = sink.deliveries_between(start, end);
    let cpu = env.cpu(&stack).per_fire(before, deliveries.len() as u64);
    let result = FanOutResult {
        timers,
        shards,
        seconds,
        expected,
        delivered: deliveries.len(),
        lost: expected.saturating_sub(deliveries.len()),
        repeated: repeats(&deliveries),
        lag: LagStats::of(&deliveries),
        cpu,
    };
    println!("{}", result.markdown());
    Ok(result)
}
