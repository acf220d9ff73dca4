//! What each command asks the API (or, for `migrate` and `key create --bootstrap`, the
//! database), and what it prints.

use std::collections::BTreeMap;
use std::io::Read;

use punctual_shared::api_key::{ApiKey, Role};
use punctual_shared::fan_out::{Broadcast, ByDns, FanOut};
use punctual_shared::sealed::SecretKeys;
use punctual_shared::sealed_store;
use punctual_shared::timer::{ActionSpec, HttpActionSpec, ScheduleSpec, TimerSpec};
use serde::Serialize;
use serde_json::{json, Value};

use crate::args::{
    Cli, Command, DeadCommand, KeyCommand, NamespaceCommand, Output, RunCommand, ScheduleArgs, SecretsCommand,
    TimerCommand,
};
use crate::client::{CliError, Client};
use crate::output::{print_keys, print_namespaces, print_runs, print_timer, print_timers, Printer};

/// `--shards` or `--broadcast` (`dns`, or URLs) as a timer's fan-out.
fn fan_out(shards: Option<i32>, broadcast: Vec<String>) -> Option<FanOut> {
    let broadcast = match broadcast.as_slice() {
        [] => None,
        [dns] if dns == "dns" => Some(Broadcast::Dns(ByDns::Dns)),
        _ => Some(Broadcast::Urls(broadcast)),
    };
    (shards.is_some() || broadcast.is_some()).then_some(FanOut { shards, broadcast })
}

/// `PATCH /v1/timers/{id}` as the CLI sends it.
#[derive(Debug, Serialize)]
struct TimerPatch {
    revision: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    schedule: Option<ScheduleSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    action: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fan_out: Option<FanOut>,
}

#[derive(Debug, Serialize)]
struct PreviewRequest {
    schedule: ScheduleSpec,
    count: u32,
}

#[derive(Debug, Serialize)]
struct BackfillRequest {
    from: chrono::DateTime<chrono::Utc>,
    to: chrono::DateTime<chrono::Utc>,
}

#[derive(Debug, Serialize)]
struct ReplayRequest {
    ids: Vec<i64>,
}

/// A key made with `--bootstrap`, shown as the API shows a key it creates.
#[derive(Debug, Serialize)]
struct BootstrapKey {
    id: uuid::Uuid,
    name: String,
    key: String,
    role: Role,
}

#[derive(Debug, Serialize)]
struct KeyRequest {
    name: String,
    role: Role,
    namespaces: Vec<String>,
}

fn schedule(args: ScheduleArgs) -> ScheduleSpec {
    ScheduleSpec {
        cron: args.cron,
        timezone: args.timezone,
        at: args.at,
        delay_ms: args.delay_ms,
        every_ms: args.every_ms,
        ..Default::default()
    }
}

/// `Name: value` pairs.
fn headers(given: Vec<String>) -> Result<BTreeMap<String, String>, CliError> {
    given
        .into_iter()
        .map(|h| match h.split_once(':') {
            Some((name, value)) => Ok((name.trim().to_owned(), value.trim().to_owned())),
            None => Err(CliError::Usage(format!("--header {h:?}: give it as 'Name: value'"))),
        })
        .collect()
}

fn json_arg(flag: &str, text: &str) -> Result<Value, CliError> {
    serde_json::from_str(text).map_err(|e| CliError::Usage(format!("{flag}: not JSON ({e})")))
}

/// A file's JSON, or standard input's for `-`.
fn json_file(path: &str) -> Result<Value, CliError> {
    let mut text = String::new();
    let read = if path == "-" {
        std::io::stdin().read_to_string(&mut text).map(|_| ())
    } else {
        std::fs::read_to_string(path).map(|t| text = t)
    };
    read.map_err(|e| CliError::Usage(format!("--file {path}: {e}")))?;
    json_arg(&format!("--file {path}"), &text)
}

/// A new schedule for a timer: what the flags give, keeping the current schedule's bounds
/// and, for a cron schedule that stays one, its time zone and DST policy unless given.
fn rescheduled(current: &Value, args: ScheduleArgs) -> ScheduleSpec {
    let current: ScheduleSpec = serde_json::from_value(current.clone()).unwrap_or_default();
    let still_cron = args.cron.is_some() && current.cron.is_some();
    let mut new = schedule(args);
    new.start_at = current.start_at;
    new.end_at = current.end_at;
    if still_cron {
        new.timezone = new.timezone.or(current.timezone);
        new.dst_gap = current.dst_gap;
    }
    new
}

/// A namespace as a path segment: only its own characters, so that it stays one.
fn namespace_segment(namespace: &str) -> Result<&str, CliError> {
    punctual_shared::timer::check_namespace(namespace)
        .map(|_| namespace)
        .map_err(|e| CliError::Usage(format!("--namespace {namespace:?}: {}", e.message)))
}

