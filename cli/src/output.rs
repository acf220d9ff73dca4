//! Tables for people: the fields of the API's answers that matter at a glance.

use comfy_table::presets::NOTHING;
use comfy_table::Table;
use serde_json::Value;

use crate::args::Output;

pub struct Printer {
    pub output: Output,
}

fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table.load_preset(NOTHING).set_header(header.iter().copied());
    table
}

/// `cron 0 0 2 * * * Europe/Berlin`, `every 60000 ms`, `at …`, `after … ms`.
fn schedule(timer: &Value) -> String {
    let s = &timer["schedule"];
    if let Some(cron) = s["cron"].as_str() {
        format!("cron {cron} {}", s["timezone"].as_str().unwrap_or("UTC"))
    } else if let Some(every) = s["every_ms"].as_i64() {
        format!("every {every} ms")
    } else if let Some(at) = s["at"].as_str() {
        format!("at {at}")
    } else {
        format!("after {} ms", text(&s["delay_ms"]))
    }
}

fn target(timer: &Value) -> String {
    let action = &timer["action"];
    match (action["http"]["url"].as_str(), action["kafka"]["topic"].as_str()) {
        (Some(url), _) => format!("{} {url}", action["http"]["method"].as_str().unwrap_or("POST")),
        (None, Some(topic)) => format!("kafka {topic}"),
        _ => "-".to_owned(),
    }
}

pub fn print_timer(timer: &Value) {
    let mut t = table(&["FIELD", "VALUE"]);
    let next = timer["next_fire_times"].as_array().and_then(|f| f.first()).map(text).unwrap_or("-".into());
    for (field, value) in [
        ("id", text(&timer["id"])),
        ("namespace", text(&timer["namespace"])),
        ("name", text(&timer["name"])),
        ("schedule", schedule(timer)),
        ("action", target(timer)),
        ("state", text(&timer["state"])),
        ("plan status", text(&timer["plan_status"])),
        ("revision", text(&timer["revision"])),
        ("next fire", next),
    ] {
        t.add_row([field.to_owned(), value]);
    }
    if let Some(shards) = timer["fan_out"]["shards"].as_i64() {
        t.add_row(["shards".to_owned(), shards.to_string()]);
    }
    let broadcast = match &timer["fan_out"]["broadcast"] {
        Value::String(dns) => Some(format!("every address of the host ({dns})")),
        Value::Array(urls) => Some(urls.iter().map(text).collect::<Vec<_>>().join(" ")),
        _ => None,
    };
    if let Some(broadcast) = broadcast {
        t.add_row(["broadcast".to_owned(), broadcast]);
    }
    if !timer["state_note"].is_null() {
        t.add_row(["note".to_owned(), text(&timer["state_note"])]);
    }
    if !timer["invalid_reason"].is_null() {
        t.add_row(["invalid".to_owned(), text(&timer["invalid_reason"])]);
    }
    println!("{t}");
}

pub fn print_timers(timers: &Value) {
    let mut t = table(&["ID", "NAMESPACE", "NAME", "SCHEDULE", "STATE", "NEXT FIRE"]);
    for timer in timers.as_array().into_iter().flatten() {
        let next = timer["next_fire_times"].as_array().and_then(|f| f.first()).map(text).unwrap_or("-".into());
        t.add_row([
            text(&timer["id"]),
            text(&timer["namespace"]),
            text(&timer["name"]),
            schedule(timer),
            text(&timer["state"]),
            next,
        ]);
    }
    println!("{t}");
}

pub fn print_runs(runs: &Value) {
    let mut t = table(&["TASK", "TIMER", "SCHEDULED AT", "SHARD", "STATUS", "ATTEMPT", "HTTP", "MS", "ERROR"]);
    for run in runs.as_array().into_iter().flatten() {
        let shard = match run["shards"].as_i64() {
            Some(total) if total > 1 => format!("{}/{total}", text(&run["shard"])),
            _ => "-".to_owned(),
        };
        t.add_row([
            text(&run["id"]),
            text(&run["timer_id"]),
            text(&run["scheduled_at"]),
            shard,
            text(&run["status"]),
            text(&run["attempt"]),
            text(&run["http_status"]),
            text(&run["duration_ms"]),
            text(&run["error"]),
        ]);
    }
    println!("{t}");
}

pub fn print_keys(keys: &Value) {
    let mut t = table(&["ID", "NAME", "KEY", "ROLE", "NAMESPACES", "CREATED", "REVOKED"]);
    for key in keys.as_array().into_iter().flatten() {
        let namespaces: Vec<String> = key["namespaces"].as_array().into_iter().flatten().map(text).collect();
        t.add_row([
            text(&key["id"]),
            text(&key["name"]),
            text(&key["prefix"]),
            text(&key["role"]),
            if namespaces.is_empty() { "(all)".to_owned() } else { namespaces.join(",") },
            text(&key["created_at"]),
            text(&key["revoked_at"]),
        ]);
    }
    println!("{t}");
}

/// Namespaces' policies: one row each, the limits that differ from their defaults.
pub fn print_namespaces(namespaces: &Value) {
    let mut t = table(&["NAMESPACE", "LIMITS (NOT DEFAULT)", "KAFKA TOPICS", "CALLBACK ALLOW"]);
    for ns in namespaces.as_array().into_iter().flatten() {
        let changed: Vec<String> = ns["limits"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(name, value)| ns["default_limits"][name.as_str()] != **value)
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        let list = |field: &str| -> String {
            let items: Vec<String> = ns[field].as_array().into_iter().flatten().map(text).collect();
            if items.is_empty() {
                "-".to_owned()
            } else {
                items.join(",")
            }
        };
        t.add_row([
            text(&ns["namespace"]),
            if changed.is_empty() { "-".to_owned() } else { changed.join(" ") },
            list("kafka_topics"),
            list("callback_allow"),
        ]);
    }
    println!("{t}");
}
