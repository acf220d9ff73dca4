//! The `punctual` binary against the real admin service (in-process, on a real Postgres):
//! what it prints, and that every error is one line on stderr and a non-zero exit.

use std::process::Output;

use punctual_admin::{AdminConfig, App};
use punctual_shared::api_key::ApiKey;
use punctual_testkit::TestDb;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

struct Admin {
    addr: String,
    key: String,
    db: TestDb,
    _stop: tokio_util::sync::DropGuard,
}

async fn admin() -> Admin {
    let db = TestDb::create().await;
    let key = ApiKey::generate();
    let config = AdminConfig {
        database: db.config(),
        addr: "127.0.0.1:0".parse().unwrap(),
        metrics_namespace_label: false,
        callback_allow: Default::default(),
        secret_headers: Default::default(),
        min_fire_interval_ms: 1_000,
        namespace_max_timers: 100_000,
        tasks_topic: "punctual.tasks".into(),
        dead_topic: "punctual.dead".into(),
        migrate: true,
        secrets: Default::default(),
        auth: punctual_admin::auth::AuthConfig {
            bootstrap_api_key: Some(key.expose().to_owned()),
            api_rate_limit: 0,
            failed_auth_limit: 0,
            ..Default::default()
        },
    };
    let app = App::build(config).await.expect("admin starts");
    let addr = format!("http://{}", app.addr());
    let token = CancellationToken::new();
    tokio::spawn(app.run_until_stopped(token.clone()));
    Admin { addr, key: key.expose().to_owned(), db, _stop: token.drop_guard() }
}

/// Runs `punctual` with the admin's address and `key`, off the test's runtime.
async fn punctual(admin: &Admin, key: Option<&str>, args: &[&str]) -> Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_punctual"));
    command
        .args(args)
        .env("PUNCTUAL_ADDR", &admin.addr)
        .env_remove("PUNCTUAL_API_KEY")
        .env_remove("PUNCTUAL_DATABASE_URL");
    if let Some(key) = key {
        command.env("PUNCTUAL_API_KEY", key);
    }
    tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap()
}

