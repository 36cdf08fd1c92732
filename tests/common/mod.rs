//! Shared pieces of the layer tests: a layer at the fixtures' fixed time, a store that counts
//! its operations, and a store whose faults can be switched on and off while deliveries run.
//! (Requests go through `sangho_webhook::testing::send`.)

#![allow(dead_code)]

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use sangho_webhook::{
    SanghoWebhookLayer, SanghoWebhookLayerBuilder,
    store::{
        Claim, ClaimToken, Claimant, Completion, IdempotencyStore, MokaStore, Release, Renewal,
        StoreError, async_trait,
    },
    testing::fixtures,
};
pub mod logs;

pub use sangho_webhook::testing::fixtures::{EVENT_TYPE as TYPE, secret};

/// A builder with the fixture secret, at the fixtures' fixed time.
pub fn builder(store: impl IdempotencyStore) -> SanghoWebhookLayerBuilder {
    SanghoWebhookLayer::builder(secret(), store).with_clock(fixtures::fixed_clock)
}

/// A layer with the fixture secret, at the fixtures' fixed time, and the default settings.
pub fn layer(store: impl IdempotencyStore) -> SanghoWebhookLayer {
    builder(store).build().unwrap()
}

/// What a fresh claim of `id` in `store` answers now (an acquired claim stays held).
pub async fn peek(store: &dyn IdempotencyStore, id: &str) -> Claim {
    let token = ClaimToken::generate();
    store
        .claim(Claimant::new(id, TYPE, &token), Duration::from_secs(3600))
        .await
        .unwrap()
}

/// A [`FaultyStore`] without faults: a `MokaStore` that counts its operations.
pub type SpyStore = FaultyStore;

/// The faults of a [`FaultyStore`], switchable while deliveries run. Clones share them.
#[derive(Clone, Default)]
pub struct Faults {
    /// Every operation fails at once.
    down: Arc<AtomicBool>,
    /// Every operation hangs (until the layer's store timeout gives up on it).
    hang: Arc<AtomicBool>,
    /// Only completions fail.
    completions_fail: Arc<AtomicBool>,
    /// Claims are applied, then answered this many milliseconds late.
    late_claims_ms: Arc<AtomicU64>,
    claims_applied_late_ms: Arc<AtomicU64>,
    renewals_applied_late_ms: Arc<AtomicU64>,
    renewals_answered_late_ms: Arc<AtomicU64>,
}

impl Faults {
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    pub fn set_hang(&self, hang: bool) {
        self.hang.store(hang, Ordering::SeqCst);
    }

    pub fn set_completions_fail(&self, fail: bool) {
        self.completions_fail.store(fail, Ordering::SeqCst);
    }

    /// Claims are applied at once and answered `late`.
    pub fn set_late_claims(&self, late: Duration) {
        self.late_claims_ms
            .store(late.as_millis() as u64, Ordering::SeqCst);
    }

    /// Claims wait `late` (a lock, a slow link) before they are applied and answered; applied
    /// even when their caller stops waiting, as a statement already sent.
    pub fn set_claims_applied_late(&self, late: Duration) {
        self.claims_applied_late_ms
            .store(late.as_millis() as u64, Ordering::SeqCst);
    }

    /// Renewals are applied at once and answered `late`.
    pub fn set_renewals_answered_late(&self, late: Duration) {
        self.renewals_answered_late_ms
            .store(late.as_millis() as u64, Ordering::SeqCst);
    }

    /// Renewals wait `late` before they are applied and answered; applied even when their
    /// caller stops waiting, as a statement already sent.
    pub fn set_renewals_applied_late(&self, late: Duration) {
        self.renewals_applied_late_ms
            .store(late.as_millis() as u64, Ordering::SeqCst);
    }
}

/// A [`MokaStore`] (its state readable through [`FaultyStore::inner`]) behind switchable
/// [`Faults`], counting every operation it is asked for. Clones share everything.
#[derive(Clone, Default)]
pub struct FaultyStore {
    pub inner: Arc<MokaStore>,
    pub faults: Faults,
    claims: Arc<AtomicUsize>,
    renewals: Arc<AtomicUsize>,
    completions: Arc<AtomicUsize>,
    releases: Arc<AtomicUsize>,
}

impl FaultyStore {
    /// Every operation asked for, whatever it answered.
    pub fn operations(&self) -> usize {
        self.claims.load(Ordering::SeqCst) + self.renewals() + self.completions() + self.releases()
    }

