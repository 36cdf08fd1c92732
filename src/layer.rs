//! [`SanghoWebhookLayer`]: the configuration, with its defaults and builders.

use std::{
    fmt,
    sync::Arc,
    time::{Duration, SystemTime},
};

use tower_layer::Layer;

use crate::{SanghoWebhook, signature::Secret, store::IdempotencyStore};

/// A source of the current time, for the timestamp tolerance check.
pub(crate) type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// Receives Sangho webhooks: buffers the body under a limit, verifies the signature, parses the
/// event into the request extensions and processes each event once, through an
/// [`IdempotencyStore`].
///
/// | setting | default | builder |
/// | --- | --- | --- |
/// | secrets | the one given to [`new`](Self::new) | [`with_secret`](Self::with_secret) adds one (rotation) |
/// | body limit | 1 MiB | [`with_max_body_size`](Self::with_max_body_size) |
/// | timestamp tolerance | 300 s, both directions | [`with_tolerance`](Self::with_tolerance) |
/// | lease of an in-flight claim | 30 s | [`with_lease`](Self::with_lease) |
/// | retention of a completed event | 72 h | [`with_retention`](Self::with_retention) |
/// | store timeout | 5 s | [`with_store_timeout`](Self::with_store_timeout) |
/// | `Retry-After` on 409 and 503 | 5 s | [`with_retry_after`](Self::with_retry_after) |
/// | fail open when the store is down | no | [`with_fail_open`](Self::with_fail_open) |
/// | clock | the system clock | [`with_clock`](Self::with_clock) |
///
/// ```
/// use axum::{Router, routing::post};
/// use sangho_webhook::{SanghoWebhookLayer, signature::Secret, store::MokaStore};
/// use std::time::Duration;
///
/// let secret = Secret::new("whsec_development_only").unwrap();
/// let webhooks = SanghoWebhookLayer::new(secret, MokaStore::new())
///     .with_max_body_size(256 * 1024)
///     .with_lease(Duration::from_secs(60));
///
/// let app: Router = Router::new()
///     .route("/webhooks/sangho", post(|| async { "ok" }))
///     .layer(webhooks);
/// ```
///
/// # The lease
///
/// A claim is held for the lease while the handler runs. If the process dies mid-handler, the
/// event is stuck as in flight (answered 409) until the lease expires, then the next delivery
/// takes it over. If a handler runs longer than the lease, a redelivery can take the event over
/// and run it a second time: choose a lease longer than your slowest handler.
#[derive(Clone)]
pub struct SanghoWebhookLayer {
    config: Arc<Config>,
}

/// Everything a [`SanghoWebhook`] needs, shared between its clones.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) secrets: Vec<Secret>,
    pub(crate) max_body_size: usize,
    pub(crate) tolerance: Duration,
    pub(crate) lease: Duration,
    pub(crate) retention: Duration,
    pub(crate) store_timeout: Duration,
    pub(crate) retry_after: Duration,
    pub(crate) fail_open: bool,
    pub(crate) clock: Clock,
    pub(crate) store: Arc<dyn IdempotencyStore>,
}

