//! Physical baselines of the machine, measured in the same run as the scenarios: what
//! Postgres and the broker can do alone with Punctual's statements and settings. The
//! end-to-end rate is reported as a share of each.

use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use punctual_shared::config::KafkaConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::FutureRecord;
use serde::Serialize;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection};

#[derive(Debug, Clone, Serialize)]
pub struct ClaimBaseline {
    pub rows: u64,
    pub batch: i64,
    pub rows_per_s: f64,
}

/// How many task rows per second Postgres claims with the scanner's own statement
/// (batched `UPDATE … FOR UPDATE SKIP LOCKED … RETURNING`, same schema and indexes), all
/// due at once as at the peak of a burst, in a database of its own.
pub async fn claim(server: &str, rows: i64, batch: i64) -> anyhow::Result<ClaimBaseline> {
    let name = format!("bench_{}", uuid::Uuid::new_v4().simple());
    let mut admin = PgConnection::connect(&format!("{server}/postgres")).await.context("connecting")?;
    sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin).await?;
    let pool = PgPoolOptions::new().max_connections(2).connect(&format!("{server}/{name}")).await?;
    punctual_shared::db::MIGRATOR.run(&pool).await?;
    let timer: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO timers (name, schedule_kind, cron_expr, http_url, plan_status)
         VALUES ('bench', 'cron', '* * * * * *', 'http://127.0.0.1:9/', 'planned') RETURNING id",
    )
    .fetch_one(&pool)
    .await?;
    sqlx::query(
        "INSERT INTO tasks (timer_id, scheduled_at, due_at, timer_version, bucket)
         SELECT $1, t, t, 1, 0
           FROM generate_series(now() - interval '1 hour', now() - interval '1 hour' + ($2 - 1) * interval '1 millisecond',
                                interval '1 millisecond') AS t",
    )
    .bind(timer)
    .bind(rows)
    .execute(&pool)
    .await?;
    sqlx::query("VACUUM ANALYZE tasks").execute(&pool).await?;
    let held = punctual_shared::bucket::join_and_acquire(&pool, "bench", Duration::from_secs(3600), 1024).await?;
    let started = Instant::now();
    let mut claimed = 0u64;
    loop {
        let got =
            punctual_shared::task::claim(&pool, &held, Duration::from_secs(5), Duration::from_secs(30), batch).await?;
        if got.is_empty() {
            break;
        }
        claimed += got.len() as u64;
    }
    let elapsed = started.elapsed().as_secs_f64();
    pool.close().await;
    sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)")).execute(&mut admin).await?;
    let result = ClaimBaseline { rows: claimed, batch, rows_per_s: claimed as f64 / elapsed };
    println!("claim baseline: {claimed} rows in {elapsed:.2} s, batches of {batch}: {:.0} rows/s", result.rows_per_s);
    Ok(result)
}

#[derive(Debug, Clone, Serialize)]
pub struct BrokerBaseline {
    pub messages: u64,
    pub partitions: i32,
    pub message_bytes: usize,
    /// Produce rate (sent and acknowledged).
    pub produce_per_s: f64,
    /// From the first send to the last message consumed, with production and consumption
    /// running at once.
    pub produce_consume_per_s: f64,
}

/// Raw broker throughput with the scanner's producer settings (idempotent, acks=all,
/// linger 1 ms) and a consumer like the executor's, on a topic of its own: messages of a
/// task message's size, keyed like tasks.
pub async fn broker(brokers: &str, messages: u64, partitions: i32) -> anyhow::Result<BrokerBaseline> {
    let topic = format!("punctual.bench.{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let cfg = KafkaConfig {
        kafka_brokers: brokers.to_owned(),
        tasks_topic: topic.clone(),
        tasks_partitions: partitions,
        topic_replication: 1,
        kafka_options: Default::default(),
    };
    punctual_shared::kafka::ensure_topic(&cfg, &topic, partitions).await?;
    let producer = punctual_scanner::publisher::producer(&cfg)?;
    let consumer: StreamConsumer = punctual_shared::kafka::client_config(
        &cfg,
        &[
            ("group.id", &format!("bench-{}", uuid::Uuid::new_v4().simple())),
            ("auto.offset.reset", "earliest"),
            ("enable.auto.commit", "false"),
            ("fetch.wait.max.ms", "10"),
        ],
    )
    .create()?;
    consumer.subscribe(&[&topic])?;
    let message = punctual_shared::task::TaskMessage {
        task_id: 123_456_789,
        timer_id: uuid::Uuid::new_v4(),
        scheduled_at: chrono::Utc::now(),
        attempt: 1,
        due_at: Some(chrono::Utc::now()),
        bucket: 1023,
        epoch: 1_000,
    };
    let payload = serde_json::to_vec(&message)?;
    let key = message.key();

    let started = Instant::now();
    let consuming = tokio::spawn(async move {
        let mut stream = consumer.stream();
        let mut seen = 0u64;
        while seen < messages {
            match tokio::time::timeout(Duration::from_secs(60), stream.next()).await {
                Ok(Some(Ok(_))) => seen += 1,
                Ok(Some(Err(e))) => tracing::warn!(error = %e, "consuming"),
                Ok(None) | Err(_) => break,
            }
        }
        (seen, started.elapsed())
    });
    let mut deliveries = futures::stream::FuturesUnordered::new();
    for i in 0..messages {
        let record = FutureRecord::to(&topic).partition((i % partitions as u64) as i32).key(&key).payload(&payload);
        match producer.send_result(record) {
            Ok(d) => deliveries.push(d),
            Err((e, _)) => anyhow::bail!("producing: {e}"),
        }
        // Keep the producer's queue bounded, as the scanner's batches do.
        while deliveries.len() >= 50_000 {
            deliveries.next().await;
        }
    }
    while deliveries.next().await.is_some() {}
    let produced = started.elapsed();
    let (seen, consumed) = consuming.await?;
    anyhow::ensure!(seen == messages, "consumed {seen} of {messages} messages");
    let result = BrokerBaseline {
        messages,
        partitions,
        message_bytes: payload.len() + key.len(),
        produce_per_s: messages as f64 / produced.as_secs_f64(),
        produce_consume_per_s: messages as f64 / consumed.as_secs_f64(),
    };
    println!(
        "broker baseline: {messages} messages of {} bytes on {partitions} partitions: produce {:.0}/s, produce+consume {:.0}/s",
        result.message_bytes, result.produce_per_s, result.produce_consume_per_s
    );
    Ok(result)
}
