//! Scanner settings: environment variables with documented defaults (see docs/configuration.md).

use std::net::SocketAddr;
use std::time::Duration;

use punctual_shared::config::{DatabaseConfig, KafkaConfig};

/// `PUNCTUAL_PUBLISH_LEAD_MS` unless set (the bench's broker baseline uses its producer).
pub const DEFAULT_PUBLISH_LEAD_MS: u64 = 200;

#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "punctual-scanner",
    about = "Plans timer occurrences, claims due tasks and publishes each at its fire time"
)]
pub struct ScannerConfig {
    #[command(flatten)]
    pub database: DatabaseConfig,
    #[command(flatten)]
    pub kafka: KafkaConfig,
    /// Address of the health and metrics endpoints.
    #[arg(long, env = "PUNCTUAL_SCANNER_ADDR", default_value = "127.0.0.1:8081")]
    pub addr: SocketAddr,
    /// Name this scanner holds buckets and claims tasks under; must differ between scanners
    /// and stay the same across restarts (default: `<host name>:<ops port>`), so that a
    /// scanner restarted at once takes its buckets back at once.
    #[arg(long, env = "PUNCTUAL_SCANNER_ID")]
    pub scanner_id: Option<String>,
    /// How often the scanner plans and claims, when no notification wakes it earlier.
    #[arg(long, env = "PUNCTUAL_SCAN_INTERVAL_MS", default_value_t = 200)]
    pub scan_interval_ms: u64,
    /// While scans find nothing to plan or claim, the interval doubles up to this (and to at
    /// most half of what the lookahead leaves before the publish lead, and half the plan
    /// horizon, so that what a scan claims or plans is still ahead of its time). A timer
    /// written, a task made pending (a retry, a deferral, a replay) and buckets acquired wake
    /// the scanner at once; what else it finds (a plan running out, a claim expiring, a
    /// misfire) it finds up to this late. Equal to `PUNCTUAL_SCAN_INTERVAL_MS`: no backoff.
    #[arg(long, env = "PUNCTUAL_SCAN_IDLE_INTERVAL_MS", default_value_t = 2_000)]
    pub scan_idle_interval_ms: u64,
    /// Occurrences are planned into task rows this far ahead (timers are re-planned when
    /// their planned horizon is nearer than this, up to twice this ahead). Occurrences
    /// planned within the lookahead are written claimed, so with a horizon of at most half
    /// the lookahead (the default) no occurrence needs a separate claim. Each re-plan
    /// rewrites the timer's row (a non-HOT update: `next_plan_at` is indexed), so a timer
    /// firing every second costs one timer write per 10 occurrences at 10 s, and one per 5
    /// at 5 s (docs/bench/history.md, item 17).
    #[arg(long, env = "PUNCTUAL_PLAN_HORIZON_MS", default_value_t = 10_000)]
    pub plan_horizon_ms: u64,
    /// Tasks due within this window are claimed (or planned claimed) and held in memory
    /// until they fire: about 150 bytes each, so 20 s at 20,000 fires/s is 60 MB.
    #[arg(long, env = "PUNCTUAL_LOOKAHEAD_MS", default_value_t = 20_000)]
    pub lookahead_ms: u64,
    /// Tasks are published this long before they are due, so that the message's way to an
    /// executor, and the executor's start, are over when the task is due; the executor holds
    /// it until then. The lag this hides is the producer's batching (half the lead, at most
    /// 100 ms), the broker, the consumer's fetch and the start statement (tens of
    /// milliseconds, more under load); a task sent later than its lead (a timer triggered
    /// now, a replay) goes by a producer that batches for 5 ms at most. A timer paused or
    /// changed within this long before an occurrence may still fire it. At most 10,000 (an
    /// executor runs nothing published earlier) and half the lookahead.
    #[arg(long, env = "PUNCTUAL_PUBLISH_LEAD_MS", default_value_t = DEFAULT_PUBLISH_LEAD_MS)]
    pub publish_lead_ms: u64,
    /// A claim expires this long after its task is due (after the claim, for a task claimed
    /// when already due), unless its task has started; the task is then claimed and published
    /// again (its scanner died or froze, or its message was lost). An executor starts a
    /// callback without a write while the claim outlives the callback's timeout by 2 s, so
    /// with the defaults a task may wait 18 s past its due time (an executor far behind)
    /// before its start costs a write. Must exceed `PUNCTUAL_LOOKAHEAD_MS` by more than
    /// 1,000.
    #[arg(long, env = "PUNCTUAL_LEASE_MS", default_value_t = 30_000)]
    pub lease_ms: u64,
    /// Most tasks claimed by one statement.
    #[arg(long, env = "PUNCTUAL_CLAIM_BATCH", default_value_t = 5_000)]
    pub claim_batch: i64,
    /// Most tasks held in memory; claiming pauses above it.
    #[arg(long, env = "PUNCTUAL_MAX_HELD", default_value_t = 2_000_000)]
    pub max_held: usize,
    /// A scanner holds its buckets for this long after its last heartbeat: a scanner that
    /// died or froze loses them this long after its last renewal, and the others then take
    /// them over (at their next heartbeat) and claim their tasks again at once.
    #[arg(long, env = "PUNCTUAL_BUCKET_LEASE_MS", default_value_t = 3_000)]
    pub bucket_lease_ms: u64,
    /// How often a scanner renews its membership (one row write), and hands over or
    /// acquires buckets towards its fair share of the live scanners. At most half of
    /// `PUNCTUAL_BUCKET_LEASE_MS`.
    #[arg(long, env = "PUNCTUAL_BUCKET_HEARTBEAT_MS", default_value_t = 1_000)]
    pub bucket_heartbeat_ms: u64,
    /// Finished occurrences (succeeded, dead, cancelled) are deleted, with their attempts,
    /// this many days after they finished; 0 keeps them forever. The scanner holding
    /// bucket 0 does it, in short batches.
    #[arg(long, env = "PUNCTUAL_RETENTION_DAYS", default_value_t = 7)]
    pub retention_days: u32,
    /// How often the retention pass runs.
    #[arg(long, env = "PUNCTUAL_RETENTION_INTERVAL_MS", default_value_t = 600_000)]
    pub retention_interval_ms: u64,
    /// Occurrences missed by more than this (system down or behind) are judged by their
    /// timer's misfire policy (`skip`, `fire_once`, `fire_all`) instead of fired late.
    #[arg(long, env = "PUNCTUAL_MISFIRE_THRESHOLD_MS", default_value_t = 60_000)]
    pub misfire_threshold_ms: u64,
}

