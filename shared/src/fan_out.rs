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
use crate::timer::{check_url, task_identity, FieldError};

/// The header telling a call of a fanned-out occurrence its shard, `3/16` (the index from
/// 0, then the total): `Punctual-Shard` on a callback, `punctual-shard` on a Kafka message.
pub const SHARD_HEADER: &str = "punctual-shard";

/// Most shards an occurrence may have.
pub const MAX_SHARDS: i32 = 1_000;

/// Most URLs a broadcast lists.
pub const MAX_BROADCAST_URLS: usize = 100;

/// The header telling a call of a DNS broadcast which of its host's addresses it went to.
pub const ADDRESS_HEADER: &str = "punctual-address";

/// How a timer's occurrences run: `{"shards": N}` makes each occurrence N calls;
/// `{"broadcast": "dns"}` one call to each address the URL's host resolves to when it is
/// due; `{"broadcast": ["https://a…", …]}` one call to each URL listed (instead of the
/// action's). Exactly one of the two.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FanOut {
    /// 1 to 1000: each occurrence becomes this many calls, each with its shard's index and
    /// the total (the `Punctual-Shard: 3/16` header; `punctual-shard` for a Kafka action),
    /// and an identity of its own (the occurrence's, then `/` and the index).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<i32>,
    /// An HTTP action's call made to every address of its URL's host (`"dns"`, each address
    /// checked like any target's and named in `Punctual-Address`), or to each of 1 to 100
    /// URLs instead of the action's `url` (each checked like it); each call is a shard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broadcast: Option<Broadcast>,
}

/// Where a broadcast's calls go.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum Broadcast {
    /// Every address the URL's host name resolves to when the occurrence is due.
    Dns(ByDns),
    /// Each of these URLs, with the action's method, headers and body.
    Urls(Vec<String>),
}

/// `"dns"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ByDns {
    Dns,
}

/// A timer's fan-out, checked: what the planner and the executor go by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FanOutKind {
    /// N calls to the action's target (1: no fan-out).
    Shards(i16),
    /// One call to each URL.
    Urls(Vec<String>),
    /// One call to each address of the action's host, split when due.
    Dns,
}

impl FanOutKind {
    /// The shards planned for each occurrence: a DNS broadcast is planned as one, and split
    /// by the executor when it is due.
    pub fn planned_shards(&self) -> i16 {
        match self {
            FanOutKind::Shards(n) => *n,
            FanOutKind::Urls(urls) => urls.len() as i16,
            FanOutKind::Dns => 1,
        }
    }

    /// The stored columns: `fan_out_shards`, `fan_out_urls`, `fan_out_dns`.
    pub fn columns(&self) -> (i32, Option<&[String]>, bool) {
        match self {
            FanOutKind::Shards(n) => (i32::from(*n), None, false),
            FanOutKind::Urls(urls) => (1, Some(urls), false),
            FanOutKind::Dns => (1, None, true),
        }
    }

    /// From the stored columns, checked as the API checks them (a row written with SQL is
    /// not); the problem names the column. `http`: whether the action is an HTTP call.
    pub fn from_columns(shards: i32, urls: Option<&[String]>, dns: bool, http: bool) -> Result<Self, FieldError> {
        let kind = match (urls, dns) {
            (None, false) => {
                return FanOut { shards: Some(shards), broadcast: None }
                    .validate(http)
                    .map_err(|e| FieldError::new("fan_out_shards", e.message));
            }
            (Some(urls), false) => Broadcast::Urls(urls.to_vec()),
            (None, true) => Broadcast::Dns(ByDns::Dns),
            (Some(_), true) => {
                return Err(FieldError::new("fan_out_dns", "a broadcast lists URLs or resolves, not both"))
            }
        };
        if shards != 1 {
            return Err(FieldError::new(
                "fan_out_shards",
                "a broadcast's calls are its URLs' or addresses': leave it 1",
            ));
        }
        FanOut { shards: None, broadcast: Some(kind) }.validate(http).map_err(|e| {
            let column = if dns { "fan_out_dns" } else { "fan_out_urls" };
            FieldError::new(column, e.message)
        })
    }
}

