//! Shared by the integration tests: the test Redis URL, stores under a unique prefix that are
//! cleaned up when dropped, `redis-server` processes of the test's own (alone, as a replica, as
//! a cluster), and a TCP proxy that can freeze its connections.

#![allow(dead_code)] // each test file uses a part of it

pub mod cluster;
pub mod deliver;
pub mod proxy;

use std::{
    net::TcpListener,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use sangho_webhook::{store::ClaimToken, testing::conformance::StoreUnderTest};
use sangho_webhook_redis::{RedisStore, redis};

/// Why the server tests are ignored by a plain `cargo test`.
pub const NEEDS_REDIS: &str = "needs Redis: run with --include-ignored; URL from SANGHO_TEST_REDIS_URL (default redis://127.0.0.1:6379)";

/// The test Redis: `SANGHO_TEST_REDIS_URL`, or the local default.
pub fn redis_url() -> String {
    std::env::var("SANGHO_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// A key prefix no other test or run uses.
pub fn unique_prefix() -> String {
    format!("sangho:test:{}:", ClaimToken::generate())
}

/// Deletes every key under its prefix when dropped (the keys would expire by themselves, but
/// the conformance checks use one-hour leases).
pub struct PrefixCleanup {
    url: String,
    prefix: String,
}

impl PrefixCleanup {
    pub fn new(url: impl Into<String>, prefix: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            prefix: prefix.into(),
        }
    }

    fn delete_all(&self) -> redis::RedisResult<()> {
        let client = redis::Client::open(self.url.as_str())?;
        let mut connection = client.get_connection_with_timeout(Duration::from_secs(1))?;
        let pattern = format!("{}*", self.prefix);
        let mut cursor = 0_u64;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query(&mut connection)?;
            if !keys.is_empty() {
                redis::cmd("DEL").arg(&keys).exec(&mut connection)?;
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }
}

impl Drop for PrefixCleanup {
    fn drop(&mut self) {
        if let Err(error) = self.delete_all() {
            eprintln!("could not clean up {}*: {error}", self.prefix);
        }
    }
}

/// A [`RedisStore`] on the test Redis under a unique prefix, for the conformance suite: the
/// prefix is emptied when the check ends.
pub async fn store_under_test() -> StoreUnderTest {
    let url = redis_url();
    let prefix = unique_prefix();
    let store = RedisStore::connect(url.as_str())
        .await
        .unwrap_or_else(|error| panic!("cannot connect to the test Redis at {url}: {error}"))
        .with_prefix(prefix.clone());
    StoreUnderTest::new(store).with_cleanup(PrefixCleanup::new(url, prefix))
}

/// A port nothing listens on (at the time of asking).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("a bound address").port()
}

/// A `redis-server` of the test's own, on its own loopback port and in its own temporary
/// directory, killed when dropped. Without persistence unless its arguments ask for it.
pub struct RedisServer {
    port: u16,
    args: Vec<String>,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl RedisServer {
    /// The binary, from `SANGHO_TEST_REDIS_SERVER` or `/usr/bin/redis-server`.
    pub fn binary() -> String {
        std::env::var("SANGHO_TEST_REDIS_SERVER")
            .unwrap_or_else(|_| "/usr/bin/redis-server".to_owned())
    }

    /// Starts a server without persistence on a free port and waits until it answers.
    pub async fn start() -> Self {
        Self::start_with(&["--save", "", "--appendonly", "no"]).await
    }

    /// Starts a server with these extra arguments (e.g. `--appendonly yes`) on a free port
    /// and waits until it answers.
    pub async fn start_with(args: &[&str]) -> Self {
        let mut server = Self::configure(args);
        server.restart().await;
        server
    }

    /// A replica of `primary` (without persistence), started and in sync.
    pub async fn start_replica_of(primary: &RedisServer) -> Self {
        Self::start_replica_of_port(primary.port()).await
    }

    /// A replica of the server (or the proxy) on `port`, started and in sync.
    pub async fn start_replica_of_port(port: u16) -> Self {
        let port = port.to_string();
        let replica = Self::start_with(&[
            "--save",
            "",
            "--appendonly",
            "no",
            "--replicaof",
            "127.0.0.1",
            &port,
        ])
        .await;
        wait_for_link(&replica).await;
        replica
    }

    /// A server that is not started yet.
    pub fn configure(args: &[&str]) -> Self {
        Self::configure_at(free_port(), args)
    }

    /// A server on `port` that is not started yet.
    pub fn configure_at(port: u16, args: &[&str]) -> Self {
        Self {
            port,
            args: args.iter().map(|arg| (*arg).to_owned()).collect(),
            dir: tempfile::Builder::new()
                .prefix("sangho-redis-")
                .tempdir()
                .expect("a temporary directory"),
            child: None,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the server (again, after [`stop`](Self::stop)) on its port and in its directory,
    /// and waits until it answers.
    pub async fn restart(&mut self) {
        self.spawn();
        self.wait_until_it_answers().await;
    }

    /// Starts the server process without waiting for it.
    pub fn spawn(&mut self) {
        assert!(self.child.is_none(), "the server is running already");
        let child = Command::new(Self::binary())
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--daemonize", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(["--logfile", "redis.log"])
            // A replica's first sync starts at once instead of after Redis's default 5 s delay
            // (diskless sync waits for more replicas to join).
            .args(["--repl-diskless-sync-delay", "0"])
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {}: {error}", Self::binary()));
        self.child = Some(child);
    }

    async fn wait_until_it_answers(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if self.ping().is_ok() {
                return;
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!(
                    "redis-server on port {} exited: {status}; its log: {}",
                    self.port,
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not answer within 10 s",
                self.port
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The server's log file.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }

    fn ping(&self) -> redis::RedisResult<()> {
        let mut connection = self.sync_connection()?;
        redis::cmd("PING").exec(&mut connection)
    }

    /// A plain blocking connection to the server, for the test's own commands.
    pub fn sync_connection(&self) -> redis::RedisResult<redis::Connection> {
        let client = redis::Client::open(self.url())?;
        let connection = client.get_connection_with_timeout(Duration::from_millis(500))?;
        connection.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(connection)
    }

    /// Runs one command on the server (from the test), e.g. `["REPLICAOF", "NO", "ONE"]`.
    pub fn command(&self, args: &[&str]) -> redis::Value {
        let mut connection = self
            .sync_connection()
            .unwrap_or_else(|error| panic!("cannot reach port {}: {error}", self.port));
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query(&mut connection)
            .unwrap_or_else(|error| panic!("{args:?} on port {}: {error}", self.port))
    }

    /// The value of `key`, read on this server.
    pub fn get(&self, key: &str) -> Option<String> {
        let mut connection = self.sync_connection().expect("the server answers");
        redis::cmd("GET")
            .arg(key)
            .query(&mut connection)
            .expect("GET")
    }

    /// Freezes the server (SIGSTOP): connections stay open and the kernel still accepts new
    /// ones, but nothing answers, as with a hung server or a silent network.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Thaws a server frozen by [`pause`](Self::pause) (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("the server is running");
        let status = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} failed");
    }

    /// Kills the server (SIGKILL: an abrupt crash) and waits for it to be gone.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop(); // SIGKILL ends a paused server too
    }
}

pub fn info_replication(server: &RedisServer) -> String {
    match server.command(&["INFO", "replication"]) {
        redis::Value::BulkString(info) => String::from_utf8_lossy(&info).into_owned(),
        redis::Value::VerbatimString { text, .. } => text,
        other => panic!("INFO replication answered {other:?}"),
    }
}

/// Waits (at most 30 s, for a loaded machine) until `replica` is in sync with its primary, on
/// both sides: the replica's link is up, and its primary has its acknowledgement. After a
/// diskless sync the primary streams writes to the replica only once its first `REPLCONF ACK`
/// has come (sent once a second), and until then a `WAIT` counts no replica, although `INFO`
/// already calls it online; so this writes a short-lived key on the primary and `WAIT`s for it.
pub async fn wait_for_link(replica: &RedisServer) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info = info_replication(replica);
        if info.contains("master_link_status:up")
            && let Some(primary) = info
                .lines()
                .find_map(|line| line.strip_prefix("master_port:"))
            && acknowledges(primary.trim())
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the replica did not sync in 30 s; its log: {}",
            replica.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether a replica of the server (or proxy) on `port` acknowledges a write within 200 ms.
///
/// The write is a key that expires in a second. It must be a write that the replication stream
/// carries: a `PUBLISH` is not one on a cluster (it travels over the cluster bus), and a `WAIT`
/// after it counted every replica at once, even one that had not acknowledged anything yet. A
/// cluster node refuses (`MOVED`) the keys of other nodes' slots, so this tries names until one
/// is its own.
fn acknowledges(port: &str) -> bool {
    let Ok(mut connection) = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .and_then(|client| client.get_connection_with_timeout(Duration::from_millis(500)))
    else {
        return false;
    };
    if connection
        .set_read_timeout(Some(Duration::from_secs(5)))
        .is_err()
    {
        return false;
    }
    let written = (0..64).any(|n| {
        redis::cmd("SET")
            .arg(format!("sangho-test:link:{n}"))
            .arg("")
            .arg("PX")
            .arg(1000)
            .query::<()>(&mut connection)
            .is_ok()
    });
    written
        && redis::cmd("WAIT")
            .arg(1)
            .arg(200)
            .query::<i64>(&mut connection)
            .is_ok_and(|replicas| replicas >= 1)
}