fn id_path(id: &str) -> Result<String, CliError> {
    uuid::Uuid::parse_str(id)
        .map(|id| format!("/v1/timers/{id}"))
        .map_err(|_| CliError::Usage(format!("{id:?} is not a timer id (a UUID)")))
}

pub async fn run(cli: Cli) -> Result<(), CliError> {
    let out = Printer { output: cli.output };
    let client = || Client::new(&cli.addr, cli.api_key.clone());
    match cli.command {
        Command::Timer(command) => timer(&client()?, &out, command).await,
        Command::Run(RunCommand::List { timer, namespace, status, limit }) => {
            let mut query = vec![("limit", limit.to_string())];
            query.extend(status.map(|s| ("status", s)));
            let path = match (timer, namespace) {
                (Some(timer), _) => format!("{}/runs", id_path(&timer)?),
                (None, Some(ns)) => format!("/v1/namespaces/{}/runs", namespace_segment(&ns)?),
                (None, None) => return Err(CliError::Usage("give --timer or --namespace".into())),
            };
            let answer = client()?.get(&path, &query).await?;
            out.show(&answer, || print_runs(&answer["runs"]));
            Ok(())
        }
        Command::Dead(DeadCommand::List { namespace, limit }) => {
            let mut query = vec![("status", "dead".to_owned()), ("limit", limit.to_string())];
            query.extend(namespace.map(|ns| ("namespace", ns)));
            let answer = client()?.get("/v1/tasks", &query).await?;
            out.show(&answer, || print_runs(&answer["tasks"]));
            Ok(())
        }
        Command::Dead(DeadCommand::Replay { task_ids }) => {
            let answer = client()?.post("/v1/tasks/replay", Some(&ReplayRequest { ids: task_ids })).await?;
            out.show(&answer, || println!("replayed: {}", answer["replayed"]));
            Ok(())
        }
        Command::Key(KeyCommand::Create { name, role, namespaces, bootstrap: true, database_url }) => {
            let url = database_url.ok_or_else(|| CliError::Usage("--bootstrap needs PUNCTUAL_DATABASE_URL".into()))?;
            if !matches!(Role::from(role), Role::Admin) || !namespaces.is_empty() {
                return Err(CliError::Usage("--bootstrap makes an admin key: --role admin, no --namespace".into()));
            }
            let pool = sqlx::PgPool::connect(&url).await?;
            punctual_shared::db::migrate(&pool).await?;
            let key = ApiKey::generate();
            let (id, _) = punctual_shared::api_key::store(&pool, &name, &key, Role::Admin, &[])
                .await?
                .ok_or(CliError::Database(sqlx::Error::RowNotFound))?;
            let created = BootstrapKey { id, name, key: key.expose().to_owned(), role: Role::Admin };
            let answer = serde_json::to_value(&created).unwrap_or_default();
            out.show(&answer, || println!("API key: {}\n(id {id}, admin; it is shown only now)", key.expose()));
            Ok(())
        }
        Command::Key(KeyCommand::Create { name, role, namespaces, .. }) => {
            let request = KeyRequest { name, role: role.into(), namespaces };
            let answer = client()?.post("/v1/keys", Some(&request)).await?;
            out.show(&answer, || {
                println!("API key: {}", answer["key"].as_str().unwrap_or_default());
                println!(
                    "(id {}, {}; it is shown only now)",
                    answer["id"].as_str().unwrap_or_default(),
                    answer["role"]
                );
            });
            Ok(())
        }
        Command::Key(KeyCommand::List) => {
            let answer = client()?.get("/v1/keys", &[]).await?;
            out.show(&answer, || print_keys(&answer["keys"]));
            Ok(())
        }
        Command::Key(KeyCommand::Revoke { id }) => {
            let id = uuid::Uuid::parse_str(&id).map_err(|_| CliError::Usage(format!("{id:?} is not a key id")))?;
            client()?.delete(&format!("/v1/keys/{id}")).await?;
            out.done(&format!("revoked key {id}"));
            Ok(())
        }
        Command::Namespace(NamespaceCommand::List) => {
            let answer = client()?.get("/v1/namespaces", &[]).await?;
            out.show(&answer, || print_namespaces(&answer["namespaces"]));
            Ok(())
        }
        Command::Namespace(NamespaceCommand::Get { namespace }) => {
            let answer = client()?.get(&format!("/v1/namespaces/{}", namespace_name(&namespace)?), &[]).await?;
            out.show(&answer, || print_namespaces(&Value::Array(vec![answer.clone()])));
            Ok(())
        }
        Command::Namespace(NamespaceCommand::Set { namespace, limits, kafka_topics, callback_allow }) => {
            let mut body = serde_json::Map::new();
            let mut changed = serde_json::Map::new();
            for limit in limits {
                let (name, value) = limit
                    .split_once('=')
                    .ok_or_else(|| CliError::Usage(format!("--limit {limit:?}: give NAME=VALUE")))?;
                let value = match value {
                    "default" => Value::Null,
                    number => Value::from(number.parse::<i64>().map_err(|_| {
                        CliError::Usage(format!("--limit {name}: {number:?} is neither a whole number nor default"))
                    })?),
                };
                changed.insert(name.to_owned(), value);
            }
            if !changed.is_empty() {
                body.insert("limits".into(), Value::Object(changed));
            }
            let list = |given: &str| -> Value {
                given.split(',').map(str::trim).filter(|e| !e.is_empty()).map(Value::from).collect()
            };
            if let Some(topics) = kafka_topics {
                body.insert("kafka_topics".into(), list(&topics));
            }
            if let Some(allow) = callback_allow {
                body.insert("callback_allow".into(), list(&allow));
            }
            if body.is_empty() {
                return Err(CliError::Usage(
                    "nothing to change: give --limit, --kafka-topics or --callback-allow".into(),
                ));
            }
            let path = format!("/v1/namespaces/{}", namespace_name(&namespace)?);
            let answer = client()?.patch(&path, &Value::Object(body)).await?;
            out.show(&answer, || print_namespaces(&Value::Array(vec![answer.clone()])));
            Ok(())
        }
        Command::Secrets(SecretsCommand::Key { id }) => {
            let entry = SecretKeys::generate_entry(&id);
            entry.parse::<SecretKeys>().map_err(|e| CliError::Usage(e.to_string()))?;
            println!("{entry}");
            Ok(())
        }
        Command::Secrets(SecretsCommand::Rotate { db, secrets }) => {
            let keys = secrets.keys().map_err(|e| CliError::Usage(e.to_string()))?;
            let current =
                keys.current_id().ok_or_else(|| CliError::Usage("set PUNCTUAL_SECRET_KEY".into()))?.to_owned();
            let pool = sqlx::PgPool::connect(&db.database_url).await?;
            // Sealed values, whatever their header's name; plaintext ones the admin seals at
            // its start, knowing which header names are secret.
            let done = sealed_store::seal_stored(&pool, &keys, &|_| false)
                .await
                .map_err(|e| CliError::Usage(e.to_string()))?;
            out.done(&format!(
                "sealed with key {current}: {} signing secrets, the headers of {} timers",
                done.signing_secrets, done.timers
            ));
            Ok(())
        }
        Command::Migrate { db, service_role } => {
            if let Some(role) = service_role.as_deref().filter(|r| !punctual_shared::db::is_role_name(r)) {
                return Err(CliError::Usage(format!(
                    "--service-role: {role:?} is not a role name of lowercase letters, digits and _"
                )));
            }
            let pool = sqlx::PgPool::connect(&db.database_url).await?;
            punctual_shared::db::migrate(&pool).await?;
            out.done("the schema is up to date");
            if let Some(role) = service_role {
                punctual_shared::db::grant_service_role(&pool, &role).await?;
                out.done(&format!("{role} may read and write the rows, and change no schema"));
            }
            Ok(())
        }
    }
}

