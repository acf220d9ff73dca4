//! The whole pipeline as separate processes: admin, scanner and executor against a
//! database and a topic of their own.

use std::time::Duration;

use serde_json::Value;
use uuid::Uuid;

use crate::{kafka_brokers, unique_name, ServiceProcess, TestDb};

/// `PUNCTUAL_CALLBACK_ALLOW` for callback targets on this machine.
pub const LOOPBACK: &str = "127.0.0.0/8,::1,localhost";

/// Partitions of the tasks topic of every stack started here.
pub const TASKS_PARTITIONS: i32 = 4;

pub struct Stack {
    pub db: TestDb,
    pub topic: String,
    pub dead_topic: String,
    pub admin: ServiceProcess,
    pub scanner: ServiceProcess,
    pub executor: ServiceProcess,
    /// Further instances started with [`Stack::add`], killed with the stack.
    pub more: Vec<ServiceProcess>,
    /// Sends the stack's admin key with every request.
    pub http: reqwest::Client,
    /// The admin API's bootstrap key.
    pub api_key: String,
    /// The environment every service was started with (the admin with the database's
    /// owner instead of the service role).
    pub env: Vec<(&'static str, String)>,
}

impl Stack {
    /// Starts the three services (with `extra` environment for all) and waits until each
    /// is healthy.
    pub async fn start(extra: &[(&'static str, String)]) -> Stack {
        let server = std::env::var("PUNCTUAL_TEST_DATABASE_URL").expect("PUNCTUAL_TEST_DATABASE_URL (run `make test`)");
        Self::start_on(&server, &kafka_brokers(), extra).await
    }

    /// Against a Postgres server and brokers of the test's own.
    pub async fn start_on(database_server: &str, brokers: &str, extra: &[(&'static str, String)]) -> Stack {
        let db = TestDb::create_on(database_server).await;
        let topic = unique_name("punctual.tasks");
        let api_key = punctual_shared::api_key::ApiKey::generate().expose().to_owned();
        let dead_topic = unique_name("punctual.dead");
        let mut env: Vec<(&'static str, String)> = vec![
            // The scanners and executors as the service role (no DDL); the admin, which
            // migrates, as the schema's owner.
            ("PUNCTUAL_DATABASE_URL", db.service_url()),
            ("PUNCTUAL_KAFKA_BROKERS", brokers.to_owned()),
            ("PUNCTUAL_TASKS_TOPIC", topic.clone()),
            ("PUNCTUAL_DEAD_TOPIC", dead_topic.clone()),
            ("PUNCTUAL_TASKS_PARTITIONS", TASKS_PARTITIONS.to_string()),
            ("PUNCTUAL_EXECUTOR_GROUP", unique_name("executors")),
            // The tests' callback targets listen on loopback, which the guard refuses unless allowed.
            ("PUNCTUAL_CALLBACK_ALLOW", LOOPBACK.to_owned()),
            ("PUNCTUAL_BOOTSTRAP_API_KEY", api_key.clone()),
            // Secrets are stored sealed, as `make up` has them.
            ("PUNCTUAL_SECRET_KEY", punctual_shared::sealed::SecretKeys::generate_entry("k1")),
        ];
        env.extend(extra.iter().cloned());
        let tag = unique_name("");
        let admin_env: Vec<(&str, String)> =
            env.iter().cloned().chain([("PUNCTUAL_DATABASE_URL", db.url.clone())]).collect();
        let mut admin =
            ServiceProcess::start("punctual-admin", &format!("admin{tag}"), "PUNCTUAL_ADMIN_ADDR", &admin_env);
        let mut scanner =
            ServiceProcess::start("punctual-scanner", &format!("scanner{tag}"), "PUNCTUAL_SCANNER_ADDR", &env);
        let mut executor =
            ServiceProcess::start("punctual-executor", &format!("executor{tag}"), "PUNCTUAL_EXECUTOR_ADDR", &env);
        for p in [&mut admin, &mut scanner, &mut executor] {
            p.wait_healthy(Duration::from_secs(60)).await;
        }
        for p in [&mut admin, &mut scanner, &mut executor] {
            p.assert_running();
        }
        let mut headers = reqwest::header::HeaderMap::new();
        let bearer = format!("Bearer {api_key}").parse().expect("a key is a header value");
        headers.insert(reqwest::header::AUTHORIZATION, bearer);
        let http = reqwest::Client::builder().default_headers(headers).build().expect("an HTTP client");
        Stack { db, topic, dead_topic, admin, scanner, executor, more: Vec::new(), http, api_key, env }
    }

    /// One more instance of `binary` (e.g. a second scanner) against the same database and
    /// topics, healthy.
    pub async fn start_another(&self, binary: &str, port_var: &str) -> ServiceProcess {
        let mut p = ServiceProcess::start(binary, &unique_name(binary), port_var, &self.env);
        p.wait_healthy(Duration::from_secs(60)).await;
        p
    }

    /// As [`Stack::start_another`], kept in [`Stack::more`].
    pub async fn add(&mut self, binary: &str, port_var: &str) {
        let p = self.start_another(binary, port_var).await;
        self.more.push(p);
    }

    /// Starts again each service that exited on its own, as a supervisor would; returns
    /// each one's name and how it exited.
    pub fn restart_exited(&mut self) -> Vec<(String, std::process::ExitStatus)> {
        [&mut self.admin, &mut self.scanner, &mut self.executor]
            .into_iter()
            .filter_map(|p| p.restart_if_exited().map(|status| (p.name.clone(), status)))
            .collect()
    }

    /// `POST /v1/timers`; panics unless the answer is 201. Returns the stored timer.
    pub async fn create_timer(&self, body: &Value) -> Value {
        let r = self.http.post(self.admin.url("/v1/timers")).json(body).send().await.expect("admin reachable");
        let status = r.status();
        let v: Value = r.json().await.expect("JSON answer");
        assert_eq!(status.as_u16(), 201, "creating {body}: {v}");
        v
    }

    /// `POST /v1/timers/{id}/{action}` (pause, resume); panics unless 200.
    pub async fn timer_action(&self, id: &str, action: &str) -> Value {
        let r =
            self.http.post(self.admin.url(&format!("/v1/timers/{id}/{action}"))).send().await.expect("admin reachable");
        assert_eq!(r.status().as_u16(), 200);
        r.json().await.expect("JSON answer")
    }

    /// `GET /v1/timers/{id}/runs`.
    pub async fn runs(&self, id: &str) -> Vec<Value> {
        let r = self
            .http
            .get(self.admin.url(&format!("/v1/timers/{id}/runs?limit=1000")))
            .send()
            .await
            .expect("admin reachable");
        let v: Value = r.json().await.expect("JSON answer");
        v["runs"].as_array().cloned().unwrap_or_default()
    }

    /// Waits (30 s at most) until no further call can come of what is due: every
    /// occurrence due by now (of `timers`, or of every timer) is finished in the database
    /// (succeeded, dead or cancelled), and no executor that answers has a call in flight (a
    /// redelivered occurrence can be running on a second executor while the first writes
    /// its outcome). Returns whether it settled; a test asserts on what it then sees.
    pub async fn wait_settled(&self, timers: Option<&[Uuid]>) -> bool {
        crate::eventually_or(Duration::from_secs(30), || async {
            let open: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM tasks
                  WHERE ($1::uuid[] IS NULL OR timer_id = ANY($1)) AND due_at <= now()
                    AND status NOT IN ('succeeded', 'dead', 'cancelled')",
            )
            .bind(timers)
            .fetch_one(&self.db.pool)
            .await
            .ok()?;
            if open > 0 {
                return None;
            }
            for executor in self.executors() {
                if self.in_flight(executor).await.unwrap_or(0.0) > 0.0 {
                    return None;
                }
            }
            Some(())
        })
        .await
        .is_some()
    }

    /// The executors started, the first and those added, running or not.
    pub fn executors(&self) -> impl Iterator<Item = &ServiceProcess> {
        std::iter::once(&self.executor).chain(self.more.iter().filter(|p| p.is("punctual-executor")))
    }

    /// An executor's calls in flight (`punctual_tasks_in_flight`); `None` when it does not
    /// answer within a second (killed, frozen or stopped).
    pub async fn in_flight(&self, executor: &ServiceProcess) -> Option<f64> {
        let answer = self.http.get(executor.url("/metrics")).timeout(Duration::from_secs(1)).send().await.ok()?;
        metric_value(&answer.text().await.ok()?, "punctual_tasks_in_flight")
    }

    /// The text of a service's `/metrics`.
    pub async fn metrics(&self, service: &ServiceProcess) -> String {
        self.http.get(service.url("/metrics")).send().await.expect("reachable").text().await.expect("text")
    }
}

/// The value of an un-labelled (or fully spelled) sample in Prometheus text, if present.
pub fn metric_value(text: &str, sample: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(sample).and_then(|rest| rest.strip_prefix(' ')).and_then(|v| v.trim().parse().ok())
    })
}

/// The last lines of every service log, for a failing test to print.
pub fn dump_logs(stack: &Stack) -> String {
    [&stack.admin, &stack.scanner, &stack.executor]
        .iter()
        .map(|p| format!("--- {} ---\n{}", p.name, p.log_tail()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A message read from a topic.
#[derive(Debug, Clone)]
pub struct Record {
    pub key: String,
    pub payload: Vec<u8>,
    pub headers: Vec<(String, String)>,
}

/// Reads `topic` from the beginning until `n` messages arrived or `timeout` passed.
pub async fn read_topic(topic: &str, n: usize, timeout: Duration) -> Vec<Record> {
    use rdkafka::consumer::{Consumer, StreamConsumer};
    use rdkafka::message::Headers;
    use rdkafka::Message;
    let consumer: StreamConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("group.id", unique_name("reader"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + timeout;
    while out.len() < n {
        match tokio::time::timeout_at(deadline, consumer.recv()).await {
            Ok(Ok(m)) => out.push(Record {
                key: String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned(),
                payload: m.payload().unwrap_or_default().to_vec(),
                headers: m
                    .headers()
                    .map(|h| {
                        h.iter()
                            .map(|h| {
                                (h.key.to_owned(), String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned())
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            }),
            Ok(Err(e)) => tracing::warn!(error = %e, "reading {topic}"),
            Err(_) => break,
        }
    }
    out
}

/// Creates a topic (for a test's own Kafka action target).
pub async fn create_topic(topic: &str, partitions: i32) {
    let cfg = punctual_shared::config::KafkaConfig {
        kafka_brokers: kafka_brokers(),
        tasks_topic: topic.to_owned(),
        tasks_partitions: partitions,
        topic_replication: 1,
        kafka_options: Default::default(),
    };
    punctual_runtime::kafka::ensure_topic(&cfg, topic, partitions).await.expect("create topic");
}
