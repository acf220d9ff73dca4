//! A callback target that accepts connections and never answers: every call to it runs
//! until its timeout.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::net::TcpListener;

/// A running black hole; its connections are closed when it is dropped.
pub struct BlackHole {
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    server: tokio::task::JoinHandle<()>,
}

impl BlackHole {
    pub async fn start() -> BlackHole {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind black hole");
        let addr = listener.local_addr().expect("black hole address");
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        let server = tokio::spawn(async move {
            // Held, never read: the request stays in the socket's buffer, unanswered.
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::Relaxed);
                held.push(socket);
            }
        });
        BlackHole { addr, accepted, server }
    }

    /// A URL on this black hole.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.server.abort();
    }
}
