//! The command line, after `temporal schedule`'s conventions: `punctual <noun> <verb>`.

use chrono::{DateTime, Utc};
use clap::{Args, Parser, Subcommand, ValueEnum};
use punctual_shared::api_key::Role;

#[derive(Debug, Parser)]
#[command(name = "punctual", version, about = "Punctual's admin API from the command line")]
pub struct Cli {
    /// The admin API.
    #[arg(long, global = true, env = "PUNCTUAL_ADDR", default_value = "http://127.0.0.1:8080")]
    pub addr: String,
    /// An API key (`pct_…`).
    #[arg(long, global = true, env = "PUNCTUAL_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// How answers are printed: tables for people, JSON (the API's answer as it is) for scripts.
    #[arg(short, long, global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create, read, change and run timers.
    #[command(subcommand)]
    Timer(TimerCommand),
    /// Occurrences of timers and their attempts.
    #[command(subcommand)]
    Run(RunCommand),
    /// Dead tasks: list them, run them again.
    #[command(subcommand)]
    Dead(DeadCommand),
    /// API keys (admin keys only).
    #[command(subcommand)]
    Key(KeyCommand),
    /// Namespaces' policies: limits, quota, Kafka topics, callback allow-list (changed by
    /// admin keys only).
    #[command(subcommand)]
    Namespace(NamespaceCommand),
    /// Applies the schema's migrations to PUNCTUAL_DATABASE_URL (as the role that owns the
    /// schema).
    Migrate {
        #[command(flatten)]
        db: DatabaseArgs,
        /// Also gives this existing role what the scanners and executors need, and no DDL:
        /// the rows of every table, now and after later migrations.
        #[arg(long, value_name = "ROLE")]
        service_role: Option<String>,
    },
    /// The keys that seal secrets at rest (PUNCTUAL_SECRET_KEY).
    #[command(subcommand)]
    Secrets(SecretsCommand),
}

