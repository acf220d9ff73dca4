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

/// A database of its own on a Postgres server, for one baseline or peer.
pub(crate) struct Scratch {
    pub name: String,
    admin: PgConnection,
    pub pool: sqlx::PgPool,
}

impl Scratch {
    /// With Punctual's schema.
    pub async fn create(server: &str) -> anyhow::Result<Self> {
        let scratch = Self::empty(server).await?;
        punctual_shared::db::MIGRATOR.run(&scratch.pool).await?;
        Ok(scratch)
    }

    pub async fn empty(server: &str) -> anyhow::Result<Self> {
        let name = format!("bench_{}", uuid::Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(&format!("{server}/postgres")).await.context("connecting")?;
        sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin).await?;
        let pool = PgPoolOptions::new().max_connections(2).connect(&format!("{server}/{name}")).await?;
        Ok(Self { name, admin, pool })
    }

    pub async fn drop(mut self) -> anyhow::Result<()> {
        self.pool.close().await;
        sqlx::query(&format!("DROP DATABASE {} WITH (FORCE)", self.name)).execute(&mut self.admin).await?;
        Ok(())
    }
}

/// How many task rows per second Postgres claims with the scanner's own statement
/// (batched `UPDATE … FOR UPDATE SKIP LOCKED … RETURNING`, same schema and indexes), all
/// due at once as at the peak of a burst, in a database of its own.
pub async fn claim(server: &str, rows: i64, batch: i64) -> anyhow::Result<ClaimBaseline> {
    let scratch = Scratch::create(server).await?;
    let pool = scratch.pool.clone();
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
    scratch.drop().await?;
    let result = ClaimBaseline { rows: claimed, batch, rows_per_s: claimed as f64 / elapsed };
    println!("claim baseline: {claimed} rows in {elapsed:.2} s, batches of {batch}: {:.0} rows/s", result.rows_per_s);
    Ok(result)
}

#[derive(Debug, Clone, Serialize)]
pub struct RetentionCost {
    pub rows: i64,
    /// Retention's batched deletes (5,000 a statement, the scanner's own statement).
    pub delete_s: f64,
    pub delete_wal_mb: f64,
    /// The same rows as one partition of a table partitioned by `scheduled_at`, dropped.
    pub drop_partition_s: f64,
    pub drop_partition_wal_mb: f64,
}

