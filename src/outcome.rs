//! [`Outcome`]: what became of a delivery, in every response's extensions.

use std::fmt;

use crate::RejectionKind;

/// What the layer did with one delivery. Every response the layer returns carries one in its
/// extensions, so that an outer layer (metrics, access logs) can count deliveries by outcome.
///
/// Two endings have no response to carry it: a handler that returned an `Err` (the error
/// passes through the layer), and a provider that hung up before the answer (the handler keeps
/// running, and its answer settles the event as usual). Both are logged at `warn` with an
/// `outcome` field, `handler_error` and `hung_up`: count them from the tracing events.
///
/// ```
/// use sangho_webhook::Outcome;
///
/// # fn count(response: &http::Response<()>) {
/// if let Some(outcome) = response.extensions().get::<Outcome>() {
///     println!("sangho_webhook_deliveries_total{{outcome=\"{}\"}} += 1", outcome.code());
/// }
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// The handler answered 2xx and the event is recorded as completed.
    Processed,
    /// The handler answered 2xx, but recording the completion failed; the layer retries it in
    /// the background.
    CompletionFailed,
    /// The handler answered 2xx, but another delivery had taken the event over (this one's
    /// lease ran out): the event may have been processed twice.
    TakenOver,
    /// The event was processed already: answered 200 without calling the handler.
    Duplicate,
    /// Another delivery of the event is being processed: answered 409.
    InFlight,
    /// The delivery was refused before the handler (bad signature, body, event…).
    Refused(RejectionKind),
    /// The idempotency store failed or timed out: answered 503.
    StoreUnavailable,
    /// The handler answered, but not 2xx: the claim was released for the next delivery.
    HandlerFailed,
    /// The handler panicked: answered 500, and the claim was released for the next delivery.
    HandlerPanicked,
}

impl Outcome {
    /// A short machine-readable name, for a metric's label: `processed`, `completion_failed`,
    /// `taken_over`, `duplicate`, `in_flight`, `refused`, `store_unavailable`,
    /// `handler_failed` or `handler_panicked`.
    pub fn code(self) -> &'static str {
        match self {
            Self::Processed => "processed",
            Self::CompletionFailed => "completion_failed",
            Self::TakenOver => "taken_over",
            Self::Duplicate => "duplicate",
            Self::InFlight => "in_flight",
            Self::Refused(_) => "refused",
            Self::StoreUnavailable => "store_unavailable",
            Self::HandlerFailed => "handler_failed",
            Self::HandlerPanicked => "handler_panicked",
        }
    }

    /// Whether the provider should see this delivery as accepted (a 2xx).
    pub fn is_accepted(self) -> bool {
        matches!(
            self,
            Self::Processed | Self::CompletionFailed | Self::TakenOver | Self::Duplicate
        )
    }
}

impl From<RejectionKind> for Outcome {
    fn from(kind: RejectionKind) -> Self {
        match kind {
            RejectionKind::InFlight => Self::InFlight,
            RejectionKind::StoreUnavailable => Self::StoreUnavailable,
            kind => Self::Refused(kind),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Refused(kind) => write!(f, "refused ({kind})"),
            outcome => f.write_str(outcome.code()),
        }
    }
}