#[derive(Debug, Subcommand)]
pub enum NamespaceCommand {
    /// The namespaces with a policy of their own (the others have the defaults).
    List,
    /// One namespace's policy.
    Get { namespace: String },
    /// Changes a namespace's policy; what is not given is kept.
    Set {
        namespace: String,
        /// A limit as NAME=VALUE (e.g. max_concurrent_calls=50, max_timers=1000;
        /// NAME=default returns it to its default). Repeatable.
        #[arg(long = "limit", value_name = "NAME=VALUE")]
        limits: Vec<String>,
        /// The Kafka topics its timers may publish to, comma-separated: names, or prefixes
        /// ending in * (replaces the list; "" for none).
        #[arg(long)]
        kafka_topics: Option<String>,
        /// Hosts and networks its callbacks may reach besides public addresses,
        /// comma-separated (replaces the list; "" for none).
        #[arg(long)]
        callback_allow: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum SecretsCommand {
    /// Prints a new key entry for PUNCTUAL_SECRET_KEY (`<id>:<base64>`).
    Key {
        /// The key's id, which sealed values name.
        #[arg(long)]
        id: String,
    },
    /// Seals every stored secret again with the first key of PUNCTUAL_SECRET_KEY (after a new
    /// key was put first, the old one still listed after it), directly in the database.
    Rotate {
        #[command(flatten)]
        db: DatabaseArgs,
        #[command(flatten)]
        secrets: punctual_shared::config::SecretKeyConfig,
    },
}

#[derive(Debug, Args)]
pub struct DatabaseArgs {
    /// The database (SQL access: not through the API).
    #[arg(long, env = "PUNCTUAL_DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
}

/// A schedule: exactly one of these.
#[derive(Debug, Args, Default)]
#[group(multiple = true)]
pub struct ScheduleArgs {
    /// A cron expression (5, 6 or 7 fields, or `@daily` and such).
    #[arg(long)]
    pub cron: Option<String>,
    /// The IANA time zone of a cron expression (UTC unless given).
    #[arg(long, requires = "cron")]
    pub timezone: Option<String>,
    /// Fires every this many milliseconds.
    #[arg(long)]
    pub every_ms: Option<i64>,
    /// Fires once at this time (RFC 3339).
    #[arg(long)]
    pub at: Option<DateTime<Utc>>,
    /// Fires once, this many milliseconds after creation.
    #[arg(long)]
    pub delay_ms: Option<i64>,
}

impl ScheduleArgs {
    pub fn given(&self) -> bool {
        self.cron.is_some() || self.every_ms.is_some() || self.at.is_some() || self.delay_ms.is_some()
    }
}

#[derive(Debug, Subcommand)]
pub enum TimerCommand {
    /// Creates a timer calling a URL (or, with --file, any timer the API takes).
    Create {
        #[arg(long, required_unless_present = "file")]
        name: Option<String>,
        #[arg(long, default_value = "default")]
        namespace: String,
        #[command(flatten)]
        schedule: ScheduleArgs,
        /// The URL the callback is sent to.
        #[arg(long, required_unless_present = "file")]
        url: Option<String>,
        /// The callback's method.
        #[arg(long, default_value = "POST")]
        method: String,
        /// A header of the callback, `Name: value` (repeatable).
        #[arg(long = "header")]
        headers: Vec<String>,
        /// The callback's JSON body.
        #[arg(long)]
        body: Option<String>,
        /// Each occurrence as this many calls (shards, 1 to 1000), each told its index and
        /// the total in the `Punctual-Shard` header.
        #[arg(long)]
        shards: Option<i32>,
        /// Each occurrence as a call to every address of the URL's host (`dns`), or to each
        /// URL given (repeatable) instead of --url's.
        #[arg(long = "broadcast", conflicts_with = "shards")]
        broadcast: Vec<String>,
        /// A timer as JSON (the API's `POST /v1/timers` body), `-` for standard input.
        #[arg(long, conflicts_with_all = ["name", "url", "shards", "broadcast"])]
        file: Option<String>,
    },
    /// Shows a timer.
    Get { id: String },
    /// Lists timers.
    List {
        #[arg(long)]
        namespace: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Changes a timer: its name, schedule or URL, or (with --file) any field of a PATCH.
    Update {
        id: String,
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        schedule: ScheduleArgs,
        /// A new callback URL (the rest of the action stays).
        #[arg(long)]
        url: Option<String>,
        /// A new number of shards an occurrence is split into (1: one call), from the next
        /// occurrence not yet started.
        #[arg(long)]
        shards: Option<i32>,
        /// The fields to change as JSON, `-` for standard input.
        #[arg(long)]
        file: Option<String>,
    },
    /// Deletes a timer.
    Delete { id: String },
    /// Pauses a timer.
    Pause {
        id: String,
        /// Why: shown with the timer until its state changes again.
        #[arg(long)]
        note: Option<String>,
    },
    /// Resumes a timer from now on.
    Resume {
        id: String,
        /// Why: shown with the timer until its state changes again.
        #[arg(long)]
        note: Option<String>,
    },
    /// Runs a timer now, once, with an identity of its own.
    Trigger { id: String },
    /// Runs a timer's occurrences of a past range now.
    Backfill {
        id: String,
        #[arg(long)]
        from: DateTime<Utc>,
        #[arg(long)]
        to: DateTime<Utc>,
    },
    /// The next fire times of a schedule, without creating anything.
    Preview {
        #[command(flatten)]
        schedule: ScheduleArgs,
        #[arg(long, default_value_t = 10)]
        count: u32,
    },
}

#[derive(Debug, Subcommand)]
pub enum RunCommand {
    /// A timer's runs, or a namespace's.
    List {
        /// One timer's runs.
        #[arg(long, conflicts_with = "namespace", required_unless_present = "namespace")]
        timer: Option<String>,
        /// A namespace's runs (of the last day).
        #[arg(long)]
        namespace: Option<String>,
        #[arg(long)]
        status: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
}

#[derive(Debug, Subcommand)]
pub enum DeadCommand {
    /// Dead tasks, latest first.
    List {
        #[arg(long)]
        namespace: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Runs dead tasks again, as a further attempt.
    Replay {
        #[arg(required = true)]
        task_ids: Vec<i64>,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Creates a key; it is printed once.
    Create {
        #[arg(long)]
        name: String,
        #[arg(long, value_parser = clap::value_parser!(RoleArg))]
        role: RoleArg,
        /// A namespace the key sees (repeatable; none for an admin key).
        #[arg(long = "namespace")]
        namespaces: Vec<String>,
        /// Creates an admin key in the database directly, without the API: the first key.
        #[arg(long, requires = "database_url")]
        bootstrap: bool,
        #[arg(long, env = "PUNCTUAL_DATABASE_URL", hide_env_values = true)]
        database_url: Option<String>,
    },
    /// Lists the keys (never the keys themselves).
    List,
    /// Revokes a key.
    Revoke { id: String },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum RoleArg {
    Read,
    Write,
    Admin,
}

impl From<RoleArg> for Role {
    fn from(role: RoleArg) -> Role {
        match role {
            RoleArg::Read => Role::Read,
            RoleArg::Write => Role::Write,
            RoleArg::Admin => Role::Admin,
        }
    }
}