/// What deleting `rows` finished occurrences costs Postgres: retention's batched deletes
/// against dropping a time partition holding the same rows, each in a database of its own.
pub async fn retention(server: &str, rows: i64) -> anyhow::Result<RetentionCost> {
    let scratch = Scratch::create(server).await?;
    let pool = scratch.pool.clone();
    let timer: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO timers (name, schedule_kind, cron_expr, http_url, plan_status)
         VALUES ('bench', 'cron', '* * * * * *', 'http://127.0.0.1:9/', 'planned') RETURNING id",
    )
    .fetch_one(&pool)
    .await?;
    let finished =
        "SELECT $1::uuid, t, t, 1::bigint, 0::smallint, 'succeeded', t + interval '1 second', 200::smallint, 5
                      FROM generate_series(now() - interval '30 days',
                                           now() - interval '30 days' + ($2 - 1) * interval '1 millisecond',
                                           interval '1 millisecond') AS t";
    let columns =
        "timer_id, scheduled_at, due_at, timer_version, bucket, status, finished_at, http_status, duration_ms";
    sqlx::query(&format!("INSERT INTO tasks ({columns}) {finished}")).bind(timer).bind(rows).execute(&pool).await?;
    for statement in [
        "CREATE TABLE tasks_by_time (LIKE tasks INCLUDING DEFAULTS) PARTITION BY RANGE (scheduled_at)",
        "CREATE TABLE tasks_old PARTITION OF tasks_by_time FOR VALUES FROM (MINVALUE) TO (now() - interval '7 days')",
        "CREATE TABLE tasks_new PARTITION OF tasks_by_time FOR VALUES FROM (now() - interval '7 days') TO (MAXVALUE)",
        "ALTER TABLE tasks_by_time ADD PRIMARY KEY (id, scheduled_at)",
        "CREATE UNIQUE INDEX ON tasks_by_time (timer_id, scheduled_at, shard)",
    ] {
        sqlx::query(statement).execute(&pool).await.with_context(|| statement.to_owned())?;
    }
    sqlx::query(&format!(
        "INSERT INTO tasks_by_time (id, {columns}) SELECT row_number() OVER (), x.* FROM ({finished}) x"
    ))
    .bind(timer)
    .bind(rows)
    .execute(&pool)
    .await?;
    sqlx::query("CHECKPOINT").execute(&pool).await?;
    sqlx::query("VACUUM ANALYZE").execute(&pool).await?;
    let wal = || {
        sqlx::query_scalar::<_, f64>("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::float8").fetch_one(&pool)
    };

    let held = punctual_shared::bucket::join_and_acquire(&pool, "bench", Duration::from_secs(3600), 1024).await?;
    let wal_before = wal().await?;
    let started = Instant::now();
    let (mut after, mut deleted) = (0, 0);
    loop {
        let batch =
            punctual_shared::task::prune_batch(&pool, &held, 0, after, 5_000, Duration::from_secs(7 * 86_400)).await?;
        deleted += batch.deleted;
        match batch.last_id {
            Some(last) if !batch.reached_young => after = last,
            _ => break,
        }
    }
    let delete_s = started.elapsed().as_secs_f64();
    let delete_wal_mb = (wal().await? - wal_before) / 1e6;
    anyhow::ensure!(deleted == rows, "retention deleted {deleted} of {rows}");

    let wal_before = wal().await?;
    let started = Instant::now();
    sqlx::query("DROP TABLE tasks_old").execute(&pool).await?;
    let drop_partition_s = started.elapsed().as_secs_f64();
    let drop_partition_wal_mb = (wal().await? - wal_before) / 1e6;
    scratch.drop().await?;
    let result = RetentionCost { rows, delete_s, delete_wal_mb, drop_partition_s, drop_partition_wal_mb };
    println!(
        "retention of {rows} rows: batched deletes {delete_s:.2} s, {delete_wal_mb:.1} MB of WAL; \
         dropping a partition {drop_partition_s:.3} s, {drop_partition_wal_mb:.3} MB of WAL"
    );
    Ok(result)
}

#[derive(Debug, Clone, Serialize)]
pub struct HistoryCheck {
    pub finished_rows: i64,
    pub insert_s: f64,
    /// The claim statement (`task::claim`) taking 5,000 due tasks beside the history.
    pub claim_ms: f64,
    /// A timer's latest 100 runs (the admin API's `GET /v1/timers/{id}/runs`), best of 5.
    pub runs_ms: f64,
    pub due_plan: String,
    pub expired_plan: String,
    pub runs_plan: String,
}

