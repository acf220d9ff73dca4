//! The benchmark's callback target: answers 200 at once and keeps, per Idempotency-Key,
//! the occurrence time, the first receive time and the number of calls. Leaner than the
//! test kit's sink (which keeps every request whole), because at 20,000 calls/s the
//! target shares the machine's two cores with everything it measures.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Router;
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

/// What the sink knows of one occurrence.
#[derive(Debug, Clone, Copy)]
pub struct Delivery {
    /// The occurrence time, from the Idempotency-Key, in µs since the epoch.
    pub scheduled_us: i64,
    /// When its first call arrived, in µs since the epoch.
    pub first_received_us: i64,
    pub calls: u32,
    /// The task's bucket (from the timer id in the key): its partition is the bucket modulo
    /// the tasks topic's partitions.
    pub bucket: i16,
}

impl Delivery {
    /// From the occurrence time to the first call, in µs.
    pub fn lag_us(&self) -> i64 {
        self.first_received_us - self.scheduled_us
    }
}

type Deliveries = Arc<Mutex<HashMap<Box<str>, Delivery>>>;

pub struct LagSink {
    pub addr: SocketAddr,
    deliveries: Deliveries,
    token: CancellationToken,
}

impl LagSink {
    /// Serves on a thread of its own with a single-threaded runtime: its connections are
    /// never handed between threads, which costs less per call than the harness's
    /// work-stealing runtime.
    pub async fn start() -> anyhow::Result<LagSink> {
        let deliveries = Deliveries::default();
        let router = Router::new().fallback(record).with_state(deliveries.clone());
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let token = CancellationToken::new();
        let stop = token.clone();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        std::thread::Builder::new().name("lag-sink".into()).spawn(move || {
            runtime.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
                let _ = axum::serve(listener, router).with_graceful_shutdown(stop.cancelled_owned()).await;
            });
        })?;
        Ok(LagSink { addr, deliveries, token })
    }

    pub fn url(&self) -> String {
        format!("http://{}/fire", self.addr)
    }

    /// The deliveries of the occurrences scheduled in `[from, to)`.
    pub fn deliveries_between(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<Delivery> {
        let (from, to) = (from.timestamp_micros(), to.timestamp_micros());
        self.deliveries
            .lock()
            .expect("sink lock")
            .values()
            .filter(|d| d.scheduled_us >= from && d.scheduled_us < to)
            .copied()
            .collect()
    }

    pub fn distinct(&self) -> usize {
        self.deliveries.lock().expect("sink lock").len()
    }
}

impl Drop for LagSink {
    fn drop(&mut self) {
        self.token.cancel();
    }
}

/// `<timer_id>:<RFC 3339>` → the occurrence time, in µs since the epoch.
fn scheduled_us(key: &str) -> Option<i64> {
    punctual_shared::timer::identity_scheduled_at(key).map(|t| t.timestamp_micros())
}

async fn record(State(deliveries): State<Deliveries>, headers: HeaderMap) -> StatusCode {
    let now = Utc::now().timestamp_micros();
    let Some(key) = headers.get("idempotency-key").and_then(|v| v.to_str().ok()) else {
        return StatusCode::BAD_REQUEST;
    };
    let Some(scheduled_us) = scheduled_us(key) else {
        return StatusCode::BAD_REQUEST;
    };
    let bucket = punctual_shared::timer::identity_timer_id(key).map_or(-1, punctual_shared::bucket::bucket_of);
    let mut map = deliveries.lock().expect("sink lock");
    map.entry(key.into()).and_modify(|d| d.calls += 1).or_insert(Delivery {
        scheduled_us,
        first_received_us: now,
        calls: 1,
        bucket,
    });
    StatusCode::OK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_occurrence_time_from_the_key() {
        assert_eq!(
            scheduled_us("00000000-0000-0000-0000-000000000000:2026-12-24T18:00:00.500Z"),
            Some(1_798_135_200_500_000)
        );
        assert_eq!(scheduled_us("no-time-here"), None);
    }
}
