//! The Kafka messages of the tasks topic and the dead-letter topic.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::claim::ClaimedTask;
use crate::fan_out::Shard;

/// The Kafka message for a due task. The key is the task identity; the value carries
/// what the executor needs to find the task row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskMessage {
    pub task_id: i64,
    pub timer_id: Uuid,
    pub scheduled_at: DateTime<Utc>,
    pub attempt: i32,
    /// When this attempt is due: the executor does not run it before. The scanner publishes
    /// a little ahead of it (`PUNCTUAL_PUBLISH_LEAD_MS`), so that the message's way to the
    /// executor and the start are over when it is due. Absent in messages of older
    /// scanners, which published at the due time: those run at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at: Option<DateTime<Utc>>,
    /// The task's bucket, and the epoch its scanner held the bucket at when it claimed the
    /// task: a message from a superseded epoch runs nothing.
    pub bucket: i16,
    pub epoch: i64,
    /// The task's shard of a fanned-out occurrence (absent: the one call of its occurrence).
    #[serde(default, skip_serializing_if = "is_whole_shard")]
    pub shard: Option<[i16; 2]>,
}

fn is_whole_shard(shard: &Option<[i16; 2]>) -> bool {
    shard.is_none_or(|[_, total]| total <= 1)
}

impl TaskMessage {
    /// The task's identity.
    pub fn key(&self) -> String {
        let [index, total] = self.shard.unwrap_or([0, 1]);
        Shard { index, total }.identity(self.timer_id, self.scheduled_at)
    }
}

/// The dead-letter message of a task that failed its last attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    pub task_id: i64,
    pub timer_id: Uuid,
    pub scheduled_at: DateTime<Utc>,
    pub idempotency_key: String,
    pub attempts: i32,
    pub http_status: Option<i16>,
    pub last_error: Option<String>,
}

impl From<&ClaimedTask> for TaskMessage {
    fn from(t: &ClaimedTask) -> Self {
        Self {
            task_id: t.id,
            timer_id: t.timer_id,
            scheduled_at: t.scheduled_at,
            attempt: t.attempt,
            due_at: Some(t.due_at),
            bucket: t.bucket,
            epoch: t.epoch,
            shard: t.shard.is_fanned_out().then_some([t.shard.index, t.shard.total]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_round_trips_and_keys_by_identity() {
        let m = TaskMessage {
            task_id: 7,
            timer_id: Uuid::nil(),
            scheduled_at: DateTime::parse_from_rfc3339("2026-12-24T18:00:00.5Z").unwrap().with_timezone(&Utc),
            attempt: 1,
            due_at: Some(DateTime::parse_from_rfc3339("2026-12-24T18:00:01Z").unwrap().with_timezone(&Utc)),
            bucket: 3,
            epoch: 12,
            shard: None,
        };
        let v = serde_json::to_vec(&m).unwrap();
        assert_eq!(serde_json::from_slice::<TaskMessage>(&v).unwrap(), m);
        assert_eq!(m.key(), "00000000-0000-0000-0000-000000000000:2026-12-24T18:00:00.500Z");
        // Without a due time: due at once.
        let undated = br#"{"task_id":7,"timer_id":"00000000-0000-0000-0000-000000000000","scheduled_at":"2026-12-24T18:00:00.5Z","attempt":1,"bucket":3,"epoch":12}"#;
        assert_eq!(serde_json::from_slice::<TaskMessage>(undated).unwrap(), TaskMessage { due_at: None, ..m });
        // A message of a scanner from before bucket leases has no epoch: not run (its task
        // is claimed again when its lease expires).
        let unfenced = br#"{"task_id":7,"timer_id":"00000000-0000-0000-0000-000000000000","scheduled_at":"2026-12-24T18:00:00.5Z","attempt":1}"#;
        assert!(serde_json::from_slice::<TaskMessage>(unfenced).is_err());
        // A shard of a fanned-out occurrence: keyed by its own identity.
        let third = TaskMessage { shard: Some([3, 16]), ..m.clone() };
        let v = serde_json::to_vec(&third).unwrap();
        assert_eq!(serde_json::from_slice::<TaskMessage>(&v).unwrap(), third);
        assert_eq!(third.key(), "00000000-0000-0000-0000-000000000000:2026-12-24T18:00:00.500Z/3");
    }
}
