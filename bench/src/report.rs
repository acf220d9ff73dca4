//! A run's results: JSON for machines, Markdown for docs/BENCHMARKS.md, and the plot of
//! lag percentiles against rate.

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;
use serde::Serialize;

use crate::baselines::{BrokerBaseline, ClaimBaseline};
use crate::scenarios::{BurstResult, LoadResult, StoredResult};

#[derive(Debug, Clone, Serialize, Default)]
pub struct Results {
    pub mode: String,
    pub machine: String,
    pub started_at: String,
    /// Measured after the scenarios, on a server of its own.
    pub claim_baseline: Option<ClaimBaseline>,
    /// The same, measured before the scenarios: the host's speed drifts within a run
    /// (docs/bench/history.md, item 20), and the two measurements bracket it.
    pub claim_baseline_before: Option<ClaimBaseline>,
    pub broker_baseline: Option<BrokerBaseline>,
    pub sustained: Vec<LoadResult>,
    /// Sustained rates with two scanners, two executors, or two of each.
    pub scale_out: Vec<LoadResult>,
    pub burst: Option<BurstResult>,
    pub stored: Option<StoredResult>,
    pub neighbors: Option<crate::neighbors::NeighborsResult>,
    pub fan_out: Option<crate::fan_out::FanOutResult>,
    /// The peer at the sustained rates, up to the first it did not sustain.
    pub peer: Vec<crate::peer::PeerResult>,
    pub idle: Option<crate::idle::IdleResult>,
    /// A fire's parts alone, each at a paced rate.
    pub floor: Vec<crate::floor::Part>,
}

/// What the harness ran on: CPU model and count, memory, kernel.
pub fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, m)| m.trim().to_owned()))
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_gib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0 / 1024.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cores} × {model}, {mem_gib:.0} GiB, Linux {}", kernel.trim())
}

impl Results {
    /// The highest rate delivered completely with max lag ≤ 1 s.
    pub fn best_sustained(&self) -> Option<&LoadResult> {
        best_of(&self.sustained)
    }

    /// The claim rate the end-to-end rate is compared with: the higher of the two
    /// measurements, so that a host slower at one of them does not flatter the ratio.
    pub fn claim_reference_per_s(&self) -> Option<f64> {
        [&self.claim_baseline, &self.claim_baseline_before].into_iter().flatten().map(|c| c.rows_per_s).reduce(f64::max)
    }

