//! Fan-out: an occurrence split into shards, each a call of its own (docs/semantics.md,
//! "Fan-out").
//!
//! A shard is a task row like any other: its own identity, attempts, retries and dead
//! letter. What is fanned out is the occurrence, so the rules that judge an occurrence as
//! a whole (its status, overlap) read its shards together.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::bucket::{bucket_of, BUCKETS};
use crate::task::TaskStatus;
use crate::timer::{task_identity, FieldError};

/// The header telling a call of a fanned-out occurrence its shard, `3/16` (the index from
/// 0, then the total): `Punctual-Shard` on a callback, `punctual-shard` on a Kafka message.
pub const SHARD_HEADER: &str = "punctual-shard";

/// Most shards an occurrence may have.
pub const MAX_SHARDS: i32 = 1_000;

/// How a timer's occurrences run: `{"shards": N}` makes each occurrence N calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FanOut {
    /// 1 to 1000: each occurrence becomes this many calls, each with its shard's index and
    /// the total (the `Punctual-Shard: 3/16` header; `punctual-shard` for a Kafka action),
    /// and an identity of its own (the occurrence's, then `/` and the index).
    pub shards: i32,
}

impl FanOut {
    /// The number of shards, checked (a problem names `fan_out.shards`).
    pub fn validate(self) -> Result<i16, FieldError> {
        if !(1..=MAX_SHARDS).contains(&self.shards) {
            return Err(FieldError::new("fan_out.shards", format!("must be 1 to {MAX_SHARDS}, got {}", self.shards)));
        }
        Ok(self.shards as i16)
    }

    /// As a timer shows it: none for a timer whose occurrences are one call each.
    pub fn of(shards: i32) -> Option<FanOut> {
        (shards > 1).then_some(FanOut { shards })
    }
}

/// One shard of an occurrence: its index from 0, and the occurrence's number of shards
/// (`tasks.shard`, `tasks.shards`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, sqlx::FromRow)]
pub struct Shard {
    #[sqlx(rename = "shard")]
    pub index: i16,
    #[sqlx(rename = "shards")]
    pub total: i16,
}

impl Shard {
    /// The one call of an occurrence that is not fanned out.
    pub const WHOLE: Shard = Shard { index: 0, total: 1 };

    /// The shards of an occurrence with `total` of them.
    pub fn all(total: i16) -> impl Iterator<Item = Shard> {
        (0..total.max(1)).map(move |index| Shard { index, total: total.max(1) })
    }

    pub fn is_fanned_out(self) -> bool {
        self.total > 1
    }

    /// `3/16`: what the `Punctual-Shard` header says.
    pub fn header_value(self) -> String {
        format!("{}/{}", self.index, self.total)
    }

    /// The identity of this call of occurrence (`timer_id`, `scheduled_at`): the
    /// occurrence's ([`task_identity`]), followed by `/` and the index for a shard of a
    /// fanned-out occurrence, so each shard has an idempotency key of its own.
    pub fn identity(self, timer_id: Uuid, scheduled_at: DateTime<Utc>) -> String {
        let mut identity = task_identity(timer_id, scheduled_at);
        if self.is_fanned_out() {
            identity.push('/');
            identity.push_str(&self.index.to_string());
        }
        identity
    }

    /// This shard's bucket: its timer's, moved on by the index, so an occurrence's shards
    /// spread over buckets and with them over scanners, partitions and executors. The
    /// schema computes the same (`punctual_bucket(timer_id) + shard`, modulo the buckets).
    pub fn bucket(self, timer_id: Uuid) -> i16 {
        ((bucket_of(timer_id) as i32 + self.index as i32) % BUCKETS as i32) as i16
    }
}

/// The status of a whole occurrence from its shards': dead if any shard is dead, succeeded
/// only if every shard succeeded; otherwise the least advanced shard's among those not
/// finished (pending, claimed, running), or cancelled when every shard finished and some
/// were cancelled. `None` for an occurrence with no shard.
pub fn occurrence_status(shards: impl IntoIterator<Item = TaskStatus>) -> Option<TaskStatus> {
    let mut seen = [false; 6];
    let rank = |s: TaskStatus| match s {
        TaskStatus::Dead => 0,
        TaskStatus::Pending => 1,
        TaskStatus::Claimed => 2,
        TaskStatus::Running => 3,
        TaskStatus::Cancelled => 4,
        TaskStatus::Succeeded => 5,
    };
    let mut any = false;
    for status in shards {
        seen[rank(status)] = true;
        any = true;
    }
    if !any {
        return None;
    }
    let order =
        [TaskStatus::Dead, TaskStatus::Pending, TaskStatus::Claimed, TaskStatus::Running, TaskStatus::Cancelled];
    Some(order.into_iter().find(|s| seen[rank(*s)]).unwrap_or(TaskStatus::Succeeded))
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaskStatus::*;

    #[test]
    fn a_shard_has_an_identity_and_a_bucket_of_its_own() {
        let at = DateTime::parse_from_rfc3339("2026-12-24T18:00:00.5Z").unwrap().with_timezone(&Utc);
        let timer = Uuid::from_u128(0x3ff);
        assert_eq!(Shard::WHOLE.identity(timer, at), task_identity(timer, at));
        let third = Shard { index: 3, total: 16 };
        assert_eq!(third.identity(timer, at), format!("{}/3", task_identity(timer, at)));
        assert_eq!(third.header_value(), "3/16");
        assert_eq!(Shard::WHOLE.bucket(timer), 1023);
        assert_eq!(third.bucket(timer), 2, "moved on by the index, around the buckets");
        let identities: std::collections::HashSet<String> = Shard::all(16).map(|s| s.identity(timer, at)).collect();
        assert_eq!(identities.len(), 16);
        assert_eq!(Shard::all(1).collect::<Vec<_>>(), vec![Shard::WHOLE]);
    }

    #[test]
    fn shards_are_one_to_a_thousand() {
        assert_eq!(FanOut { shards: 16 }.validate(), Ok(16));
        for wrong in [0, -1, 1001] {
            assert_eq!(FanOut { shards: wrong }.validate().unwrap_err().field, "fan_out.shards");
        }
        assert_eq!(FanOut::of(1), None);
        assert_eq!(FanOut::of(4), Some(FanOut { shards: 4 }));
    }

    #[test]
    fn an_occurrence_is_dead_if_any_shard_is_and_succeeded_only_if_all_are() {
        assert_eq!(occurrence_status([Succeeded, Succeeded]), Some(Succeeded));
        assert_eq!(occurrence_status([Succeeded, Dead, Running]), Some(Dead));
        assert_eq!(occurrence_status([Succeeded, Running, Pending]), Some(Pending));
        assert_eq!(occurrence_status([Succeeded, Running]), Some(Running));
        assert_eq!(occurrence_status([Succeeded, Cancelled]), Some(Cancelled));
        assert_eq!(occurrence_status([]), None);
    }
}
