//! [`HealingConnection`]: a connection manager that also replaces its connection after a
//! response timeout or a `READONLY` reply.

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

/// A reconnecting connection to one Redis server: a [`ConnectionManager`] that is also
/// replaced by a fresh one when the server's answers show that the connection is no longer
/// worth keeping.
///
/// The [`ConnectionManager`] reconnects when its connection is closed or reset. Two failures
/// leave the socket open, and the manager keeps using it forever:
///
/// - **a response timeout**: the connection is half-open (a proxy, a load balancer or a
///   firewall froze it or forgot it, a network path died silently) or the server hangs. Every
///   command sent on it times out, while a new connection would work;
/// - **a `READONLY` or `MASTERDOWN` reply**: the server was a primary and has been demoted to a
///   replica (a failover). The configured address (a DNS name, a virtual IP, a proxy, a
///   Kubernetes service) now leads to the new primary, but only for new connections.
///
/// After either, this connection drops the manager and builds a new one, which connects to the
/// configured address on its next command. The failure is counted once per connection: the
/// commands that were waiting on the dead one fail (each within the response timeout), and
/// every command sent after it goes to the new connection. So a dead connection costs at most
/// one response timeout of failed commands, never more.
///
/// Clones share the connection. [`RedisStore::connect`](crate::RedisStore::connect) builds one.
#[derive(Clone)]
pub struct HealingConnection {
    shared: Arc<Shared>,
}

struct Shared {
    client: Client,
    config: ConnectionManagerConfig,
    /// The current manager and its generation (how many times it was replaced).
    current: RwLock<(u64, ConnectionManager)>,
    replaced: AtomicU64,
}

impl HealingConnection {
    /// Connects to the server of `client` with `config` (see
    /// [`RedisStore::manager_config`](crate::RedisStore::manager_config)), and fails if it
    /// cannot be reached now.
    pub async fn new(client: Client, config: ConnectionManagerConfig) -> RedisResult<Self> {
        let manager = ConnectionManager::new_with_config(client.clone(), config.clone()).await?;
        Ok(Self {
            shared: Arc::new(Shared {
                client,
                config,
                current: RwLock::new((0, manager)),
                replaced: AtomicU64::new(0),
            }),
        })
    }

    /// How many times the connection was replaced after a response timeout or a `READONLY`
    /// reply since it was built (reconnections after a closed connection are not counted).
    pub fn replacements(&self) -> u64 {
        self.shared.replaced.load(Ordering::Relaxed)
    }

    /// The current manager and its generation.
    fn current(&self) -> (u64, ConnectionManager) {
        let current = self
            .shared
            .current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        (current.0, current.1.clone())
    }

    /// Replaces the manager of `generation` by a fresh one, unless another command did so
    /// already.
    fn replace(&self, generation: u64, cause: &RedisError) {
        let fresh = match ConnectionManager::new_lazy_with_config(
            self.shared.client.clone(),
            self.shared.config.clone(),
        ) {
            Ok(fresh) => fresh,
            Err(error) => {
                tracing::error!(%error, "redis: cannot build a new connection manager");
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

impl ConnectionLike for HealingConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (generation, mut manager) = self.current();
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
            let (generation, mut manager) = self.current();
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
        self.current().1.get_db()
    }
}

impl fmt::Debug for HealingConnection {
    /// Shows the replacement count only: the client's debug form includes the server's
    /// address and credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HealingConnection")
            .field("replacements", &self.replacements())
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
