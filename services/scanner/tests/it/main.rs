//! The scanner's planner and retention against a real Postgres.

mod planner;
mod retention;
