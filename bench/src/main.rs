//! punctual-bench: Punctual end to end on the real stack, with the physical baselines of
//! the same machine measured in the same run. See docs/BENCHMARKS.md.
//!
//! `run` does every scenario (`--smoke`: each one small, for CI, so the harness cannot
//! rot) and writes results.json, results.md and lag-vs-rate.svg; the other commands run
//! one scenario each. Unless given servers, the harness starts its own Postgres and
//! broker in temporary folders; the services are the binaries built beside this one.

mod baselines;
mod env;
mod measure;
mod panels;
mod report;
mod scenarios;
mod sink;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use env::Env;
use report::Results;

#[derive(Parser)]
#[command(about = "Punctual's benchmark harness")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Clone)]
struct Servers {
    /// Postgres server URL, without database (default: start one in a temporary folder).
    #[arg(long, env = "PUNCTUAL_BENCH_DATABASE_URL", global = true)]
    database_server: Option<String>,
    /// Kafka brokers (default: start a broker in a temporary folder).
    #[arg(long, env = "PUNCTUAL_BENCH_KAFKA_BROKERS", global = true)]
    brokers: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Every scenario, baselines first; writes the results into --out.
    Run {
        /// Each scenario small and short (CI).
        #[arg(long)]
        smoke: bool,
        /// Folder for results.json, results.md and lag-vs-rate.svg.
        #[arg(long, default_value = "target/bench")]
        out: PathBuf,
        /// Sustained rates to step through, fires/s (default: 1000,2500,5000,7500,10000,12500,15000,20000,25000; smoke: 200).
        #[arg(long, value_delimiter = ',')]
        rates: Option<Vec<u32>>,
        #[command(flatten)]
        servers: Servers,
    },
    /// `rate` fires/s for `duration` seconds.
    Sustained {
        #[arg(long, default_value_t = 1_000)]
        rate: u32,
        #[arg(long, default_value_t = 30)]
        duration: u32,
        /// Scanners sharing the buckets.
        #[arg(long, default_value_t = 1)]
        scanners: usize,
        /// Executors sharing the partitions.
        #[arg(long, default_value_t = 1)]
        executors: usize,
        #[command(flatten)]
        servers: Servers,
    },
    /// `timers` one-shot timers due within `window` seconds.
    Burst {
        #[arg(long, default_value_t = 1_000_000)]
        timers: u64,
        #[arg(long, default_value_t = 60)]
        window: u32,
        /// Seconds between inserting the timers and the window's start.
        #[arg(long, default_value_t = 90)]
        lead: u32,
        #[command(flatten)]
        servers: Servers,
    },
    /// A small load on an empty table, then beside `stored` future tasks.
    Stored {
        #[arg(long, default_value_t = 10_000_000)]
        stored: u64,
        #[arg(long, default_value_t = 500)]
        rate: u32,
        #[arg(long, default_value_t = 20)]
        duration: u32,
        #[command(flatten)]
        servers: Servers,
    },
    /// Raw claim throughput of Postgres with Punctual's schema and claim statement.
    ClaimBaseline {
        #[arg(long, default_value_t = 200_000)]
        rows: i64,
        /// Rows per claim statement (the scanner's PUNCTUAL_CLAIM_BATCH).
        #[arg(long, default_value_t = 5_000)]
        batch: i64,
        #[command(flatten)]
        servers: Servers,
    },
    /// What deleting old history costs: retention's batched deletes against dropping a
    /// time partition of the same rows.
    Retention {
        #[arg(long, default_value_t = 1_000_000)]
        rows: i64,
        #[command(flatten)]
        servers: Servers,
    },
    /// The hot scans beside `rows` finished occurrences: index range scans, and how long
    /// the claim and a timer's run listing take.
    History {
        #[arg(long, default_value_t = 10_000_000)]
        rows: i64,
        #[command(flatten)]
        servers: Servers,
    },
    /// A scripted run watched by Prometheus; draws the Overview dashboard's panels into --out.
    Panels {
        #[arg(long, default_value = "docs/img")]
        out: PathBuf,
        #[arg(long, default_value_t = 150)]
        duration: u32,
        /// One-shot timers falling due within 15 s a third of the way through.
        #[arg(long, default_value_t = 200_000)]
        spike: i64,
        #[command(flatten)]
        servers: Servers,
    },
    /// Raw produce and consume throughput of the broker with Punctual's client settings.
    BrokerBaseline {
        #[arg(long, default_value_t = 1_000_000)]
        messages: u64,
        #[arg(long, default_value_t = 4)]
        partitions: i32,
        #[command(flatten)]
        servers: Servers,
    },
}