    pub fn markdown(&self) -> String {
        let mut md = String::new();
        let _ = writeln!(md, "Mode: {}; machine: {}; started {}.\n", self.mode, self.machine, self.started_at);
        md.push_str(&self.headline());
        if let Some(c) = &self.claim_baseline {
            let _ = write!(
                md,
                "- Postgres claim baseline: {:.0} rows/s ({} rows, batches of {})",
                c.rows_per_s, c.rows, c.batch
            );
            if let Some(before) = &self.claim_baseline_before {
                let _ = write!(md, "; before the scenarios: {:.0} rows/s", before.rows_per_s);
            }
            let _ = writeln!(md, ".");
        }
        if let Some(b) = &self.broker_baseline {
            let _ = writeln!(
                md,
                "- Broker baseline: produce {:.0} msgs/s, produce+consume {:.0} msgs/s ({} messages of {} bytes, {} partitions).",
                b.produce_per_s, b.produce_consume_per_s, b.messages, b.message_bytes, b.partitions
            );
        }
        if let Some(warmup_s) = self.sustained.iter().map(|r| r.warmup_s).max().filter(|w| *w > 0) {
            let _ = writeln!(md, "\nEach rate is measured after {warmup_s} s of the same load (warm-up).");
        }
        if let Some(rows) =
            self.sustained.iter().chain(&self.scale_out).map(|r| r.claim_beside_rows).max().filter(|n| *n > 0)
        {
            let _ = writeln!(
                md,
                "\nEach rate is compared with the higher of two claim baselines of {rows} rows taken on its Postgres just before and just after it (× claim beside: the ratio, then the two in rows/s)."
            );
        }
        if !self.sustained.is_empty() {
            let _ = writeln!(
                md,
                "\n| rate /s | s | delivered | lost | dup | achieved /s | × claim beside | lag p50 ms | p99 ms | p99.9 ms | max ms | row writes /fire | scanner MB | executor MB (early → late) |"
            );
            let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
            for r in &self.sustained {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} | {:.0} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.0} | {:.0} → {:.0} |",
                    r.rate,
                    r.duration_s,
                    r.delivered,
                    r.lost,
                    r.duplicated,
                    r.achieved_per_s,
                    claim_beside(r),
                    r.lag.p50_ms,
                    r.lag.p99_ms,
                    r.lag.p999_ms,
                    r.lag.max_ms,
                    r.row_writes_per_fire,
                    r.memory.scanner_peak_mb,
                    r.memory.executor_early_mb,
                    r.memory.executor_late_mb
                );
            }
        }
        if !self.sustained.is_empty() {
            let _ = writeln!(
                md,
                "\nCPU per delivered fire, µs (from the end of the warm-up to the last delivery):\n\n| rate /s | scanner | executor | broker | postgres | sink | total | row writes /fire | of which HOT |"
            );
            let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|");
            for r in &self.sustained {
                let c = &r.cpu_per_fire;
                let _ = writeln!(
                    md,
                    "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} |",
                    r.rate,
                    c.scanner_us,
                    c.executor_us,
                    c.broker_us,
                    c.postgres_us,
                    c.sink_us,
                    c.total_us,
                    r.row_writes_per_fire,
                    r.writes.hot_updated as f64 / r.delivered.max(1) as f64
                );
            }
        }
        if let Some(best) = self.best_sustained() {
            let _ = write!(
                md,
                "\nHighest rate sustained (nothing lost, max lag ≤ 1 s): {:.0} fires/s",
                best.achieved_per_s
            );
            if (best.scanners, best.executors) != (1, 1) {
                let _ = write!(md, " with {} scanner(s) and {} executor(s)", best.scanners, best.executors);
            }
            if let (Some(ratio), Some([before, after])) = (best.claim_ratio(), best.claim_beside_per_s) {
                let _ = write!(
                    md,
                    " = {ratio:.2} × the claim baseline measured beside it (the higher of {before:.0} rows/s before and {after:.0} after)"
                );
            } else if let Some(claim_per_s) = self.claim_reference_per_s() {
                let _ = write!(md, " = {:.2} × the claim baseline", best.achieved_per_s / claim_per_s);
                if self.claim_baseline_before.is_some() {
                    let _ = write!(md, " (the higher of its two measurements)");
                }
            }
            if let Some(b) = &self.broker_baseline {
                let _ = write!(md, ", {:.2} × the broker baseline", best.achieved_per_s / b.produce_consume_per_s);
            }
            let _ = writeln!(md, ".");
        }
        if !self.scale_out.is_empty() {
            md.push_str(&self.scale_out_markdown());
        }
        if let Some(b) = &self.burst {
            let _ = writeln!(
                md,
                "\n- Burst: {} one-shot timers due within {} s: delivered {}, lost {}, duplicated {}; drained {:.1} s after the first was due; lag p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; scanner held up to {} tasks at {:.0} bytes each; peak RSS scanner {:.0} MB, executor {:.0} MB, admin {:.0} MB.",
                b.timers,
                b.window_s,
                b.delivered,
                b.lost,
                b.duplicated,
                b.drain_s,
                b.lag.p50_ms,
                b.lag.p99_ms,
                b.lag.max_ms,
                b.peak_held,
                b.scanner_bytes_per_held_task,
                b.memory.scanner_peak_mb,
                b.memory.executor_peak_mb,
                b.memory.admin_peak_mb
            );
        }
        if let Some(s) = &self.stored {
            let _ = writeln!(
                md,
                "- Stored scale, {}/s for {} s: empty table: scan {:.2} ms, lag p50 {:.1} ms, p99 {:.1} ms; beside {} stored future tasks: scan {:.2} ms, lag p50 {:.1} ms, p99 {:.1} ms.",
                s.empty.rate,
                s.empty.duration_s,
                s.empty.mean_scan_ms,
                s.empty.lag.p50_ms,
                s.empty.lag.p99_ms,
                s.stored,
                s.full.mean_scan_ms,
                s.full.lag.p50_ms,
                s.full.lag.p99_ms
            );
        }
        if let Some(n) = &self.neighbors {
            let _ = writeln!(md, "\n{}", n.markdown());
        }
        if let Some(f) = &self.fan_out {
            let _ = writeln!(md, "\n{}", f.markdown());
        }
        md
    }

    /// The table a run opens with: each offered rate, what Punctual did (rate, lag, CPU a
    /// fire by component, row writes a fire) next to the claim baseline measured beside it
    /// and next to the peer at the same rate; then the idle stack, and a fire's parts alone.
    fn headline(&self) -> String {
        let mut md = String::new();
        if self.sustained.is_empty() {
            return md;
        }
        let peer = self.peer.first().map_or(crate::peer::PEER, |p| p.peer);
        let _ = writeln!(
            md,
            "| offered /s | Punctual /s | lag p50 / p99 ms | CPU µs a fire: scanner + executor + broker + Postgres = all | row writes a fire | × claim beside | {peer} /s | its lag p50 / p99 ms | its CPU µs a job: worker + Postgres = all | its row writes a job | Punctual ÷ peer |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|");
        let ceiling = self.peer.iter().map(|p| p.achieved_per_s).reduce(f64::max);
        for r in &self.sustained {
            let c = &r.cpu_per_fire;
            let all = c.total_us - c.sink_us;
            let mark = if r.is_sustained() { "" } else { " ✗" };
            let _ = write!(
                md,
                "| {} | {:.0}{mark} | {:.1} / {:.1} | {:.0} + {:.0} + {:.0} + {:.0} = **{all:.0}** | {:.2} | {} |",
                r.rate,
                r.achieved_per_s,
                r.lag.p50_ms,
                r.lag.p99_ms,
                c.scanner_us,
                c.executor_us,
                c.broker_us,
                c.postgres_us,
                r.row_writes_per_fire,
                claim_beside(r)
            );
            match self.peer.iter().find(|p| p.rate == r.rate) {
                Some(p) => {
                    let mark = if p.is_sustained() { "" } else { " ✗" };
                    let _ = writeln!(
                        md,
                        " {:.0}{mark} | {:.1} / {:.1} | {:.0} + {:.0} = **{:.0}** | {:.2} | {:.2} |",
                        p.achieved_per_s,
                        p.lag.p50_ms,
                        p.lag.p99_ms,
                        p.worker_us,
                        p.postgres_us,
                        p.total_us,
                        p.row_writes_per_fire,
                        r.achieved_per_s / p.achieved_per_s.max(1.0)
                    );
                }
                None => match ceiling {
                    Some(ceiling) => {
                        let _ = writeln!(
                            md,
                            " not run (above its ceiling) | | | | {:.2} × its ceiling ({ceiling:.0}/s) |",
                            r.achieved_per_s / ceiling.max(1.0)
                        );
                    }
                    None => {
                        let _ = writeln!(md, " not run | | | | |");
                    }
                },
            }
        }
        let _ = writeln!(
            md,
            "
(✗: not sustained, that is something not delivered or a lag above 1 s. The peer is run at each rate up to the first it does not sustain; above that its highest rate is its ceiling. The sink's CPU is left out of both.)
"
        );
        if let Some(idle) = &self.idle {
            let _ = writeln!(md, "{}", idle.markdown());
        }
        if !self.floor.is_empty() {
            let _ = writeln!(
                md,
                "\nA fire's parts alone, each at a paced rate with nothing else running (µs of CPU a fire):\n"
            );
            for part in &self.floor {
                let _ = writeln!(md, "- {}", part.line());
            }
        }
        md
    }

    /// Each configuration of scanners and executors: its highest rate sustained, with the
    /// rates tried.
    fn scale_out_markdown(&self) -> String {
        let mut md = String::from(
            "\nScanners and executors, each configuration's highest rate sustained:\n\n\
             | scanners | executors | rates tried /s | highest sustained /s | × claim baseline (beside it, if measured) | lag p99 ms | max ms | row writes /fire | CPU a fire µs: scanner | executor | broker | postgres | sink | total |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        let mut configs: Vec<(usize, usize)> = Vec::new();
        for r in self.sustained.iter().chain(&self.scale_out) {
            if !configs.contains(&(r.scanners, r.executors)) {
                configs.push((r.scanners, r.executors));
            }
        }
        for (scanners, executors) in configs {
            let runs: Vec<&LoadResult> = self
                .sustained
                .iter()
                .chain(&self.scale_out)
                .filter(|r| (r.scanners, r.executors) == (scanners, executors))
                .collect();
            let tried = runs
                .iter()
                .map(|r| format!("{}{}", r.rate, if r.is_sustained() { "" } else { "✗" }))
                .collect::<Vec<_>>()
                .join(", ");
            let _ = write!(md, "| {scanners} | {executors} | {tried} |");
            match best_of(runs.iter().copied()) {
                Some(b) => {
                    let ratio = b
                        .claim_ratio()
                        .or_else(|| self.claim_reference_per_s().map(|c| b.achieved_per_s / c))
                        .map_or_else(|| "–".to_owned(), |ratio| format!("{ratio:.2}"));
                    let c = &b.cpu_per_fire;
                    let _ = writeln!(
                        md,
                        " {:.0} | {ratio} | {:.1} | {:.1} | {:.2} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
                        b.achieved_per_s,
                        b.lag.p99_ms,
                        b.lag.max_ms,
                        b.row_writes_per_fire,
                        c.scanner_us,
                        c.executor_us,
                        c.broker_us,
                        c.postgres_us,
                        c.sink_us,
                        c.total_us
                    );
                }
                None => {
                    let _ = writeln!(md, " none | | | | | | | | | | |");
                }
            }
        }
        md.push_str("\n(✗: not sustained.)\n");
        md
    }

    /// Writes results.json, results.md and lag-vs-rate.svg into `dir`.
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("results.json"), serde_json::to_vec_pretty(self)?)?;
        std::fs::write(dir.join("results.md"), self.markdown())?;
        if !self.sustained.is_empty() {
            plot_lag(&self.sustained, &dir.join("lag-vs-rate.svg"))?;
        }
        Ok(())
    }
}