impl ScannerConfig {
    pub fn scan_interval(&self) -> Duration {
        Duration::from_millis(self.scan_interval_ms)
    }
    /// The longest wait between scans that find nothing: a scan further apart would claim
    /// what it finds within the lookahead too late to publish it ahead of its time, or
    /// plan too late. With the defaults, the setting's 2 s.
    pub fn scan_idle_interval(&self) -> Duration {
        let ahead = self.lookahead_ms.saturating_sub(self.publish_lead_ms) / 2;
        Duration::from_millis(self.scan_idle_interval_ms.min(ahead).min(self.plan_horizon_ms / 2))
    }
    pub fn lookahead(&self) -> Duration {
        Duration::from_millis(self.lookahead_ms)
    }
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }
    pub fn bucket_lease(&self) -> Duration {
        Duration::from_millis(self.bucket_lease_ms)
    }
    pub fn bucket_heartbeat(&self) -> Duration {
        Duration::from_millis(self.bucket_heartbeat_ms)
    }

    /// Cross-field rules, checked at start-up.
    pub fn check(&self) -> Result<(), String> {
        if self.lease_ms <= self.lookahead_ms + 1_000 {
            return Err(format!(
                "PUNCTUAL_LEASE_MS ({}) must exceed PUNCTUAL_LOOKAHEAD_MS ({}) by more than 1000: a claim must outlive the wait for its fire time",
                self.lease_ms, self.lookahead_ms
            ));
        }
        let max_lead = punctual_shared::task::MAX_PUBLISH_LEAD.as_millis() as u64;
        if self.publish_lead_ms > max_lead {
            return Err(format!(
                "PUNCTUAL_PUBLISH_LEAD_MS ({}) must be at most {max_lead}: executors run nothing published earlier",
                self.publish_lead_ms
            ));
        }
        if self.publish_lead_ms * 2 > self.lookahead_ms {
            return Err(format!(
                "PUNCTUAL_PUBLISH_LEAD_MS ({}) must be at most half of PUNCTUAL_LOOKAHEAD_MS ({})",
                self.publish_lead_ms, self.lookahead_ms
            ));
        }
        if self.bucket_heartbeat_ms == 0 || self.bucket_heartbeat_ms * 2 > self.bucket_lease_ms {
            return Err(format!(
                "PUNCTUAL_BUCKET_HEARTBEAT_MS ({}) must be positive and at most half of PUNCTUAL_BUCKET_LEASE_MS ({})",
                self.bucket_heartbeat_ms, self.bucket_lease_ms
            ));
        }
        if self.claim_batch < 1 || self.scan_interval_ms == 0 {
            return Err("PUNCTUAL_CLAIM_BATCH and PUNCTUAL_SCAN_INTERVAL_MS must be positive".into());
        }
        if self.scan_idle_interval_ms < self.scan_interval_ms {
            return Err(format!(
                "PUNCTUAL_SCAN_IDLE_INTERVAL_MS ({}) must be at least PUNCTUAL_SCAN_INTERVAL_MS ({})",
                self.scan_idle_interval_ms, self.scan_interval_ms
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn parse(args: &[&str]) -> Result<ScannerConfig, clap::Error> {
        ScannerConfig::try_parse_from(std::iter::once("punctual-scanner").chain(args.iter().copied()))
    }

    #[test]
    fn the_defaults_pass_and_a_lead_beyond_half_the_lookahead_is_refused() {
        assert_eq!(parse(&[]).unwrap().check(), Ok(()));
        let error = parse(&["--publish-lead-ms", "11000"]).unwrap().check().unwrap_err();
        assert!(error.contains("PUNCTUAL_PUBLISH_LEAD_MS"), "{error}");
        let error =
            parse(&["--publish-lead-ms", "10001", "--lookahead-ms", "60000", "--lease-ms", "90000"]).unwrap().check();
        assert!(error.unwrap_err().contains("at most 10000"));
        let error = parse(&["--lease-ms", "20500"]).unwrap().check().unwrap_err();
        assert!(error.contains("PUNCTUAL_LEASE_MS"), "{error}");
        let error = parse(&["--bucket-heartbeat-ms", "2000"]).unwrap().check().unwrap_err();
        assert!(error.contains("PUNCTUAL_BUCKET_HEARTBEAT_MS"), "{error}");
        let error = parse(&["--scan-idle-interval-ms", "100"]).unwrap().check().unwrap_err();
        assert!(error.contains("PUNCTUAL_SCAN_IDLE_INTERVAL_MS"), "{error}");
    }

    #[test]
    fn a_scan_after_idle_ones_comes_within_half_the_lookahead_and_half_the_horizon() {
        let idle = |args: &[&str]| parse(args).unwrap().scan_idle_interval().as_millis();
        assert_eq!(idle(&[]), 2_000);
        // A lookahead of 1.5 s, publishing 200 ms ahead: a scan within 650 ms of the last.
        assert_eq!(idle(&["--lookahead-ms", "1500", "--lease-ms", "4000"]), 650);
        assert_eq!(idle(&["--plan-horizon-ms", "1000"]), 500);
        assert_eq!(idle(&["--scan-idle-interval-ms", "60000"]), 5_000);
    }

    #[test]
    fn kafka_options_must_be_key_value_pairs() {
        let options = parse(&["--kafka-options", "linger.ms=2;acks=all"]).unwrap().kafka.kafka_options;
        assert_eq!(options.0.len(), 2);
        let error = parse(&["--kafka-options", "linger.ms"]).unwrap_err().to_string();
        assert!(error.contains("key=value") && error.contains("linger.ms"), "{error}");
    }
}
