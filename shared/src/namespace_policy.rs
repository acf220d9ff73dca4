//! A namespace's policy (table `namespaces`): the limits its occurrences run under, so that
//! one namespace's load cannot take over what all of them share (docs/semantics.md,
//! "Fairness"), how many timers it holds and how often they may fire, and what its timers
//! may reach: the Kafka topics they may publish to and the private callback targets its
//! allow-list opens (docs/semantics.md, "Tenants"). This module owns the table's writes.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgExecutor, PgPool};

use crate::kafka_topics::KafkaTopics;
use crate::target_guard::TargetGuard;
use crate::timer::FieldError;

/// Callbacks of one namespace in flight at once in one executor, unless its policy says
/// otherwise: a tenth of an executor's default slots (`PUNCTUAL_MAX_IN_FLIGHT`), so that
/// no single namespace's calls can take them all.
pub const DEFAULT_MAX_CONCURRENT_CALLS: u32 = 2_000;
/// Longest a callback may take, unless the namespace's policy says less: the longest
/// timeout a timer may set (`http_timeout_ms`).
pub const DEFAULT_MAX_CALLBACK_TIMEOUT_MS: u32 = 600_000;

/// Replayed and backfilled occurrences of one namespace due per second, unless its policy
/// says otherwise.
pub const DEFAULT_MAX_CATCH_UP_PER_SECOND: u32 = 1_000;
/// Fires of one namespace a second in one executor, unless its policy says otherwise:
/// more than an executor has run (docs/BENCHMARKS.md), so a limit only when set.
pub const DEFAULT_MAX_FIRES_PER_SECOND: u32 = 100_000;
/// Live timers of one namespace, unless its policy says otherwise (0: no limit): the
/// default of `PUNCTUAL_NAMESPACE_MAX_TIMERS`, which sets it for a service.
pub const DEFAULT_MAX_TIMERS: u32 = 100_000;
/// The shortest time between two fires of one timer, unless the namespace's policy says
/// otherwise: the default of `PUNCTUAL_MIN_FIRE_INTERVAL_MS`, which sets it for a service.
pub const DEFAULT_MIN_FIRE_INTERVAL_MS: u32 = 1_000;

/// The bounds the schema checks, for the API to name the field before it does.
const CONCURRENT_CALLS_RANGE: (u32, u32) = (1, 1_000_000);
const CATCH_UP_RANGE: (u32, u32) = (1, 1_000_000);
const FIRES_RANGE: (u32, u32) = (1, 1_000_000);
const CALLBACK_TIMEOUT_RANGE: (u32, u32) = (1, 600_000);
const MAX_TIMERS_RANGE: (u32, u32) = (0, 1_000_000_000);
const MIN_FIRE_INTERVAL_RANGE: (u32, u32) = (0, 86_400_000);
/// Most entries of a namespace's callback allow-list.
pub const MAX_CALLBACK_ALLOW: usize = 100;

/// The limits a namespace's occurrences run under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct NamespaceLimits {
    /// Most callbacks of the namespace in flight at once in each executor; further calls
    /// wait their turn, briefly, or are deferred.
    pub max_concurrent_calls: u32,
    /// Longest a callback of the namespace may take, whatever its timer's timeout.
    pub max_callback_timeout_ms: u32,
    /// Replayed dead tasks and backfilled occurrences due per second: a larger replay or
    /// backfill is spread over the seconds after the previous one's.
    pub max_catch_up_per_second: u32,
    /// Fires of the namespace a second in each executor (a second's worth at once);
    /// further ones wait for their slot, briefly, or are deferred to it.
    pub max_fires_per_second: u32,
    /// Live timers the namespace may hold through the API (0: no limit).
    pub max_timers: u32,
    /// The shortest time between two fires of one of its timers that the API accepts.
    pub min_fire_interval_ms: u32,
}

