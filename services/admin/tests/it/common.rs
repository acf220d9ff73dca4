//! The admin service in-process against a real Postgres, and a client for it.
#![allow(dead_code)]

use std::sync::Arc;

use punctual_admin::{AdminConfig, App};
use punctual_shared::api_key::ApiKey;
use punctual_testkit::TestDb;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

pub struct Api {
    pub base: String,
    /// Sends `key` with every request.
    pub client: reqwest::Client,
    /// The bootstrap admin key.
    pub admin_key: String,
    pub db: Arc<TestDb>,
    _stop: Arc<tokio_util::sync::DropGuard>,
}

pub async fn spawn_api() -> Api {
    spawn_api_with(|_| {}).await
}

/// The admin service with the test's settings, and a bootstrap admin key.
pub async fn spawn_api_with(configure: impl FnOnce(&mut AdminConfig)) -> Api {
    let db = TestDb::create().await;
    let admin_key = ApiKey::generate();
    let mut config = test_config(&db, Some(&admin_key));
    configure(&mut config);
    let app = App::build(config).await.expect("admin starts");
    let base = format!("http://{}", app.addr());
    let token = CancellationToken::new();
    tokio::spawn(app.run_until_stopped(token.clone()));
    let admin_key = admin_key.expose().to_owned();
    Api { base, client: client(Some(&admin_key)), admin_key, db: Arc::new(db), _stop: Arc::new(token.drop_guard()) }
}

/// The test's settings for an admin on `db`.
pub fn test_config(db: &TestDb, admin_key: Option<&ApiKey>) -> AdminConfig {
    // No callback address allowed beyond public ones, as by default.
    AdminConfig {
        database: db.config(),
        addr: "127.0.0.1:0".parse().unwrap(),
        metrics_namespace_label: false,
        callback_allow: Default::default(),
        secret_headers: "X-Tenant-Key".parse().unwrap(),
        min_fire_interval_ms: 1_000,
        namespace_max_timers: 100_000,
        tasks_topic: "punctual.tasks".into(),
        dead_topic: "punctual.dead".into(),
        migrate: true,
        secrets: Default::default(),
        auth: punctual_admin::auth::AuthConfig {
            bootstrap_api_key: admin_key.map(|k| k.expose().to_owned()),
            // Tests make requests in bursts, some without keys; the limits have tests of their own.
            api_rate_limit: 0,
            failed_auth_limit: 0,
            ..Default::default()
        },
    }
}

/// A client that sends `key` as its bearer token, or no Authorization at all.
pub fn client(key: Option<&str>) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(key) = key {
        headers.insert(reqwest::header::AUTHORIZATION, format!("Bearer {key}").parse().unwrap());
    }
    reqwest::Client::builder().default_headers(headers).build().unwrap()
}

impl Api {
    /// The same service, called with `key` (or none).
    pub fn with_key(&self, key: Option<&str>) -> Api {
        Api {
            base: self.base.clone(),
            client: client(key),
            admin_key: self.admin_key.clone(),
            db: self.db.clone(),
            _stop: self._stop.clone(),
        }
    }
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Option<String>, Value) {
        let r = self.client.post(format!("{}{path}", self.base)).json(body).send().await.unwrap();
        Self::read(r).await
    }
    pub async fn post_raw(&self, path: &str, body: &str, content_type: &str) -> (u16, Option<String>, Value) {
        let r = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", content_type)
            .body(body.to_owned())
            .send()
            .await
            .unwrap();
        Self::read(r).await
    }
    pub async fn get(&self, path: &str) -> (u16, Option<String>, Value) {
        Self::read(self.client.get(format!("{}{path}", self.base)).send().await.unwrap()).await
    }
    /// Any request, with a JSON body or none.
    pub async fn send(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Option<String>, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(body);
        }
        Self::read(request.send().await.unwrap()).await
    }
    pub async fn delete(&self, path: &str) -> u16 {
        self.client.delete(format!("{}{path}", self.base)).send().await.unwrap().status().as_u16()
    }
    pub async fn read(r: reqwest::Response) -> (u16, Option<String>, Value) {
        let status = r.status().as_u16();
        let ct = r.headers().get("content-type").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let text = r.text().await.unwrap();
        (status, ct, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }
    /// Creates the example timer in `namespace`, named `name`; returns its id.
    pub async fn timer_in(&self, namespace: &str, name: &str) -> uuid::Uuid {
        let mut body = example();
        body["namespace"] = json!(namespace);
        body["name"] = json!(name);
        let (status, _, timer) = self.post("/v1/timers", &body).await;
        assert_eq!(status, 201, "{timer}");
        uuid::Uuid::parse_str(timer["id"].as_str().unwrap()).unwrap()
    }
    /// Writes an occurrence of `timer` scheduled `minutes_ago` (on a whole minute).
    pub async fn occurrence(&self, timer: uuid::Uuid, minutes_ago: i32, status: &str, attempt: i32) {
        sqlx::query(
            "INSERT INTO tasks (timer_id, scheduled_at, due_at, timer_version, bucket, status, attempt)
             VALUES ($1, date_trunc('minute', now()) - $2 * interval '1 minute', now(), 1, 0, $3, $4)",
        )
        .bind(timer)
        .bind(minutes_ago)
        .bind(status)
        .bind(attempt)
        .execute(&self.db.pool)
        .await
        .unwrap();
    }
    pub async fn timer_count(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM timers").fetch_one(&self.db.pool).await.unwrap()
    }
}

pub fn example() -> Value {
    json!({"namespace":"billing","name":"nightly-invoices",
           "schedule":{"cron":"0 0 2 * * *","timezone":"Europe/Berlin"},
           "action":{"http":{"method":"POST","url":"https://hooks.example.com/hook","headers":{"X-Env":"prod"},"body":{"k":1},"timeout_ms":5000}}})
}
