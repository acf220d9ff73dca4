//! The admin API in-process against a real Postgres.

mod api;
mod auth;
mod common;
mod fan_out;
