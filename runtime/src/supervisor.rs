//! The long-lived tasks of a service under one cancellation token. A task that panics
//! cancels the token, so the whole service stops and exits with an error for its
//! supervisor to restart, instead of leaving a process that answers `/healthz` while one
//! of its loops is gone.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use punctual_shared::unpoisoned;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Which tasks panicked, with their messages.
#[derive(Debug, thiserror::Error)]
#[error("a service task panicked ({0}); the service stopped")]
pub struct Panicked(String);

pub struct Supervisor {
    tracker: TaskTracker,
    token: CancellationToken,
    panicked: Arc<Mutex<Vec<String>>>,
}

impl Supervisor {
    pub fn new(token: CancellationToken) -> Self {
        Self { tracker: TaskTracker::new(), token, panicked: Arc::default() }
    }

    /// Runs `task`; should it panic, records it and cancels the token.
    pub fn spawn(&self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        let token = self.token.clone();
        let panicked = self.panicked.clone();
        self.tracker.spawn(async move {
            if let Err(payload) = AssertUnwindSafe(task).catch_unwind().await {
                let message = panic_message(payload.as_ref());
                tracing::error!(task = name, %message, "a service task panicked: stopping the service");
                unpoisoned::lock(&panicked).push(format!("{name}: {message}"));
                token.cancel();
            }
        });
    }

    /// Waits for every task to end (they end when the token is cancelled).
    pub async fn wait(self) -> Result<(), Panicked> {
        self.tracker.close();
        self.tracker.wait().await;
        let panicked = unpoisoned::lock(&self.panicked);
        if panicked.is_empty() {
            Ok(())
        } else {
            Err(Panicked(panicked.join("; ")))
        }
    }
}

/// The message a panic was raised with (`panic!("…")` gives a `&str` or a `String`).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_task_that_panics_stops_the_others_and_is_reported() {
        let token = CancellationToken::new();
        let supervisor = Supervisor::new(token.clone());
        let waiting = token.clone();
        supervisor.spawn("loop", async move { waiting.cancelled().await });
        supervisor.spawn("planner", async { panic!("DateTime + TimeDelta overflowed") });
        let err = tokio::time::timeout(std::time::Duration::from_secs(5), supervisor.wait())
            .await
            .expect("the panic cancels the other task")
            .unwrap_err();
        assert!(token.is_cancelled());
        assert!(err.to_string().contains("planner: DateTime + TimeDelta overflowed"), "{err}");
    }

    #[tokio::test]
    async fn tasks_that_end_when_cancelled_are_fine() {
        let token = CancellationToken::new();
        let supervisor = Supervisor::new(token.clone());
        let waiting = token.clone();
        supervisor.spawn("loop", async move { waiting.cancelled().await });
        token.cancel();
        supervisor.wait().await.unwrap();
    }
}