/// A namespace named on the command line, checked as the API checks it (it goes in a path).
fn namespace_name(namespace: &str) -> Result<&str, CliError> {
    punctual_shared::timer::check_namespace(namespace)
        .map_err(|e| CliError::Usage(format!("namespace: {}", e.message)))?;
    Ok(namespace)
}

async fn timer(client: &Client, out: &Printer, command: TimerCommand) -> Result<(), CliError> {
    match command {
        TimerCommand::Create { file: Some(file), .. } => {
            let answer = client.post("/v1/timers", Some(&json_file(&file)?)).await?;
            out.show(&answer, || print_timer(&answer));
        }
        TimerCommand::Create {
            name,
            namespace,
            schedule: s,
            url,
            method,
            headers: h,
            body,
            shards,
            broadcast,
            file: None,
        } => {
            if !s.given() {
                return Err(CliError::Usage("give a schedule: --cron, --every-ms, --at or --delay-ms".into()));
            }
            let body = body.map(|b| json_arg("--body", &b)).transpose()?;
            let spec = TimerSpec {
                namespace: Some(namespace),
                name: name.unwrap_or_default(),
                schedule: schedule(s),
                action: ActionSpec {
                    http: Some(HttpActionSpec {
                        method: Some(method),
                        url: url.unwrap_or_default(),
                        headers: headers(h)?,
                        body,
                        timeout_ms: None,
                    }),
                    kafka: None,
                },
                retry: None,
                misfire_policy: None,
                catchup_window_ms: None,
                overlap_policy: None,
                fan_out: fan_out(shards, broadcast),
            };
            let answer = client.post("/v1/timers", Some(&spec)).await?;
            out.show(&answer, || print_timer(&answer));
        }
        TimerCommand::Get { id } => {
            let answer = client.get(&id_path(&id)?, &[]).await?;
            out.show(&answer, || print_timer(&answer));
        }
        TimerCommand::List { namespace, limit } => {
            let mut query = vec![("limit", limit.to_string())];
            query.extend(namespace.map(|ns| ("namespace", ns)));
            let answer = client.get("/v1/timers", &query).await?;
            out.show(&answer, || print_timers(&answer["timers"]));
        }
        TimerCommand::Update { id, name, schedule: s, url, shards, file } => {
            let path = id_path(&id)?;
            let current = client.get(&path, &[]).await?;
            let revision = current["revision"].as_i64().unwrap_or_default();
            let answer = if let Some(file) = file {
                let mut patch = json_file(&file)?;
                let Some(fields) = patch.as_object_mut() else {
                    return Err(CliError::Usage(format!("--file {file}: give a JSON object of the fields to change")));
                };
                fields.entry("revision").or_insert(revision.into());
                client.patch(&path, &patch).await?
            } else {
                if url.is_some() && current["action"]["http"].is_null() {
                    return Err(CliError::Usage("--url: this timer publishes to Kafka; change it with --file".into()));
                }
                let action = url.map(|url| {
                    let mut action = current["action"].clone();
                    action["http"]["url"] = url.into();
                    action
                });
                let schedule = s.given().then(|| rescheduled(&current["schedule"], s));
                let fan_out = shards.map(|shards| FanOut { shards: Some(shards), broadcast: None });
                if name.is_none() && schedule.is_none() && action.is_none() && fan_out.is_none() {
                    return Err(CliError::Usage(
                        "nothing to change: give --name, a schedule, --url, --shards or --file".into(),
                    ));
                }
                client.patch(&path, &TimerPatch { revision, name, schedule, action, fan_out }).await?
            };
            out.show(&answer, || print_timer(&answer));
        }
        TimerCommand::Delete { id } => {
            client.delete(&id_path(&id)?).await?;
            out.done(&format!("deleted timer {id}"));
        }
        TimerCommand::Pause { id, note } => {
            let note = note.map(|note| json!({ "note": note }));
            let answer = client.post(&format!("{}/pause", id_path(&id)?), note.as_ref()).await?;
            out.show(&answer, || print_timer(&answer));
        }
        TimerCommand::Resume { id, note } => {
            let note = note.map(|note| json!({ "note": note }));
            let answer = client.post(&format!("{}/resume", id_path(&id)?), note.as_ref()).await?;
            out.show(&answer, || print_timer(&answer));
        }
        TimerCommand::Trigger { id } => {
            let answer = client.post(&format!("{}/trigger", id_path(&id)?), None::<&()>).await?;
            out.show(&answer, || {
                println!(
                    "triggered: task {} scheduled at {} (idempotency key {})",
                    answer["task_id"],
                    answer["scheduled_at"].as_str().unwrap_or_default(),
                    answer["idempotency_key"].as_str().unwrap_or_default()
                )
            });
        }
        TimerCommand::Backfill { id, from, to } => {
            let path = format!("{}/backfill", id_path(&id)?);
            let answer = client.post(&path, Some(&BackfillRequest { from, to })).await?;
            out.show(&answer, || {
                println!("added {} of the range's {} occurrences", answer["added"], answer["occurrences"])
            });
        }
        TimerCommand::Preview { schedule: s, count } => {
            if !s.given() {
                return Err(CliError::Usage("give a schedule: --cron, --every-ms, --at or --delay-ms".into()));
            }
            let answer =
                client.post("/v1/schedules/preview", Some(&PreviewRequest { schedule: schedule(s), count })).await?;
            out.show(&answer, || {
                for time in answer["fire_times"].as_array().into_iter().flatten() {
                    println!("{}", time.as_str().unwrap_or_default());
                }
            });
        }
    }
    Ok(())
}

impl Printer {
    /// The answer as JSON, or as `table` prints it.
    pub fn show(&self, answer: &Value, table: impl FnOnce()) {
        match self.output {
            Output::Json => println!("{}", serde_json::to_string_pretty(answer).unwrap_or_default()),
            Output::Table => table(),
        }
    }

    /// An action without an answer: a line for people, nothing for scripts.
    pub fn done(&self, line: &str) {
        if self.output == Output::Table {
            println!("{line}");
        }
    }
}
