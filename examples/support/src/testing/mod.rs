//! For the examples' tests: the example's binary run as a process ([`ExampleProcess`]), a
//! layer at the fixtures' fixed time ([`layer`]), and a store that counts what it is asked and
//! can go down ([`SpyStore`]).

mod process;

pub use process::{ExampleProcess, read_answer, send_raw};

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use sangho_webhook::{
    SanghoWebhookLayer,
    store::{
        Claim, ClaimToken, Claimant, Completion, IdempotencyStore, MokaStore, Release, Renewal,
        StoreError, async_trait,
    },
    testing::fixtures::{self, EVENT_TYPE, secret},
};

/// A layer with the fixture secret, at the fixtures' fixed time, and the default settings.
pub fn layer(store: impl IdempotencyStore) -> SanghoWebhookLayer {
    SanghoWebhookLayer::builder(secret(), store)
        .with_clock(fixtures::fixed_clock)
        .build()
        .expect("the default settings")
}

/// What a fresh claim of `id` in `store` answers now (an acquired claim stays held, as by a
/// delivery in progress).
pub async fn peek(store: &dyn IdempotencyStore, id: &str) -> Claim {
    let token = ClaimToken::generate();
    store
        .claim(
            Claimant::new(id, EVENT_TYPE, &token),
            Duration::from_secs(3600),
        )
        .await
        .expect("the store answers")
}

/// A [`MokaStore`] (readable through [`SpyStore::inner`]) that counts every operation it is
/// asked for, and fails them all while it is down. Clones share everything.
#[derive(Clone, Debug, Default)]
pub struct SpyStore {
    /// The store behind.
    pub inner: Arc<MokaStore>,
    down: Arc<AtomicBool>,
    operations: Arc<AtomicUsize>,
}

impl SpyStore {
    /// Every operation asked for, whatever it answered.
    pub fn operations(&self) -> usize {
        self.operations.load(Ordering::SeqCst)
    }

    /// From now on, every operation fails at once (`down`), or reaches the store again.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    fn check(&self) -> Result<(), StoreError> {
        self.operations.fetch_add(1, Ordering::SeqCst);
        if self.down.load(Ordering::SeqCst) {
            return Err(StoreError::backend(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "the store is down",
            )));
        }
        Ok(())
    }
}

#[async_trait]
impl IdempotencyStore for SpyStore {
    async fn claim(&self, claimant: Claimant<'_>, lease: Duration) -> Result<Claim, StoreError> {
        self.check()?;
        self.inner.claim(claimant, lease).await
    }

    async fn renew(&self, claimant: Claimant<'_>, lease: Duration) -> Result<Renewal, StoreError> {
        self.check()?;
        self.inner.renew(claimant, lease).await
    }

    async fn complete(
        &self,
        claimant: Claimant<'_>,
        retention: Duration,
    ) -> Result<Completion, StoreError> {
        self.check()?;
        self.inner.complete(claimant, retention).await
    }

    async fn release(&self, claimant: Claimant<'_>) -> Result<Release, StoreError> {
        self.check()?;
        self.inner.release(claimant).await
    }
}
