//! What the inbox's own operations take and answer (renew, complete and abandon answer the
//! store's [`Renewal`](crate::store::Renewal), [`Completion`](crate::store::Completion) and
//! [`Release`](crate::store::Release)).

use std::time::Duration;

/// What [`receive`](super::Inbox::receive) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Receipt {
    /// The event is new, and its row is durable: acknowledge it.
    Stored,
    /// The event was stored or processed already (received, in flight, completed or dead):
    /// acknowledge it as a duplicate.
    Duplicate,
    /// A delivery of the direct mode holds a live claim on the event and has not recorded it:
    /// answer 409, so that the provider retries.
    ClaimedByDelivery,
}

/// A failed attempt, as [`fail`](super::Inbox::fail) records it.
///
/// ```
/// use sangho_webhook::inbox::{FailedAttempt, NextAttempt};
/// use std::time::Duration;
///
/// let attempt = FailedAttempt::new("status 500: upstream down", NextAttempt::After(Duration::from_secs(20)));
/// # let _ = attempt;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailedAttempt<'a> {
    /// A bounded excerpt of the status or the error.
    pub error: &'a str,
    /// When the event is due again, or never.
    pub next: NextAttempt,
}

impl<'a> FailedAttempt<'a> {
    /// A failed attempt with its error excerpt and what comes next.
    pub fn new(error: &'a str, next: NextAttempt) -> Self {
        Self { error, next }
    }
}

/// What comes after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextAttempt {
    /// The event is due again after this long.
    After(Duration),
    /// The event is dead: no more attempts until an operator replays it.
    Dead,
}

/// What [`fail`](super::Inbox::fail) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Failure {
    /// The attempt is recorded, and the event waits for its next attempt (or is dead).
    Recorded,
    /// The token does not hold the event (another worker took it over, or it is completed):
    /// nothing changed.
    NotHeld,
}

/// How an operator replays events.
///
/// ```
/// use sangho_webhook::inbox::Replay;
///
/// let replay = Replay::new().with_force(true).with_reason("the fix for INC-42 is deployed");
/// # let _ = replay;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Replay {
    /// Replays a completed event too (it is processed again).
    pub force: bool,
    /// Why, recorded in the event's history.
    pub reason: Option<String>,
}

impl Replay {
    /// A replay of waiting and dead events only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replays completed events too.
    pub fn with_force(mut self, force: bool) -> Self {
        self.force = force;
        self
    }

    /// Records `reason` in the history.
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }
}

/// What [`replay`](super::Inbox::replay) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Replayed {
    /// The event is due now, with a fresh attempt budget; its history is kept.
    Replayed,
    /// A worker holds the event right now: refused, nothing changed.
    InFlight,
    /// The event is completed, and the replay was not forced: refused, nothing changed.
    Completed,
    /// No such event in the inbox (unknown, purged, or processed by the direct mode, which
    /// keeps no body): nothing changed.
    Unknown,
}

/// What [`discard`](super::Inbox::discard) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Discarded {
    /// The event's row is deleted.
    Discarded,
    /// A worker holds the event right now: refused, nothing changed.
    InFlight,
    /// No such event in the inbox: nothing changed.
    Unknown,
}
