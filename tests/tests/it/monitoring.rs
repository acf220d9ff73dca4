//! Monitoring against a real Prometheus: every service's `/metrics` passes `promtool check
//! metrics`, and every panel query of every dashboard in deploy/grafana returns data once
//! the services have run a short load; `/readyz` tells when Postgres is gone.

use std::time::Duration;

use punctual_testkit::load::Load;
use punctual_testkit::prometheus::{promtool_check_metrics, repo_root, stack_jobs, Prometheus};
use punctual_testkit::servers::PgServer;
use punctual_testkit::{kafka_brokers, Behaviour, Sink, Stack};
use serde_json::{json, Value};

/// Each panel's title and query, rows' nested panels included.
fn panel_queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut queries = Vec::new();
    let mut panels: Vec<&Value> = dashboard["panels"].as_array().into_iter().flatten().collect();
    while let Some(panel) = panels.pop() {
        panels.extend(panel["panels"].as_array().into_iter().flatten());
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                queries.push((panel["title"].as_str().unwrap_or_default().to_owned(), expr.to_owned()));
            }
        }
    }
    queries
}

/// A panel query as Grafana would send it for the last minutes, every instance selected.
fn as_grafana_sends(expr: &str) -> String {
    expr.replace("${instance}", ".*")
        .replace("$instance", ".*")
        .replace("${__rate_interval}", "15s")
        .replace("$__rate_interval", "15s")
        .replace("$__interval", "5s")
        .replace("$__range", "1m")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_panel_query_returns_data_from_the_services() {
    let sink = Sink::start().await;
    sink.behave("/fails", Behaviour::fail_first(10_000, 500));
    let stack = Stack::start(&[]).await;
    let jobs = stack_jobs(&stack);
    let rules = std::fs::read_to_string(repo_root().join("deploy/prometheus/alerts.yml")).expect("alert rules");
    let prometheus = Prometheus::start(&jobs, &rules).await;

    // Successes, a failure that is retried and then dead-lettered, and API requests.
    let load = Load::start(&stack, &sink, 50, 20).await;
    stack
        .create_timer(&json!({
            "name": "fails", "schedule": {"every_ms": 1000},
            "action": {"http": {"url": sink.url("/fails")}},
            "retry": {"max_attempts": 2, "initial_ms": 100, "max_ms": 100}
        }))
        .await;
    let audit = load.audit_calls(&stack, || sink.calls_to("/load"), Duration::from_secs(60)).await;
    assert_eq!(audit.lost, 0, "the load was delivered");
    punctual_testkit::eventually(Duration::from_secs(30), "a dead letter counted", || async {
        let dead = prometheus.query("sum(punctual_tasks_executed_total{outcome=\"dead\"}) > 0").await;
        (!dead.is_empty()).then_some(())
    })
    .await;
    // The cluster's figures and the consumer's lag come every 5 s, the timer counts every 15 s.
    tokio::time::sleep(Duration::from_secs(16)).await;

    for (name, service) in [("admin", &stack.admin), ("scanner", &stack.scanner), ("executor", &stack.executor)] {
        let text = stack.metrics(service).await;
        if let Err(said) = promtool_check_metrics(&text) {
            panic!("promtool check metrics on the {name}'s /metrics: {said}");
        }
    }
    assert!(prometheus.unhealthy_targets().await.is_empty(), "{:?}", prometheus.unhealthy_targets().await);
    let fresh = prometheus.query("time() - max(punctual_cluster_figures_read_timestamp_seconds) < 15").await;
    assert!(!fresh.is_empty(), "the cluster's figures were read within the last 15 s");

    let mut dashboards: Vec<_> = std::fs::read_dir(repo_root().join("deploy/grafana/dashboards"))
        .expect("deploy/grafana/dashboards")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    dashboards.sort();
    assert!(dashboards.len() >= 4, "overview and one per service: {dashboards:?}");
    let mut empty = Vec::new();
    let mut evaluated = 0;
    for path in &dashboards {
        let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("dashboard")).expect("JSON");
        let queries = panel_queries(&dashboard);
        assert!(!queries.is_empty(), "{} has no panel query", path.display());
        for (title, expr) in queries {
            evaluated += 1;
            if prometheus.query(&as_grafana_sends(&expr)).await.is_empty() {
                empty.push(format!("{}: {title}: {expr}", path.file_name().unwrap().to_string_lossy()));
            }
        }
    }
    println!("{evaluated} panel queries of {} dashboards evaluated", dashboards.len());
    assert!(empty.is_empty(), "panel queries without data:\n{}", empty.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_fails_while_postgres_is_down_and_recovers() {
    let pg = PgServer::start();
    let stack = Stack::start_on(&pg.url(), &kafka_brokers(), &[]).await;
    let http = reqwest::Client::new();
    let ready = |url: String| {
        let http = http.clone();
        async move {
            let r = http.get(url).send().await.expect("reachable");
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.expect("JSON report"))
        }
    };
    for service in [&stack.admin, &stack.scanner, &stack.executor] {
        punctual_testkit::eventually(Duration::from_secs(20), &format!("{} ready", service.name), || async {
            let (status, report) = ready(service.url("/readyz")).await;
            (status == 200 && report["ready"] == true).then_some(())
        })
        .await;
    }
    let (_, scanner_report) = ready(stack.scanner.url("/readyz")).await;
    let names: Vec<&str> =
        scanner_report["checks"].as_array().unwrap().iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, ["postgres", "migrations", "kafka", "bucket lease"]);

    pg.stop();
    for service in [&stack.admin, &stack.scanner, &stack.executor] {
        punctual_testkit::eventually(Duration::from_secs(20), &format!("{} not ready", service.name), || async {
            let (status, report) = ready(service.url("/readyz")).await;
            let postgres = report["checks"].as_array()?.iter().find(|c| c["name"] == "postgres")?.clone();
            (status == 503 && postgres["ok"] == false && postgres["error"].is_string()).then_some(())
        })
        .await;
        // Alive all the same: a supervisor must not restart it for a database outage.
        assert_eq!(http.get(service.url("/healthz")).send().await.expect("reachable").status().as_u16(), 200);
    }
    pg.restart();
    for service in [&stack.admin, &stack.scanner, &stack.executor] {
        punctual_testkit::eventually(Duration::from_secs(30), &format!("{} ready again", service.name), || async {
            let (status, _) = ready(service.url("/readyz")).await;
            (status == 200).then_some(())
        })
        .await;
    }
}

