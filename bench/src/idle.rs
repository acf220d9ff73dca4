//! `idle`: what the stack costs with almost nothing to do. The three services, Postgres and
//! the broker (all started here) with one timer firing every 5 s into the harness's sink, as
//! `make up`'s demo timer does; after a warm-up, the CPU each process used over `seconds`,
//! as a share of one core.

use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use crate::env::{CpuSample, Env};
use crate::measure::cpu_seconds;
use crate::sink::LagSink;

#[derive(Debug, Clone, Serialize)]
pub struct IdleResult {
    pub seconds: f64,
    /// Seconds the stack ran before.
    pub warmup_s: u64,
    /// Percent of one core, by process.
    pub scanner: f64,
    pub executor: f64,
    pub admin: f64,
    pub broker: f64,
    pub postgres: f64,
    pub total: f64,
    pub calls: usize,
}

impl IdleResult {
    pub fn markdown(&self) -> String {
        format!(
            "Idle: one timer every 5 s, {:.0} s measured after {} s ({} calls).\n\n\
             | scanner | executor | admin | broker | Postgres | all |\n|---|---|---|---|---|---|\n\
             | {:.2} % | {:.2} % | {:.2} % | {:.2} % | {:.2} % | **{:.2} %** |\n",
            self.seconds,
            self.warmup_s,
            self.calls,
            self.scanner,
            self.executor,
            self.admin,
            self.broker,
            self.postgres,
            self.total
        )
    }
}

pub async fn idle(env: &Env, warmup: u64, seconds: u64) -> anyhow::Result<IdleResult> {
    let sink = LagSink::start().await?;
    let stack = env.stack(&[]).await;
    stack
        .create_timer(&json!({"namespace": "demo", "name": "every-5-seconds", "schedule": {"cron": "*/5 * * * * *"},
                              "action": {"http": {"url": sink.url()}}}))
        .await;
    // Past start-up: the first plans, the group's join, the JIT's first work in the broker.
    tokio::time::sleep(Duration::from_secs(warmup)).await;
    let admin = || stack.admin.pid().and_then(cpu_seconds).unwrap_or(0.0);
    let (before, admin_before, calls_before, began) = (env.cpu(&stack), admin(), sink.distinct(), Instant::now());
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let (after, admin_after, calls_after) = (env.cpu(&stack), admin(), sink.distinct());
    let elapsed = began.elapsed().as_secs_f64();
    let share = |a: f64, b: f64| (a - b) * 100.0 / elapsed;
    let part = |f: fn(&CpuSample) -> f64| share(f(&after), f(&before));
    let mut result = IdleResult {
        seconds: elapsed,
        warmup_s: warmup,
        scanner: part(|c| c.scanner),
        executor: part(|c| c.executor),
        admin: share(admin_after, admin_before),
        broker: part(|c| c.broker),
        postgres: part(|c| c.postgres),
        total: 0.0,
        calls: calls_after - calls_before,
    };
    result.total = result.scanner + result.executor + result.admin + result.broker + result.postgres;
    println!("{}", result.markdown());
    Ok(result)
}
