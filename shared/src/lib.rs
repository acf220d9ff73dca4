//! Punctual's common crate: the domain (timers, schedules, namespaces, tasks and their
//! state machine), the schema's access (one writing module per table), the Kafka message
//! format and the settings. No Kafka client, HTTP server or telemetry: those are
//! `punctual-runtime`'s, which only the services link.

// The paths in the statements of `query_timer_rows!` name this crate as its users do.
extern crate self as punctual_shared;

pub mod api_key;
pub mod audit;
pub mod bucket;
pub mod config;
pub mod db;
pub mod fan_out;
pub mod kafka_topics;
pub mod namespace_policy;
pub mod paused_target;
pub mod policy;
pub mod retry;
pub mod schedule;
pub mod sealed;
pub mod sealed_store;
pub mod signing_secrets;
pub mod target_guard;
pub mod task;
pub mod timer;
pub mod timer_rows;
pub mod timer_state;
pub mod timer_store;
pub mod trace_context;
pub mod unpoisoned;
pub mod webhook_signature;