    pub fn renewals(&self) -> usize {
        self.renewals.load(Ordering::SeqCst)
    }

    pub fn releases(&self) -> usize {
        self.releases.load(Ordering::SeqCst)
    }

    pub fn completions(&self) -> usize {
        self.completions.load(Ordering::SeqCst)
    }

    /// What a claim of `id` answers now (not counted; an acquired claim stays held).
    pub async fn peek(&self, id: &str) -> Claim {
        peek(&*self.inner, id).await
    }

    /// A store failing in every operation from the start.
    pub fn down() -> Self {
        let store = Self::default();
        store.faults.set_down(true);
        store
    }

    /// A store hanging in every operation from the start.
    pub fn hanging() -> Self {
        let store = Self::default();
        store.faults.set_hang(true);
        store
    }

    async fn check(&self) -> Result<(), StoreError> {
        if self.faults.hang.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        if self.faults.down.load(Ordering::SeqCst) {
            return Err(StoreError::backend(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "the store is down",
            )));
        }
        Ok(())
    }
}

/// The milliseconds in `delay`, if any.
fn ms(delay: &AtomicU64) -> Option<Duration> {
    let late = delay.load(Ordering::SeqCst);
    (late > 0).then(|| Duration::from_millis(late))
}

/// `operation`, applied after `late_ms` whether or not its caller still waits: a statement
/// already sent to a database runs to its end.
async fn on_the_wire<T: Send + 'static>(
    late_ms: u64,
    operation: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    let sent = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(late_ms)).await;
        operation.await
    });
    sent.await.unwrap()
}

#[async_trait]
impl IdempotencyStore for FaultyStore {
    async fn claim(&self, claimant: Claimant<'_>, lease: Duration) -> Result<Claim, StoreError> {
        self.claims.fetch_add(1, Ordering::SeqCst);
        self.check().await?;
        let claim = match self.faults.claims_applied_late_ms.load(Ordering::SeqCst) {
            0 => self.inner.claim(claimant, lease).await,
            late => {
                let (inner, owned) = (self.inner.clone(), OwnedClaimant::from(claimant));
                on_the_wire(
                    late,
                    async move { inner.claim(owned.claimant(), lease).await },
                )
                .await
            }
        };
        let late = self.faults.late_claims_ms.load(Ordering::SeqCst);
        if late > 0 {
            tokio::time::sleep(Duration::from_millis(late)).await;
        }
        claim
    }

    async fn renew(&self, claimant: Claimant<'_>, lease: Duration) -> Result<Renewal, StoreError> {
        self.renewals.fetch_add(1, Ordering::SeqCst);
        self.check().await?;
        let renewed = match self.faults.renewals_applied_late_ms.load(Ordering::SeqCst) {
            0 => self.inner.renew(claimant, lease).await,
            late => {
                let (inner, owned) = (self.inner.clone(), OwnedClaimant::from(claimant));
                on_the_wire(
                    late,
                    async move { inner.renew(owned.claimant(), lease).await },
                )
                .await
            }
        };
        if let Some(late) = ms(&self.faults.renewals_answered_late_ms) {
            tokio::time::sleep(late).await;
        }
        renewed
    }

    async fn complete(
        &self,
        claimant: Claimant<'_>,
        retention: Duration,
    ) -> Result<Completion, StoreError> {
        self.completions.fetch_add(1, Ordering::SeqCst);
        self.check().await?;
        if self.faults.completions_fail.load(Ordering::SeqCst) {
            return Err(StoreError::backend(std::io::Error::other(
                "completions fail",
            )));
        }
        self.inner.complete(claimant, retention).await
    }

    async fn release(&self, claimant: Claimant<'_>) -> Result<Release, StoreError> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        self.check().await?;
        self.inner.release(claimant).await
    }
}

/// A claimant's fields, owned: for an operation that outlives its caller ("on the wire").
struct OwnedClaimant {
    event_id: String,
    event_type: String,
    token: ClaimToken,
}

impl OwnedClaimant {
    fn claimant(&self) -> Claimant<'_> {
        Claimant::new(&self.event_id, &self.event_type, &self.token)
    }
}

impl From<Claimant<'_>> for OwnedClaimant {
    fn from(claimant: Claimant<'_>) -> Self {
        Self {
            event_id: claimant.event_id.to_owned(),
            event_type: claimant.event_type.to_owned(),
            token: *claimant.token,
        }
    }
}