impl Default for NamespaceLimits {
    fn default() -> Self {
        NamespaceLimits {
            max_concurrent_calls: DEFAULT_MAX_CONCURRENT_CALLS,
            max_callback_timeout_ms: DEFAULT_MAX_CALLBACK_TIMEOUT_MS,
            max_catch_up_per_second: DEFAULT_MAX_CATCH_UP_PER_SECOND,
            max_fires_per_second: DEFAULT_MAX_FIRES_PER_SECOND,
            max_timers: DEFAULT_MAX_TIMERS,
            min_fire_interval_ms: DEFAULT_MIN_FIRE_INTERVAL_MS,
        }
    }
}

/// A namespace's limits as stored: `None` is the default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoredLimits {
    pub max_concurrent_calls: Option<i32>,
    pub max_callback_timeout_ms: Option<i32>,
    pub max_catch_up_per_second: Option<i32>,
    pub max_fires_per_second: Option<i32>,
    pub max_timers: Option<i32>,
    pub min_fire_interval_ms: Option<i32>,
}

impl StoredLimits {
    /// The limits in force: the stored ones, the defaults for the others.
    pub fn effective(&self) -> NamespaceLimits {
        self.effective_with(&NamespaceLimits::default())
    }

    /// As [`StoredLimits::effective`], with the service's own defaults.
    pub fn effective_with(&self, defaults: &NamespaceLimits) -> NamespaceLimits {
        NamespaceLimits {
            max_concurrent_calls: self.max_concurrent_calls.map_or(defaults.max_concurrent_calls, |v| v.max(1) as u32),
            max_callback_timeout_ms: self
                .max_callback_timeout_ms
                .map_or(defaults.max_callback_timeout_ms, |v| v.max(1) as u32),
            max_catch_up_per_second: self
                .max_catch_up_per_second
                .map_or(defaults.max_catch_up_per_second, |v| v.max(1) as u32),
            max_fires_per_second: self.max_fires_per_second.map_or(defaults.max_fires_per_second, |v| v.max(1) as u32),
            max_timers: self.max_timers.map_or(defaults.max_timers, |v| v.max(0) as u32),
            min_fire_interval_ms: self.min_fire_interval_ms.map_or(defaults.min_fire_interval_ms, |v| v.max(0) as u32),
        }
    }

