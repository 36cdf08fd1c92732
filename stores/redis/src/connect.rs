//! Connecting: [`ConnectOptions`], the `maxmemory-policy` check, and [`ConnectError`].

use redis::{
    Client, ErrorKind, IntoConnectionInfo, RedisError, Value,
    aio::{ConnectionLike, ConnectionManagerConfig},
};

use crate::{HealingConnection, RedisStore};

/// How [`RedisStore::connect`] connects: the connection manager's configuration, and whether
/// a server that may evict keys is accepted.
///
/// ```no_run
/// use sangho_webhook_redis::RedisStore;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), sangho_webhook_redis::ConnectError> {
/// let store = RedisStore::options()
///     .manager_config(
///         RedisStore::manager_config().set_response_timeout(Some(Duration::from_millis(500))),
///     )
///     .connect("redis://127.0.0.1:6379")
///     .await?;
/// # let _ = store;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
#[must_use]
pub struct ConnectOptions {
    manager: ConnectionManagerConfig,
    allow_evicting_policy: bool,
}

impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("allow_evicting_policy", &self.allow_evicting_policy)
            .finish_non_exhaustive()
    }
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            manager: RedisStore::manager_config(),
            allow_evicting_policy: false,
        }
    }
}

impl ConnectOptions {
    /// Connects with this connection manager configuration instead of
    /// [`RedisStore::manager_config`] (start from it, to keep bounded timeouts). On Redis
    /// Cluster, its connection and response timeouts apply to every node.
    pub fn manager_config(mut self, config: ConnectionManagerConfig) -> Self {
        self.manager = config;
        self
    }

    /// Accepts a server whose `maxmemory-policy` evicts keys (`allkeys-*`, `volatile-*`),
    /// with a warning at connect, instead of refusing it.
    ///
    /// Every key this store writes has a time to live, so under memory pressure such a server
    /// may evict an in-flight claim (a concurrent delivery then runs the handler a second
    /// time) or a completed event (a redelivery is processed again). Accept it only when the
    /// server never reaches its `maxmemory`, or when doubles are acceptable.
    pub fn allow_evicting_policy(mut self) -> Self {
        self.allow_evicting_policy = true;
        self
    }

    /// Connects to the Redis at `url` (e.g. `redis://127.0.0.1:6379`,
    /// `redis://:password@host:6379/2`, `rediss://…`) over a [`HealingConnection`], and checks
    /// its `maxmemory-policy` (see [`RedisStore::check_memory_policy`]).
    ///
    /// For TLS (`rediss://`), enable one of the `redis` crate's TLS features in your own
    /// `Cargo.toml` (e.g. `redis = { version = "1", features = ["tokio-rustls-comp"] }`):
    /// features unify, and this store uses the same `redis`.
    ///
    /// Fails when the URL is invalid, when the server cannot be reached now (after the
    /// configuration's bounded retries, a few seconds at most), or when it evicts keys and
    /// that was not [allowed](Self::allow_evicting_policy).
    pub async fn connect(self, url: impl IntoConnectionInfo) -> Result<RedisStore, ConnectError> {
        let client = Client::open(url)?;
        let connection = HealingConnection::new(client, self.manager.clone()).await?;
        let store = RedisStore::new(connection);
        self.check(&store).await?;
        Ok(store)
    }

    /// Connects to the Redis Cluster that `nodes` belong to (one reachable node is enough;
    /// the others are discovered) over a [`HealingConnection`], with this configuration's
    /// connection and response timeouts, and checks the `maxmemory-policy` of every primary.
    ///
    /// The cluster connection follows slot migrations and failovers by itself (`MOVED`,
    /// `ASK`, and a refresh of the slot map after connection errors); the
    /// [`HealingConnection`] around it builds it again after a response timeout (a
    /// half-open connection to a node).
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub async fn connect_cluster<T: IntoConnectionInfo>(
        self,
        nodes: impl IntoIterator<Item = T>,
    ) -> Result<RedisStore<HealingConnection<redis::cluster_async::ClusterConnection>>, ConnectError>
    {
        let mut config = redis::cluster::ClusterConfig::new();
        let mut builder = redis::cluster::ClusterClientBuilder::new(nodes);
        if let Some(timeout) = self.manager.connection_timeout() {
            config = config.set_connection_timeout(timeout);
        }
        if let Some(timeout) = self.manager.response_timeout() {
            config = config.set_response_timeout(timeout);
            // The cluster connection retries a timed-out command on the same connection, up to
            // 16 times: bound the whole request, so that a half-open connection fails (and is
            // replaced) within two response timeouts.
            builder = builder.overall_response_timeout(Some(timeout * 2));
        }
        let client = builder.build()?;
        let connection = HealingConnection::cluster(client, config).await?;
        let every_primary = redis::cluster_routing::RoutingInfo::MultiNode((
            redis::cluster_routing::MultipleNodeRoutingInfo::AllMasters,
            None,
        ));
        let answer = connection
            .current()
            .route_command(config_get_memory_policy(), every_primary)
            .await;
        self.judge(judge_memory_policy(answer))?;
        Ok(RedisStore::new(connection))
    }