impl Servers {
    fn start(self) -> Env {
        Env::start(self.database_server, self.brokers)
    }
}

/// mimalloc rather than glibc's allocator: the hot paths allocate per message and per
/// call from many threads, and glibc's malloc and free were a fifth of the executor's CPU
/// under load (docs/BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let telemetry = punctual_shared::telemetry::init("punctual-bench")?;
    let result = match Cli::parse().command {
        Command::Run { smoke, out, rates, servers } => run(smoke, &out, rates, servers).await,
        Command::Sustained { rate, duration, scanners, executors, servers } => {
            scenarios::sustained(&servers.start(), rate, duration, scanners, executors).await.map(drop)
        }
        Command::Burst { timers, window, lead, servers } => {
            scenarios::burst(&servers.start(), timers, window, lead).await.map(drop)
        }
        Command::Stored { stored, rate, duration, servers } => {
            scenarios::stored(&servers.start(), stored, rate, duration).await.map(drop)
        }
        Command::ClaimBaseline { rows, batch, servers } => {
            baselines::claim(&servers.start().database_server, rows, batch).await.map(drop)
        }
        Command::Retention { rows, servers } => {
            baselines::retention(&servers.start().database_server, rows).await.map(drop)
        }
        Command::History { rows, servers } => {
            baselines::history(&servers.start().database_server, rows).await.map(drop)
        }
        Command::Panels { out, duration, spike, servers } => {
            panels::panels(&servers.start(), &out, duration, spike).await
        }
        Command::BrokerBaseline { messages, partitions, servers } => {
            baselines::broker(&servers.start().brokers, messages, partitions).await.map(drop)
        }
    };
    telemetry.shutdown().await;
    result
}

/// Every scenario in turn. The smoke mode fails if anything was lost, so CI notices a
/// harness (or a pipeline) that stopped delivering.
/// Each scenario gets servers of its own (unless servers are given), so none inherits
/// another's leftovers: a broker holding a million messages, a Postgres busy vacuuming
/// the last scenario's tables.
async fn run(smoke: bool, out: &std::path::Path, rates: Option<Vec<u32>>, servers: Servers) -> anyhow::Result<()> {
    let mut results = Results {
        mode: if smoke { "smoke" } else { "full" }.into(),
        machine: report::machine(),
        started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        ..Default::default()
    };
    let (claim_rows, messages) = if smoke { (20_000, 20_000) } else { (200_000, 1_000_000) };
    let rates = rates.unwrap_or_else(|| {
        if smoke {
            vec![200]
        } else {
            vec![1_000, 2_500, 5_000, 7_500, 10_000, 12_500, 15_000, 20_000, 25_000]
        }
    });
    let duration = if smoke { 5 } else { 30 };
    results.claim_baseline_before =
        Some(baselines::claim(&servers.clone().start().database_server, claim_rows, 5_000).await?);
    for rate in rates {
        results.sustained.push(scenarios::sustained(&servers.clone().start(), rate, duration, 1, 1).await?);
    }
    results.burst = Some(if smoke {
        scenarios::burst(&servers.clone().start(), 5_000, 5, 10).await?
    } else {
        scenarios::burst(&servers.clone().start(), 1_000_000, 60, 90).await?
    });
    results.stored = Some(if smoke {
        scenarios::stored(&servers.clone().start(), 100_000, 100, 5).await?
    } else {
        scenarios::stored(&servers.clone().start(), 10_000_000, 500, 20).await?
    });
    results.claim_baseline = Some(baselines::claim(&servers.clone().start().database_server, claim_rows, 5_000).await?);
    results.broker_baseline = Some(baselines::broker(&servers.start().brokers, messages, 4).await?);
    results.write(out)?;
    println!("\n{}", results.markdown());
    println!("results written to {}", out.display());
    if smoke {
        let lost = results.sustained.iter().map(|r| r.lost).sum::<u64>()
            + results.burst.as_ref().map_or(0, |b| b.lost)
            + results.stored.as_ref().map_or(0, |s| s.empty.lost + s.full.lost);
        anyhow::ensure!(lost == 0, "the smoke run lost {lost} occurrences");
    }
    Ok(())
}