impl FanOut {
    /// Checked (the problem names the field), for an HTTP action or not.
    pub fn validate(self, http: bool) -> Result<FanOutKind, FieldError> {
        match (self.shards, self.broadcast) {
            (Some(shards), None) => {
                if !(1..=MAX_SHARDS).contains(&shards) {
                    return Err(FieldError::new("fan_out.shards", format!("must be 1 to {MAX_SHARDS}, got {shards}")));
                }
                Ok(FanOutKind::Shards(shards as i16))
            }
            (None, Some(_)) if !http => {
                Err(FieldError::new("fan_out.broadcast", "a broadcast calls URLs: only an http action takes one"))
            }
            (None, Some(Broadcast::Dns(ByDns::Dns))) => Ok(FanOutKind::Dns),
            (None, Some(Broadcast::Urls(urls))) => {
                if !(1..=MAX_BROADCAST_URLS).contains(&urls.len()) {
                    return Err(FieldError::new(
                        "fan_out.broadcast",
                        format!("lists 1 to {MAX_BROADCAST_URLS} URLs, got {}", urls.len()),
                    ));
                }
                for (i, url) in urls.iter().enumerate() {
                    check_url(&format!("fan_out.broadcast[{i}]"), url)?;
                }
                Ok(FanOutKind::Urls(urls))
            }
            _ => Err(FieldError::new("fan_out", "exactly one of shards and broadcast")),
        }
    }

    /// As a timer shows it: none for a timer whose occurrences are one call each.
    pub fn of(kind: &FanOutKind) -> Option<FanOut> {
        match kind {
            FanOutKind::Shards(1) => None,
            FanOutKind::Shards(n) => Some(FanOut { shards: Some(i32::from(*n)), broadcast: None }),
            FanOutKind::Urls(urls) => Some(FanOut { shards: None, broadcast: Some(Broadcast::Urls(urls.clone())) }),
            FanOutKind::Dns => Some(FanOut { shards: None, broadcast: Some(Broadcast::Dns(ByDns::Dns)) }),
        }
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
    fn shards_are_one_to_a_thousand_and_broadcasts_one_to_a_hundred_urls() {
        let shards = |n| FanOut { shards: Some(n), broadcast: None };
        assert_eq!(shards(16).validate(true), Ok(FanOutKind::Shards(16)));
        for wrong in [0, -1, 1001] {
            assert_eq!(shards(wrong).validate(true).unwrap_err().field, "fan_out.shards");
        }
        let urls = |urls: Vec<&str>| FanOut {
            shards: None,
            broadcast: Some(Broadcast::Urls(urls.into_iter().map(str::to_owned).collect())),
        };
        let two = urls(vec!["https://a.example.com/x", "http://b.example.com:8080/y"]);
        assert_eq!(two.clone().validate(true).unwrap().planned_shards(), 2);
        assert_eq!(urls(vec![]).validate(true).unwrap_err().field, "fan_out.broadcast");
        assert_eq!(
            urls(vec!["https://a.example.com", "ftp://b"]).validate(true).unwrap_err().field,
            "fan_out.broadcast[1]"
        );
        assert_eq!(two.clone().validate(false).unwrap_err().field, "fan_out.broadcast", "not for a Kafka action");
        let both = FanOut { shards: Some(2), ..two };
        assert_eq!(both.validate(true).unwrap_err().field, "fan_out");
        let dns: FanOut = serde_json::from_str(r#"{"broadcast": "dns"}"#).unwrap();
        assert_eq!(dns.clone().validate(true), Ok(FanOutKind::Dns));
        assert_eq!(FanOutKind::Dns.planned_shards(), 1, "split when due");
        assert_eq!(FanOut::of(&FanOutKind::Dns), Some(dns));
        assert!(serde_json::from_str::<FanOut>(r#"{"broadcast": "everywhere"}"#).is_err());
        assert_eq!(FanOut::of(&FanOutKind::Shards(1)), None);
        // Rows written with SQL are checked as the API checks them.
        assert_eq!(FanOutKind::from_columns(4, None, false, true), Ok(FanOutKind::Shards(4)));
        assert_eq!(FanOutKind::from_columns(4, None, true, true).unwrap_err().field, "fan_out_shards");
        assert_eq!(FanOutKind::from_columns(1, None, true, false).unwrap_err().field, "fan_out_dns");
        let bad = ["nope".to_owned()];
        assert_eq!(FanOutKind::from_columns(1, Some(&bad), false, true).unwrap_err().field, "fan_out_urls");
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
