//! The store's answers: one enum per operation, each variant named for what the store found.

/// What [`IdempotencyStore::claim`](super::IdempotencyStore::claim) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Claim {
    /// The event had no live record: the caller's token now owns it, and the caller must
    /// [`complete`](super::IdempotencyStore::complete) or
    /// [`release`](super::IdempotencyStore::release) it.
    Acquired,
    /// The event was processed already: answer the provider with a duplicate acknowledgement.
    Completed,
    /// Another delivery holds a live claim on the event: the outcome is not known yet.
    InFlight,
}

/// What [`IdempotencyStore::renew`](super::IdempotencyStore::renew) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Renewal {
    /// The claim is still the token's: its lease was extended (or recorded again, when its
    /// record had run out and nobody took the event over), or the token completed the event.
    Held,
    /// Another owner holds or completed the event: the claim was taken over, and nothing was
    /// changed.
    TakenOver,
}

/// What [`IdempotencyStore::complete`](super::IdempotencyStore::complete) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Completion {
    /// The event is recorded as completed by the token for the retention, also when the
    /// token's own record had expired, been evicted or lost, and on a repeated completion.
    Recorded,
    /// Another owner holds or completed the event: nothing was changed.
    TakenOver,
}

/// What [`IdempotencyStore::release`](super::IdempotencyStore::release) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Release {
    /// The token's live in-flight claim was forgotten: the next delivery processes the event.
    Released,
    /// The token held no live in-flight claim (it expired, another owner holds the event, or
    /// the event is completed): nothing was changed.
    NotHeld,
}
