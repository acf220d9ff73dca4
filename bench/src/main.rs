//! punctual-bench: Punctual end to end on the real stack, with the physical baselines of
//! the same machine measured in the same run. See docs/BENCHMARKS.md.
//!
//! `run` does every scenario (`--smoke`: each one small, for CI, so the harness cannot
//! rot) and writes results.json, results.md and lag-vs-rate.svg; the other commands run
//! one scenario each. Unless given servers, the harness starts its own Postgres and
//! broker in temporary folders; the services are the binaries built beside this one.

mod baselines;
mod env;
mod fan_out;
mod floor;
mod idle;
mod measure;
mod neighbors;
mod panels;
mod peer;
mod report;
mod scenarios;
mod sink;
mod surface;
mod timer_list;

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};

use env::Env;
use punctual_testkit::servers::Broker;
use report::Results;
use scenarios::LoadResult;

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
        /// Sustained rates tried beyond the listed ones to narrow down the highest sustained
        /// (halving the gap to the lowest rate not sustained, a quarter higher if all were, or
        /// three quarters of the slowest pace delivered if none was).
        #[arg(long, default_value_t = 3)]
        refine: u32,
        #[command(flatten)]
        peer: peer::PeerSettings,
        #[command(flatten)]
        servers: Servers,
    },
    /// `rate` fires/s for `duration` seconds after `warmup` seconds of the same load.
    Sustained {
        #[arg(long, default_value_t = 1_000)]
        rate: u32,
        #[command(flatten)]
        load: LoadShape,
        #[command(flatten)]
        servers: Servers,
    },
    /// Sustained rates with the claim baseline before and after: `run`'s first part, with
    /// as many scanners and executors as asked.
    Sweep {
        /// Folder for results.json, results.md and lag-vs-rate.svg.
        #[arg(long, default_value = "target/bench-sweep")]
        out: PathBuf,
        #[arg(long, value_delimiter = ',', default_value = "5000,7500,10000,12500,15000,20000,25000")]
        rates: Vec<u32>,
        #[arg(long, default_value_t = 3)]
        refine: u32,
        /// Rows of the claim baseline taken just before and just after each rate (0: none).
        #[arg(long, default_value_t = CLAIM_ROWS)]
        claim_rows: i64,
        #[command(flatten)]
        load: LoadShape,
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
        #[arg(long, default_value_t = CLAIM_ROWS)]
        rows: i64,
        /// Rows per claim statement (the scanner's PUNCTUAL_CLAIM_BATCH).
        #[arg(long, default_value_t = CLAIM_BATCH)]
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
    /// A steady namespace while other namespaces import, aim at a black hole and at a
    /// target answering 429, and replay dead tasks; the steady namespace's lag per phase.
    Neighbors {
        /// The steady namespace's fires per second.
        #[arg(long, default_value_t = 2_000)]
        rate: u32,
        /// Each phase small and short (CI).
        #[arg(long)]
        smoke: bool,
        #[command(flatten)]
        servers: Servers,
    },
    /// An authenticated request's latency, idle and while many clients call /readyz at once.
    Surface {
        /// Clients calling /readyz at once.
        #[arg(long, default_value_t = 5_000)]
        readyz_clients: u32,
        /// Authenticated requests timed in each phase.
        #[arg(long, default_value_t = 300)]
        requests: u32,
        #[command(flatten)]
        servers: Servers,
    },
    /// What the stack costs with one timer firing every 5 s: each process's CPU over `seconds`.
    Idle {
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Seconds the stack runs before it is measured.
        #[arg(long, default_value_t = 15)]
        warmup: u64,
        #[command(flatten)]
        servers: Servers,
    },
    /// The peer (graphile-worker) offered the same load as `sustained`, rate by rate up
    /// to the first it does not sustain, on a Postgres server of its own.
    Peer {
        #[arg(long, value_delimiter = ',', default_value = "1000,2500,5000,10000")]
        rates: Vec<u32>,
        #[arg(long, default_value_t = WARMUP_S)]
        warmup: u32,
        #[arg(long, default_value_t = 30)]
        duration: u32,
        #[command(flatten)]
        settings: peer::PeerSettings,
        /// Postgres server URL, without database (default: start one in a temporary folder).
        #[arg(long, env = "PUNCTUAL_BENCH_DATABASE_URL")]
        database_server: Option<String>,
    },
    /// Timers whose occurrences are split into shards: `timers` × `shards` calls a second.
    FanOut {
        #[arg(long, default_value_t = 100)]
        timers: usize,
        #[arg(long, default_value_t = 100)]
        shards: i32,
        #[arg(long, default_value_t = 30)]
        seconds: i64,
        #[command(flatten)]
        servers: Servers,
    },
    /// The console's timer list, a page at a time for each filter, with `timers` timers stored.
    TimerList {
        #[arg(long, default_value_t = 1_000_000)]
        timers: i64,
        /// Pages read for each filter.
        #[arg(long, default_value_t = 200)]
        requests: u32,
        #[command(flatten)]
        servers: Servers,
    },
    /// What a fire's parts cost alone, each at a paced rate: an HTTP call, a task message
    /// through the broker, a fire's rows in Postgres (today's, with a HOT outcome, written once).
    Floor {
        /// Fires a second of each part.
        #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..))]
        rate: u32,
        /// Seconds of each part before the measured ones.
        #[arg(long, default_value_t = 10)]
        warmup: u32,
        /// Seconds measured of each part.
        #[arg(long, default_value_t = 20)]
        duration: u32,
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

/// How each sustained rate is run: for how long, and by how many scanners and executors.
#[derive(Debug, Clone, Copy, clap::Args)]
struct LoadShape {
    /// Seconds of the same load before the measured ones.
    #[arg(long, default_value_t = WARMUP_S)]
    warmup: u32,
    /// Seconds measured.
    #[arg(long, default_value_t = 30)]
    duration: u32,
    /// Scanners sharing the buckets.
    #[arg(long, default_value_t = 1)]
    scanners: usize,
    /// Executors sharing the partitions.
    #[arg(long, default_value_t = 1)]
    executors: usize,
}

impl Servers {
    fn start(self) -> Env {
        Env::start(self.database_server, self.brokers)
    }
}

/// Seconds of load before a sustained rate is measured (`sustained --warmup`).
const WARMUP_S: u32 = 15;

/// Rows per claim statement in the claim baselines: the scanner's default PUNCTUAL_CLAIM_BATCH.
const CLAIM_BATCH: i64 = 5_000;

/// Rows of a claim baseline: the one before and after a run, the one beside each of its
/// rates and `claim-baseline`'s default, so that all of them measure the same thing.
const CLAIM_ROWS: i64 = 200_000;

/// mimalloc rather than glibc's allocator: the hot paths allocate per message and per
/// call from many threads, and glibc's malloc and free were a fifth of the executor's CPU
/// under load (docs/BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let telemetry = punctual_runtime::telemetry::init("punctual-bench")?;
    let result = match Cli::parse().command {
        Command::Run { smoke, out, rates, refine, peer, servers } => {
            run(smoke, &out, rates, refine, peer, servers).await
        }
        Command::Sustained { rate, load, servers } => {
            let LoadShape { warmup, duration, scanners, executors } = load;
            scenarios::sustained(&servers.start(), rate, warmup, duration, scanners, executors).await.map(drop)
        }
        Command::Sweep { out, rates, refine, claim_rows, load, servers } => {
            sweep(&out, Sweep { rates, refine, load, claim_rows }, servers).await
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
        Command::Neighbors { rate, smoke, servers } => {
            let sizes = if smoke { neighbors::Neighbours::smoke() } else { neighbors::Neighbours::full(rate) };
            neighbors::neighbors(&servers.start(), sizes).await.map(drop)
        }
        Command::Surface { readyz_clients, requests, servers } => {
            surface::surface(&servers.start(), surface::Surface { readyz_clients, requests }).await.map(drop)
        }
        Command::Peer { rates, warmup, duration, settings, database_server } => {
            peer::peer_rates(&Env::postgres_only(database_server), &rates, warmup, duration, settings).await.map(drop)
        }
        Command::Idle { seconds, warmup, servers } => idle::idle(&servers.start(), warmup, seconds).await.map(drop),
        Command::FanOut { timers, shards, seconds, servers } => {
            fan_out::fan_out(&servers.start(), timers, shards, seconds).await.map(drop)
        }
        Command::TimerList { timers, requests, servers } => {
            timer_list::timer_list(&servers.start(), timers, requests).await.map(drop)
        }
        Command::Floor { rate, warmup, duration, servers } => {
            floor::run(&servers.start(), rate, warmup, duration).await.map(drop)
        }
        Command::BrokerBaseline { messages, partitions, servers } => {
            baselines::broker(&servers.start().brokers, messages, partitions).await.map(drop)
        }
    };
    telemetry.shutdown().await;
    result
}

async fn sweep(out: &std::path::Path, sweep: Sweep, servers: Servers) -> anyhow::Result<()> {
    let mut results = Results {
        mode: format!("sweep, {} scanner(s), {} executor(s)", sweep.load.scanners, sweep.load.executors),
        machine: report::machine(),
        started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        ..Default::default()
    };
    results.claim_baseline_before =
        Some(baselines::claim(&servers.clone().start().database_server, CLAIM_ROWS, CLAIM_BATCH).await?);
    results.sustained = sweep.run(&servers).await?;
    results.claim_baseline = Some(baselines::claim(&servers.start().database_server, CLAIM_ROWS, CLAIM_BATCH).await?);
    results.write(out)?;
    println!("\n{}", results.markdown());
    println!("results written to {}", out.display());
    Ok(())
}

/// Sustained rates in turn, then more to narrow down the highest sustained.
struct Sweep {
    rates: Vec<u32>,
    refine: u32,
    load: LoadShape,
    /// Rows of the claim baseline taken beside each rate (0: none).
    claim_rows: i64,
}

impl Sweep {
    /// The sustained results, in the order of their rates.
    async fn run(&self, servers: &Servers) -> anyhow::Result<Vec<LoadResult>> {
        // The rates share one broker (each with a Postgres of its own): a broker started
        // per rate spends its first minutes compiling its hot code (docs/BENCHMARKS.md).
        let broker = servers.brokers.is_none().then(|| Arc::new(Broker::start(false)));
        let env = || match &broker {
            Some(broker) => Env::sharing(servers.database_server.clone(), broker),
            None => servers.clone().start(),
        };
        let mut runs: Vec<LoadResult> = Vec::new();
        let mut listed = self.rates.iter().copied();
        let mut refined = 0;
        loop {
            let rate = match listed.next() {
                Some(rate) => rate,
                None if refined < self.refine => {
                    refined += 1;
                    let Some(rate) = report::next_rate_to_try(&runs) else { break };
                    rate
                }
                None => break,
            };
            let LoadShape { warmup, duration, scanners, executors } = self.load;
            let env = env();
            let before = self.claim_beside(&env).await?;
            let mut run = scenarios::sustained(&env, rate, warmup, duration, scanners, executors).await?;
            let after = self.claim_beside(&env).await?;
            run.claim_beside_per_s = before.zip(after).map(|(before, after)| [before, after]);
            run.claim_beside_rows = self.claim_rows;
            runs.push(run);
        }
        runs.sort_by_key(|r| r.rate);
        Ok(runs)
    }

    async fn claim_beside(&self, env: &Env) -> anyhow::Result<Option<f64>> {
        if self.claim_rows == 0 {
            return Ok(None);
        }
        Ok(Some(baselines::claim(&env.database_server, self.claim_rows, CLAIM_BATCH).await?.rows_per_s))
    }
}

/// Every scenario in turn. The smoke mode fails if anything was lost, so CI notices a
/// harness (or a pipeline) that stopped delivering.
/// Each scenario gets servers of its own (unless servers are given), so none inherits
/// another's leftovers: a broker holding a million messages, a Postgres busy vacuuming
/// the last scenario's tables.
async fn run(
    smoke: bool,
    out: &std::path::Path,
    rates: Option<Vec<u32>>,
    refine: u32,
    peer_settings: peer::PeerSettings,
    servers: Servers,
) -> anyhow::Result<()> {
    let mut results = Results {
        mode: if smoke { "smoke" } else { "full" }.into(),
        machine: report::machine(),
        started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        ..Default::default()
    };
    let (claim_rows, messages) = if smoke { (20_000, 20_000) } else { (CLAIM_ROWS, 1_000_000) };
    let rates = rates.unwrap_or_else(|| {
        if smoke {
            vec![200]
        } else {
            vec![1_000, 2_500, 5_000, 7_500, 10_000, 12_500, 15_000, 20_000, 25_000]
        }
    });
    let sweep = if smoke {
        Sweep {
            rates,
            refine: 0,
            load: LoadShape { warmup: 0, duration: 5, scanners: 1, executors: 1 },
            claim_rows: claim_rows / 2,
        }
    } else {
        Sweep {
            rates,
            refine,
            load: LoadShape { warmup: WARMUP_S, duration: 30, scanners: 1, executors: 1 },
            claim_rows: CLAIM_ROWS,
        }
    };
    results.claim_baseline_before =
        Some(baselines::claim(&servers.clone().start().database_server, claim_rows, CLAIM_BATCH).await?);
    results.sustained = sweep.run(&servers).await?;
    // The peer at the same rates, after Punctual's, on the same kind of Postgres server.
    let rates: Vec<u32> = results.sustained.iter().map(|r| r.rate).collect();
    let LoadShape { warmup, duration, .. } = sweep.load;
    results.peer =
        peer::peer_rates(&Env::postgres_only(servers.database_server.clone()), &rates, warmup, duration, peer_settings)
            .await?;
    if !smoke {
        // Two scanners, two executors, and two of each: from three quarters of the rate
        // one of each sustained, narrowed down the same way.
        let start = results.best_sustained().map_or(5_000, |r| r.rate * 3 / 4 / 500 * 500).max(1_000);
        for (scanners, executors) in [(2, 1), (1, 2), (2, 2)] {
            let sweep = Sweep {
                rates: vec![start],
                refine: 2,
                load: LoadShape { scanners, executors, ..sweep.load },
                claim_rows: sweep.claim_rows,
            };
            results.scale_out.extend(sweep.run(&servers).await?);
        }
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
    let sizes = if smoke { neighbors::Neighbours::smoke() } else { neighbors::Neighbours::full(2_000) };
    results.neighbors = Some(neighbors::neighbors(&servers.clone().start(), sizes).await?);
    let (timers, shards, seconds) = if smoke { (10, 10, 5) } else { (100, 100, 30) };
    results.fan_out = Some(fan_out::fan_out(&servers.clone().start(), timers, shards, seconds).await?);
    let (rate, warmup, duration) = if smoke { (200, 1, 3) } else { (20_000, 10, 20) };
    results.floor = floor::run(&servers.clone().start(), rate, warmup, duration).await?;
    results.idle = Some(idle::idle(&servers.clone().start(), 15, if smoke { 10 } else { 60 }).await?);
    results.claim_baseline =
        Some(baselines::claim(&servers.clone().start().database_server, claim_rows, CLAIM_BATCH).await?);
    results.broker_baseline = Some(baselines::broker(&servers.start().brokers, messages, 4).await?);
    results.write(out)?;
    println!("\n{}", results.markdown());
    println!("results written to {}", out.display());
    if smoke {
        let lost = results.sustained.iter().map(|r| r.lost).sum::<u64>()
            + results.burst.as_ref().map_or(0, |b| b.lost)
            + results.stored.as_ref().map_or(0, |s| s.empty.lost + s.full.lost)
            + results.neighbors.as_ref().map_or(0, |n| n.lost())
            + results.fan_out.as_ref().map_or(0, |f| f.lost as u64)
            + results.peer.iter().map(|p| p.undelivered).sum::<u64>();
        anyhow::ensure!(lost == 0, "the smoke run lost {lost} occurrences");
    }
    Ok(())
}
