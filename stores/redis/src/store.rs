//! [`RedisStore`]: the configuration and the four store operations.

use std::{fmt, sync::Arc, time::Duration};

use async_trait::async_trait;
use redis::{
    Client, IntoConnectionInfo, RedisError, Script, Value,
    aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig},
};
use sangho_webhook::store::{Claim, ClaimToken, IdempotencyStore, StoreError};

use crate::scripts;

/// An [`IdempotencyStore`] in Redis, over a reconnecting [`ConnectionManager`] (or any
/// cloneable [`redis::aio::ConnectionLike`] connection, such as a cluster connection).
///
/// Clones share the connection. See the [crate docs](crate) for how events are kept, and what
/// happens when Redis is down.
///
/// ```no_run
/// use sangho_webhook::store::{Claim, ClaimToken, IdempotencyStore};
/// use sangho_webhook_redis::RedisStore;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = RedisStore::connect("redis://127.0.0.1:6379")
///     .await?
///     .with_prefix("billing:webhooks:");
/// let (lease, token) = (Duration::from_secs(30), ClaimToken::generate());
/// let Claim::Acquired = store.claim("evt_1", "payment_intent.succeeded", &token, lease).await?
/// else {
///     return Ok(()); // processed already, or being processed
/// };
/// // ... process the event, then:
/// let retention = Duration::from_secs(72 * 3600);
/// store.complete("evt_1", "payment_intent.succeeded", &token, retention).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisStore<C = ConnectionManager> {
    connection: C,
    prefix: Arc<str>,
}

impl RedisStore<ConnectionManager> {
    /// The default key prefix: `sangho:webhook:`.
    pub const DEFAULT_PREFIX: &'static str = "sangho:webhook:";

    /// How a completed event's value starts: `completed:`, followed by the token that
    /// completed it. (An event in flight holds its owner's token, 32 hex digits.)
    pub const COMPLETED_PREFIX: &'static str = scripts::COMPLETED_PREFIX;

    /// The response timeout of [`connect`](Self::connect): 1 s. A command that gets no answer
    /// within it fails (and the connection manager reconnects).
    pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);
    /// The timeout of one connection attempt in [`connect`](Self::connect): 1 s.
    pub const DEFAULT_CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);
    /// How many times [`connect`](Self::connect)'s manager retries a failed connection attempt
    /// before failing the commands waiting for it: 2 (with a backoff of 100 ms to 1 s).
    pub const DEFAULT_CONNECTION_RETRIES: usize = 2;

    /// Connects to the Redis at `url` (e.g. `redis://127.0.0.1:6379`,
    /// `redis://:password@host:6379/2`, `rediss://…`) with
    /// [`manager_config`](Self::manager_config).
    ///
    /// For TLS (`rediss://`), enable one of the `redis` crate's TLS features in your own
    /// `Cargo.toml` (e.g. `redis = { version = "1", features = ["tokio-rustls-comp"] }`):
    /// features unify, and this store uses the same `redis`.
    ///
    /// Fails when the URL is invalid or the server cannot be reached now, after the bounded
    /// retries of the configuration (a few seconds at most).
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sangho_webhook_redis::redis::RedisError> {
    /// let store = sangho_webhook_redis::RedisStore::connect("redis://127.0.0.1:6379").await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(url: impl IntoConnectionInfo) -> Result<Self, RedisError> {
        Self::connect_with_config(url, Self::manager_config()).await
    }

    /// Connects to the Redis at `url` with this connection manager configuration.
    ///
    /// Start from [`manager_config`](Self::manager_config) to keep bounded timeouts:
    ///
    /// ```no_run
    /// use sangho_webhook_redis::RedisStore;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sangho_webhook_redis::redis::RedisError> {
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
    ) -> Result<Self, RedisError> {
        let client = Client::open(url)?;
        let manager = ConnectionManager::new_with_config(client, config).await?;
        Ok(Self::new(manager))
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

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A store over `connection`, usually a [`ConnectionManager`] (build it with a
    /// [`ConnectionManagerConfig`] that sets timeouts, e.g.
    /// [`manager_config`](RedisStore::manager_config)), with the
    /// [default prefix](RedisStore::DEFAULT_PREFIX).
    ///
    /// ```no_run
    /// use sangho_webhook_redis::{RedisStore, redis};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redis::RedisError> {
    /// let client = redis::Client::open("redis://127.0.0.1:6379")?;
    /// let manager =
    ///     redis::aio::ConnectionManager::new_with_config(client, RedisStore::manager_config())
    ///         .await?;
    /// let store = RedisStore::new(manager);
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(connection: C) -> Self {
        Self {
            connection,
            prefix: Arc::from(RedisStore::DEFAULT_PREFIX),
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

    async fn run(&self, invocation: &mut redis::ScriptInvocation<'_>) -> Result<i64, StoreError> {
        let mut connection = self.connection.clone();
        invocation
            .invoke_async(&mut connection)
            .await
            .map_err(StoreError::backend)
    }

    async fn owner_checked(
        &self,
        script: &Script,
        event_id: &str,
        token: &ClaimToken,
        ttl: Option<Duration>,
    ) -> Result<bool, StoreError> {
        let mut invocation = script.key(self.key(event_id));
        invocation.arg(token.as_str());
        if let Some(ttl) = ttl {
            invocation.arg(millis(ttl));
        }
        match self.run(&mut invocation).await? {
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
    async fn claim(
        &self,
        event_id: &str,
        _event_type: &str,
        token: &ClaimToken,
        lease: Duration,
    ) -> Result<Claim, StoreError> {
        let mut connection = self.connection.clone();
        let previous: Value = redis::cmd("SET")
            .arg(self.key(event_id))
            .arg(token.as_str())
            .arg("NX")
            .arg("PX")
            .arg(millis(lease))
            .arg("GET")
            .query_async(&mut connection)
            .await
            .map_err(StoreError::backend)?;
        match previous {
            Value::Nil => Ok(Claim::Acquired),
            Value::BulkString(value) if scripts::is_completed(&value) => Ok(Claim::Completed),
            Value::BulkString(_) => Ok(Claim::InFlight),
            other => Err(StoreError::Protocol(format!(
                "SET NX GET answered {other:?}, expected nil or a string"
            ))),
        }
    }

    async fn renew(
        &self,
        event_id: &str,
        _event_type: &str,
        token: &ClaimToken,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        self.owner_checked(&scripts::RENEW, event_id, token, Some(lease))
            .await
    }

    async fn complete(
        &self,
        event_id: &str,
        _event_type: &str,
        token: &ClaimToken,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        self.owner_checked(&scripts::COMPLETE, event_id, token, Some(retention))
            .await
    }

    async fn release(&self, event_id: &str, token: &ClaimToken) -> Result<bool, StoreError> {
        self.owner_checked(&scripts::RELEASE, event_id, token, None)
            .await
    }
}

impl<C> fmt::Debug for RedisStore<C> {
    /// Shows the prefix only: the connection's debug form can include the server's address and
    /// credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
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
