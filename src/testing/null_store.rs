use std::time::Duration;

use crate::store::{Claim, ClaimToken, IdempotencyStore, StoreError, async_trait};

/// A store that acquires every claim at once and records nothing: for measuring what the layer
/// itself costs. It deduplicates nothing.
///
/// ```
/// use sangho_webhook::{SanghoWebhookLayer, signature::Secret, testing::NullStore};
///
/// let layer = SanghoWebhookLayer::new(Secret::new("whsec_x").unwrap(), NullStore);
/// # let _ = layer;
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct NullStore;

#[async_trait]
impl IdempotencyStore for NullStore {
    async fn claim(
        &self,
        _: &str,
        _: &str,
        _: &ClaimToken,
        _: Duration,
    ) -> Result<Claim, StoreError> {
        Ok(Claim::Acquired)
    }

    async fn renew(
        &self,
        _: &str,
        _: &str,
        _: &ClaimToken,
        _: Duration,
    ) -> Result<bool, StoreError> {
        Ok(true)
    }

    async fn complete(
        &self,
        _: &str,
        _: &str,
        _: &ClaimToken,
        _: Duration,
    ) -> Result<bool, StoreError> {
        Ok(true)
    }

    async fn release(&self, _: &str, _: &ClaimToken) -> Result<bool, StoreError> {
        Ok(true)
    }
}
