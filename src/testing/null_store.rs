use std::time::Duration;

use crate::store::{
    Claim, Claimant, Completion, IdempotencyStore, Release, Renewal, StoreError, async_trait,
};

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
    async fn claim(&self, _: Claimant<'_>, _: Duration) -> Result<Claim, StoreError> {
        Ok(Claim::Acquired)
    }

    async fn renew(&self, _: Claimant<'_>, _: Duration) -> Result<Renewal, StoreError> {
        Ok(Renewal::Held)
    }

    async fn complete(&self, _: Claimant<'_>, _: Duration) -> Result<Completion, StoreError> {
        Ok(Completion::Recorded)
    }

    async fn release(&self, _: Claimant<'_>) -> Result<Release, StoreError> {
        Ok(Release::Released)
    }
}
