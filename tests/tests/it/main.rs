//! End-to-end and fault tests: the real stack, each service a process of its own, against the test run's Postgres and broker (or servers of a test's own). One test binary; .config/nextest.toml says which tests may not overlap.

mod claims;
mod configuration;
mod console;
mod delivery;
mod executor_group;
mod extreme_values;
mod fairness;
mod fan_out;
mod faults;
mod graceful_stop;
mod logs;
mod monitoring;
mod pipeline;
mod policies;
mod replicated_cluster;
mod scale_out;
mod secrets_at_rest;
mod signed_callbacks;
mod stale_epoch;
mod target_guard;
mod tenant_walls;
mod traces;
