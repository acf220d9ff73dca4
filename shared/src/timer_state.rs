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
    pub const fn as_str(self) -> &'static str {
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
    pub const fn as_str(self) -> &'static str {
        match self {
            PlanStatus::New => "new",
            PlanStatus::Planned => "planned",
            PlanStatus::Done => "done",
            PlanStatus::Invalid => "invalid",
        }
    }
}

/// A timer's state as counted in stats and metrics, an SQL expression over `timers`:
/// `active`, `paused`, or, whatever that, `invalid` (refused by the planner) or `finished`
/// (nothing left to plan).
pub const COUNTED_STATE: &str = "CASE WHEN plan_status = 'invalid' THEN 'invalid'
                                      WHEN plan_status = 'done' THEN 'finished'
                                      ELSE state END";
/// Every value of [`COUNTED_STATE`].
pub const COUNTED_STATES: [&str; 4] = ["active", "paused", "invalid", "finished"];
/// The timers not deleted, an SQL condition over `timers`.
pub const NOT_DELETED: &str = "state <> 'deleted'";

#[cfg(test)]
mod tests {
    use super::*;

    /// The SQL fragments spell the states as the enums map them.
    #[test]
    fn the_fragments_name_the_states_as_mapped() {
        assert!(NOT_DELETED.contains(&format!("'{}'", TimerState::Deleted.as_str())));
        assert!(COUNTED_STATE.contains(&format!("'{}'", PlanStatus::Invalid.as_str())));
        assert!(COUNTED_STATE.contains(&format!("'{}'", PlanStatus::Done.as_str())));
        assert_eq!(&COUNTED_STATES[..2], &[TimerState::Active.as_str(), TimerState::Paused.as_str()]);
    }

    /// The partial indexes over `timers`, whose conditions the statements they serve spell
    /// alike, name the states as mapped.
    #[test]
    fn the_partial_indexes_name_the_states_as_mapped() {
        let schema = include_str!("../../migrations/20261202000001_init.sql");
        let condition = format!(
            "WHERE plan_status = '{}' AND state = '{}';",
            PlanStatus::Planned.as_str(),
            TimerState::Active.as_str()
        );
        assert!(schema.contains(&format!("CREATE INDEX timers_plan_due ON timers (next_plan_at) {condition}")));
        let new = format!("WHERE plan_status = '{}';", PlanStatus::New.as_str());
        assert!(schema.contains(&format!("CREATE INDEX timers_plan_new ON timers (created_at) {new}")));
        let live = format!("WHERE state <> '{}';", TimerState::Deleted.as_str());
        assert!(schema.contains(&format!("ON timers (namespace, name) {live}")));
    }
}
