//! [`Claimant`]: the event a store operation is about, and the delivery that asks.

use super::ClaimToken;

/// The event a store operation is about, and the delivery that asks: every
/// [`IdempotencyStore`](super::IdempotencyStore) operation takes one.
///
/// The event's id is the key of its record; its type is recorded for operators (the SQL
/// schema has a column for it) and takes no part in any decision; the token names the
/// delivery that owns, or wants to own, the claim.
///
/// ```
/// use sangho_webhook::store::{ClaimToken, Claimant};
///
/// let token = ClaimToken::generate();
/// let claimant = Claimant::new("evt_1", "payment_intent.succeeded", &token);
/// assert_eq!(claimant.event_id, "evt_1");
/// assert_eq!(claimant.token, &token);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Claimant<'a> {
    /// The event's id (`Sangho-Event-ID`, the event's `id`): the key of its record.
    pub event_id: &'a str,
    /// The event's type (`payment_intent.succeeded`), recorded for operators.
    pub event_type: &'a str,
    /// The delivery's token: who owns the claim.
    pub token: &'a ClaimToken,
}

impl<'a> Claimant<'a> {
    /// The delivery that holds `token` asks about the event `event_id` of type `event_type`.
    pub fn new(event_id: &'a str, event_type: &'a str, token: &'a ClaimToken) -> Self {
        Self {
            event_id,
            event_type,
            token,
        }
    }
}
