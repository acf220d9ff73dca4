//! The tasks topic against a real broker.

use punctual_runtime::kafka::{ensure_tasks_topic, ensure_topic, TopicError};
use punctual_testkit::kafka_config;

#[tokio::test]
async fn a_tasks_topic_with_fewer_partitions_than_configured_is_refused_with_the_remedy() {
    let mut cfg = kafka_config(2);
    assert_eq!(ensure_topic(&cfg, &cfg.tasks_topic, 2).await.unwrap(), 2);
    cfg.tasks_partitions = 4;
    let err = ensure_tasks_topic(&cfg).await.unwrap_err();
    assert!(matches!(err, TopicError::TooFewPartitions { found: 2, configured: 4, .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("--partitions 4") && message.contains("PUNCTUAL_TASKS_PARTITIONS=2"), "{message}");
    // As many as configured, or more, is fine.
    cfg.tasks_partitions = 2;
    assert_eq!(ensure_tasks_topic(&cfg).await.unwrap(), 2);
    cfg.tasks_partitions = 1;
    assert_eq!(ensure_tasks_topic(&cfg).await.unwrap(), 2);
}