impl SanghoWebhookLayer {
    /// The default body limit: 1 MiB.
    pub const DEFAULT_MAX_BODY_SIZE: usize = 1024 * 1024;
    /// The default timestamp tolerance: 300 s.
    pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);
    /// The default lease of an in-flight claim: 30 s.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
    /// The default retention of a completed event: 72 h. The provider never redelivers after
    /// 48 h, so a completed event is remembered for as long as a redelivery can come.
    pub const DEFAULT_RETENTION: Duration = Duration::from_secs(72 * 3600);
    /// The default time a store operation may take before the delivery is answered 503: 5 s.
    pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_secs(5);
    /// The default `Retry-After` on 409 and 503: 5 s.
    pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(5);

    /// A layer that accepts events signed with `secret` and remembers them in `store`.
    ///
    /// `store` can be any [`IdempotencyStore`], including an `Arc<dyn IdempotencyStore>`.
    pub fn new(secret: Secret, store: impl IdempotencyStore) -> Self {
        Self {
            config: Arc::new(Config {
                secrets: vec![secret],
                max_body_size: Self::DEFAULT_MAX_BODY_SIZE,
                tolerance: Self::DEFAULT_TOLERANCE,
                lease: Self::DEFAULT_LEASE,
                retention: Self::DEFAULT_RETENTION,
                store_timeout: Self::DEFAULT_STORE_TIMEOUT,
                retry_after: Self::DEFAULT_RETRY_AFTER,
                fail_open: false,
                clock: Arc::new(SystemTime::now),
                store: Arc::new(store),
            }),
        }
    }

    fn update(mut self, change: impl FnOnce(&mut Config)) -> Self {
        change(Arc::make_mut(&mut self.config));
        self
    }

    /// Accepts events signed with `secret` too. During a rotation, configure the old and the
    /// new secret; remove the old one once the provider signs with the new one only.
    #[must_use]
    pub fn with_secret(self, secret: Secret) -> Self {
        self.update(|config| config.secrets.push(secret))
    }

    /// Refuses bodies larger than `bytes` with 413. A `Content-Length` over the limit is refused
    /// before anything is read; a streamed body is cut off at the limit.
    #[must_use]
    pub fn with_max_body_size(self, bytes: usize) -> Self {
        self.update(|config| config.max_body_size = bytes)
    }

    /// Accepts signatures whose timestamp is at most `tolerance` before or after now (whole
    /// seconds). A smaller tolerance narrows the window for replays; it must stay above the
    /// clock skew between the provider and this server.
    #[must_use]
    pub fn with_tolerance(self, tolerance: Duration) -> Self {
        self.update(|config| config.tolerance = tolerance)
    }

    /// Holds an in-flight claim for `lease`: after it, a claim whose owner never finished
    /// (a crashed process) is taken over by the next delivery.
    #[must_use]
    pub fn with_lease(self, lease: Duration) -> Self {
        self.update(|config| config.lease = lease)
    }

    /// Remembers a completed event for `retention`. Keep it above the provider's 48 h
    /// redelivery window.
    #[must_use]
    pub fn with_retention(self, retention: Duration) -> Self {
        self.update(|config| config.retention = retention)
    }

    /// Gives each store operation at most `timeout`; past it, the delivery is answered 503 (or,
    /// for the completion, logged at `error`).
    #[must_use]
    pub fn with_store_timeout(self, timeout: Duration) -> Self {
        self.update(|config| config.store_timeout = timeout)
    }

    /// Sends `Retry-After` with this many seconds (at least 1) on 409 and 503.
    #[must_use]
    pub fn with_retry_after(self, retry_after: Duration) -> Self {
        self.update(|config| config.retry_after = retry_after)
    }

    /// When the store fails, calls the handler anyway instead of answering 503.
    ///
    /// Off by default. Turning it on trades duplicates for availability: while the store is
    /// down, every delivery is processed, including redeliveries of events already processed
    /// and concurrent deliveries of one event.
    #[must_use]
    pub fn with_fail_open(self, fail_open: bool) -> Self {
        self.update(|config| config.fail_open = fail_open)
    }

    /// Reads the current time from `clock` instead of the system clock (for tests).
    ///
    /// ```
    /// use sangho_webhook::{SanghoWebhookLayer, signature::Secret, store::MokaStore};
    /// use std::time::{Duration, UNIX_EPOCH};
    ///
    /// let layer = SanghoWebhookLayer::new(Secret::new("whsec_x").unwrap(), MokaStore::new())
    ///     .with_clock(|| UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    /// # let _ = layer;
    /// ```
    #[must_use]
    pub fn with_clock(self, clock: impl Fn() -> SystemTime + Send + Sync + 'static) -> Self {
        self.update(|config| config.clock = Arc::new(clock))
    }
}

impl<S> Layer<S> for SanghoWebhookLayer {
    type Service = SanghoWebhook<S>;

    fn layer(&self, inner: S) -> Self::Service {
        SanghoWebhook::new(inner, self.config.clone())
    }
}

impl fmt::Debug for SanghoWebhookLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.config.fmt(f)
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SanghoWebhookLayer")
            .field("secrets", &self.secrets)
            .field("max_body_size", &self.max_body_size)
            .field("tolerance", &self.tolerance)
            .field("lease", &self.lease)
            .field("retention", &self.retention)
            .field("store_timeout", &self.store_timeout)
            .field("retry_after", &self.retry_after)
            .field("fail_open", &self.fail_open)
            .finish_non_exhaustive()
    }
}
