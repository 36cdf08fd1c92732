//! [`RedisStore`]: the configuration and the four store operations.

use std::{fmt, sync::Arc, time::Duration};

use async_trait::async_trait;
use redis::{
    ErrorKind, IntoConnectionInfo, Script, ServerErrorKind, Value,
    aio::{ConnectionLike, ConnectionManagerConfig},
};
use sangho_webhook::store::{
    Claim, ClaimToken, Claimant, Completion, IdempotencyStore, Release, Renewal, StoreError,
};

use crate::{
    ConnectError, ConnectOptions, HealingConnection, ReplicationError,
    connect::{config_get_memory_policy, judge_memory_policy},
    scripts,
};

/// An [`IdempotencyStore`] in Redis, over a [`HealingConnection`] (or any cloneable
/// [`redis::aio::ConnectionLike`] connection, such as a Redis Cluster connection).
///
/// Clones share the connection. See the [crate docs](crate) for how events are kept, and what
/// happens when Redis is down.
///
/// ```no_run
/// use sangho_webhook::store::{Claim, ClaimToken, Claimant, IdempotencyStore};
/// use sangho_webhook_redis::RedisStore;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = RedisStore::connect("redis://127.0.0.1:6379")
///     .await?
///     .with_prefix("billing:webhooks:");
/// let (lease, token) = (Duration::from_secs(30), ClaimToken::generate());
/// let claimant = Claimant::new("evt_1", "payment_intent.succeeded", &token);
/// let Claim::Acquired = store.claim(claimant, lease).await? else {
///     return Ok(()); // processed already, or being processed
/// };
/// // ... process the event, then:
/// store.complete(claimant, Duration::from_secs(72 * 3600)).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisStore<C = HealingConnection> {
    connection: C,
    prefix: Arc<str>,
    wait: Option<ReplicaWait>,
}

/// `WAIT <replicas> <timeout>` after every write that must survive a failover.
#[derive(Clone, Copy, Debug)]
struct ReplicaWait {
    replicas: u32,
    timeout: Duration,
}

impl RedisStore<HealingConnection> {
    /// The default key prefix: `sangho:webhook:`.
    pub const DEFAULT_PREFIX: &'static str = "sangho:webhook:";

    /// How a completed event's value starts: `completed:`, followed by the token that
    /// completed it. (An event in flight holds its owner's token, 32 hex digits.)
    pub const COMPLETED_PREFIX: &'static str = scripts::COMPLETED_PREFIX;

    /// The response timeout of [`connect`](Self::connect): 1 s. A command that gets no answer
    /// within it fails, and the connection is replaced (see [`HealingConnection`]).
    pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);
    /// The timeout of one connection attempt in [`connect`](Self::connect): 1 s.
    pub const DEFAULT_CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);
    /// How many times [`connect`](Self::connect)'s manager retries a failed connection attempt
    /// before failing the commands waiting for it: 2 (with a backoff of 100 ms to 1 s).
    pub const DEFAULT_CONNECTION_RETRIES: usize = 2;

    /// Connects to the Redis at `url` (e.g. `redis://127.0.0.1:6379`,
    /// `redis://:password@host:6379/2`, `rediss://…`) with the default
    /// [options](Self::options): [`manager_config`](Self::manager_config), and a refusal of a
    /// server whose `maxmemory-policy` evicts keys.
    ///
    /// Fails when the URL is invalid, when the server cannot be reached now (after the bounded
    /// retries of the configuration, a few seconds at most), or when it may evict keys.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sangho_webhook_redis::ConnectError> {
    /// let store = sangho_webhook_redis::RedisStore::connect("redis://127.0.0.1:6379").await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(url: impl IntoConnectionInfo) -> Result<Self, ConnectError> {
        Self::options().connect(url).await
    }

    /// Connects to the Redis at `url` with this connection manager configuration (and the
    /// other [options](Self::options) at their defaults).
    ///
    /// Start from [`manager_config`](Self::manager_config) to keep bounded timeouts:
    ///
    /// ```no_run
    /// use sangho_webhook_redis::RedisStore;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sangho_webhook_redis::ConnectError> {
    /// let config = RedisStore::manager_config()
    ///     .set_response_timeout(Some(Duration::from_millis(300)));
    /// let store = RedisStore::connect_with_config("redis://127.0.0.1:6379", config).await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_with_config(
        url: impl IntoConnectionInfo,
        config: ConnectionManagerConfig,
    ) -> Result<Self, ConnectError> {
        Self::options().manager_config(config).connect(url).await
    }

    /// The options of [`connect`](Self::connect) and
    /// [`connect_cluster`](ConnectOptions::connect_cluster), to change.
    pub fn options() -> ConnectOptions {
        ConnectOptions::default()
    }

    /// The connection manager configuration of [`connect`](Self::connect): a
    /// [response timeout](Self::DEFAULT_RESPONSE_TIMEOUT), a
    /// [connection timeout](Self::DEFAULT_CONNECTION_TIMEOUT) and
    /// [few retries](Self::DEFAULT_CONNECTION_RETRIES), so that an operation on a dead or
    /// unreachable server fails within about four seconds in the worst case (a silent
    /// network), at once when the connection is refused.
    ///
    /// ```
    /// let config = sangho_webhook_redis::RedisStore::manager_config();
    /// assert!(config.response_timeout().is_some() && config.connection_timeout().is_some());
    /// ```
    pub fn manager_config() -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_response_timeout(Some(Self::DEFAULT_RESPONSE_TIMEOUT))
            .set_connection_timeout(Some(Self::DEFAULT_CONNECTION_TIMEOUT))
            .set_number_of_retries(Self::DEFAULT_CONNECTION_RETRIES)
            .set_min_delay(Duration::from_millis(100))
            .set_max_delay(Duration::from_secs(1))
    }
}