    async fn check<C>(&self, store: &RedisStore<C>) -> Result<(), ConnectError>
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        self.judge(store.check_memory_policy().await)
    }

    fn judge(&self, verdict: Result<(), ConnectError>) -> Result<(), ConnectError> {
        match verdict {
            Err(ConnectError::EvictingPolicy { policy }) if self.allow_evicting_policy => {
                tracing::warn!(
                    %policy,
                    "redis: maxmemory-policy {policy} may evict claims and completed events \
                     under memory pressure, and so process an event twice (accepted by \
                     allow_evicting_policy)"
                );
                Ok(())
            }
            other => other,
        }
    }
}

/// Connecting to Redis failed, or the server is unfit for exactly-once processing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The URL is invalid, or the server could not be reached or answered an error.
    #[error("cannot connect to Redis")]
    Redis(#[from] RedisError),
    /// The server's `maxmemory-policy` evicts keys with a time to live, and every key of this
    /// store has one: under memory pressure a claim or a completed event could vanish, and an
    /// event be processed twice. Set `maxmemory-policy noeviction` (the server then refuses
    /// writes when full, and the layer answers 503 until there is room), or accept the risk
    /// with [`ConnectOptions::allow_evicting_policy`].
    #[error(
        "Redis maxmemory-policy is {policy}: it may evict claims and completed events, and \
         events would then be processed twice; set maxmemory-policy noeviction, or accept the \
         risk with ConnectOptions::allow_evicting_policy"
    )]
    EvictingPolicy {
        /// The server's policy, e.g. `allkeys-lru`.
        policy: String,
    },
}

impl ConnectError {
    /// The Redis error, if that is what failed.
    pub fn redis_error(&self) -> Option<&RedisError> {
        match self {
            Self::Redis(error) => Some(error),
            Self::EvictingPolicy { .. } => None,
        }
    }
}

/// `CONFIG GET maxmemory-policy`.
pub(crate) fn config_get_memory_policy() -> redis::Cmd {
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET").arg("maxmemory-policy");
    cmd
}

/// The verdict on a `CONFIG GET maxmemory-policy` answer: an evicting policy is an error; a
/// server that refuses `CONFIG` (renamed or disabled command, ACL) is accepted with a warning.
pub(crate) fn judge_memory_policy(answer: Result<Value, RedisError>) -> Result<(), ConnectError> {
    match answer {
        Ok(answer) => {
            let found = policies(&answer);
            if let Some(policy) = found.iter().find(|policy| evicts(policy)) {
                return Err(ConnectError::EvictingPolicy {
                    policy: policy.clone(),
                });
            }
            if found.is_empty() {
                tracing::warn!(
                    "redis: CONFIG GET maxmemory-policy answered no policy; make sure the \
                     server does not evict keys (maxmemory-policy noeviction)"
                );
            }
            Ok(())
        }
        Err(error) if config_refused(&error) => {
            tracing::warn!(
                %error,
                "redis: cannot read maxmemory-policy (CONFIG is disabled for this client); \
                 make sure the server does not evict keys (maxmemory-policy noeviction)"
            );
            Ok(())
        }
        Err(error) => Err(error.into()),
    }
}

/// Whether `policy` lets the server evict keys.
pub(crate) fn evicts(policy: &str) -> bool {
    policy.starts_with("allkeys-") || policy.starts_with("volatile-")
}

/// Every string in `value` (a `CONFIG GET` answer, or a map of them per node).
fn strings(value: &Value, into: &mut Vec<String>) {
    match value {
        Value::BulkString(bytes) => into.push(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => into.push(text.clone()),
        Value::Array(values) | Value::Set(values) => {
            values.iter().for_each(|value| strings(value, into));
        }
        Value::Map(pairs) => pairs.iter().for_each(|(key, value)| {
            strings(key, into);
            strings(value, into);
        }),
        _ => {}
    }
}

/// The policies named in a `CONFIG GET maxmemory-policy` answer.
pub(crate) fn policies(answer: &Value) -> Vec<String> {
    let mut found = Vec::new();
    strings(answer, &mut found);
    found.retain(|text| text == "noeviction" || evicts(text));
    found
}

/// Whether `error` means that the server does not let this client run `CONFIG GET` (renamed
/// or disabled command, ACL), as opposed to a failed connection.
pub(crate) fn config_refused(error: &RedisError) -> bool {
    matches!(error.kind(), ErrorKind::Server(_) | ErrorKind::Extension)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_allkeys_and_volatile_policies_evict() {
        for policy in [
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
        ] {
            assert!(evicts(policy), "{policy}");
        }
        assert!(!evicts("noeviction"));
    }

    #[test]
    fn policies_are_read_from_one_server_or_a_map_of_nodes() {
        let one = Value::Array(vec![
            Value::BulkString(b"maxmemory-policy".to_vec()),
            Value::BulkString(b"noeviction".to_vec()),
        ]);
        assert_eq!(policies(&one), ["noeviction"]);
        let nodes = Value::Map(vec![
            (Value::SimpleString("127.0.0.1:7000".into()), one),
            (
                Value::SimpleString("127.0.0.1:7001".into()),
                Value::Map(vec![(
                    Value::BulkString(b"maxmemory-policy".to_vec()),
                    Value::BulkString(b"volatile-lru".to_vec()),
                )]),
            ),
        ]);
        assert_eq!(policies(&nodes), ["noeviction", "volatile-lru"]);
    }
}
