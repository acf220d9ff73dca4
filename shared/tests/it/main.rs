//! The shared crate against a real Postgres and broker: bucket leases, task states, schema rules, least privilege and the cron corpus.

mod bucket_leases;
mod cron_corpus;
mod least_privilege;
mod schema_rules;
mod task_states;
