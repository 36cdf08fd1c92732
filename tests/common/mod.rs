//! Shared pieces of the layer tests: a layer at the fixtures' fixed time, and stores that
//! record or fail. (Requests go through `sangho_webhook::testing::send`.)

#![allow(dead_code)]

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use sangho_webhook::{
    SanghoWebhookLayer,
    signature::Secret,
    store::{Claim, ClaimToken, IdempotencyStore, MokaStore, StoreError},
    testing::fixtures,
};
pub const TYPE: &str = "payment_intent.succeeded";

pub fn secret() -> Secret {
    Secret::new(fixtures::SECRET).unwrap()
}

/// A layer with the fixture secret, at the fixtures' fixed time.
pub fn layer(store: impl IdempotencyStore) -> SanghoWebhookLayer {
    SanghoWebhookLayer::new(secret(), store).with_clock(fixtures::fixed_clock)
}

/// A [`MokaStore`] that counts every operation.
#[derive(Clone, Default)]
pub struct SpyStore {
    inner: MokaStore,
    pub claims: Arc<AtomicUsize>,
    pub completions: Arc<AtomicUsize>,
    pub releases: Arc<AtomicUsize>,
}

impl SpyStore {
    pub fn operations(&self) -> usize {
        self.claims.load(Ordering::SeqCst)
            + self.completions.load(Ordering::SeqCst)
            + self.releases.load(Ordering::SeqCst)
    }

    pub fn releases(&self) -> usize {
        self.releases.load(Ordering::SeqCst)
    }

    pub fn completions(&self) -> usize {
        self.completions.load(Ordering::SeqCst)
    }

    /// What a claim of `id` answers now (this claim is not counted; a new claim stays held).
    pub async fn peek(&self, id: &str) -> Claim {
        self.inner
            .claim(id, TYPE, Duration::from_secs(3600))
            .await
            .unwrap()
    }
}

#[async_trait]
impl IdempotencyStore for SpyStore {
    async fn claim(&self, id: &str, kind: &str, lease: Duration) -> Result<Claim, StoreError> {
        self.claims.fetch_add(1, Ordering::SeqCst);
        self.inner.claim(id, kind, lease).await
    }

    async fn complete(
        &self,
        id: &str,
        token: &ClaimToken,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        self.completions.fetch_add(1, Ordering::SeqCst);
        self.inner.complete(id, token, retention).await
    }

    async fn release(&self, id: &str, token: &ClaimToken) -> Result<bool, StoreError> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        self.inner.release(id, token).await
    }
}

/// How [`BrokenStore`] fails.
#[derive(Clone, Copy, Debug)]
pub enum Failure {
    /// Every operation errs.
    Errors,
    /// Every operation hangs for an hour.
    Hangs,
    /// Claims work; completions err.
    CompletionErrors,
}

/// A store that fails in one way, over a working [`MokaStore`].
#[derive(Clone)]
pub struct BrokenStore {
    pub failure: Failure,
    pub inner: MokaStore,
}

impl BrokenStore {
    pub fn new(failure: Failure) -> Self {
        Self {
            failure,
            inner: MokaStore::new(),
        }
    }

    async fn fail(&self) -> StoreError {
        if let Failure::Hangs = self.failure {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        StoreError::backend(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "the store is down",
        ))
    }
}

#[async_trait]
impl IdempotencyStore for BrokenStore {
    async fn claim(&self, id: &str, kind: &str, lease: Duration) -> Result<Claim, StoreError> {
        match self.failure {
            Failure::CompletionErrors => self.inner.claim(id, kind, lease).await,
            _ => Err(self.fail().await),
        }
    }

    async fn complete(&self, _: &str, _: &ClaimToken, _: Duration) -> Result<bool, StoreError> {
        Err(self.fail().await)
    }

    async fn release(&self, id: &str, token: &ClaimToken) -> Result<bool, StoreError> {
        match self.failure {
            Failure::CompletionErrors => self.inner.release(id, token).await,
            _ => Err(self.fail().await),
        }
    }
}
