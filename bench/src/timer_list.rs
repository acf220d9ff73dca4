//! `timer-list`: the console's timer list with many timers stored. `timers` timers in 20
//! namespaces (a tenth paused, but none of ns-19; the four kinds of schedule in turn) and
//! 10 in a namespace of their own are inserted with SQL, planned far ahead so that the
//! scanner leaves them be; then pages of 50 are read through the API one after another, as
//! the console reads them, for each filter it offers. The latency is the client's on
//! loopback: the server's time and little more.

use std::time::Instant;

use serde::Serialize;
use serde_json::{json, Value};

use crate::env::Env;
use crate::surface::{timed, Latency};

const NAMESPACES: i64 = 20;
const PAGE: u32 = 50;

#[derive(Debug, Clone, Serialize)]
pub struct ListCase {
    pub case: String,
    pub path: String,
    pub latency: Latency,
}

#[derive(Debug, Clone, Serialize)]
pub struct TimerListResult {
    pub timers: i64,
    pub requests: u32,
    pub cases: Vec<ListCase>,
}

impl TimerListResult {
    pub fn markdown(&self) -> String {
        let mut text = format!(
            "Timer list: {} timers in {NAMESPACES} namespaces; {} pages of {PAGE} read one after another for each case.\n\n\
             | case | request | p50 | p99 | max |\n|---|---|---|---|---|\n",
            self.timers, self.requests
        );
        for c in &self.cases {
            text.push_str(&format!(
                "| {} | `{}` | {:.1} ms | {:.1} ms | {:.1} ms |\n",
                c.case, c.path, c.latency.p50_ms, c.latency.p99_ms, c.latency.max_ms
            ));
        }
        text
    }
}

pub async fn timer_list(env: &Env, timers: i64, requests: u32) -> anyhow::Result<TimerListResult> {
    // The requests are timed back to back: above a key's default rate.
    let stack = env.stack(&[("PUNCTUAL_API_RATE_LIMIT", "0".into())]).await;
    let pool = &stack.db.pool;
    let began = Instant::now();
    let chunk = 100_000;
    let mut from = 0;
    while from < timers {
        let to = (from + chunk).min(timers);
        sqlx::query(
            "INSERT INTO timers (namespace, name, schedule_kind, cron_expr, interval_ms, run_at, delay_ms, http_url,
                                 state, plan_status, next_plan_at)
             SELECT 'ns-' || lpad((i % $3)::text, 2, '0'), 'job-' || lpad(i::text, 7, '0'),
                    (ARRAY['cron', 'interval', 'once', 'delay'])[i / 200 % 4 + 1],
                    CASE WHEN i / 200 % 4 = 0 THEN '0 0 2 * * *' END, CASE WHEN i / 200 % 4 = 1 THEN 60000 END,
                    CASE WHEN i / 200 % 4 = 2 THEN now() + interval '1 year' END,
                    CASE WHEN i / 200 % 4 = 3 THEN 3600000 END,
                    'https://hooks.example.com/' || i,
                    CASE WHEN i / $3 % 10 = 9 AND i % $3 <> $3 - 1 THEN 'paused' ELSE 'active' END, 'planned',
                    now() + interval '1 year'
               FROM generate_series($1, $2 - 1) AS i",
        )
        .bind(from)
        .bind(to)
        .bind(NAMESPACES)
        .execute(pool)
        .await?;
        from = to;
    }
    // And a namespace of ten beside them: its few rows are found among the million.
    sqlx::query(
        "INSERT INTO timers (namespace, name, schedule_kind, interval_ms, http_url, plan_status, next_plan_at)
         SELECT 'small', 'small-' || i, 'interval', 60000, 'https://hooks.example.com/small', 'planned',
                now() + interval '1 year'
           FROM generate_series(1, 10) AS i",
    )
    .execute(pool)
    .await?;
    sqlx::query("ANALYZE timers").execute(pool).await?;
    println!("{timers} timers inserted and analysed in {:.0} s", began.elapsed().as_secs_f64());

    // A key of one namespace, as a tenant's console signs in with.
    let created: Value = stack
        .http
        .post(stack.admin.url("/v1/keys"))
        .json(&json!({"name": "tenant", "role": "write", "namespaces": ["ns-07"]}))
        .send()
        .await?
        .json()
        .await?;
    let tenant_key = created["key"].as_str().unwrap_or_default().to_owned();
    let tenant = reqwest::Client::builder()
        .default_headers(
            [(reqwest::header::AUTHORIZATION, format!("Bearer {tenant_key}").parse()?)].into_iter().collect(),
        )
        .build()?;
    // A cursor nine tenths into ns-07: the page after it.
    let deep: Option<String> = sqlx::query_scalar(
        "SELECT id::text FROM timers WHERE namespace = 'ns-07' ORDER BY id OFFSET (SELECT count(*) * 9 / 10 FROM timers WHERE namespace = 'ns-07') LIMIT 1",
    )
    .fetch_optional(pool)
    .await?;
    let deep = deep.unwrap_or_default();
    let cases: Vec<(&str, String, bool)> = vec![
        ("first page, every namespace (an admin key)", format!("/v1/timers?limit={PAGE}"), false),
        ("first page, one namespace", format!("/v1/timers?namespace=ns-07&limit={PAGE}"), false),
        ("a namespace of 10", format!("/v1/timers?namespace=small&limit={PAGE}"), false),
        ("a page nine tenths in, by cursor", format!("/v1/timers?namespace=ns-07&after={deep}&limit={PAGE}"), false),
        ("a name prefix matching 50", format!("/v1/timers?namespace=ns-07&name_prefix=job-0012&limit={PAGE}"), false),
        ("a name prefix matching none", format!("/v1/timers?namespace=ns-07&name_prefix=zzz&limit={PAGE}"), false),
        ("paused only", format!("/v1/timers?namespace=ns-07&state=paused&limit={PAGE}"), false),
        ("cron only", format!("/v1/timers?namespace=ns-07&schedule_kind=cron&limit={PAGE}"), false),
        (
            "paused only, in a namespace with none (its 50,000 read)",
            format!("/v1/timers?namespace=ns-19&state=paused&limit={PAGE}"),
            false,
        ),
        ("a tenant's key, its namespaces", format!("/v1/timers?limit={PAGE}"), true),
    ];
    let mut results = Vec::new();
    for (case, path, as_tenant) in cases {
        let http = if as_tenant { &tenant } else { &stack.http };
        let url = stack.admin.url(&path);
        // Warm: the key's lookup, the pool's connections, the statement's plan.
        timed(http, &url, 10).await?;
        let latency = timed(http, &url, requests).await?;
        println!("{case}: p50 {:.1} ms, p99 {:.1} ms", latency.p50_ms, latency.p99_ms);
        results.push(ListCase { case: case.to_owned(), path, latency });
    }
    let result = TimerListResult { timers, requests, cases: results };
    println!("{}", result.markdown());
    Ok(result)
}
