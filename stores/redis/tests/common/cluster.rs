//! A Redis Cluster of the test's own: three primaries (and optionally one replica each) on free
//! loopback ports, each in its own temporary directory, created with `redis-cli --cluster
//! create` and killed when dropped.

use std::{
    net::TcpListener,
    process::Stdio,
    time::{Duration, Instant},
};

use sangho_webhook_redis::redis;

use super::{RedisServer, proxy::Proxy};

pub struct Cluster {
    pub nodes: Vec<RedisServer>,
    /// With [`start_behind_proxies`](Cluster::start_behind_proxies): each node's proxy, which
    /// the node announces to clients as its address.
    pub proxies: Vec<Proxy>,
}

/// A port for a cluster node: free, below the kernel's ephemeral range, with its cluster bus
/// port (the port + 10 000) free too.
fn free_node_port() -> u16 {
    for _ in 0..1000 {
        let port = fastrand::u16(20_000..30_000);
        let free = |port: u16| TcpListener::bind(("127.0.0.1", port)).is_ok();
        if free(port) && free(port + 10_000) {
            return port;
        }
    }
    panic!("no free port pair for a cluster node");
}

/// The `redis-cli` binary, from `SANGHO_TEST_REDIS_CLI` or `/usr/bin/redis-cli`.
fn redis_cli() -> String {
    std::env::var("SANGHO_TEST_REDIS_CLI").unwrap_or_else(|_| "/usr/bin/redis-cli".to_owned())
}

impl Cluster {
    /// Starts three cluster-enabled servers, joins them into one cluster that covers every
    /// slot, and waits (at most 30 s) until every node says the cluster is `ok`.
    pub async fn start() -> Self {
        Self::start_with_replicas(0).await
    }

    /// Like [`start`](Self::start), with `replicas` replicas of each primary, in sync.
    pub async fn start_with_replicas(replicas: usize) -> Self {
        Self::start_nodes(3 * (1 + replicas), replicas, false).await
    }

    /// Like [`start`](Self::start), with each node behind a [`Proxy`] of its own that it
    /// announces to clients (`cluster-announce-port`): every client connection goes through a
    /// proxy the test controls, while the nodes talk to each other directly.
    pub async fn start_behind_proxies() -> Self {
        Self::start_nodes(3, 0, true).await
    }

    async fn start_nodes(count: usize, replicas: usize, behind_proxies: bool) -> Self {
        let (mut nodes, mut proxies) = (Vec::new(), Vec::new());
        for _ in 0..count {
            let port = free_node_port();
            let bus = (port + 10_000).to_string();
            let mut args = vec![
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
                "--cluster-announce-bus-port",
                &bus,
                "--save",
                "",
                "--appendonly",
                "no",
            ];
            let announced;
            if behind_proxies {
                let proxy = Proxy::to_port(port).await;
                announced = proxy.port().to_string();
                args.extend(["--cluster-announce-port", &announced]);
                proxies.push(proxy);
            }
            let mut node = RedisServer::configure_at(port, &args);
            node.restart().await;
            nodes.push(node);
        }
        let addresses: Vec<String> = nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port()))
            .collect();
        let create = tokio::process::Command::new(redis_cli())
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(Duration::from_secs(30), create)
            .await
            .expect("redis-cli --cluster create finishes within 30 s")
            .expect("run redis-cli");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = Self { nodes, proxies };
        cluster.wait_until_ok().await;
        for replica in cluster.replicas() {
            super::wait_for_link(replica).await;
        }
        cluster
    }

    /// The nodes that are replicas (`ROLE`).
    pub fn replicas(&self) -> Vec<&RedisServer> {
        self.nodes
            .iter()
            .filter(|node| match node.command(&["ROLE"]) {
                redis::Value::Array(role) => {
                    matches!(role.first(), Some(redis::Value::BulkString(kind)) if kind == b"slave")
                }
                other => panic!("ROLE answered {other:?}"),
            })
            .collect()
    }

    async fn wait_until_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = self.nodes.iter().all(|node| {
                matches!(
                    node.command(&["CLUSTER", "INFO"]),
                    redis::Value::BulkString(info)
                        if String::from_utf8_lossy(&info).contains("cluster_state:ok")
                )
            });
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster is not ok after 30 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The URLs clients start from: the proxies' when there are, else the nodes'.
    pub fn urls(&self) -> Vec<String> {
        if self.proxies.is_empty() {
            self.nodes.iter().map(RedisServer::url).collect()
        } else {
            self.proxies.iter().map(Proxy::url).collect()
        }
    }
}
