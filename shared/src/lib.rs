//! Punctual's common crate: the domain (timers, schedules, tasks and their state machine),
//! schema access, the Kafka message format, configuration, telemetry and the operations
//! endpoints every service serves.

pub mod api_key;
pub mod bucket;
pub mod config;
pub mod db;
pub mod http_server;
pub mod kafka;
pub mod kafka_topics;
pub mod metric_registrar;
pub mod namespace_policy;
pub mod ops;
pub mod otlp;
pub mod paused_target;
pub mod periodic;
pub mod policy;
pub mod problem;
pub mod readiness;
pub mod retry;
pub mod schedule;
pub mod sealed;
pub mod sealed_store;
pub mod service_metrics;
pub mod signing_secrets;
pub mod supervisor;
pub mod target_guard;
pub mod task;
pub mod telemetry;
pub mod timer;
pub mod timer_state;
pub mod timer_store;
pub mod trace_context;
pub mod webhook_signature;
