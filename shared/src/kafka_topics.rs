//! Which Kafka topics a namespace's timers may publish to: the topics its policy lists
//! (exact names, or prefixes ending in `*`), never the service's own. Checked when a timer
//! is written through the API and again by the executor before it publishes, since a
//! timer may be written with SQL.

use serde::{Deserialize, Serialize};

use crate::timer::FieldError;

/// The prefixes no namespace may publish under: Punctual's own topics, and Kafka's
/// internal ones (`__consumer_offsets`, `__transaction_state`).
pub const RESERVED_PREFIXES: [&str; 2] = ["punctual.", "__"];

/// Most patterns in one namespace's list.
pub const MAX_PATTERNS: usize = 100;

/// Whether `topic` is one of the service's: under a reserved prefix, or one of
/// `service_topics` (the tasks and dead-letter topics as configured, which an operator may
/// have named otherwise).
pub fn is_reserved(topic: &str, service_topics: &[String]) -> bool {
    RESERVED_PREFIXES.iter().any(|p| topic.starts_with(p)) || service_topics.iter().any(|t| t == topic)
}

/// Whether `name` is a legal Kafka topic name.
pub fn is_legal(name: &str) -> bool {
    (1..=249).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        && name != "."
        && name != ".."
}

/// A namespace's list of topics: exact names, or prefixes ending in `*` (`orders.*`; `*`
/// alone is every topic that is not the service's).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(transparent)]
pub struct KafkaTopics(pub Vec<String>);

impl From<Vec<String>> for KafkaTopics {
    fn from(patterns: Vec<String>) -> Self {
        KafkaTopics(patterns)
    }
}

impl KafkaTopics {
    pub fn allows(&self, topic: &str) -> bool {
        self.0.iter().any(|pattern| match pattern.strip_suffix('*') {
            Some(prefix) => topic.starts_with(prefix),
            None => pattern == topic,
        })
    }

    /// Checks each pattern, naming it (`kafka_topics[i]`): a legal name or a prefix of one,
    /// `*` only at the end, none that would name a reserved topic.
    pub fn check(&self) -> Result<(), FieldError> {
        if self.0.len() > MAX_PATTERNS {
            return Err(FieldError::new("kafka_topics", format!("at most {MAX_PATTERNS} patterns")));
        }
        for (i, pattern) in self.0.iter().enumerate() {
            let field = format!("kafka_topics[{i}]");
            let (stem, prefix) = match pattern.strip_suffix('*') {
                Some(stem) => (stem, true),
                None => (pattern.as_str(), false),
            };
            let legal = if prefix {
                stem.len() < 249 && stem.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
            } else {
                is_legal(stem)
            };
            if !legal {
                return Err(FieldError::new(
                    field,
                    format!("{pattern:?} is neither a topic name nor a prefix of one ending in `*`"),
                ));
            }
            // A pattern that reaches into them as well (`*`, `p*`) is fine: they are refused
            // whatever the list says.
            if RESERVED_PREFIXES.iter().any(|r| stem.starts_with(r)) {
                return Err(FieldError::new(
                    field,
                    format!("{pattern:?} names the service's own topics (punctual.*, __*), which no namespace may use"),
                ));
            }
        }
        Ok(())
    }
}

/// Why a timer may not publish to its topic, or `None`: the service's own topics are
/// refused whatever the namespace's list says.
pub fn refusal(topic: &str, allowed: &KafkaTopics, service_topics: &[String]) -> Option<String> {
    if is_reserved(topic, service_topics) {
        Some(format!("{topic:?} is one of the service's own topics, which no timer may publish to"))
    } else if !allowed.allows(topic) {
        Some(format!(
            "the namespace may not publish to {topic:?}: an admin lists the topics it may use in its policy \
             (PATCH /v1/namespaces/{{namespace}}, kafka_topics)"
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topics(patterns: &[&str]) -> KafkaTopics {
        KafkaTopics(patterns.iter().map(|p| p.to_string()).collect())
    }

    #[test]
    fn exact_names_and_prefixes_allow_what_they_name() {
        let list = topics(&["orders", "billing.*"]);
        assert!(list.allows("orders") && list.allows("billing.invoices") && list.allows("billing."));
        assert!(!list.allows("orders.eu") && !list.allows("billing") && !list.allows("other"));
        assert!(!KafkaTopics::default().allows("orders"), "none unless listed");
        assert!(topics(&["*"]).allows("anything"));
    }

    #[test]
    fn the_services_topics_are_refused_whatever_the_list() {
        let service = vec!["jobs.tasks".to_string()];
        let all = topics(&["*"]);
        for topic in ["punctual.tasks", "punctual.dead", "__consumer_offsets", "jobs.tasks"] {
            assert!(refusal(topic, &all, &service).unwrap().contains("service's own"), "{topic}");
        }
        assert!(refusal("orders", &all, &service).is_none());
        assert!(refusal("orders", &topics(&["billing"]), &service).unwrap().contains("may not publish"));
    }

    #[test]
    fn patterns_are_checked_and_named() {
        assert!(topics(&["orders", "billing.*", "*", "a-b_c.*", "p*"]).check().is_ok());
        for (bad, i) in [("or ders", 1), ("a*b", 1), ("punctual.tasks", 1), ("punctual.*", 1), ("__x", 1)] {
            let err = topics(&["ok", bad]).check().unwrap_err();
            assert_eq!(err.field, format!("kafka_topics[{i}]"), "{bad}");
        }
        let many = KafkaTopics((0..=MAX_PATTERNS).map(|i| format!("t{i}")).collect());
        assert_eq!(many.check().unwrap_err().field, "kafka_topics");
    }
}