/// Whether the hot scans stay index range scans beside `rows` finished occurrences (of
/// 10,000 timers), and how long the claim and a timer's run listing then take.
pub async fn history(server: &str, rows: i64) -> anyhow::Result<HistoryCheck> {
    let scratch = Scratch::create(server).await?;
    let pool = scratch.pool.clone();
    let timers: Vec<uuid::Uuid> = sqlx::query_scalar(
        "INSERT INTO timers (name, schedule_kind, cron_expr, http_url, plan_status)
         SELECT 'history-' || g, 'cron', '* * * * * *', 'http://127.0.0.1:9/', 'planned'
           FROM generate_series(1, 10000) g RETURNING id",
    )
    .fetch_all(&pool)
    .await?;
    let started = Instant::now();
    sqlx::query(
        "INSERT INTO tasks (timer_id, scheduled_at, due_at, timer_version, bucket, status, finished_at,
                            http_status, duration_ms)
         SELECT ($1::uuid[])[1 + g % 10000], s, s, 1, punctual_bucket(($1::uuid[])[1 + g % 10000]), 'succeeded',
                s + interval '1 second', 200, 5
           FROM generate_series(0, $2 - 1) g,
                LATERAL (SELECT now() - interval '6 days' + g * interval '1 millisecond' AS s) x",
    )
    .bind(&timers)
    .bind(rows)
    .execute(&pool)
    .await?;
    sqlx::query(
        "INSERT INTO tasks (timer_id, scheduled_at, due_at, timer_version, bucket)
         SELECT ($1::uuid[])[1 + g % 10000], s, s, 1, punctual_bucket(($1::uuid[])[1 + g % 10000])
           FROM generate_series(0, 4999) g, LATERAL (SELECT now() + g * interval '1 millisecond' AS s) x",
    )
    .bind(&timers)
    .execute(&pool)
    .await?;
    let insert_s = started.elapsed().as_secs_f64();
    sqlx::query("VACUUM ANALYZE").execute(&pool).await?;

    let explain = |sql: &'static str| {
        let pool = pool.clone();
        let timer = timers[0];
        async move {
            let lines: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN {sql}"))
                .bind(timer)
                .fetch_all(&pool)
                .await
                .with_context(|| sql.to_owned())?;
            anyhow::Ok(lines.join("\n"))
        }
    };
    // The scans of `task::claim` and of the admin API's run listing, as they read `tasks`.
    let due_plan = explain(
        "SELECT id FROM tasks WHERE $1::uuid IS NOT NULL AND status = 'pending' AND due_at < now() + interval '20 seconds'
          ORDER BY due_at LIMIT 5000",
    )
    .await?;
    let expired_plan = explain(
        "SELECT id FROM tasks WHERE $1::uuid IS NOT NULL AND status = 'claimed' AND lease_until < now()
          ORDER BY lease_until LIMIT 5000",
    )
    .await?;
    let runs_plan = explain("SELECT * FROM tasks t WHERE timer_id = $1 ORDER BY scheduled_at DESC LIMIT 100").await?;
    for (plan, index) in [
        (&due_plan, "tasks_pending_due"),
        (&expired_plan, "tasks_claim_lease"),
        (&runs_plan, "tasks_timer_id_scheduled_at_key"),
    ] {
        anyhow::ensure!(
            plan.contains(index) && !plan.contains("Seq Scan on tasks"),
            "not an index range scan on {index}:\n{plan}"
        );
    }

    let held = punctual_shared::bucket::join_and_acquire(&pool, "bench", Duration::from_secs(3600), 1024).await?;
    let started = Instant::now();
    let claimed =
        punctual_shared::task::claim(&pool, &held, Duration::from_secs(20), Duration::from_secs(30), 5_000).await?;
    let claim_ms = started.elapsed().as_secs_f64() * 1e3;
    anyhow::ensure!(claimed.len() == 5_000, "claimed {} of 5,000", claimed.len());
    let mut runs_ms = f64::MAX;
    for _ in 0..5 {
        let started = Instant::now();
        let runs: Vec<(i64,)> =
            sqlx::query_as("SELECT id FROM tasks WHERE timer_id = $1 ORDER BY scheduled_at DESC LIMIT 100")
                .bind(timers[1])
                .fetch_all(&pool)
                .await?;
        runs_ms = runs_ms.min(started.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(!runs.is_empty(), "no runs listed");
    }
    scratch.drop().await?;
    println!("{rows} finished occurrences stored (inserted in {insert_s:.0} s)");
    println!("due scan:\n{due_plan}\nexpired scan:\n{expired_plan}\nruns of a timer:\n{runs_plan}");
    println!("claim of 5,000 due tasks: {claim_ms:.1} ms; a timer's latest 100 runs: {runs_ms:.2} ms");
    Ok(HistoryCheck { finished_rows: rows, insert_s, claim_ms, runs_ms, due_plan, expired_plan, runs_plan })
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

/// Raw broker throughput with the scanner's producer settings for tasks sent on time
/// (idempotent, acks=all, the linger of the default lead) and a consumer like the
/// executor's, on a topic of its own: messages of a task message's size, keyed like tasks.
pub async fn broker(brokers: &str, messages: u64, partitions: i32) -> anyhow::Result<BrokerBaseline> {
    let topic = format!("punctual.bench.{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let cfg = KafkaConfig {
        kafka_brokers: brokers.to_owned(),
        tasks_topic: topic.clone(),
        tasks_partitions: partitions,
        topic_replication: 1,
        kafka_options: Default::default(),
    };
    punctual_runtime::kafka::ensure_topic(&cfg, &topic, partitions).await?;
    let lead = std::time::Duration::from_millis(punctual_scanner::config::DEFAULT_PUBLISH_LEAD_MS);
    let linger = punctual_scanner::publisher::on_time_linger(lead);
    let producer = punctual_scanner::publisher::producer(&cfg, linger)?;
    let consumer: StreamConsumer = punctual_runtime::kafka::client_config(
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
        shard: None,
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