#[cfg(feature = "cluster")]
#[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
impl RedisStore<HealingConnection<redis::cluster_async::ClusterConnection>> {
    /// Connects to the Redis Cluster that `nodes` belong to, with the default
    /// [options](RedisStore::options); see [`ConnectOptions::connect_cluster`].
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sangho_webhook_redis::ConnectError> {
    /// use sangho_webhook_redis::RedisStore;
    ///
    /// let nodes = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379"];
    /// let store = RedisStore::connect_cluster(nodes).await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_cluster<T: IntoConnectionInfo>(
        nodes: impl IntoIterator<Item = T>,
    ) -> Result<Self, ConnectError> {
        RedisStore::options().connect_cluster(nodes).await
    }
}

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A store over `connection` (a [`HealingConnection`], a cluster connection, a
    /// [`ConnectionManager`](redis::aio::ConnectionManager)…; build it with timeouts, e.g.
    /// [`manager_config`](RedisStore::manager_config)), with the
    /// [default prefix](RedisStore::DEFAULT_PREFIX). Unlike [`connect`](RedisStore::connect),
    /// this does not check the server's `maxmemory-policy`: call
    /// [`check_memory_policy`](Self::check_memory_policy).
    ///
    /// ```no_run
    /// use sangho_webhook_redis::{HealingConnection, RedisStore, redis};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = redis::Client::open("redis://127.0.0.1:6379")?;
    /// let connection = HealingConnection::new(client, RedisStore::manager_config()).await?;
    /// let store = RedisStore::new(connection);
    /// store.check_memory_policy().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(connection: C) -> Self {
        Self {
            connection,
            prefix: Arc::from(RedisStore::DEFAULT_PREFIX),
            wait: None,
        }
    }

    /// Keeps events under keys starting with `prefix` instead of
    /// [`DEFAULT_PREFIX`](RedisStore::DEFAULT_PREFIX): to share one Redis between several endpoints
    /// or applications, give each its own prefix.
    ///
    /// On Redis Cluster, keep any `{hash tag}` out of the prefix unless you want every event on
    /// one node.
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Arc::from(prefix.into());
        self
    }

    /// Waits, after every claim, renewal and completion, until `replicas` replicas have
    /// acknowledged it (`WAIT <replicas> <timeout>`, on the same connection, in the same round
    /// trip), so that a failover to one of them cannot lose it.
    ///
    /// When fewer replicas acknowledge within `timeout`, the operation fails with a
    /// [`ReplicationError`] (as the source of a
    /// [`StoreError::Backend`](sangho_webhook::store::StoreError::Backend)):
    ///
    /// - a **claim** is released again (owner-checked), and the layer answers `503`: the
    ///   provider redelivers later;
    /// - a **completion** fails, and the layer retries it like any failed completion (a
    ///   repeated completion by the same token succeeds);
    /// - a **renewal** fails, and the layer logs it; the lease was extended on the primary.
    ///
    /// `replicas` of 0 turns the wait off. Keep `timeout` well under the connection's
    /// response timeout (1 s by default) and the layer's store timeout: a `WAIT` holds the
    /// connection it runs on, so while replicas lag, the operations behind it on that
    /// connection wait too. See the [crate docs](crate#durability) for what this does and
    /// does not protect against.
    ///
    /// ```no_run
    /// # async fn doc() -> Result<(), sangho_webhook_redis::ConnectError> {
    /// use sangho_webhook_redis::RedisStore;
    /// use std::time::Duration;
    ///
    /// let store = RedisStore::connect("redis://127.0.0.1:6379")
    ///     .await?
    ///     .with_replica_wait(1, Duration::from_millis(250));
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_replica_wait(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait = (replicas > 0).then_some(ReplicaWait { replicas, timeout });
        self
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The Redis key of `event_id`: the prefix followed by the id.
    ///
    /// ```
    /// # async fn doc(store: sangho_webhook_redis::RedisStore) {
    /// assert_eq!(store.key("evt_1"), "sangho:webhook:evt_1");
    /// # }
    /// ```
    pub fn key(&self, event_id: &str) -> String {
        let mut key = String::with_capacity(self.prefix.len() + event_id.len());
        key.push_str(&self.prefix);
        key.push_str(event_id);
        key
    }

    /// The connection the store uses (a clone of it shares it).
    pub fn connection(&self) -> &C {
        &self.connection
    }

    /// Reads the server's `maxmemory-policy` (`CONFIG GET`) and fails with
    /// [`ConnectError::EvictingPolicy`] when it evicts keys (`allkeys-*`, `volatile-*`).
    ///
    /// Every key of this store has a time to live, so an evicting server can drop an
    /// in-flight claim (a concurrent delivery then runs the handler a second time) or a
    /// completed event (a redelivery is processed again), silently. A server that does not
    /// let this client run `CONFIG` (a managed service, an ACL) is accepted with a warning.
    /// [`connect`](RedisStore::connect) calls this; on a cluster connection it reads one node
    /// only, where [`connect_cluster`](ConnectOptions::connect_cluster) reads every primary.
    pub async fn check_memory_policy(&self) -> Result<(), ConnectError> {
        let mut connection = self.connection.clone();
        let answer = config_get_memory_policy()
            .query_async(&mut connection)
            .await;
        judge_memory_policy(answer)
    }

    /// Runs an owner-checked script; answers whether it applied.
    async fn owner_checked(
        &self,
        script: (&Script, &str),
        key: &str,
        token: &ClaimToken,
        ttl: Option<Duration>,
    ) -> Result<bool, StoreError> {
        let mut connection = self.connection.clone();
        let answer: i64 = match self.wait.filter(|_| ttl.is_some()) {
            None => {
                let mut invocation = script.0.key(key);
                invocation.arg(token.as_str());
                if let Some(ttl) = ttl {
                    invocation.arg(millis(ttl));
                }
                invocation
                    .invoke_async(&mut connection)
                    .await
                    .map_err(StoreError::backend)?
            }
            Some(wait) => {
                let ttl = millis(ttl.unwrap_or_default());
                let evalsha = |command: &str, body: &str| {
                    let mut pipe = redis::pipe();
                    pipe.cmd(command)
                        .arg(body)
                        .arg(1)
                        .arg(key)
                        .arg(token.as_str())
                        .arg(ttl);
                    pipe.cmd("WAIT")
                        .arg(wait.replicas)
                        .arg(millis(wait.timeout));
                    pipe
                };
                let mut answer: redis::RedisResult<(i64, u32)> =
                    evalsha("EVALSHA", script.0.get_hash())
                        .query_async(&mut connection)
                        .await;
                if answer.as_ref().is_err_and(|error| {
                    error.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
                }) {
                    // The server forgot the script (a restart, a failover): send its text.
                    answer = evalsha("EVAL", script.1).query_async(&mut connection).await;
                }
                let (answer, acknowledged) = answer.map_err(StoreError::backend)?;
                if answer == 1 && acknowledged < wait.replicas {
                    return Err(StoreError::backend(ReplicationError::new(
                        acknowledged,
                        wait.replicas,
                        wait.timeout,
                    )));
                }
                answer
            }
        };
        match answer {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(StoreError::Protocol(format!(
                "the owner-checked script answered {other}, expected 0 or 1"
            ))),
        }
    }
}

