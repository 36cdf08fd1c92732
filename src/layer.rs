//! [`SanghoWebhookLayer`] and its builder: the configuration, its defaults, and the checks
//! that refuse settings that cannot work.

use std::{
    fmt,
    sync::Arc,
    time::{Duration, SystemTime},
};

use tokio_util::task::TaskTracker;
use tower_layer::Layer;

use crate::{
    Rejection, SanghoWebhook,
    renewal::Renewer,
    signature::Secret,
    store::IdempotencyStore,
    verify::{self, Verifier},
};

/// Receives Sangho webhooks: checks the signature header, buffers the body under a limit,
/// verifies the signature, parses the event into the request extensions and processes each
/// event once, through an [`IdempotencyStore`].
///
/// [`new`](Self::new) takes the defaults; [`builder`](Self::builder) changes them, and refuses
/// settings that cannot work when the layer is built.
///
/// ```
/// use axum::{Router, routing::post};
/// use sangho_webhook::{SanghoWebhookLayer, signature::Secret, store::MokaStore};
/// use std::time::Duration;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let secret = Secret::new("whsec_development_only")?;
/// let webhooks = SanghoWebhookLayer::builder(secret, MokaStore::new())
///     .with_max_body_size(256 * 1024)
///     .with_lease(Duration::from_secs(60))
///     .build()?;
///
/// let app: Router = Router::new()
///     .route("/webhooks/sangho", post(|| async { "ok" })).route_layer(webhooks);
/// # let _ = app;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct SanghoWebhookLayer {
    pub(crate) config: Arc<Config>,
}

/// Everything a [`SanghoWebhook`] needs, shared between its clones.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) verifier: Verifier,
    pub(crate) lease: Duration,
    pub(crate) retention: Duration,
    pub(crate) short_retention_allowed: bool,
    pub(crate) store_timeout: Duration,
    pub(crate) max_processing_time: Duration,
    pub(crate) completion_retry: Duration,
    pub(crate) fail_open: bool,
    pub(crate) store: Arc<dyn IdempotencyStore>,
    /// The handlers still running and the background settlements, for
    /// [`SanghoWebhookLayer::drain`].
    pub(crate) tasks: TaskTracker,
    /// Renews the claims of the handlers running.
    pub(crate) renewer: Renewer,
}

/// The provider redelivers an event for up to 48 hours.
const REDELIVERY_WINDOW: Duration = Duration::from_secs(48 * 3600);
/// The shortest lease, tolerance, store timeout and maximum processing time accepted.
const SHORTEST: Duration = Duration::from_secs(1);

impl SanghoWebhookLayer {
    /// The default body limit: 1 MiB.
    pub const DEFAULT_MAX_BODY_SIZE: usize = verify::DEFAULT_MAX_BODY_SIZE;
    /// The default timestamp tolerance: 300 s.
    pub const DEFAULT_TOLERANCE: Duration = verify::DEFAULT_TOLERANCE;
    /// The default lease of an in-flight claim: 30 s.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
    /// The default retention of a completed event: 72 h. The provider never redelivers after
    /// 48 h, so a completed event is remembered for as long as a redelivery can come.
    pub const DEFAULT_RETENTION: Duration = Duration::from_secs(72 * 3600);
    /// The default time a store operation may take before the delivery is answered 503: 5 s.
    pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_secs(5);
    /// The default time a handler's claim is renewed for: 10 min.
    pub const DEFAULT_MAX_PROCESSING_TIME: Duration = Duration::from_secs(600);
    /// The default time a failed completion is retried for: 5 min.
    pub const DEFAULT_COMPLETION_RETRY: Duration = Duration::from_secs(300);
    /// The default `Retry-After` on 409 and 503: 5 s.
    pub const DEFAULT_RETRY_AFTER: Duration = verify::DEFAULT_RETRY_AFTER;
    /// The longest lease accepted: 1 h. After a crash, the event waits for the lease before
    /// a redelivery takes it over; an hour already costs much of the provider's 48 hours.
    pub const MAX_LEASE: Duration = Duration::from_secs(3600);
    /// The longest maximum processing time accepted: 12 h. With the longest lease and
    /// completion retries, one delivery can hold its event for at most 14 h, well inside the
    /// provider's 48-hour redelivery window.
    pub const MAX_PROCESSING_TIME: Duration = Duration::from_secs(12 * 3600);
    /// The longest completion-retry time accepted: 1 h.
    pub const MAX_COMPLETION_RETRY: Duration = Duration::from_secs(3600);

