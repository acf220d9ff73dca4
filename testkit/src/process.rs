//! Services as separate processes, for end-to-end and fault tests.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The folder of the workspace's binaries: `PUNCTUAL_BIN_DIR`, else the profile folder
/// the running binary was built into (a test binary lives in target/<profile>/deps, a
/// binary such as the benchmark harness in target/<profile>).
pub fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("PUNCTUAL_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().expect("the binary's folder");
    if dir.ends_with("deps") {
        dir.parent().expect("target/<profile>").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// A free TCP port on 127.0.0.1 for a service to listen on: chosen at random below the
/// kernel's ephemeral range (and above the restartable servers' range) and bound once to
/// check it is free. A port from the ephemeral
/// range (what binding port 0 gives) can be taken, before the service binds it, as the
/// local port of any outgoing connection, and with many tests at once it was: a scanner
/// failed to bind, and another process's /healthz answered on its port.
pub fn free_port() -> u16 {
    let ephemeral_from = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    port_in(RESTARTABLE.end, ephemeral_from.max(RESTARTABLE.end + 1))
}

/// Ports kept for servers that tests kill and start again on the same port (brokers,
/// Postgres): no other server of the suite listens there, so none can take the port while
/// its server is down. scripts/stack.sh keeps the same range.
const RESTARTABLE: std::ops::Range<u16> = 10_000..12_000;

/// A free port for a server that a test may kill and start again on it.
pub fn restartable_port() -> u16 {
    port_in(RESTARTABLE.start, RESTARTABLE.end)
}

/// Ports this process has handed out: a port is free until its server binds it, so a
/// second service started before the first has bound could be given the same one (an
/// executor was, and failed to bind, while the admin on it answered its /healthz).
static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());

fn port_in(low: u16, high: u16) -> u16 {
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    for _ in 0..200 {
        let random = u16::from_le_bytes(uuid::Uuid::new_v4().as_bytes()[..2].try_into().expect("two bytes"));
        let port = low + random % (high - low);
        if !handed_out.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.push(port);
            return port;
        }
    }
    panic!("no free port in {low}..{high}");
}

/// A running service process: killed when dropped. Its output goes to
/// `target/test-logs/<name>.log`.
pub struct ServiceProcess {
    pub name: String,
    pub port: u16,
    pub log: PathBuf,
    binary: PathBuf,
    envs: Vec<(String, String)>,
    child: Option<Child>,
}

impl ServiceProcess {
    /// Starts `binary` (e.g. "punctual-scanner") with `envs`; `port_var` receives the
    /// address of its HTTP endpoint, on a free port.
    pub fn start(binary: &str, name: &str, port_var: &str, envs: &[(&str, String)]) -> ServiceProcess {
        let port = free_port();
        let mut envs: Vec<(String, String)> = envs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        envs.push((port_var.to_owned(), format!("127.0.0.1:{port}")));
        let logs = bin_dir().join("test-logs");
        std::fs::create_dir_all(&logs).expect("log folder");
        let mut p = ServiceProcess {
            name: name.to_owned(),
            port,
            log: logs.join(format!("{name}.log")),
            binary: bin_dir().join(binary),
            envs,
            child: None,
        };
        p.restart();
        p
    }

    /// Starts the process again (after `kill`), with the same settings.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "{} is running", self.name);
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).expect("open log");
        let child = Command::new(&self.binary)
            // The log level, unless the settings given name one.
            .env("RUST_LOG", std::env::var("PUNCTUAL_TEST_SERVICE_LOG").unwrap_or_else(|_| "info".into()))
            .envs(self.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("starting {}: {e} (run `cargo build --workspace --bins` first)", self.binary.display())
            });
        self.child = Some(child);
    }

    /// Changes a setting for the next start, as an operator changes a service's
    /// environment before restarting it.
    pub fn set_env(&mut self, name: &str, value: &str) {
        self.envs.retain(|(k, _)| k != name);
        self.envs.push((name.to_owned(), value.to_owned()));
    }

    /// How the process exited, if it has (without starting it again).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        Some(status)
    }

    /// Whether this is an instance of `binary` (e.g. "punctual-executor").
    pub fn is(&self, binary: &str) -> bool {
        self.binary.file_name().is_some_and(|name| name == binary)
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{}", self.port, path)
    }

    /// Waits until `GET /healthz` answers.
    pub async fn wait_healthy(&mut self, timeout: Duration) {
        let client = reqwest::Client::new();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Ok(r) = client.get(self.url("/healthz")).send().await {
                if r.status().is_success() {
                    return;
                }
            }
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!("{} exited with {status}; log: {}\n{}", self.name, self.log.display(), self.log_tail());
                }
            }
            if tokio::time::Instant::now() >= deadline {
                panic!("{} not healthy after {timeout:?}; log:\n{}", self.name, self.log_tail());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Panics, with its log, if the process has exited (a healthy answer on its port came
    /// from another process, say).
    pub fn assert_running(&mut self) {
        if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
            panic!("{} exited with {status}; log: {}\n{}", self.name, self.log.display(), self.log_tail());
        }
    }

    /// The last lines of the service's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// SIGSTOP: the process freezes (as in a long pause of its host), holding what it holds.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT after `freeze`.
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill").arg(sig).arg(child.id().to_string()).status();
        }
    }

    /// If the process has exited on its own (crashed), starts it again, as a supervisor
    /// would (systemd's `Restart=`, Compose's restart policy); returns how it exited.
    pub fn restart_if_exited(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        if let Ok(mut log) = std::fs::OpenOptions::new().append(true).open(&self.log) {
            use std::io::Write;
            let _ = writeln!(log, "--- the test's supervisor: exited ({status}); starting it again ---");
        }
        self.restart();
        Some(status)
    }

    /// SIGKILL, no chance to clean up.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then waits for a graceful exit; returns whether it exited successfully.
    pub fn stop(&mut self, timeout: Duration) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
