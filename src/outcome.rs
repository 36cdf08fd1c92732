//! [`Outcome`]: what became of a delivery, in every response's extensions.

use std::fmt;

use crate::RejectionKind;

/// What the layer did with one delivery. Every response the layer returns carries one in its
/// extensions, so that an outer layer (metrics, access logs) can count deliveries by outcome.
///
/// Each answer has one outcome. An answer the layer gave itself with a
/// [`Rejection`](crate::Rejection) (a verification failure, another delivery of the event in
/// flight, the store unavailable) is [`Refused`](Self::Refused) with the rejection's kind: the
/// 409 of an event in flight is `Outcome::Refused(RejectionKind::InFlight)`, beside the
/// `Rejection` of that kind in the same extensions. Its [`code`](Self::code) tells the two
/// retry-later answers apart from the refusals.
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
    /// The layer answered the delivery itself, without calling the handler, with the
    /// [`Rejection`](crate::Rejection) of this kind: refused before the handler (bad
    /// signature, body, event…: 400 or 413), another delivery of the event being processed
    /// ([`InFlight`](RejectionKind::InFlight): 409), or the idempotency store failed or timed
    /// out ([`StoreUnavailable`](RejectionKind::StoreUnavailable): 503).
    Refused(RejectionKind),
    /// The handler answered, but not 2xx: the claim was released for the next delivery.
    HandlerFailed,
    /// The handler panicked: answered 500, and the claim was released for the next delivery.
    HandlerPanicked,
    /// Inbox mode: the event is stored durably for the workers, answered 202.
    Stored,
}

impl Outcome {
    /// A short machine-readable name, for a metric's label: `processed`, `completion_failed`,
    /// `taken_over`, `duplicate`, `in_flight`, `refused`, `store_unavailable`,
    /// `handler_failed`, `handler_panicked` or `stored`.
    ///
    /// A [`Refused`](Self::Refused) delivery is `refused` (its kind's
    /// [`code`](RejectionKind::code) says why), except the two the provider is asked to retry
    /// later, which say nothing against the delivery: `in_flight` (409) and
    /// `store_unavailable` (503).
    ///
    /// ```
    /// use sangho_webhook::{Outcome, RejectionKind};
    ///
    /// assert_eq!(Outcome::Refused(RejectionKind::SignatureMismatch).code(), "refused");
    /// assert_eq!(Outcome::Refused(RejectionKind::InFlight).code(), "in_flight");
    /// ```
    pub fn code(self) -> &'static str {
        match self {
            Self::Processed => "processed",
            Self::CompletionFailed => "completion_failed",
            Self::TakenOver => "taken_over",
            Self::Duplicate => "duplicate",
            Self::Refused(RejectionKind::InFlight) => "in_flight",
            Self::Refused(RejectionKind::StoreUnavailable) => "store_unavailable",
            Self::Refused(_) => "refused",
            Self::HandlerFailed => "handler_failed",
            Self::HandlerPanicked => "handler_panicked",
            Self::Stored => "stored",
        }
    }

    /// Whether the provider should see this delivery as accepted (a 2xx).
    pub fn is_accepted(self) -> bool {
        matches!(
            self,
            Self::Processed
                | Self::CompletionFailed
                | Self::TakenOver
                | Self::Duplicate
                | Self::Stored
        )
    }
}

/// [`Outcome::Refused`] with the kind.
impl From<RejectionKind> for Outcome {
    fn from(kind: RejectionKind) -> Self {
        Self::Refused(kind)
    }
}

/// The [`code`](Outcome::code), with the kind of a `refused` delivery: `refused
/// (signature_mismatch)`, `in_flight`.
impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self, self.code()) {
            (Self::Refused(kind), "refused") => write!(f, "refused ({kind})"),
            (_, code) => f.write_str(code),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rejection_is_refused_with_its_kind_and_the_retry_later_two_keep_their_codes() {
        let refused = Outcome::from(RejectionKind::SignatureMismatch);
        assert_eq!(refused, Outcome::Refused(RejectionKind::SignatureMismatch));
        assert_eq!(
            (refused.code(), refused.to_string().as_str()),
            ("refused", "refused (signature_mismatch)")
        );
        for (kind, code) in [
            (RejectionKind::InFlight, "in_flight"),
            (RejectionKind::StoreUnavailable, "store_unavailable"),
        ] {
            let outcome = Outcome::from(kind);
            assert_eq!(outcome, Outcome::Refused(kind));
            assert_eq!((outcome.code(), outcome.to_string().as_str()), (code, code));
            assert!(!outcome.is_accepted());
        }
    }
}