    /// A layer with the default settings that accepts events signed with `secret` and
    /// remembers them in `store` (any [`IdempotencyStore`], including an
    /// `Arc<dyn IdempotencyStore>`).
    ///
    /// ```
    /// use sangho_webhook::{SanghoWebhookLayer, signature::Secret, store::MokaStore};
    ///
    /// let layer = SanghoWebhookLayer::new(Secret::new("whsec_x").unwrap(), MokaStore::new());
    /// # let _ = layer;
    /// ```
    pub fn new(secret: Secret, store: impl IdempotencyStore) -> Self {
        Self::builder(secret, store)
            .build()
            .expect("the default settings are valid")
    }

    /// A builder starting from the default settings.
    pub fn builder(secret: Secret, store: impl IdempotencyStore) -> SanghoWebhookLayerBuilder {
        SanghoWebhookLayerBuilder {
            config: Config {
                verifier: Verifier::new(secret),
                lease: Self::DEFAULT_LEASE,
                retention: Self::DEFAULT_RETENTION,
                short_retention_allowed: false,
                store_timeout: Self::DEFAULT_STORE_TIMEOUT,
                max_processing_time: Self::DEFAULT_MAX_PROCESSING_TIME,
                completion_retry: Self::DEFAULT_COMPLETION_RETRY,
                fail_open: false,
                store: Arc::new(store),
                tasks: TaskTracker::new(),
                renewer: Renewer::default(),
            },
        }
    }
}

/// Builds a [`SanghoWebhookLayer`]; [`build`](Self::build) refuses settings that cannot work.
///
/// | setting | default | builder |
/// | --- | --- | --- |
/// | secrets | the one given to [`builder`](SanghoWebhookLayer::builder) | [`with_secret`](Self::with_secret) adds one (rotation) |
/// | body limit | 1 MiB | [`with_max_body_size`](Self::with_max_body_size) |
/// | timestamp tolerance | 300 s, both directions | [`with_tolerance`](Self::with_tolerance) |
/// | lease of an in-flight claim | 30 s, renewed while the handler runs | [`with_lease`](Self::with_lease) |
/// | maximum processing time | 10 min | [`with_max_processing_time`](Self::with_max_processing_time) |
/// | retention of a completed event | 72 h (at least 48 h) | [`with_retention`](Self::with_retention) |
/// | store timeout | 5 s | [`with_store_timeout`](Self::with_store_timeout) |
/// | completion retries | for 5 min | [`with_completion_retry`](Self::with_completion_retry) |
/// | `Retry-After` on 409 and 503 | 5 s | [`with_retry_after`](Self::with_retry_after) |
/// | fail open when the store is down | no | [`with_fail_open`](Self::with_fail_open) |
/// | refusal responses | `{"error":"<code>"}` | [`with_rejection_response`](Self::with_rejection_response) |
/// | clock | the system clock | [`with_clock`](Self::with_clock) |
///
/// ```
/// use sangho_webhook::{ConfigError, SanghoWebhookLayer, signature::Secret, store::MokaStore};
/// use std::time::Duration;
///
/// let secret = Secret::new("whsec_x").unwrap();
/// let refused = SanghoWebhookLayer::builder(secret, MokaStore::new())
///     .with_lease(Duration::from_millis(500))
///     .build();
/// assert!(matches!(refused, Err(ConfigError::LeaseTooShort(_))));
/// ```
#[must_use]
pub struct SanghoWebhookLayerBuilder {
    config: Config,
}