    /// Checks each value against the schema's bounds, naming the field (under `limits.`).
    pub fn check(&self) -> Result<(), FieldError> {
        for (field, value, (min, max)) in [
            ("limits.max_concurrent_calls", self.max_concurrent_calls, CONCURRENT_CALLS_RANGE),
            ("limits.max_callback_timeout_ms", self.max_callback_timeout_ms, CALLBACK_TIMEOUT_RANGE),
            ("limits.max_catch_up_per_second", self.max_catch_up_per_second, CATCH_UP_RANGE),
            ("limits.max_fires_per_second", self.max_fires_per_second, FIRES_RANGE),
            ("limits.max_timers", self.max_timers, MAX_TIMERS_RANGE),
            ("limits.min_fire_interval_ms", self.min_fire_interval_ms, MIN_FIRE_INTERVAL_RANGE),
        ] {
            if let Some(v) = value {
                if v < min as i32 || v as i64 > i64::from(max) {
                    return Err(FieldError::new(
                        field,
                        format!("must be between {min} and {max}, or null for the default"),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A namespace's policy as stored: a namespace without a row has the default one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredPolicy {
    pub limits: StoredLimits,
    pub kafka_topics: KafkaTopics,
    /// Hosts and networks its callbacks may reach besides public addresses (and those
    /// `PUNCTUAL_CALLBACK_ALLOW` opens for all).
    pub callback_allow: Vec<String>,
}

impl StoredPolicy {
    pub fn effective(&self) -> NamespacePolicy {
        NamespacePolicy {
            limits: self.limits.effective(),
            kafka_topics: self.kafka_topics.clone(),
            // Checked when written; an entry written with SQL that is not one opens nothing.
            callback_allow: self.callback_allow.join(",").parse().unwrap_or_default(),
        }
    }

    pub fn check(&self) -> Result<(), FieldError> {
        self.limits.check()?;
        self.kafka_topics.check()?;
        if self.callback_allow.len() > MAX_CALLBACK_ALLOW {
            return Err(FieldError::new("callback_allow", format!("at most {MAX_CALLBACK_ALLOW} entries")));
        }
        for (i, entry) in self.callback_allow.iter().enumerate() {
            if entry.contains(',') || entry.trim().is_empty() || entry.parse::<TargetGuard>().is_err() {
                return Err(FieldError::new(
                    format!("callback_allow[{i}]"),
                    format!("{entry:?} is not a host name, an IP address or a network (e.g. 10.1.0.0/16)"),
                ));
            }
        }
        Ok(())
    }
}

/// A namespace's policy in force.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespacePolicy {
    pub limits: NamespaceLimits,
    /// The topics its timers may publish to.
    pub kafka_topics: KafkaTopics,
    /// What its callbacks may reach beyond what the service's guard opens.
    pub callback_allow: TargetGuard,
}

/// A `namespaces` row as read: its name and [`StoredPolicy`]'s columns.
struct PolicyRow {
    namespace: String,
    max_concurrent_calls: Option<i32>,
    max_callback_timeout_ms: Option<i32>,
    max_catch_up_per_second: Option<i32>,
    max_fires_per_second: Option<i32>,
    max_timers: Option<i32>,
    min_fire_interval_ms: Option<i32>,
    kafka_topics: Vec<String>,
    callback_allow: Vec<String>,
}

impl PolicyRow {
    fn into_policy(self) -> (String, StoredPolicy) {
        let limits = StoredLimits {
            max_concurrent_calls: self.max_concurrent_calls,
            max_callback_timeout_ms: self.max_callback_timeout_ms,
            max_catch_up_per_second: self.max_catch_up_per_second,
            max_fires_per_second: self.max_fires_per_second,
            max_timers: self.max_timers,
            min_fire_interval_ms: self.min_fire_interval_ms,
        };
        let policy =
            StoredPolicy { limits, kafka_topics: self.kafka_topics.into(), callback_allow: self.callback_allow };
        (self.namespace, policy)
    }
}

/// `sqlx::query_as!` of [`PolicyRow`]s: their columns from `namespaces`, then the string
/// literal `$after` and the statement's arguments.
macro_rules! query_policy_rows {
    ($after:tt $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            PolicyRow,
            "SELECT namespace, max_concurrent_calls, max_callback_timeout_ms, max_catch_up_per_second,
                    max_fires_per_second, max_timers, min_fire_interval_ms, kafka_topics, callback_allow
               FROM namespaces "
                + $after
            $(, $arg)*
        )
    };
}

/// The namespace's stored policy (the default when it has no row).
pub async fn get(db: impl PgExecutor<'_>, namespace: &str) -> Result<StoredPolicy, sqlx::Error> {
    let stored = query_policy_rows!("WHERE namespace = $1", namespace).fetch_optional(db).await?;
    Ok(stored.map(|row| row.into_policy().1).unwrap_or_default())
}

/// Stores the namespace's policy (checked first with [`StoredPolicy::check`]).
pub async fn put(db: impl PgExecutor<'_>, namespace: &str, policy: &StoredPolicy) -> Result<(), sqlx::Error> {
    let limits = &policy.limits;
    sqlx::query!(
        "INSERT INTO namespaces (namespace, max_concurrent_calls, max_callback_timeout_ms, max_catch_up_per_second,
                                 max_fires_per_second, max_timers, min_fire_interval_ms, kafka_topics, callback_allow)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (namespace) DO UPDATE
            SET max_concurrent_calls = EXCLUDED.max_concurrent_calls,
                max_callback_timeout_ms = EXCLUDED.max_callback_timeout_ms,
                max_catch_up_per_second = EXCLUDED.max_catch_up_per_second,
                max_fires_per_second = EXCLUDED.max_fires_per_second,
                max_timers = EXCLUDED.max_timers,
                min_fire_interval_ms = EXCLUDED.min_fire_interval_ms,
                kafka_topics = EXCLUDED.kafka_topics,
                callback_allow = EXCLUDED.callback_allow,
                updated_at = now()",
        namespace,
        limits.max_concurrent_calls,
        limits.max_callback_timeout_ms,
        limits.max_catch_up_per_second,
        limits.max_fires_per_second,
        limits.max_timers,
        limits.min_fire_interval_ms,
        &policy.kafka_topics.0,
        &policy.callback_allow
    )
    .execute(db)
    .await?;
    Ok(())
}

/// The stored policies of the namespaces with a row, by name; only those of `visible`
/// when given.
pub async fn list(db: &PgPool, visible: Option<&[String]>) -> Result<Vec<(String, StoredPolicy)>, sqlx::Error> {
    let rows = query_policy_rows!("WHERE $1::text[] IS NULL OR namespace = ANY($1) ORDER BY namespace", visible)
        .fetch_all(db)
        .await?;
    Ok(rows.into_iter().map(PolicyRow::into_policy).collect())
}

/// The policy in force of every namespace that has a row; the others have the default.
pub async fn all(db: &PgPool) -> Result<HashMap<String, NamespacePolicy>, sqlx::Error> {
    let rows = query_policy_rows!("").fetch_all(db).await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let (namespace, policy) = row.into_policy();
            (namespace, policy.effective())
        })
        .collect())
}

