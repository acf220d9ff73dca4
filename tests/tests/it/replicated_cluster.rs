//! Punctual on a replicated Kafka cluster: three nodes (each broker and controller), the
//! tasks topic replicated 3 times with at least 2 in sync, producers waiting for all
//! in-sync replicas (`acks=all`). Under steady load the node that leads most of the
//! topic's partitions is killed (`kill -9`) and started again at once, as a supervisor
//! would: nothing is lost, nothing repeated but calls in flight, and the lag spike is
//! printed.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::Utc;
use punctual_testkit::load::{until, Load};
use punctual_testkit::servers::Cluster;
use punctual_testkit::{Sink, Stack};
use rdkafka::consumer::{BaseConsumer, Consumer};

/// Each partition's leader and in-sync replicas.
fn partitions(brokers: &str, topic: &str) -> Vec<(i32, i32, Vec<i32>)> {
    let client: BaseConsumer = rdkafka::ClientConfig::new().set("bootstrap.servers", brokers).create().unwrap();
    let metadata = client.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
    metadata.topics()[0].partitions().iter().map(|p| (p.id(), p.leader(), p.isr().to_vec())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_of_a_replicated_cluster_loses_nothing() {
    let cluster = Cluster::start();
    let sink = Sink::start().await;
    let server = std::env::var("PUNCTUAL_TEST_DATABASE_URL").unwrap();
    let mut stack = Stack::start_on(
        &server,
        &cluster.brokers(),
        &[
            ("PUNCTUAL_TOPIC_REPLICATION", "3".into()),
            ("PUNCTUAL_LEASE_MS", "4000".into()),
            ("PUNCTUAL_LOOKAHEAD_MS", "1500".into()),
            ("PUNCTUAL_KAFKA_SESSION_TIMEOUT_MS", "6000".into()),
            // A node restarted beside the whole suite has taken 55 s to answer again:
            // occurrences due meanwhile must not pass the misfire threshold (the misfire
            // policies have tests of their own).
            ("PUNCTUAL_MISFIRE_THRESHOLD_MS", "600000".into()),
        ],
    )
    .await;
    let before = partitions(&cluster.brokers(), &stack.topic);
    println!("partitions (id, leader, in sync) before: {before:?}");
    assert!(before.iter().all(|(_, _, isr)| isr.len() == 3), "replicated 3 times");

    let load = Load::start(&stack, &sink, 100, 20).await;
    until(&load, 6).await;
    let mut leads: HashMap<i32, usize> = HashMap::new();
    for (_, leader, _) in &before {
        *leads.entry(*leader).or_default() += 1;
    }
    let (&victim, _) = leads.iter().max_by_key(|(id, n)| (**n, -**id)).unwrap();
    cluster.kill(victim);
    let killed_at = Utc::now();
    cluster.restart(victim);
    println!("node {victim} killed and started again in {:.1} s", (Utc::now() - killed_at).as_seconds_f64());

    // As a supervisor would: a service that exits is started again (an executor whose
    // consumer was fenced during the failover exits so, librdkafka issue #3437).
    let restarted = load.supervise(&mut stack, &sink, Duration::from_secs(120)).await;
    println!("restarted by the supervisor: {restarted:?}");
    assert!(restarted.iter().all(|(name, _)| name.starts_with("executor")), "{restarted:?}");
    let audit = load.audit(&stack, &sink, Duration::from_secs(10)).await;
    let after = partitions(&cluster.brokers(), &stack.topic);
    println!("partitions (id, leader, in sync) after: {after:?}");
    let calls = sink.calls();
    let mut lags: Vec<i64> =
        calls.iter().filter_map(|c| Some((c.received_at - c.scheduled_at()?).num_milliseconds())).collect();
    lags.sort_unstable();
    let p99 = lags[lags.len() * 99 / 100];
    let max = *lags.last().unwrap();
    let in_flight: HashSet<String> = calls
        .iter()
        .filter(|c| (killed_at - c.received_at).num_milliseconds().abs() < 1_000)
        .filter_map(|c| c.idempotency_key.clone())
        .collect();
    let mut seen = HashSet::new();
    let repeated: HashSet<String> =
        calls.iter().filter_map(|c| c.idempotency_key.clone()).filter(|k| !seen.insert(k.clone())).collect();
    println!(
        "lag across the leader's death: p99 {p99} ms, max {max} ms; repeated {} (calls within 1 s of the kill: {})",
        repeated.len(),
        in_flight.len()
    );
    assert_eq!((audit.lost, audit.unexpected), (0, 0), "{audit:?}");
    assert!(repeated.is_subset(&in_flight), "only calls in flight at the kill are repeated: {repeated:?}");
}