/// The shipped rules with their time constants divided by six (minutes become tens of
/// seconds, every `for:` 5 s), so that an overload fires and resolves them within a test;
/// the expressions are otherwise the shipped ones.
fn rules_at_test_speed(rules: &str) -> String {
    let mut scaled = String::with_capacity(rules.len());
    for line in rules.lines() {
        let line = if line.trim_start().starts_with("for:") {
            format!("{}for: 5s", &line[..line.len() - line.trim_start().len()])
        } else {
            line.replace("[1m]", "[10s]").replace("offset 1m", "offset 10s").replace("[2m]", "[20s]")
        };
        scaled.push_str(&line);
        scaled.push('\n');
    }
    scaled
}

/// What the overload alerts look at, for a failure's message.
async fn figures(prometheus: &Prometheus) -> String {
    let mut said = Vec::new();
    for expr in [
        "max(punctual_tasks_due_backlog)",
        "sum(punctual_consumer_lag)",
        "histogram_quantile(0.99, sum by (le) (rate(punctual_fire_lag_seconds_bucket[10s])))",
        "sum(rate(punctual_tasks_executed_total[10s]))",
        "max(punctual_wheel_held_tasks)",
    ] {
        let value = prometheus.query(expr).await.first().map(|r| r["value"][1].to_string()).unwrap_or_default();
        said.push(format!("{expr} = {value}"));
    }
    said.join("; ")
}

/// An overload: the executor may run 20 tasks at once and every call takes 200 ms, so it
/// runs about 100 occurrences a second while 200 fall due every second for 20 s. The lag
/// and backlog alerts (the published tasks waiting in Kafka for an executor) must fire in
/// the real Prometheus, and resolve once the load has stopped and the backlog has drained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overload_fires_the_backlog_and_lag_alerts_and_they_resolve() {
    const OVERLOAD_ALERTS: [&str; 2] = ["PunctualConsumerLagGrowing", "PunctualFireLagHigh"];
    const SECONDS: i64 = 20;
    let sink = Sink::start().await;
    sink.behave("/load", Behaviour::slow(Duration::from_millis(200)));
    let stack = Stack::start(&[("PUNCTUAL_MAX_IN_FLIGHT", "20".to_owned())]).await;
    let jobs = stack_jobs(&stack);
    let rules = std::fs::read_to_string(repo_root().join("deploy/prometheus/alerts.yml")).expect("alert rules");
    let prometheus = Prometheus::start(&jobs, &rules_at_test_speed(&rules)).await;
    // Healthy first: scraped, and none of the two alerts pending or firing.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let quiet = prometheus.alerts().await;
    assert!(quiet.iter().all(|(name, _)| !OVERLOAD_ALERTS.contains(&name.as_str())), "before the load: {quiet:?}");

    let began = std::time::Instant::now();
    let load = Load::start(&stack, &sink, 200, SECONDS).await;
    let firing = |alerts: &[(String, String)], name: &str| alerts.iter().any(|(n, s)| n == name && s == "firing");
    let mut fired_at = Vec::new();
    while fired_at.len() < OVERLOAD_ALERTS.len() {
        let alerts = prometheus.alerts().await;
        for name in OVERLOAD_ALERTS {
            if firing(&alerts, name) && !fired_at.iter().any(|(n, _)| *n == name) {
                fired_at.push((name, began.elapsed()));
            }
        }
        if began.elapsed() > Duration::from_secs(120) {
            panic!("after 120 s, fired {fired_at:?}; alerts {alerts:?}; {}", figures(&prometheus).await);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!("fired after the load began: {fired_at:?}; {}", figures(&prometheus).await);

    // The load ends 20 s after it began; the backlog drains, the lag's window empties.
    let resolved = loop {
        let alerts = prometheus.alerts().await;
        if alerts.iter().all(|(name, _)| !OVERLOAD_ALERTS.contains(&name.as_str())) {
            break began.elapsed();
        }
        if began.elapsed() > Duration::from_secs(300) {
            panic!("after 300 s, still {alerts:?}; {}", figures(&prometheus).await);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    println!("resolved {resolved:?} after the load began (it lasted {SECONDS} s)");
    assert!(load.at(SECONDS) < chrono::Utc::now(), "resolved only after the load");
    let audit = load.audit_calls(&stack, || sink.calls_to("/load"), Duration::from_secs(60)).await;
    assert_eq!(audit.lost, 0, "late, but every occurrence ran");
}
