//! A timer's state and the planner's status for it, as the `timers` columns `state` and
//! `plan_status` hold them (text, which the schema's CHECK constraints bound to these).

use serde::{Deserialize, Serialize};

/// Whether a timer fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[sqlx(type_name = "text", rename_all = "lowercase")]
pub enum TimerState {
    Active,
    Paused,
    Deleted,
}

impl TimerState {
    pub fn as_str(self) -> &'static str {
        match self {
            TimerState::Active => "active",
            TimerState::Paused => "paused",
            TimerState::Deleted => "deleted",
        }
    }
}

/// Where the planner is with a timer: `new` (not planned yet), `planned`, `done` (no
/// further occurrence) or `invalid` (it cannot be planned: see `invalid_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[sqlx(type_name = "text", rename_all = "lowercase")]
pub enum PlanStatus {
    New,
    Planned,
    Done,
    Invalid,
}

impl PlanStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            PlanStatus::New => "new",
            PlanStatus::Planned => "planned",
            PlanStatus::Done => "done",
            PlanStatus::Invalid => "invalid",
        }
    }
}