/// Books `count` catch-up occurrences (replayed or backfilled) of `namespace` in its
/// budget: returns when the first is due and how far apart the others are. The first is
/// due now, or when the namespace's previous catch-up ends if that is later; the others
/// follow at `max_catch_up_per_second`. Holds the namespace's row lock until the
/// transaction ends, so that concurrent requests book one after the other.
pub async fn book_catch_up(
    tx: &mut sqlx::PgConnection,
    namespace: &str,
    count: usize,
) -> Result<(DateTime<Utc>, chrono::Duration), sqlx::Error> {
    sqlx::query!("INSERT INTO namespaces (namespace) VALUES ($1) ON CONFLICT (namespace) DO NOTHING", namespace)
        .execute(&mut *tx)
        .await?;
    let booked = sqlx::query!(
        r#"WITH cur AS (
            SELECT greatest(now(), catch_up_booked_until) AS start,
                   COALESCE(max_catch_up_per_second, $3) AS rate
              FROM namespaces WHERE namespace = $1 FOR UPDATE
         )
         UPDATE namespaces n SET catch_up_booked_until = cur.start + ($2::float8 / cur.rate) * interval '1 second'
           FROM cur WHERE n.namespace = $1
         RETURNING cur.start AS "start!", cur.rate AS "rate!""#,
        namespace,
        count as f64,
        DEFAULT_MAX_CATCH_UP_PER_SECOND as i32
    )
    .fetch_one(&mut *tx)
    .await?;
    let (start, rate) = (booked.start, booked.rate);
    Ok((start, chrono::Duration::microseconds(1_000_000 / i64::from(rate.max(1)))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_values_are_the_defaults_and_out_of_range_ones_are_named() {
        assert_eq!(StoredLimits::default().effective(), NamespaceLimits::default());
        let some = StoredLimits { max_concurrent_calls: Some(5), ..Default::default() };
        assert_eq!(some.effective(), NamespaceLimits { max_concurrent_calls: 5, ..Default::default() });
        assert!(some.check().is_ok());
        let zero = StoredLimits { max_concurrent_calls: Some(0), ..some };
        assert_eq!(zero.check().unwrap_err().field, "limits.max_concurrent_calls");
        let long = StoredLimits { max_callback_timeout_ms: Some(600_001), ..some };
        assert_eq!(long.check().unwrap_err().field, "limits.max_callback_timeout_ms");
    }
}
