//! Shared by the integration tests: the test Redis URL, stores under a unique prefix that are
//! cleaned up when dropped, and a `redis-server` process of the test's own.

#![allow(dead_code)] // each test file uses a part of it

use std::{
    net::TcpListener,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use async_trait::async_trait;
use sangho_webhook::store::{Claim, ClaimToken, IdempotencyStore, StoreError};
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

/// A [`RedisStore`] on the test Redis under a unique prefix, emptied when dropped.
pub struct TestStore {
    pub store: RedisStore,
    _cleanup: PrefixCleanup,
}

impl TestStore {
    pub async fn connect() -> Self {
        let url = redis_url();
        let prefix = unique_prefix();
        let store = RedisStore::connect(url.as_str())
            .await
            .unwrap_or_else(|error| panic!("cannot connect to the test Redis at {url}: {error}"))
            .with_prefix(prefix.clone());
        Self {
            store,
            _cleanup: PrefixCleanup::new(url, prefix),
        }
    }
}

#[async_trait]
impl IdempotencyStore for TestStore {
    async fn claim(
        &self,
        event_id: &str,
        event_type: &str,
        token: &ClaimToken,
        lease: Duration,
    ) -> Result<Claim, StoreError> {
        self.store.claim(event_id, event_type, token, lease).await
    }

    async fn renew(
        &self,
        event_id: &str,
        event_type: &str,
        token: &ClaimToken,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        self.store.renew(event_id, event_type, token, lease).await
    }

    async fn complete(
        &self,
        event_id: &str,
        event_type: &str,
        token: &ClaimToken,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        self.store
            .complete(event_id, event_type, token, retention)
            .await
    }

    async fn release(&self, event_id: &str, token: &ClaimToken) -> Result<bool, StoreError> {
        self.store.release(event_id, token).await
    }
}

/// A port nothing listens on (at the time of asking).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("a bound address").port()
}

/// A `redis-server` of the test's own, without persistence, killed when dropped.
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
}

impl RedisServer {
    /// The binary, from `SANGHO_TEST_REDIS_SERVER` or `/usr/bin/redis-server`.
    fn binary() -> String {
        std::env::var("SANGHO_TEST_REDIS_SERVER")
            .unwrap_or_else(|_| "/usr/bin/redis-server".to_owned())
    }

    /// Starts a server on a free port and waits until it answers.
    pub async fn start() -> Self {
        let mut server = Self {
            port: free_port(),
            child: None,
        };
        server.restart().await;
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the server again on the same port (after [`stop`](Self::stop)) and waits until
    /// it answers.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "the server is running already");
        let child = Command::new(Self::binary())
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {}: {error}", Self::binary()));
        self.child = Some(child);
        self.wait_until_it_answers().await;
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
                panic!("redis-server on port {} exited: {status}", self.port);
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not answer within 10 s",
                self.port
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn ping(&self) -> redis::RedisResult<()> {
        let client = redis::Client::open(self.url())?;
        let mut connection = client.get_connection_with_timeout(Duration::from_millis(200))?;
        redis::cmd("PING").exec(&mut connection)
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
        self.stop();
    }
}