/// Lag percentiles (log scale) against the offered rate.
fn plot_lag(results: &[LoadResult], path: &Path) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let max_rate = results.iter().map(|r| r.rate).max().unwrap_or(1) as f64 * 1.1;
    let max_lag = results.iter().map(|r| r.lag.max_ms).fold(10.0, f64::max) * 2.0;
    let mut chart = ChartBuilder::on(&root)
        .caption("Punctual: fire lag against rate", ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(65)
        .build_cartesian_2d(0f64..max_rate, (0.1f64..max_lag).log_scale())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .x_desc("fires per second (offered)")
        .y_desc("lag, ms (log)")
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    type Pick = fn(&LoadResult) -> f64;
    let series: [(&str, Pick, RGBColor); 4] = [
        ("p50", |r| r.lag.p50_ms, BLUE),
        ("p99", |r| r.lag.p99_ms, GREEN),
        ("p99.9", |r| r.lag.p999_ms, MAGENTA),
        ("max", |r| r.lag.max_ms, RED),
    ];
    for (label, pick, color) in series {
        let points: Vec<(f64, f64)> = results.iter().map(|r| (f64::from(r.rate), pick(r).max(0.1))).collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart
            .draw_series(points.into_iter().map(|p| Circle::new(p, 3, color.filled())))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

/// A rate's share of the claim baseline beside it, with that baseline's two measurements.
fn claim_beside(r: &LoadResult) -> String {
    match (r.claim_ratio(), r.claim_beside_per_s) {
        (Some(ratio), Some([before, after])) => format!("{ratio:.2} ({before:.0}, {after:.0})"),
        _ => "–".to_owned(),
    }
}

/// The run of `runs` that sustained the highest rate.
fn best_of<'a>(runs: impl IntoIterator<Item = &'a LoadResult>) -> Option<&'a LoadResult> {
    runs.into_iter().filter(|r| r.is_sustained()).max_by(|a, b| a.achieved_per_s.total_cmp(&b.achieved_per_s))
}

