//! `punctual-bench panels`: a scripted run watched by a real Prometheus (with the shipped
//! rules), then the Overview dashboard's time-series panels drawn from the range queries
//! Grafana would send: what the dashboard shows, as PNG for the README (Grafana itself is
//! not installed here). SVG is drawn with plotters, and turned into PNG by `rsvg-convert`
//! (Debian's librsvg2-bin).
//!
//! The script: 2,000 interval timers fire every second throughout; 20 more call a target
//! that always answers 500, so they are retried and dead-lettered; a third of the way
//! through, `spike` one-shot timers fall due within 15 s, more than the machine carries,
//! and the lag, backlog and consumer lag rise and fall back.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use chrono::Utc;
use plotters::prelude::*;
use punctual_testkit::prometheus::{repo_root, stack_jobs, Prometheus};
use punctual_testkit::{Behaviour, Sink};
use serde_json::Value;

use crate::env::Env;
use crate::sink::LagSink;

/// Steady timers firing every second.
const STEADY: i32 = 2_000;
/// Timers whose target always fails.
const FAILING: i32 = 20;
/// The spike's window.
const SPIKE_WINDOW_S: i64 = 15;

pub async fn panels(env: &Env, out: &Path, duration_s: u32, spike: i64) -> anyhow::Result<()> {
    std::fs::create_dir_all(out)?;
    let sink = LagSink::start().await?;
    let failing = Sink::start().await;
    failing.behave("/fails", Behaviour::fail_first(1_000_000, 500));
    let stack = env.stack(&[]).await;
    let jobs = stack_jobs(&stack);
    let rules = std::fs::read_to_string(repo_root().join("deploy/prometheus/alerts.yml"))?;
    let prometheus = Prometheus::start(&jobs, &rules).await;

    let t0 = Utc::now() + chrono::Duration::seconds(10);
    let end = t0 + chrono::Duration::seconds(i64::from(duration_s));
    let insert = |name: &str, count: i32, url: String, retry: i32| {
        sqlx::query(
            "INSERT INTO timers (name, schedule_kind, interval_ms, start_at, end_at, http_url, retry_max_attempts,
                                 retry_initial_ms, retry_max_ms)
             SELECT $1 || i, 'interval', 1000, $2 + (i::bigint * 1000000 / $3) * interval '1 microsecond', $4, $5, $6,
                    200, 1000
               FROM generate_series(0, $3 - 1) AS i",
        )
        .bind(name.to_owned())
        .bind(t0)
        .bind(count)
        .bind(end)
        .bind(url)
        .bind(retry)
        .execute(&stack.db.pool)
    };
    insert("steady-", STEADY, sink.url(), 3).await?;
    insert("failing-", FAILING, failing.url("/fails"), 2).await?;
    let spike_at = t0 + chrono::Duration::seconds(i64::from(duration_s) / 3);
    sqlx::query(
        "INSERT INTO timers (name, schedule_kind, run_at, http_url)
         SELECT 'spike-' || i, 'once', $1 + random() * $2 * interval '1 second', $3 FROM generate_series(1, $4) AS i",
    )
    .bind(spike_at)
    .bind(SPIKE_WINDOW_S as f64)
    .bind(sink.url())
    .bind(spike)
    .execute(&stack.db.pool)
    .await?;
    println!("panels: steady {STEADY}/s from {t0}, a spike of {spike} at {spike_at}, until {end}");
    // The run, then a minute for the lag's and rates' windows to settle.
    let settled = end + chrono::Duration::seconds(60);
    if let Ok(wait) = (settled - Utc::now()).to_std() {
        tokio::time::sleep(wait).await;
    }

    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(repo_root().join("deploy/grafana/dashboards/overview.json"))?)?;
    let from = t0 - chrono::Duration::seconds(20);
    let mut drawn = Vec::new();
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        if panel["type"] != "timeseries" {
            continue;
        }
        let title = panel["title"].as_str().unwrap_or("panel");
        let mut series = Vec::new();
        for target in panel["targets"].as_array().into_iter().flatten() {
            let Some(expr) = target["expr"].as_str() else { continue };
            let legend = target["legendFormat"].as_str().unwrap_or("");
            let expr = expr.replace("$instance", ".*").replace("$__rate_interval", "15s");
            for result in prometheus.query_range(&expr, from, settled, Duration::from_secs(2)).await {
                let points: Vec<(f64, f64)> = result["values"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| {
                        let at = v[0].as_f64()?;
                        let value: f64 = v[1].as_str()?.parse().ok()?;
                        value.is_finite().then_some((at - from.timestamp() as f64, value))
                    })
                    .collect();
                series.push((legend_of(legend, &result["metric"]), points));
            }
        }
        let stem = format!("overview-{}", slug(title));
        let svg = out.join(format!("{stem}.svg"));
        draw(title, panel["fieldConfig"]["defaults"]["unit"].as_str().unwrap_or(""), &series, &svg)?;
        let png = out.join(format!("{stem}.png"));
        let converted = Command::new("rsvg-convert").arg("-o").arg(&png).arg(&svg).status();
        match converted {
            Ok(s) if s.success() => {
                std::fs::remove_file(&svg)?;
                drawn.push(png);
            }
            _ => {
                println!("panels: rsvg-convert (Debian's librsvg2-bin) missing or failed: kept {}", svg.display());
                drawn.push(svg);
            }
        }
    }
    for path in &drawn {
        println!("panels: wrote {}", path.display());
    }
    let calls = failing.calls_to("/fails").len();
    println!("panels: {} occurrences delivered to the steady sink, {calls} failing calls", sink.distinct());
    Ok(())
}

/// Grafana's legend format: `{{label}}` replaced by the series' label value.
fn legend_of(format: &str, metric: &Value) -> String {
    let mut legend = format.to_owned();
    if let Some(labels) = metric.as_object() {
        for (name, value) in labels {
            legend = legend.replace(&format!("{{{{{name}}}}}"), value.as_str().unwrap_or(""));
        }
    }
    if legend.is_empty() {
        metric.to_string()
    } else {
        legend
    }
}

fn slug(title: &str) -> String {
    let slug: String =
        title.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    slug.split('-').filter(|p| !p.is_empty()).collect::<Vec<_>>().join("-")
}

/// One panel: each series a line over the run's seconds.
fn draw(title: &str, unit: &str, series: &[(String, Vec<(f64, f64)>)], path: &Path) -> anyhow::Result<()> {
    let e = |e: DrawingAreaErrorKind<_>| anyhow::anyhow!("{e}");
    let root = SVGBackend::new(path, (720, 300)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let points = series.iter().flat_map(|(_, p)| p.iter());
    let x_max = points.clone().map(|p| p.0).fold(1.0, f64::max);
    let y_max = points.map(|p| p.1).fold(0.0, f64::max).max(1e-3) * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(32)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(e)?;
    let y_desc = match unit {
        "s" => "seconds",
        "ops" | "reqps" => "per second",
        "" | "short" | "none" => "",
        other => other,
    };
    chart
        .configure_mesh()
        .x_desc("seconds into the run")
        .y_desc(y_desc)
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(e)?;
    for (i, (label, points)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(e)?
            .label(label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
    }
    if !series.is_empty() {
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.85))
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(e)?;
    }
    root.present().map_err(e)?;
    Ok(())
}