impl SanghoWebhookLayerBuilder {
    /// Accepts events signed with `secret` too. During a rotation, configure the old and the
    /// new secret; remove the old one once the provider signs with the new one only.
    pub fn with_secret(mut self, secret: Secret) -> Self {
        self.config.verifier.secrets.push(secret);
        self
    }

    /// Refuses bodies larger than `bytes` with 413. A `Content-Length` over the limit is refused
    /// before anything is read; a streamed body is cut off at the limit. At least 1.
    pub fn with_max_body_size(mut self, bytes: usize) -> Self {
        self.config.verifier.max_body_size = bytes;
        self
    }

    /// Accepts signatures whose timestamp is at most `tolerance` before or after now (whole
    /// seconds, at least 1 s). A smaller tolerance narrows the window for replays; it must
    /// stay above the clock skew between the provider and this server.
    pub fn with_tolerance(mut self, tolerance: Duration) -> Self {
        self.config.verifier.tolerance = tolerance;
        self
    }

    /// Holds an in-flight claim for `lease` (at least 1 s, at most 1 h, shorter than the
    /// retention), renewed every third of it while the handler runs. Each renewal may take
    /// what remains of the lease (the store timeout at most): keep the lease well above the
    /// store's latency. After a crash, the event waits this long (answered 409) before the next
    /// delivery takes it over.
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.config.lease = lease;
        self
    }

    /// Renews a handler's claim for at most `limit` (at least 1 s, at most 12 h). A handler still running
    /// after it is logged at `error`, and its claim is left to run out, so that a hung handler
    /// cannot hold its event until the provider gives up; a redelivery after that may process
    /// the event a second time.
    pub fn with_max_processing_time(mut self, limit: Duration) -> Self {
        self.config.max_processing_time = limit;
        self
    }

    /// Remembers a completed event for `retention`, which must cover the provider's 48-hour
    /// redelivery window unless [`with_short_retention_allowed`](Self::with_short_retention_allowed).
    pub fn with_retention(mut self, retention: Duration) -> Self {
        self.config.retention = retention;
        self
    }

    /// Accepts a retention under 48 hours (for tests, or an endpoint whose events may be
    /// processed again after that).
    pub fn with_short_retention_allowed(mut self, allowed: bool) -> Self {
        self.config.short_retention_allowed = allowed;
        self
    }

    /// Gives each store operation at most `timeout` (at least 1 s); past it, a claim is
    /// answered 503 (and released in the background), a completion is retried.
    pub fn with_store_timeout(mut self, timeout: Duration) -> Self {
        self.config.store_timeout = timeout;
        self
    }

    /// Retries a completion that failed for up to `limit`, with backoff, while the claim is
    /// renewed, so that a store that comes back within it loses nothing (at most 1 h). Zero
    /// disables the retries: a failed completion is then logged at `error`, and the event may be processed
    /// again on redelivery.
    pub fn with_completion_retry(mut self, limit: Duration) -> Self {
        self.config.completion_retry = limit;
        self
    }

    /// Sends `Retry-After` with this many seconds (at least 1) on 409 and 503.
    pub fn with_retry_after(mut self, retry_after: Duration) -> Self {
        self.config.verifier.retry_after = retry_after;
        self
    }

    /// When the store fails, calls the handler anyway instead of answering 503.
    ///
    /// Off by default. Turning it on trades duplicates for availability: while the store is
    /// down, every delivery is processed, including redeliveries of events already processed
    /// and concurrent deliveries of one event.
    pub fn with_fail_open(mut self, fail_open: bool) -> Self {
        self.config.fail_open = fail_open;
        self
    }

    /// Answers refused deliveries with `response` instead of the default JSON
    /// ([`Rejection::default_response`]). `Retry-After` is still set on 409 and 503 unless the
    /// function sets it; the [`Rejection`] and the [`Outcome`](crate::Outcome) still go into the
    /// response's extensions.
    ///
    /// ```
    /// use sangho_webhook::{Rejection, SanghoWebhookLayer, signature::Secret, store::MokaStore};
    ///
    /// let layer = SanghoWebhookLayer::builder(Secret::new("whsec_x").unwrap(), MokaStore::new())
    ///     .with_rejection_response(|rejection: &Rejection| {
    ///         http::Response::builder()
    ///             .status(rejection.status())
    ///             .header("content-type", "text/plain")
    ///             .body(format!("refused: {}", rejection.kind()))
    ///             .unwrap()
    ///     })
    ///     .build()
    ///     .unwrap();
    /// # let _ = layer;
    /// ```
    pub fn with_rejection_response<F, B>(mut self, response: F) -> Self
    where
        F: Fn(&Rejection) -> http::Response<B> + Send + Sync + 'static,
        B: Into<bytes::Bytes>,
    {
        self.config.verifier.rejection_response =
            Arc::new(move |rejection| response(rejection).map(Into::into));
        self
    }

    /// Reads the current time from `clock` instead of the system clock (for tests).
    ///
    /// ```
    /// use sangho_webhook::{SanghoWebhookLayer, signature::Secret, store::MokaStore};
    /// use std::time::{Duration, UNIX_EPOCH};
    ///
    /// let layer = SanghoWebhookLayer::builder(Secret::new("whsec_x").unwrap(), MokaStore::new())
    ///     .with_clock(|| UNIX_EPOCH + Duration::from_secs(1_700_000_000))
    ///     .build()
    ///     .unwrap();
    /// # let _ = layer;
    /// ```
    pub fn with_clock(mut self, clock: impl Fn() -> SystemTime + Send + Sync + 'static) -> Self {
        self.config.verifier.clock = Arc::new(clock);
        self
    }

    /// The layer, or the first setting that cannot work.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the setting.
    pub fn build(self) -> Result<SanghoWebhookLayer, ConfigError> {
        let config = self.config;
        let at_least_a_second = [
            (
                config.lease,
                ConfigError::LeaseTooShort as fn(Duration) -> ConfigError,
            ),
            (config.verifier.tolerance, ConfigError::ToleranceTooShort),
            (config.store_timeout, ConfigError::StoreTimeoutTooShort),
            (
                config.max_processing_time,
                ConfigError::MaxProcessingTimeTooShort,
            ),
        ];
        if let Some((value, error)) = at_least_a_second
            .iter()
            .find(|(value, _)| *value < SHORTEST)
        {
            return Err(error(*value));
        }
        let at_most = [
            (
                config.lease,
                SanghoWebhookLayer::MAX_LEASE,
                ConfigError::LeaseTooLong as fn(Duration) -> ConfigError,
            ),
            (
                config.max_processing_time,
                SanghoWebhookLayer::MAX_PROCESSING_TIME,
                ConfigError::MaxProcessingTimeTooLong,
            ),
            (
                config.completion_retry,
                SanghoWebhookLayer::MAX_COMPLETION_RETRY,
                ConfigError::CompletionRetryTooLong,
            ),
        ];
        if let Some((value, _, error)) = at_most.iter().find(|(value, max, _)| value > max) {
            return Err(error(*value));
        }
        let short_retention = config.retention < REDELIVERY_WINDOW;
        if config.retention.is_zero() || (short_retention && !config.short_retention_allowed) {
            return Err(ConfigError::RetentionTooShort(config.retention));
        }
        if config.lease >= config.retention {
            return Err(ConfigError::LeaseNotUnderRetention {
                lease: config.lease,
                retention: config.retention,
            });
        }
        if config.verifier.max_body_size == 0 {
            return Err(ConfigError::EmptyBodyLimit);
        }
        Ok(SanghoWebhookLayer {
            config: Arc::new(config),
        })
    }
}

