//! Postgres servers and brokers of a test's own, for fault tests that stop, kill or
//! restart them. Started with the same script as `make test` and `make up`.

use std::path::PathBuf;
use std::process::Command;

use crate::process::free_port;

fn stack_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/stack.sh")
}

fn run(args: &[&str]) {
    run_with(args, &[]);
}

fn run_with(args: &[&str], envs: &[(&str, &str)]) {
    let status = Command::new("bash")
        .arg(stack_script())
        .args(args)
        .envs(envs.iter().copied())
        .status()
        .expect("run scripts/stack.sh");
    assert!(status.success(), "scripts/stack.sh {args:?} failed");
}

fn temp_dir(prefix: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(crate::unique_name(prefix));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A Postgres server of its own; stopped when dropped.
pub struct PgServer {
    pub dir: PathBuf,
    pub port: u16,
    /// Server settings (`-c name=value …`), as scripts/stack.sh takes them in PG_EXTRA_OPTS.
    options: String,
}

impl PgServer {
    pub fn start() -> PgServer {
        Self::start_with_options(&std::env::var("PG_EXTRA_OPTS").unwrap_or_default())
    }

    /// With server settings of its own, e.g. `-c shared_buffers=1GB`.
    pub fn start_with_options(options: &str) -> PgServer {
        let server = PgServer { dir: temp_dir("pg"), port: free_port(), options: options.to_owned() };
        server.up();
        server
    }

    fn up(&self) {
        run_with(
            &["pg-start", self.dir.to_str().expect("utf-8 path"), &self.port.to_string()],
            &[("PG_EXTRA_OPTS", &self.options)],
        );
    }

    /// The server URL (no database), as `PUNCTUAL_TEST_DATABASE_URL` has it.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}", self.port)
    }

    /// Stops the server (fast shutdown: connections are cut).
    pub fn stop(&self) {
        run(&["pg-stop", self.dir.to_str().expect("utf-8 path")]);
    }

    pub fn restart(&self) {
        self.stop();
        self.up();
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        run(&["pg-purge", self.dir.to_str().expect("utf-8 path")]);
    }
}

/// A broker of its own, with durable (sqlite) or memory storage; killed when dropped.
pub struct Broker {
    pub dir: PathBuf,
    pub port: u16,
    storage: &'static str,
}

impl Broker {
    pub fn start(durable: bool) -> Broker {
        let broker =
            Broker { dir: temp_dir("broker"), port: free_port(), storage: if durable { "sqlite" } else { "memory" } };
        broker.up();
        broker
    }

    fn up(&self) {
        run(&["broker-start", self.dir.to_str().expect("utf-8 path"), &self.port.to_string(), self.storage]);
    }

    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// SIGKILL: whatever it had not made durable is gone.
    pub fn kill(&self) {
        if let Ok(pid) = std::fs::read_to_string(self.dir.join("broker.pid")) {
            let _ = Command::new("kill").args(["-KILL", pid.trim()]).status();
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        let _ = std::fs::remove_file(self.dir.join("broker.pid"));
    }

    pub fn restart(&self) {
        self.up();
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