fn stdout(output: &Output) -> String {
    assert!(output.status.success(), "failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn json(output: &Output) -> Value {
    serde_json::from_str(&stdout(output)).unwrap()
}

/// A failure: exit code 1, exactly one line on stderr, which it returns.
fn failure(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(
        output.status.code(),
        Some(1),
        "stdout {:?}, stderr {stderr:?}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
    assert!(output.stdout.is_empty());
    stderr
}

#[tokio::test]
async fn timers_are_managed_from_the_command_line() {
    let admin = admin().await;
    let key = Some(admin.key.as_str());
    let created = json(
        &punctual(
            &admin,
            key,
            &[
                "-o",
                "json",
                "timer",
                "create",
                "--name",
                "nightly",
                "--namespace",
                "billing",
                "--cron",
                "0 0 2 * * *",
                "--timezone",
                "Europe/Berlin",
                "--url",
                "https://hooks.example.com/nightly",
                "--header",
                "X-Env: prod",
                "--body",
                r#"{"k": 1}"#,
            ],
        )
        .await,
    );
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["action"]["http"]["headers"]["X-Env"], "prod");
    assert_eq!(created["action"]["http"]["body"]["k"], 1);

    let shown = stdout(&punctual(&admin, key, &["timer", "get", &id]).await);
    assert!(
        shown.contains("cron 0 0 2 * * * Europe/Berlin") && shown.contains("POST https://hooks.example.com/nightly"),
        "{shown}"
    );
    let listed = stdout(&punctual(&admin, key, &["timer", "list", "--namespace", "billing"]).await);
    assert!(listed.lines().next().unwrap().contains("NAMESPACE") && listed.contains(&id), "{listed}");

    let later = json(&punctual(&admin, key, &["-o", "json", "timer", "update", &id, "--cron", "0 0 3 * * *"]).await);
    assert_eq!(
        later["schedule"],
        serde_json::json!({"cron": "0 0 3 * * *", "timezone": "Europe/Berlin", "dst_gap": "next_valid"}),
        "a new cron expression keeps the time zone"
    );
    let updated = json(
        &punctual(&admin, key, &["-o", "json", "timer", "update", &id, "--name", "nightly-2", "--every-ms", "60000"])
            .await,
    );
    assert_eq!((updated["name"].as_str(), updated["revision"].as_i64()), (Some("nightly-2"), Some(3)));
    assert_eq!(updated["schedule"], serde_json::json!({"every_ms": 60000}));
    let moved = json(
        &punctual(&admin, key, &["-o", "json", "timer", "update", &id, "--url", "https://hooks.example.com/moved"])
            .await,
    );
    assert_eq!(moved["action"]["http"]["url"], "https://hooks.example.com/moved");
    assert_eq!(moved["action"]["http"]["headers"]["X-Env"], "prod", "the rest of the action stays");
    let sharded = json(&punctual(&admin, key, &["-o", "json", "timer", "update", &id, "--shards", "4"]).await);
    assert_eq!(sharded["fan_out"], serde_json::json!({"shards": 4}));
    assert!(stdout(&punctual(&admin, key, &["timer", "get", &id]).await).contains("shards"));

    let paused = json(&punctual(&admin, key, &["-o", "json", "timer", "pause", &id, "--note", "a freeze"]).await);
    assert_eq!(
        (&paused["state"], &paused["state_note"]),
        (&serde_json::json!("paused"), &serde_json::json!("a freeze"))
    );
    let shown = stdout(&punctual(&admin, key, &["timer", "get", &id]).await);
    assert!(shown.contains("a freeze"), "{shown}");
    assert_eq!(json(&punctual(&admin, key, &["-o", "json", "timer", "resume", &id]).await)["state"], "active");
    let triggered = stdout(&punctual(&admin, key, &["timer", "trigger", &id]).await);
    assert!(triggered.starts_with("triggered: task "), "{triggered}");
    let backfilled = json(
        &punctual(
            &admin,
            key,
            &["-o", "json", "timer", "backfill", &id, "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:03:00Z"],
        )
        .await,
    );
    assert_eq!(backfilled["occurrences"], 0, "the timer was created after that range: {backfilled}");
    let runs = stdout(&punctual(&admin, key, &["run", "list", "--timer", &id]).await);
    assert_eq!(runs.lines().count(), 5, "the header and the triggered occurrence's four shards: {runs}");
    assert!(runs.contains("3/4"), "{runs}");
    let preview = stdout(
        &punctual(
            &admin,
            key,
            &["timer", "preview", "--cron", "0 0 2 * * *", "--timezone", "Europe/Berlin", "--count", "3"],
        )
        .await,
    );
    assert_eq!(preview.lines().count(), 3, "{preview}");
    assert!(preview.lines().all(|l| l.contains("T01:00:00") || l.contains("T00:00:00")), "{preview}");

    assert!(stdout(&punctual(&admin, key, &["timer", "delete", &id]).await).contains("deleted"));
    let gone = failure(&punctual(&admin, key, &["timer", "get", &id]).await);
    assert!(gone.contains("404 not-found: no timer with id"), "{gone}");
}

#[tokio::test]
async fn every_error_is_one_line_and_a_non_zero_exit() {
    let admin = admin().await;
    let key = Some(admin.key.as_str());
    let mut unreachable = std::process::Command::new(env!("CARGO_BIN_EXE_punctual"));
    unreachable.args(["--addr", "http://127.0.0.1:9", "--api-key", &admin.key, "timer", "list"]);
    let line = failure(&tokio::task::spawn_blocking(move || unreachable.output().unwrap()).await.unwrap());
    assert!(line.contains("cannot reach the admin API at http://127.0.0.1:9") && line.contains("refused"), "{line}");

    let line = failure(&punctual(&admin, None, &["timer", "list"]).await);
    assert!(line.contains("401 unauthenticated") && line.contains("PUNCTUAL_API_KEY"), "{line}");
    let line = failure(
        &punctual(
            &admin,
            key,
            &["timer", "create", "--name", "n", "--cron", "61 * * * *", "--url", "https://e.example.com/"],
        )
        .await,
    );
    assert!(line.contains("422 invalid-field") && line.contains("(field schedule.cron)"), "{line}");
    let line = failure(
        &punctual(
            &admin,
            key,
            &[
                "timer",
                "create",
                "--name",
                "n",
                "--every-ms",
                "60000",
                "--url",
                "https://e.example.com/",
                "--shards",
                "0",
            ],
        )
        .await,
    );
    assert!(line.contains("422 invalid-field") && line.contains("(field fan_out.shards)"), "{line}");
    let line = failure(
        &punctual(
            &admin,
            key,
            &[
                "timer",
                "create",
                "--name",
                "n",
                "--every-ms",
                "60000",
                "--url",
                "https://e.example.com/",
                "--body",
                "{",
            ],
        )
        .await,
    );
    assert!(line.contains("--body: not JSON"), "{line}");
    // clap's own usage errors: one line too, and exit code 2.
    let usage = punctual(&admin, key, &["key", "create", "--name", "x"]).await;
    let stderr = String::from_utf8_lossy(&usage.stderr);
    assert_eq!((usage.status.code(), stderr.lines().count()), (Some(2), 1), "{stderr}");
    assert!(stderr.contains("--role"), "{stderr}");
    let line = failure(&punctual(&admin, key, &["run", "list", "--namespace", "../keys"]).await);
    assert!(line.contains("--namespace"), "{line}");
    let line = failure(&punctual(&admin, key, &["timer", "get", "not-an-id"]).await);
    assert!(line.contains("not a timer id"), "{line}");
    let line =
        failure(&punctual(&admin, key, &["timer", "create", "--name", "n", "--url", "https://e.example.com/"]).await);
    assert!(line.contains("give a schedule"), "{line}");
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM timers").fetch_one(&admin.db.pool).await.unwrap();
    assert_eq!(count, 0, "nothing was created");
}

#[tokio::test]
async fn keys_dead_tasks_and_migrations_from_the_command_line() {
    let admin = admin().await;
    let database_url = admin.db.url.clone();
    // The first key, made in the database directly.
    let mut bootstrap = std::process::Command::new(env!("CARGO_BIN_EXE_punctual"));
    bootstrap
        .args(["key", "create", "--bootstrap", "--name", "first", "--role", "admin"])
        .env("PUNCTUAL_DATABASE_URL", &database_url);
    let printed = stdout(&tokio::task::spawn_blocking(move || bootstrap.output().unwrap()).await.unwrap());
    let first = printed.lines().next().unwrap().strip_prefix("API key: ").unwrap().to_owned();
    let key = Some(first.as_str());

    let reader = json(
        &punctual(
            &admin,
            key,
            &["-o", "json", "key", "create", "--name", "ci", "--role", "read", "--namespace", "billing"],
        )
        .await,
    );
    let reader_key = reader["key"].as_str().unwrap().to_owned();
    let listed = stdout(&punctual(&admin, key, &["key", "list"]).await);
    assert!(listed.contains("billing") && listed.contains("(all)") && !listed.contains(&reader_key[10..]), "{listed}");
    assert!(stdout(&punctual(&admin, Some(&reader_key), &["timer", "list"]).await).contains("NAMESPACE"));
    let line = failure(&punctual(&admin, Some(&reader_key), &["key", "list"]).await);
    assert!(line.contains("403 forbidden"), "{line}");
    stdout(&punctual(&admin, key, &["key", "revoke", reader["id"].as_str().unwrap()]).await);
    assert!(failure(&punctual(&admin, Some(&reader_key), &["timer", "list"]).await).contains("401"));

    // A dead task, listed and replayed.
    let timer = json(
        &punctual(
            &admin,
            key,
            &["-o", "json", "timer", "create", "--name", "t", "--every-ms", "60000", "--url", "https://e.example.com/"],
        )
        .await,
    );
    let task: i64 = sqlx::query_scalar(
        "INSERT INTO tasks (timer_id, scheduled_at, due_at, timer_version, bucket, status, attempt)
         VALUES ($1, now() - interval '1 hour', now(), 1, 0, 'dead', 3) RETURNING id",
    )
    .bind(uuid::Uuid::parse_str(timer["id"].as_str().unwrap()).unwrap())
    .fetch_one(&admin.db.pool)
    .await
    .unwrap();
    let dead = stdout(&punctual(&admin, key, &["dead", "list"]).await);
    assert!(dead.contains(&task.to_string()) && dead.contains("dead"), "{dead}");
    let replayed = json(&punctual(&admin, key, &["-o", "json", "dead", "replay", &task.to_string()]).await);
    assert_eq!(replayed["replayed"], serde_json::json!([task]));

    let mut migrate = std::process::Command::new(env!("CARGO_BIN_EXE_punctual"));
    migrate.args(["migrate"]).env("PUNCTUAL_DATABASE_URL", &database_url);
    assert!(
        stdout(&tokio::task::spawn_blocking(move || migrate.output().unwrap()).await.unwrap()).contains("up to date")
    );
}

/// `punctual secrets key` makes a key entry; `punctual secrets rotate` seals the stored
/// secrets again with the first key, the old one still opening them; a key that does not
/// open them is one clear line and exit code 1.
#[tokio::test]
async fn secrets_are_sealed_again_with_a_new_key_from_the_command_line() {
    use punctual_shared::sealed::{key_id, Purpose, SecretKeys};
    let admin = admin().await;
    let pool = &admin.db.pool;
    let run = |args: &'static [&'static str], key: String| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_punctual"));
        command.args(args).env("PUNCTUAL_DATABASE_URL", &admin.db.url).env("PUNCTUAL_SECRET_KEY", key);
        async move { tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap() }
    };
    let k1 = stdout(&run(&["secrets", "key", "--id", "k1"], String::new()).await).trim().to_owned();
    assert!(k1.starts_with("k1:"), "{k1}");
    let old: SecretKeys = k1.parse().unwrap();
    let whsec = punctual_shared::webhook_signature::SigningSecret::generate().encoded();
    sqlx::query("INSERT INTO signing_secrets (namespace, secret) VALUES ('billing', $1)")
        .bind(old.seal(&whsec, Purpose::SigningSecret))
        .execute(pool)
        .await
        .unwrap();

    let k2 = SecretKeys::generate_entry("k2");
    let printed = stdout(&run(&["secrets", "rotate"], format!("{k2},{k1}")).await);
    assert!(printed.contains("sealed with key k2: 1 signing secrets"), "{printed}");
    let stored: String = sqlx::query_scalar("SELECT secret FROM signing_secrets").fetch_one(pool).await.unwrap();
    assert_eq!(key_id(&stored), Some("k2"));
    let new: SecretKeys = k2.parse().unwrap();
    assert_eq!(new.open(&stored, Purpose::SigningSecret).unwrap(), whsec);

    let line = failure(&run(&["secrets", "rotate"], SecretKeys::generate_entry("k3")).await);
    assert!(line.contains("k2") && line.contains("PUNCTUAL_SECRET_KEY"), "{line}");
    let line = failure(&run(&["secrets", "rotate"], "not a key".into()).await);
    assert!(line.contains("PUNCTUAL_SECRET_KEY") && !line.contains("not a key"), "{line}");
}

