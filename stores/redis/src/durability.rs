//! [`ReplicationError`]: a write that too few replicas acknowledged.

use std::time::Duration;

/// A claim, renewal or completion that fewer replicas acknowledged than
/// [`with_replica_wait`](crate::RedisStore::with_replica_wait) requires, within its timeout.
/// It is the source of the [`StoreError::Backend`](sangho_webhook::store::StoreError::Backend)
/// that the operation answers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{acknowledged} of the {required} required Redis replicas acknowledged the write within \
     {timeout:?}"
)]
pub struct ReplicationError {
    acknowledged: u32,
    required: u32,
    timeout: Duration,
}

impl ReplicationError {
    pub(crate) fn new(acknowledged: u32, required: u32, timeout: Duration) -> Self {
        Self {
            acknowledged,
            required,
            timeout,
        }
    }

    /// How many replicas acknowledged the write.
    pub fn acknowledged(&self) -> u32 {
        self.acknowledged
    }

    /// How many were required.
    pub fn required(&self) -> u32 {
        self.required
    }
}
