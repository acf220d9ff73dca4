//! Partitions of the tasks topic that no live executor holds.
//!
//! After a rebalance every partition should belong to one member of the group; one that
//! belongs to none is consumed by nobody, and its tasks wait until their claims expire and
//! are published to it again, forever. Each executor reads the group's description (every
//! member's assignment) and the topic's partitions every [`CHECK_INTERVAL`], exports how
//! many are unassigned, and when some stay unassigned across two checks of a stable group,
//! the member with the smallest client id (one of them, not all at once) joins the group
//! again, which makes the group assign every partition afresh.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use prometheus::IntGauge;
use rdkafka::consumer::{Consumer, ConsumerContext};
use tokio_util::sync::CancellationToken;

use crate::TaskConsumer;

/// How often the group is checked.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(5);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// What one check saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupView {
    /// The group's state, as the broker names it ("Stable", "PreparingRebalance", …).
    pub state: String,
    /// Every member's client id.
    pub members: Vec<String>,
    /// Partitions of the topic that no member holds.
    pub unassigned: BTreeSet<i32>,
}

/// Why the group could not be described.
#[derive(Debug, thiserror::Error)]
pub enum GroupWatchError {
    #[error("kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error("group {0} not described")]
    NotDescribed(String),
    #[error("a member's assignment: {0}")]
    Assignment(&'static str),
}

/// Reads the group and the topic through `consumer`, which need not be a member (blocking
/// calls: run on a blocking thread).
pub fn describe<C: ConsumerContext, K: Consumer<C>>(
    consumer: &K,
    group: &str,
    topic: &str,
) -> Result<GroupView, GroupWatchError> {
    let groups = consumer.fetch_group_list(Some(group), REQUEST_TIMEOUT)?;
    let metadata = consumer.fetch_metadata(Some(topic), REQUEST_TIMEOUT)?;
    let partitions: BTreeSet<i32> = metadata
        .topics()
        .iter()
        .filter(|t| t.name() == topic)
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    let Some(info) = groups.groups().iter().find(|g| g.name() == group) else {
        return Err(GroupWatchError::NotDescribed(group.to_owned()));
    };
    let mut assigned = BTreeSet::new();
    for member in info.members() {
        let held = member.assignment().map(|bytes| assigned_partitions(bytes, topic)).transpose()?;
        assigned.extend(held.into_iter().flatten());
    }
    Ok(GroupView {
        state: info.state().to_owned(),
        members: info.members().iter().map(|m| m.client_id().to_owned()).collect(),
        unassigned: partitions.difference(&assigned).copied().collect(),
    })
}

/// The partitions of `topic` in a member's assignment, in the consumer protocol's format:
/// version (int16), then an array (int32 count) of topics, each a string (int16 length)
/// and an array of int32 partitions, then user data (ignored).
pub fn assigned_partitions(bytes: &[u8], topic: &str) -> Result<Vec<i32>, GroupWatchError> {
    let mut r = Reader(bytes);
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let _version = r.i16()?;
    let mut out = Vec::new();
    for _ in 0..r.count()? {
        let name_len = usize::try_from(r.i16()?).map_err(|_| GroupWatchError::Assignment("a null topic name"))?;
        let name = r.take(name_len)?;
        for _ in 0..r.count()? {
            let partition = r.i32()?;
            if name == topic.as_bytes() {
                out.push(partition);
            }
        }
    }
    Ok(out)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], GroupWatchError> {
        if self.0.len() < n {
            return Err(GroupWatchError::Assignment("assignment truncated"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], GroupWatchError> {
        self.take(N)?.try_into().map_err(|_| GroupWatchError::Assignment("assignment truncated"))
    }
    fn i16(&mut self) -> Result<i16, GroupWatchError> {
        Ok(i16::from_be_bytes(self.array()?))
    }
    fn i32(&mut self) -> Result<i32, GroupWatchError> {
        Ok(i32::from_be_bytes(self.array()?))
    }
    /// An array's length (-1, null, is empty).
    fn count(&mut self) -> Result<usize, GroupWatchError> {
        Ok(usize::try_from(self.i32()?).unwrap_or(0))
    }
}

/// Whether this member should make the group assign again: some partitions stayed
/// unassigned across two checks of a stable group, and it has the smallest client id.
pub fn should_rejoin(previous: Option<&GroupView>, now: &GroupView, client_id: &str) -> bool {
    let stuck = now.state == "Stable"
        && !now.unassigned.is_empty()
        && previous.is_some_and(|p| p.state == "Stable" && !p.unassigned.is_disjoint(&now.unassigned));
    stuck && now.members.iter().min().is_some_and(|first| first == client_id)
}

/// Checks the group every [`CHECK_INTERVAL`] until `token` is cancelled.
pub async fn watch(
    consumer: Arc<TaskConsumer>,
    group: String,
    topic: String,
    client_id: String,
    unassigned: IntGauge,
    token: CancellationToken,
) {
    let mut tick = tokio::time::interval(CHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut previous: Option<GroupView> = None;
    loop {
        tokio::select! {
            _ = token.cancelled() => return,
            _ = tick.tick() => {}
        }
        let (c, g, t) = (consumer.clone(), group.clone(), topic.clone());
        let view = match tokio::task::spawn_blocking(move || describe(&*c, &g, &t)).await {
            Ok(Ok(view)) => view,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "describing the consumer group");
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "describing the consumer group");
                continue;
            }
        };
        unassigned.set(view.unassigned.len() as i64);
        if should_rejoin(previous.as_ref(), &view, &client_id) {
            tracing::warn!(partitions = ?view.unassigned, "partitions held by no executor: joining the group again");
            consumer.unsubscribe();
            if let Err(e) = consumer.subscribe(&[&topic]) {
                tracing::error!(error = %e, "subscribing again failed");
            }
            previous = None;
        } else {
            previous = Some(view);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(topics: &[(&str, &[i32])]) -> Vec<u8> {
        let mut b = vec![0, 1]; // version 1
        b.extend((topics.len() as i32).to_be_bytes());
        for (name, partitions) in topics {
            b.extend((name.len() as i16).to_be_bytes());
            b.extend(name.as_bytes());
            b.extend((partitions.len() as i32).to_be_bytes());
            for p in *partitions {
                b.extend(p.to_be_bytes());
            }
        }
        b.extend((-1i32).to_be_bytes()); // no user data
        b
    }

    #[test]
    fn an_assignment_is_read_for_its_topic() {
        let bytes = assignment(&[("other", &[0, 1]), ("punctual.tasks", &[3, 5, 7])]);
        assert_eq!(assigned_partitions(&bytes, "punctual.tasks").unwrap(), vec![3, 5, 7]);
        assert_eq!(assigned_partitions(&[], "punctual.tasks").unwrap(), Vec::<i32>::new());
        assert!(assigned_partitions(&bytes[..9], "punctual.tasks").is_err());
    }

    fn view(state: &str, unassigned: &[i32]) -> GroupView {
        GroupView {
            state: state.into(),
            members: vec!["executor-b".into(), "executor-a".into()],
            unassigned: unassigned.iter().copied().collect(),
        }
    }

    #[test]
    fn only_the_first_member_rejoins_and_only_when_partitions_stay_unassigned() {
        let stuck = view("Stable", &[6, 7]);
        assert!(should_rejoin(Some(&stuck), &stuck, "executor-a"));
        assert!(!should_rejoin(Some(&stuck), &stuck, "executor-b"), "one member, not all");
        assert!(!should_rejoin(None, &stuck, "executor-a"), "seen once only");
        assert!(!should_rejoin(Some(&view("PreparingRebalance", &[6])), &stuck, "executor-a"));
        assert!(!should_rejoin(Some(&view("Stable", &[1])), &stuck, "executor-a"), "other partitions");
        assert!(!should_rejoin(Some(&stuck), &view("Stable", &[]), "executor-a"));
    }
}