/// `punctual namespace set|get|list`: a namespace's policy from the command line; a bad
/// limit is one clear line and exit code 1.
#[tokio::test]
async fn namespace_policies_from_the_command_line() {
    let admin = admin().await;
    let key = Some(admin.key.as_str());
    let set = &[
        "-o",
        "json",
        "namespace",
        "set",
        "billing",
        "--limit",
        "max_concurrent_calls=50",
        "--kafka-topics",
        "billing.*,audit",
        "--callback-allow",
        "10.20.0.0/16",
    ];
    let policy = json(&punctual(&admin, key, set).await);
    assert_eq!(policy["limits"]["max_concurrent_calls"], 50);
    assert_eq!(policy["kafka_topics"], serde_json::json!(["billing.*", "audit"]));
    assert_eq!(policy["callback_allow"], serde_json::json!(["10.20.0.0/16"]));
    let shown = stdout(&punctual(&admin, key, &["namespace", "get", "billing"]).await);
    assert!(shown.contains("max_concurrent_calls=50") && shown.contains("billing.*,audit"), "{shown}");
    let reset = &["-o", "json", "namespace", "set", "billing", "--limit", "max_concurrent_calls=default"];
    assert_eq!(json(&punctual(&admin, key, reset).await)["limits"]["max_concurrent_calls"], 2_000);
    let listed = stdout(&punctual(&admin, key, &["namespace", "list"]).await);
    assert!(listed.contains("billing") && listed.contains("10.20.0.0/16"), "{listed}");
    let line = failure(&punctual(&admin, key, &["namespace", "set", "billing", "--limit", "max_timers=lots"]).await);
    assert!(line.contains("max_timers") && line.contains("whole number"), "{line}");
    let line =
        failure(&punctual(&admin, key, &["namespace", "set", "billing", "--callback-allow", "not a host!"]).await);
    assert!(line.contains("callback_allow[0]"), "{line}");
    let line = failure(&punctual(&admin, key, &["namespace", "get", "Bad/Name"]).await);
    assert!(line.contains("namespace"), "{line}");
}
