//! Tasks (one per occurrence) and their state machine, in one place.
//!
//! ```text
//! plan────────────────┐ due within the planning scanner's lookahead: written claimed
//!  ▼                  ▼
//! pending ──claim──▶ claimed ──start──▶ running ──finish──▶ succeeded
//!    ▲  ▲               │ lease expired: claimable again        │   failed, retryable: ──▶ pending (later due_at)
//!    │  └───────────────┘ (scanner died or froze, message lost) │   failed, no attempt left ──▶ dead
//!    └────────────────────────────── replay ──── dead            └── (timer paused, deleted or edited) ──▶ cancelled
//! ```
//!
//! Every transition is one conditional SQL statement over a batch of tasks, so a service
//! never re-spells a transition and a redelivered or stale request changes nothing. The
//! statements are written for batches because they are the hot path. An occurrence
//! planned within its scanner's lookahead is inserted claimed; most start without a write
//! (see [`start`]); so an occurrence usually costs two row writes, the insert and the
//! outcome, each shared with the other tasks of its batch. Sending the message writes
//! nothing: the claim's lease covers a message that never arrives.

use serde::{Deserialize, Serialize};

/// Where an occurrence stands (`tasks.status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[sqlx(type_name = "text", rename_all = "lowercase")]
pub enum TaskStatus {
    /// Planned, waiting for its due time (or for a retry's).
    Pending,
    /// Claimed by a scanner, which publishes it when due.
    Claimed,
    /// Started by an executor.
    Running,
    Succeeded,
    /// Failed its last attempt (or had no turn within the hour).
    Dead,
    /// Not run: its timer changed or was paused, or a policy (misfire, overlap) skipped it.
    Cancelled,
}

impl TaskStatus {
    pub const ALL: [TaskStatus; 6] = [
        TaskStatus::Pending,
        TaskStatus::Claimed,
        TaskStatus::Running,
        TaskStatus::Succeeded,
        TaskStatus::Dead,
        TaskStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Pending => "pending",
            TaskStatus::Claimed => "claimed",
            TaskStatus::Running => "running",
            TaskStatus::Succeeded => "succeeded",
            TaskStatus::Dead => "dead",
            TaskStatus::Cancelled => "cancelled",
        }
    }
}

impl std::str::FromStr for TaskStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskStatus::ALL.into_iter().find(|status| status.as_str() == s).ok_or_else(|| {
            let names: Vec<&str> = TaskStatus::ALL.iter().map(|status| status.as_str()).collect();
            format!("{s:?} is none of {}", names.join(", "))
        })
    }
}

mod action;
mod claim;
mod finish;
mod message;
mod misfire;
mod operator;
mod plan;
mod prune;
mod split;
mod start;
pub mod stats;

pub use action::*;
pub use claim::*;
pub use finish::*;
pub use message::*;
pub use misfire::*;
pub use operator::*;
pub use plan::*;
pub use prune::*;
pub use split::*;
pub use start::*;
