//! Postgres servers and brokers of a test's own, for fault tests that stop, kill or
//! restart them. Started with the same script as `make test` and `make up`.

use std::path::PathBuf;
use std::process::Command;

use crate::process::restartable_port;

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
        let server = PgServer { dir: temp_dir("pg"), port: restartable_port(), options: options.to_owned() };
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

/// A Kafka broker of its own (one KRaft node, broker and controller, started by
/// scripts/stack.sh), its log in a temporary folder; killed and deleted when dropped.
pub struct Broker {
    pub dir: PathBuf,
    pub port: u16,
    durable: bool,
}

impl Broker {
    /// `durable`: [`Broker::restart`] comes back with the log it had (what it had
    /// acknowledged survives a kill: Kafka writes to the page cache, which outlives the
    /// process). Not durable: each restart first deletes the log (as [`Broker::wipe`]), so
    /// the broker comes back empty, a new cluster without the topics, the messages, the
    /// consumer groups or their offsets: a broker that lost its disk.
    pub fn start(durable: bool) -> Broker {
        let broker = Broker { dir: temp_dir("broker"), port: restartable_port(), durable };
        broker.up();
        broker
    }

    fn up(&self) {
        let mode = if self.durable { "durable" } else { "throwaway" };
        run(&["broker-start", self.dir_arg(), &self.port.to_string(), mode]);
    }

    fn dir_arg(&self) -> &str {
        self.dir.to_str().expect("utf-8 path")
    }

    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// SIGKILL: the process is gone at once, without a controlled shutdown.
    pub fn kill(&self) {
        run(&["broker-kill", self.dir_arg()]);
    }

    /// SIGTERM: a controlled shutdown (SIGKILL if it takes longer than 10 s).
    pub fn stop(&self) {
        run(&["broker-stop", self.dir_arg()]);
    }

    /// Deletes the log of the stopped (or killed) broker: the next start is empty.
    pub fn wipe(&self) {
        run(&["broker-wipe", self.dir_arg()]);
    }

    /// Starts it again on the same ports (after [`Broker::kill`] or [`Broker::stop`]),
    /// with its log if durable, empty if not (`broker-start … throwaway` deletes it first).
    /// Returns once it accepts connections; nothing happens if it is running.
    pub fn restart(&self) {
        self.up();
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        // Not `run`: no panic while dropping, perhaps during a panic.
        let _ = Command::new("bash").arg(stack_script()).args(["broker-kill", self.dir_arg()]).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Three Kafka nodes of a test's own (each broker and controller; topics replicated 3
/// times, at least 2 in sync), started by scripts/stack.sh; stopped and deleted when
/// dropped.
pub struct Cluster {
    pub dir: PathBuf,
}

impl Cluster {
    pub fn start() -> Cluster {
        let cluster = Cluster { dir: temp_dir("cluster") };
        run(&["cluster-start", cluster.dir_arg()]);
        cluster
    }

    fn dir_arg(&self) -> &str {
        self.dir.to_str().expect("utf-8 path")
    }

    /// The bootstrap list of all three nodes.
    pub fn brokers(&self) -> String {
        std::fs::read_to_string(self.dir.join("brokers")).expect("the cluster's brokers").trim().to_owned()
    }

    /// SIGKILL to node `id` (1 to 3, its broker id too).
    pub fn kill(&self, id: i32) {
        run(&["node-kill", self.dir_arg(), &id.to_string()]);
    }

    /// Starts node `id` again with its log, as a supervisor would: at once, and again if
    /// it exits while starting (a node restarted within the controller's broker session
    /// may be refused as a duplicate registration); returns once it accepts connections.
    pub fn restart(&self, id: i32) {
        for attempt in 1..=10 {
            let started = Command::new("bash")
                .arg(stack_script())
                .args(["node-start", self.dir_arg(), &id.to_string()])
                .status()
                .expect("run scripts/stack.sh");
            if started.success() {
                return;
            }
            eprintln!("node {id} did not start (attempt {attempt}): starting it again");
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
        panic!("node {id} did not start in 10 attempts");
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash").arg(stack_script()).args(["cluster-stop", self.dir_arg()]).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
