//! A real Prometheus server (Debian's `prometheus` package) scraping a test's services
//! every second, with the repository's alert rules; and `promtool`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::process::{bin_dir, free_port};
use crate::unique_name;

/// The repository's root (the tests run from their crate's folder).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace").to_path_buf()
}

/// A scrape job: its name (`punctual-scanner`, …) and its targets (`host:port`).
pub struct Job {
    pub name: String,
    pub targets: Vec<String>,
}

/// The scrape jobs of a stack's three services, named as deploy/prometheus names them.
pub fn stack_jobs(stack: &crate::Stack) -> Vec<Job> {
    [("punctual-admin", &stack.admin), ("punctual-scanner", &stack.scanner), ("punctual-executor", &stack.executor)]
        .into_iter()
        .map(|(name, p)| Job { name: name.to_owned(), targets: vec![format!("127.0.0.1:{}", p.port)] })
        .collect()
}

pub struct Prometheus {
    pub url: String,
    pub dir: PathBuf,
    child: Child,
    http: reqwest::Client,
}

impl Prometheus {
    /// Starts Prometheus scraping `jobs` every second, evaluating `rules` (a rule file's
    /// text) every second, and waits until it is ready.
    pub async fn start(jobs: &[Job], rules: &str) -> Prometheus {
        let dir = bin_dir().join("test-prometheus").join(unique_name("prometheus"));
        std::fs::create_dir_all(dir.join("data")).expect("prometheus folder");
        std::fs::write(dir.join("alerts.yml"), rules).expect("rules file");
        let mut config = String::from(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [alerts.yml]\nscrape_configs:\n",
        );
        for job in jobs {
            let targets: Vec<String> = job.targets.iter().map(|t| format!("\"{t}\"")).collect();
            config.push_str(&format!(
                "  - job_name: {}\n    static_configs:\n      - targets: [{}]\n",
                job.name,
                targets.join(", ")
            ));
        }
        std::fs::write(dir.join("prometheus.yml"), config).expect("config file");
        let port = free_port();
        let log = std::fs::File::create(dir.join("prometheus.log")).expect("log file");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("prometheus on PATH (scripts/stack.sh tools installs it)");
        let p = Prometheus { url: format!("http://127.0.0.1:{port}"), dir, child, http: reqwest::Client::new() };
        crate::eventually(Duration::from_secs(30), "prometheus ready", || async {
            let ready = p.http.get(format!("{}/-/ready", p.url)).send().await;
            ready.ok().filter(|r| r.status().is_success()).map(|_| ())
        })
        .await;
        p
    }

    /// A JSON answer of Prometheus's HTTP API.
    async fn get(&self, path: &str, query: &[(&str, &str)]) -> Value {
        let answer = self.http.get(format!("{}{path}", self.url)).query(query).send().await;
        answer.expect("prometheus reachable").json().await.expect("JSON answer")
    }

    /// The result of an instant query (`data.result`); panics on an error answer.
    pub async fn query(&self, expr: &str) -> Vec<Value> {
        let answer = self.get("/api/v1/query", &[("query", expr)]).await;
        assert_eq!(answer["status"], "success", "query {expr}: {answer}");
        answer["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// The result of a range query (`data.result`: series with their `values`).
    pub async fn query_range(
        &self,
        expr: &str,
        start: chrono::DateTime<chrono::Utc>,
        end: chrono::DateTime<chrono::Utc>,
        step: Duration,
    ) -> Vec<Value> {
        let (start, end, step) =
            (start.timestamp().to_string(), end.timestamp().to_string(), format!("{}s", step.as_secs().max(1)));
        let answer = self
            .get("/api/v1/query_range", &[("query", expr), ("start", &start), ("end", &end), ("step", &step)])
            .await;
        assert_eq!(answer["status"], "success", "query {expr}: {answer}");
        answer["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// The alerts Prometheus holds now, each as (name, state: pending or firing).
    pub async fn alerts(&self) -> Vec<(String, String)> {
        let answer = self.get("/api/v1/alerts", &[]).await;
        answer["data"]["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| {
                (
                    a["labels"]["alertname"].as_str().unwrap_or_default().to_owned(),
                    a["state"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    /// The scrape targets whose last scrape failed, with the error.
    pub async fn unhealthy_targets(&self) -> Vec<String> {
        let answer = self.get("/api/v1/targets", &[]).await;
        answer["data"]["activeTargets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| t["health"] != "up")
            .map(|t| format!("{} {}: {}", t["labels"]["job"], t["scrapeUrl"], t["lastError"]))
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(self.dir.join("data"));
    }
}

/// Runs `promtool check metrics` on a service's `/metrics` text: Ok, or what it said.
pub fn promtool_check_metrics(text: &str) -> Result<(), String> {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool on PATH (scripts/stack.sh tools installs it)");
    child.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("write to promtool");
    let out = child.wait_with_output().expect("promtool");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    }
}