/// A duration as whole milliseconds for `PX`: rounded up, at least 1 (Redis refuses 0), at most
/// about 146 000 years (Redis refuses expiry times past `i64::MAX` ms).
fn millis(duration: Duration) -> u64 {
    const MAX: u64 = 1 << 62;
    let millis = duration.as_nanos().div_ceil(1_000_000);
    u64::try_from(millis).unwrap_or(MAX).clamp(1, MAX)
}

#[async_trait]
impl<C> IdempotencyStore for RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn claim(&self, claimant: Claimant<'_>, lease: Duration) -> Result<Claim, StoreError> {
        let (event_id, token) = (claimant.event_id, claimant.token);
        let key = self.key(event_id);
        let mut set = redis::cmd("SET");
        set.arg(&key)
            .arg(token.as_str())
            .arg("NX")
            .arg("PX")
            .arg(millis(lease))
            .arg("GET");
        let mut connection = self.connection.clone();
        let (previous, acknowledged): (Value, Option<u32>) = match self.wait {
            None => (
                set.query_async(&mut connection)
                    .await
                    .map_err(StoreError::backend)?,
                None,
            ),
            Some(wait) => {
                let mut pipe = redis::pipe();
                pipe.add_command(set)
                    .cmd("WAIT")
                    .arg(wait.replicas)
                    .arg(millis(wait.timeout));
                let (previous, acknowledged): (Value, u32) = pipe
                    .query_async(&mut connection)
                    .await
                    .map_err(StoreError::backend)?;
                (previous, Some(acknowledged))
            }
        };
        match previous {
            Value::Nil => {
                if let (Some(wait), Some(acknowledged)) = (self.wait, acknowledged)
                    && acknowledged < wait.replicas
                {
                    // Not durable: give the event back, so that a redelivery (after the 503)
                    // is not refused for a whole lease.
                    if let Err(error) = self
                        .owner_checked(
                            (&*scripts::RELEASE, scripts::RELEASE_LUA),
                            &key,
                            token,
                            None,
                        )
                        .await
                    {
                        tracing::warn!(
                            %error, event_id,
                            "redis: cannot release a claim that the replicas did not acknowledge"
                        );
                    }
                    return Err(StoreError::backend(ReplicationError::new(
                        acknowledged,
                        wait.replicas,
                        wait.timeout,
                    )));
                }
                Ok(Claim::Acquired)
            }
            Value::BulkString(value) if scripts::is_completed(&value) => Ok(Claim::Completed),
            Value::BulkString(_) => Ok(Claim::InFlight),
            other => Err(StoreError::Protocol(format!(
                "SET NX GET answered {other:?}, expected nil or a string"
            ))),
        }
    }

    async fn renew(&self, claimant: Claimant<'_>, lease: Duration) -> Result<Renewal, StoreError> {
        let script = (&*scripts::RENEW, scripts::RENEW_LUA);
        let key = self.key(claimant.event_id);
        Ok(
            match self
                .owner_checked(script, &key, claimant.token, Some(lease))
                .await?
            {
                true => Renewal::Held,
                false => Renewal::TakenOver,
            },
        )
    }

    async fn complete(
        &self,
        claimant: Claimant<'_>,
        retention: Duration,
    ) -> Result<Completion, StoreError> {
        let script = (&*scripts::COMPLETE, scripts::COMPLETE_LUA);
        let key = self.key(claimant.event_id);
        let owner_checked = self.owner_checked(script, &key, claimant.token, Some(retention));
        Ok(match owner_checked.await? {
            true => Completion::Recorded,
            false => Completion::TakenOver,
        })
    }

    async fn release(&self, claimant: Claimant<'_>) -> Result<Release, StoreError> {
        let script = (&*scripts::RELEASE, scripts::RELEASE_LUA);
        let key = self.key(claimant.event_id);
        Ok(
            match self
                .owner_checked(script, &key, claimant.token, None)
                .await?
            {
                true => Release::Released,
                false => Release::NotHeld,
            },
        )
    }
}

impl<C> fmt::Debug for RedisStore<C> {
    /// Shows the prefix only: the connection's debug form can include the server's address and
    /// credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_rounds_up_and_stays_in_the_range_redis_accepts() {
        assert_eq!(millis(Duration::ZERO), 1);
        assert_eq!(millis(Duration::from_micros(1)), 1);
        assert_eq!(millis(Duration::from_micros(1_500)), 2);
        assert_eq!(millis(Duration::from_secs(30)), 30_000);
        assert_eq!(millis(Duration::from_secs(72 * 3600)), 259_200_000);
        assert_eq!(millis(Duration::MAX), 1 << 62);
    }

    #[test]
    fn a_token_is_never_read_as_completed() {
        let token = ClaimToken::generate();
        assert!(!scripts::is_completed(token.as_str().as_bytes()));
        assert!(scripts::is_completed(
            format!("{}{token}", RedisStore::COMPLETED_PREFIX).as_bytes()
        ));
        assert!(scripts::is_completed(b"completed"));
    }
}