/// The next sustained rate to try to narrow down the highest one of `runs` ([`next_rate`]).
pub fn next_rate_to_try(runs: &[LoadResult]) -> Option<u32> {
    next_rate(
        &runs
            .iter()
            .map(|r| Tried { rate: r.rate, delivered_per_s: r.achieved_per_s, sustained: r.is_sustained() })
            .collect::<Vec<_>>(),
    )
}

/// A rate tried: offered, delivered a second, and whether it was sustained.
struct Tried {
    rate: u32,
    delivered_per_s: f64,
    sustained: bool,
}

/// Halfway between the highest rate sustained and the lowest rate above it that was not,
/// or a quarter above the highest if none above failed; if none was sustained, three
/// quarters of the least any rate delivered a second (the pace the stack kept at worst,
/// seconds late) or of the lowest rate tried. Rounded down to 500 fires/s. None when the
/// gap is 500 fires/s or less, or nothing was tried.
fn next_rate(tried: &[Tried]) -> Option<u32> {
    let Some(best) = tried.iter().filter(|t| t.sustained).map(|t| t.rate).max() else {
        let lowest = tried.iter().map(|t| t.rate).min()?;
        let kept_up = tried.iter().map(|t| t.delivered_per_s).fold(f64::from(lowest), f64::min);
        let next = (kept_up * 0.75) as u32 / 500 * 500;
        return Some(next).filter(|next| *next >= 500 && *next < lowest);
    };
    let failed_above = tried.iter().filter(|t| !t.sustained && t.rate > best).map(|t| t.rate).min();
    let next = match failed_above {
        Some(failed) => (best + failed) / 2,
        None => best + best / 4,
    } / 500
        * 500;
    (next > best && failed_above.is_none_or(|failed| next < failed)).then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::LagStats;

    fn claim(rows_per_s: f64) -> ClaimBaseline {
        ClaimBaseline { rows: 200_000, batch: 5_000, rows_per_s }
    }

    #[test]
    fn the_ratio_is_taken_against_the_higher_claim_measurement() {
        let mut results = Results { claim_baseline: Some(claim(37_387.0)), ..Default::default() };
        assert_eq!(results.claim_reference_per_s(), Some(37_387.0));
        results.claim_baseline_before = Some(claim(50_401.0));
        assert_eq!(results.claim_reference_per_s(), Some(50_401.0));
        results.claim_baseline = Some(claim(66_113.0));
        assert_eq!(results.claim_reference_per_s(), Some(66_113.0));
        assert_eq!(Results::default().claim_reference_per_s(), None);
    }

    /// Rates tried, each delivered in full.
    fn tried(rates: &[(u32, bool)]) -> Vec<Tried> {
        rates.iter().map(|&(rate, sustained)| Tried { rate, delivered_per_s: f64::from(rate), sustained }).collect()
    }

    #[test]
    fn the_next_rate_halves_the_gap_climbs_a_quarter_or_falls_below_what_was_kept_up() {
        assert_eq!(next_rate(&tried(&[(7_500, true), (10_000, true), (12_500, false), (15_000, false)])), Some(11_000));
        assert_eq!(next_rate(&tried(&[(10_000, true), (11_000, true), (12_500, false)])), Some(11_500));
        assert_eq!(next_rate(&tried(&[(11_000, true), (11_500, false)])), None);
        assert_eq!(next_rate(&tried(&[(20_000, true), (25_000, true)])), Some(31_000));
        // A rate sustained above one that was not (the host sped up) is what counts.
        assert_eq!(next_rate(&tried(&[(10_000, false), (12_500, true)])), Some(15_500));
        // Nothing sustained, everything delivered late: three quarters of the lowest rate.
        assert_eq!(next_rate(&tried(&[(17_500, false), (20_000, false)])), Some(13_000));
        // Nothing sustained, and a rate delivered at a slower pace: three quarters of that.
        let fell_behind = Tried { rate: 17_500, delivered_per_s: 12_032.0, sustained: false };
        assert_eq!(next_rate(&[tried(&[(12_500, false)]).remove(0), fell_behind]), Some(9_000));
        assert_eq!(next_rate(&tried(&[(600, false)])), None);
        assert_eq!(next_rate(&[]), None);
    }

    #[test]
    fn a_rate_is_compared_with_the_higher_claim_baseline_beside_it() {
        let rate = |rate: u32, beside: [f64; 2]| LoadResult {
            rate,
            scanners: 1,
            executors: 1,
            achieved_per_s: f64::from(rate),
            claim_beside_per_s: Some(beside),
            claim_beside_rows: 200_000,
            ..Default::default()
        };
        let results = Results {
            // Far from the rates' own: not what they are compared with.
            claim_baseline: Some(claim(80_000.0)),
            sustained: vec![rate(10_000, [20_000.0, 25_000.0]), rate(12_000, [16_000.0, 15_000.0])],
            scale_out: vec![LoadResult { scanners: 2, ..rate(8_000, [20_000.0, 16_000.0]) }],
            ..Default::default()
        };
        assert_eq!(results.best_sustained().and_then(LoadResult::claim_ratio), Some(0.75));
        let md = results.markdown();
        assert!(md.contains("| 0.40 (20000, 25000) |"), "{md}");
        assert!(md.contains("two claim baselines of 200000 rows"), "{md}");
        assert!(
            md.contains("12000 fires/s = 0.75 × the claim baseline measured beside it (the higher of 16000 rows/s before and 15000 after)"),
            "{md}"
        );
        assert!(md.contains("| 1 | 1 | 10000, 12000 | 12000 | 0.75 |"), "{md}");
        assert!(md.contains("| 2 | 1 | 8000 | 8000 | 0.40 |"), "{md}");
    }

    #[test]
    fn the_headline_sets_each_rate_beside_the_peers_and_its_ceiling_above_what_it_ran() {
        let punctual = |rate: u32, achieved: f64| LoadResult {
            rate,
            achieved_per_s: achieved,
            lag: LagStats { p50_ms: 2.0, p99_ms: 9.0, max_ms: 20.0, ..Default::default() },
            cpu_per_fire: crate::env::CpuPerFire {
                scanner_us: 7.0,
                executor_us: 26.0,
                broker_us: 4.0,
                postgres_us: 36.0,
                sink_us: 10.0,
                total_us: 83.0,
            },
            row_writes_per_fire: 2.13,
            ..Default::default()
        };
        let peer = |rate: u32, achieved: f64, max_ms: f64| crate::peer::PeerResult {
            peer: crate::peer::PEER,
            settings: crate::peer::PeerSettings { concurrency: 20, pool: 20, poll_ms: 100 },
            rate,
            warmup_s: 15,
            duration_s: 30,
            expected: u64::from(rate) * 30,
            delivered: u64::from(rate) * 30,
            undelivered: 0,
            duplicated: 0,
            achieved_per_s: achieved,
            lag: LagStats { p50_ms: 30.0, p99_ms: 800.0, max_ms, ..Default::default() },
            worker_us: 800.0,
            postgres_us: 700.0,
            total_us: 1_500.0,
            row_writes_per_fire: 3.0,
        };
        let results = Results {
            sustained: vec![punctual(1_000, 1_000.0), punctual(2_500, 2_500.0), punctual(5_000, 5_000.0)],
            peer: vec![peer(1_000, 1_000.0, 900.0), peer(2_500, 1_250.0, 60_000.0)],
            ..Default::default()
        };
        let md = results.markdown();
        // CPU all-in leaves the sink out: 7 + 26 + 4 + 36 = 73.
        assert!(md.contains("| 1000 | 1000 | 2.0 / 9.0 | 7 + 26 + 4 + 36 = **73** | 2.13 | – | 1000 | 30.0 / 800.0 | 800 + 700 = **1500** | 3.00 | 1.00 |"), "{md}");
        assert!(md.contains("| 2500 | 2500 | 2.0 / 9.0 | 7 + 26 + 4 + 36 = **73** | 2.13 | – | 1250 ✗ |"), "{md}");
        assert!(md.contains("| 2.00 |\n"), "{md}");
        assert!(md.contains("not run (above its ceiling) | | | | 4.00 × its ceiling (1250/s) |"), "{md}");
    }

    #[test]
    fn both_claim_measurements_are_reported() {
        let results = Results {
            claim_baseline: Some(claim(37_387.0)),
            claim_baseline_before: Some(claim(50_401.0)),
            ..Default::default()
        };
        let md = results.markdown();
        assert!(
            md.contains("- Postgres claim baseline: 37387 rows/s (200000 rows, batches of 5000); before the scenarios: 50401 rows/s."),
            "{md}"
        );
    }
}