/// A setting that cannot work, refused by [`SanghoWebhookLayerBuilder::build`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The lease is under a second: claims would expire while their handler runs.
    #[error("the lease must be at least 1 s (got {0:?})")]
    LeaseTooShort(Duration),
    /// The timestamp tolerance is under a second: every delivery would be refused as a replay.
    #[error("the timestamp tolerance must be at least 1 s (got {0:?})")]
    ToleranceTooShort(Duration),
    /// The store timeout is under a second: ordinary store latency would turn into 503s.
    #[error("the store timeout must be at least 1 s (got {0:?})")]
    StoreTimeoutTooShort(Duration),
    /// The maximum processing time is under a second.
    #[error("the maximum processing time must be at least 1 s (got {0:?})")]
    MaxProcessingTimeTooShort(Duration),
    /// The retention is zero, or under the provider's 48-hour redelivery window without
    /// [`with_short_retention_allowed`](SanghoWebhookLayerBuilder::with_short_retention_allowed):
    /// a redelivery after it would be processed again.
    #[error(
        "the retention must cover the provider's 48 h redelivery window (got {0:?}); allow a \
         shorter one explicitly with with_short_retention_allowed(true)"
    )]
    RetentionTooShort(Duration),
    /// The lease is over [`SanghoWebhookLayer::MAX_LEASE`]: after a crash, its event would
    /// wait that long for a redelivery to take it over.
    #[error("the lease must be at most 1 h (got {0:?})")]
    LeaseTooLong(Duration),
    /// The maximum processing time is over [`SanghoWebhookLayer::MAX_PROCESSING_TIME`]: one
    /// delivery could hold its event past the provider's redelivery window.
    #[error("the maximum processing time must be at most 12 h (got {0:?})")]
    MaxProcessingTimeTooLong(Duration),
    /// The completion-retry time is over [`SanghoWebhookLayer::MAX_COMPLETION_RETRY`].
    #[error("the completion-retry time must be at most 1 h (got {0:?})")]
    CompletionRetryTooLong(Duration),
    /// The lease is not shorter than the retention: a completed event would be forgotten
    /// before an in-flight claim of it ran out.
    #[error("the lease ({lease:?}) must be shorter than the retention ({retention:?})")]
    LeaseNotUnderRetention {
        /// The lease.
        lease: Duration,
        /// The retention.
        retention: Duration,
    },
    /// The body limit is zero: every delivery would be refused.
    #[error("the body limit must be at least 1 byte")]
    EmptyBodyLimit,
    /// The inbox's receipts are not durable (a store with asynchronous commits): inbox mode
    /// would acknowledge events that a crash then loses.
    #[error(
        "the inbox's receipts are not durable (asynchronous commits): inbox mode acknowledges an \
         event only once it is durable; use a store with synchronous commits"
    )]
    InboxNotDurable,
    /// A header that carries credentials was asked to be stored with the inbox's events.
    #[error("the {0} header carries credentials and is never stored with an event")]
    CredentialHeaderStored(http::HeaderName),
    /// An inbox worker with no tasks would handle nothing.
    #[error("an inbox worker needs a concurrency of at least 1")]
    NoWorkers,
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

impl fmt::Debug for SanghoWebhookLayerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.config.fmt(f)
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SanghoWebhookLayer")
            .field("secrets", &self.verifier.secrets)
            .field("max_body_size", &self.verifier.max_body_size)
            .field("tolerance", &self.verifier.tolerance)
            .field("lease", &self.lease)
            .field("max_processing_time", &self.max_processing_time)
            .field("retention", &self.retention)
            .field("store_timeout", &self.store_timeout)
            .field("completion_retry", &self.completion_retry)
            .field("retry_after", &self.verifier.retry_after)
            .field("fail_open", &self.fail_open)
            .finish_non_exhaustive()
    }
}
