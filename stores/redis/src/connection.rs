//! [`HealingConnection`]: a connection that is replaced by a fresh one after a response
//! timeout or a `READONLY` reply.

use std::{
    fmt,
    sync::{
        Arc, RwLock,
        atomic::{AtomicU64, Ordering},
    },
};

use redis::{
    Client, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, ServerErrorKind, Value,
    aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig},
};

/// A reconnecting connection: a [`ConnectionManager`] (one server), or a Redis Cluster
/// connection, that is replaced by a fresh one when the server's answers show that the
/// connection is no longer worth keeping.
///
/// The [`ConnectionManager`] reconnects when its connection is closed or reset, and the
/// cluster connection when a node's connection is, or the slots moved. Two failures leave the
/// socket open, and both keep using it forever:
///
/// - **a response timeout**: the connection is half-open (a proxy, a load balancer or a
///   firewall froze it or forgot it, a network path died silently) or the server hangs. Every
///   command sent on it times out, while a new connection would work;
/// - **a `READONLY` or `MASTERDOWN` reply**: the server was a primary and has been demoted to a
///   replica (a failover). The configured address (a DNS name, a virtual IP, a proxy, a
///   Kubernetes service) now leads to the new primary, but only for new connections.
///
/// After either, this connection drops the manager (or the cluster connection) and builds a new
/// one, which connects to the configured address (the cluster's nodes) on its next command. The failure is counted once per connection: the
/// commands that were waiting on the dead one fail (each within the response timeout), and
/// every command sent after it goes to the new connection. So a dead connection costs at most
/// one response timeout of failed commands, never more.
///
/// Clones share the connection. [`RedisStore::connect`](crate::RedisStore::connect) and
/// [`RedisStore::connect_cluster`](crate::RedisStore::connect_cluster) build one.
pub struct HealingConnection<C = ConnectionManager> {
    shared: Arc<Shared<C>>,
}

impl<C> Clone for HealingConnection<C> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

/// Builds a fresh connection that connects on its first command.
type Fresh<C> = Box<dyn Fn() -> RedisResult<C> + Send + Sync>;

struct Shared<C> {
    fresh: Fresh<C>,
    /// The current connection and its generation (how many times it was replaced).
    current: RwLock<(u64, C)>,
    replaced: AtomicU64,
}

impl HealingConnection<ConnectionManager> {
    /// Connects to the server of `client` with `config` (see
    /// [`RedisStore::manager_config`](crate::RedisStore::manager_config)), and fails if it
    /// cannot be reached now.
    pub async fn new(client: Client, config: ConnectionManagerConfig) -> RedisResult<Self> {
        let manager = ConnectionManager::new_with_config(client.clone(), config.clone()).await?;
        let fresh = move || ConnectionManager::new_lazy_with_config(client.clone(), config.clone());
        Ok(Self::with(manager, Box::new(fresh)))
    }
}

#[cfg(feature = "cluster")]
#[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
impl HealingConnection<redis::cluster_async::ClusterConnection> {
    /// Connects to the Redis Cluster of `client` with `config` (give it connection and
    /// response timeouts), and fails if it cannot be reached now.
    pub async fn cluster(
        client: redis::cluster::ClusterClient,
        config: redis::cluster::ClusterConfig,
    ) -> RedisResult<Self> {
        let connection = client
            .get_async_connection_with_config(config.clone())
            .await?;
        let fresh = move || Ok(client.get_pending_async_connection_with_config(config.clone()));
        Ok(Self::with(connection, Box::new(fresh)))
    }
}

impl<C: Clone> HealingConnection<C> {
    fn with(connection: C, fresh: Fresh<C>) -> Self {
        Self {
            shared: Arc::new(Shared {
                fresh,
                current: RwLock::new((0, connection)),
                replaced: AtomicU64::new(0),
            }),
        }
    }

    /// How many times the connection was replaced after a response timeout or a `READONLY`
    /// reply since it was built (reconnections after a closed connection are not counted).
    pub fn replacements(&self) -> u64 {
        self.shared.replaced.load(Ordering::Relaxed)
    }

    /// The connection in use now (it is dropped when replaced).
    pub fn current(&self) -> C {
        self.current_generation().1
    }

    /// The current connection and its generation.
    fn current_generation(&self) -> (u64, C) {
        let current = self
            .shared
            .current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        (current.0, current.1.clone())
    }

    /// Replaces the connection of `generation` by a fresh one, unless another command did so
    /// already.
    fn replace(&self, generation: u64, cause: &RedisError) {
        let fresh = match (self.shared.fresh)() {
            Ok(fresh) => fresh,
            Err(error) => {
                tracing::error!(%error, "redis: cannot build a new connection");
                return;
            }
        };
        let mut current = self
            .shared
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if current.0 != generation {
            return;
        }
        *current = (generation + 1, fresh);
        drop(current);
        self.shared.replaced.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            %cause,
            "redis: replacing the connection (response timeout or demoted server); the next \
             command connects again"
        );
    }

    /// Replaces the connection of `generation` if `failure` says it is dead or demoted.
    fn heal_after(&self, generation: u64, failure: Option<&RedisError>) {
        if let Some(cause) = failure
            && needs_a_new_connection(cause)
        {
            self.replace(generation, cause);
        }
    }
}

/// A response timeout, or a server that is no longer a writable primary.
fn needs_a_new_connection(error: &RedisError) -> bool {
    error.is_timeout()
        || matches!(
            error.kind(),
            ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
        )
}

/// The first error among replies (a server error is a reply, not a failed call).
fn reply_error(value: &Value) -> Option<RedisError> {
    match value {
        Value::ServerError(error) => Some(error.clone().into()),
        _ => None,
    }
}

impl<C> ConnectionLike for HealingConnection<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (generation, mut manager) = self.current_generation();
            let result = manager.req_packed_command(cmd).await;
            let failure = match &result {
                Err(error) => Some(error.clone()),
                Ok(value) => reply_error(value),
            };
            self.heal_after(generation, failure.as_ref());
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (generation, mut manager) = self.current_generation();
            let result = manager.req_packed_commands(cmd, offset, count).await;
            let failure = match &result {
                Err(error) => Some(error.clone()),
                Ok(values) => values.iter().find_map(reply_error),
            };
            self.heal_after(generation, failure.as_ref());
            result
        })
    }

    fn get_db(&self) -> i64 {
        self.current_generation().1.get_db()
    }
}

impl<C> fmt::Debug for HealingConnection<C> {
    /// Shows the replacement count only: the client's debug form includes the server's
    /// address and credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HealingConnection")
            .field(
                "replacements",
                &self.shared.replaced.load(Ordering::Relaxed),
            )
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_and_demotions_need_a_new_connection_other_errors_do_not() {
        let timeout: RedisError =
            std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer").into();
        assert!(needs_a_new_connection(&timeout));
        let read_only: RedisError = (
            ErrorKind::Server(ServerErrorKind::ReadOnly),
            "You can't write against a read only replica.",
        )
            .into();
        assert!(needs_a_new_connection(&read_only));
        let wrong_type: RedisError = (
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "WRONGTYPE",
        )
            .into();
        assert!(!needs_a_new_connection(&wrong_type));
    }
}
