//! The events an inbox holds, as the receipt writes them, a worker takes them and an operator
//! reads them.

use std::{fmt, time::Duration, time::SystemTime};

use bytes::Bytes;

use crate::store::{ClaimToken, Claimant};

/// A verified event, as the receipt stores it: its id and type, the raw signed body, the
/// stored headers and the path it was received on.
///
/// ```
/// use sangho_webhook::inbox::ReceivedEvent;
///
/// let body = bytes::Bytes::from_static(br#"{"id":"evt_1","type":"charge.succeeded"}"#);
/// let headers = [("content-type".to_owned(), "application/json".to_owned())];
/// let event = ReceivedEvent::new("evt_1", "charge.succeeded", &body, &headers, "/webhooks");
/// assert_eq!(event.event_id, "evt_1");
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ReceivedEvent<'a> {
    /// The event's id (the deduplication key).
    pub event_id: &'a str,
    /// The event's type.
    pub event_type: &'a str,
    /// The raw body, byte for byte as signed.
    pub body: &'a Bytes,
    /// The stored headers (lower-case names), in the order received.
    pub headers: &'a [(String, String)],
    /// The path the event was received on.
    pub path: &'a str,
    /// The event's ordering key, if the receiver gives one (already as stored:
    /// [`stored_ordering_key`](super::stored_ordering_key)).
    pub ordering_key: Option<&'a str>,
}

impl<'a> ReceivedEvent<'a> {
    /// The event, as the receipt stores it.
    pub fn new(
        event_id: &'a str,
        event_type: &'a str,
        body: &'a Bytes,
        headers: &'a [(String, String)],
        path: &'a str,
    ) -> Self {
        Self {
            event_id,
            event_type,
            body,
            headers,
            path,
            ordering_key: None,
        }
    }

    /// The event with an ordering key: events that share one are processed one at a time, in
    /// the order of receipt (see [per-object ordering](crate::inbox#per-object-ordering)).
    pub fn with_ordering_key(mut self, key: Option<&'a str>) -> Self {
        self.ordering_key = key;
        self
    }
}

/// An event a worker took, under a lease owned by its token.
///
/// ```
/// # fn handle(taken: sangho_webhook::inbox::TakenEvent) {
/// println!("attempt {} of {}", taken.attempt, taken.event_id);
/// let claimant = taken.claimant(); // for renew, complete, fail and abandon
/// # let _ = claimant;
/// # }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TakenEvent {
    /// The event's id.
    pub event_id: String,
    /// The event's type.
    pub event_type: String,
    /// The raw body, byte for byte as received.
    pub body: Bytes,
    /// The stored headers.
    pub headers: Vec<(String, String)>,
    /// The path the event was received on.
    pub path: String,
    /// When the event was received.
    pub received_at: SystemTime,
    /// When the attempt budget started: the receipt, or the last replay. The
    /// [`RetryPolicy`](super::RetryPolicy)'s age limit counts from it.
    pub budget_start: SystemTime,
    /// This attempt's number: 1 for the first, counted since the last replay.
    pub attempt: u32,
    /// The token that owns the lease.
    pub token: ClaimToken,
    /// The event's ordering key, if it has one.
    pub ordering_key: Option<String>,
}

impl TakenEvent {
    /// A taken event, as a store builds it.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        event_id: String,
        event_type: String,
        body: Bytes,
        headers: Vec<(String, String)>,
        path: String,
        received_at: SystemTime,
        budget_start: SystemTime,
        attempt: u32,
        token: ClaimToken,
    ) -> Self {
        Self {
            event_id,
            event_type,
            body,
            headers,
            path,
            received_at,
            budget_start,
            attempt,
            token,
            ordering_key: None,
        }
    }

    /// The taken event with its ordering key.
    pub fn with_ordering_key(mut self, key: Option<String>) -> Self {
        self.ordering_key = key;
        self
    }

    /// The lease's owner, for [`renew`](super::Inbox::renew), [`complete`](super::Inbox::complete),
    /// [`fail`](super::Inbox::fail) and [`abandon`](super::Inbox::abandon).
    pub fn claimant(&self) -> Claimant<'_> {
        Claimant::new(&self.event_id, &self.event_type, &self.token)
    }
}

/// Where an event is in the inbox.
///
/// ```
/// use sangho_webhook::inbox::EventState;
///
/// assert_eq!("dead".parse::<EventState>(), Ok(EventState::Dead));
/// assert_eq!(EventState::InFlight.as_str(), "in_flight");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum EventState {
    /// Stored and waiting: due now, or at its next attempt after a failure.
    Received,
    /// A worker holds it under a lease.
    InFlight,
    /// Processed.
    Completed,
    /// Out of attempts (or too old): kept until an operator replays or discards it.
    Dead,
}

impl EventState {
    /// Every state, in the order of the life of an event.
    pub const ALL: [EventState; 4] = [
        EventState::Received,
        EventState::InFlight,
        EventState::Completed,
        EventState::Dead,
    ];

    /// The state's name, as stored: `received`, `in_flight`, `completed` or `dead`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Received => "received",
            Self::InFlight => "in_flight",
            Self::Completed => "completed",
            Self::Dead => "dead",
        }
    }
}

impl fmt::Display for EventState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A state name that is not one of [`EventState`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown event state {0:?} (expected received, in_flight, completed or dead)")]
pub struct UnknownState(pub String);

impl std::str::FromStr for EventState {
    type Err = UnknownState;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|state| state.as_str() == name)
            .ok_or_else(|| UnknownState(name.to_owned()))
    }
}

/// One event, as an operator lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EventSummary {
    /// The event's id.
    pub event_id: String,
    /// The event's type.
    pub event_type: String,
    /// Where it is.
    pub state: EventState,
    /// When it was received.
    pub received_at: SystemTime,
    /// The attempts since its receipt or its last replay.
    pub attempts: u32,
    /// The last failed attempt's error, if any.
    pub last_error: Option<String>,
    /// Its ordering key, if it has one.
    pub ordering_key: Option<String>,
}

impl EventSummary {
    /// A summary, as a store builds it.
    pub fn new(
        event_id: String,
        event_type: String,
        state: EventState,
        received_at: SystemTime,
        attempts: u32,
        last_error: Option<String>,
    ) -> Self {
        Self {
            event_id,
            event_type,
            state,
            received_at,
            attempts,
            last_error,
            ordering_key: None,
        }
    }

    /// The summary with the event's ordering key.
    pub fn with_ordering_key(mut self, key: Option<String>) -> Self {
        self.ordering_key = key;
        self
    }
}

/// One event in full, as an operator shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EventRecord {
    /// What [`list`](super::Inbox::list) shows.
    pub summary: EventSummary,
    /// When it is due again (waiting), or when its lease ends (in flight).
    pub due_at: Option<SystemTime>,
    /// How many times an operator replayed it.
    pub replays: u32,
    /// The stored headers.
    pub headers: Vec<(String, String)>,
    /// The path it was received on.
    pub path: String,
    /// The raw body.
    pub body: Bytes,
    /// Its history, oldest first: each failed attempt, lost lease and replay, with its time
    /// (bounded: the oldest lines go first).
    pub history: Vec<String>,
}

impl EventRecord {
    /// A record, as a store builds it.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        summary: EventSummary,
        due_at: Option<SystemTime>,
        replays: u32,
        headers: Vec<(String, String)>,
        path: String,
        body: Bytes,
        history: Vec<String>,
    ) -> Self {
        Self {
            summary,
            due_at,
            replays,
            headers,
            path,
            body,
            history,
        }
    }
}

/// Which events [`list`](super::Inbox::list) and [`count`](super::Inbox::count) select: every
/// condition that is set must hold.
///
/// ```
/// use sangho_webhook::inbox::{EventState, Filter};
///
/// let dead_charges = Filter::new()
///     .with_state(EventState::Dead)
///     .with_event_type("charge.failed")
///     .with_limit(100);
/// # let _ = dead_charges;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Filter {
    /// Only events in this state.
    pub state: Option<EventState>,
    /// Only events of this type.
    pub event_type: Option<String>,
    /// Only events received at or after this time.
    pub since: Option<SystemTime>,
    /// Only events received before this time.
    pub before: Option<SystemTime>,
    /// Only events with this ordering key (as stored).
    pub ordering_key: Option<String>,
    /// At most this many events (for `list`; `count` ignores it).
    pub limit: Option<u32>,
}

impl Filter {
    /// Every event.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only events in `state`.
    pub fn with_state(mut self, state: EventState) -> Self {
        self.state = Some(state);
        self
    }

    /// Only events of `event_type`.
    pub fn with_event_type(mut self, event_type: impl Into<String>) -> Self {
        self.event_type = Some(event_type.into());
        self
    }

    /// Only events received at or after `since`.
    pub fn with_since(mut self, since: SystemTime) -> Self {
        self.since = Some(since);
        self
    }

    /// Only events received before `before`.
    pub fn with_before(mut self, before: SystemTime) -> Self {
        self.before = Some(before);
        self
    }

    /// Only events with the ordering key `key` (as the receiver gave it: a long key is
    /// matched by its stored hash).
    pub fn with_ordering_key(mut self, key: impl AsRef<str>) -> Self {
        self.ordering_key = Some(super::stored_ordering_key(key.as_ref()).into_owned());
        self
    }

    /// At most `limit` events.
    pub fn with_limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Whether an event matches (for stores that filter in memory).
    pub fn matches(&self, summary: &EventSummary) -> bool {
        self.state.is_none_or(|state| state == summary.state)
            && self
                .event_type
                .as_ref()
                .is_none_or(|kind| *kind == summary.event_type)
            && self.since.is_none_or(|since| summary.received_at >= since)
            && self
                .before
                .is_none_or(|before| summary.received_at < before)
            && self
                .ordering_key
                .as_ref()
                .is_none_or(|key| summary.ordering_key.as_ref() == Some(key))
    }
}

/// The inbox at a glance: events per state, and how long the oldest waiting event has waited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct InboxStats {
    /// Waiting: due now or at their next attempt.
    pub received: u64,
    /// Held by a worker.
    pub in_flight: u64,
    /// Processed and remembered (until the purge).
    pub completed: u64,
    /// Dead.
    pub dead: u64,
    /// How long ago the oldest event that is due now (waiting, not in flight) was received.
    pub oldest_waiting: Option<Duration>,
}

impl InboxStats {
    /// Stats, as a store builds them.
    pub fn new(
        received: u64,
        in_flight: u64,
        completed: u64,
        dead: u64,
        oldest_waiting: Option<Duration>,
    ) -> Self {
        Self {
            received,
            in_flight,
            completed,
            dead,
            oldest_waiting,
        }
    }
}

/// The numbers an operator alerts on, as [`gauges`](super::Inbox::gauges) reads them from the
/// inbox's indexes: the unfinished and dead events, and how long the oldest waiting event has
/// waited (completed events, which an inbox may hold by the million, are left out).
///
/// ```
/// use sangho_webhook::inbox::{InboxGauges, InboxStats};
///
/// let stats = InboxStats::new(3, 1, 1_000_000, 2, None);
/// let gauges = InboxGauges::from(stats);
/// assert_eq!((gauges.received, gauges.in_flight, gauges.dead), (3, 1, 2));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct InboxGauges {
    /// Waiting: due now or at their next attempt.
    pub received: u64,
    /// Held by a worker.
    pub in_flight: u64,
    /// Dead.
    pub dead: u64,
    /// How long ago the oldest event that is due now (waiting, not in flight) was received.
    pub oldest_waiting: Option<Duration>,
}

impl InboxGauges {
    /// Gauges, as a store builds them.
    pub fn new(received: u64, in_flight: u64, dead: u64, oldest_waiting: Option<Duration>) -> Self {
        Self {
            received,
            in_flight,
            dead,
            oldest_waiting,
        }
    }
}

impl From<InboxStats> for InboxGauges {
    fn from(stats: InboxStats) -> Self {
        Self::new(
            stats.received,
            stats.in_flight,
            stats.dead,
            stats.oldest_waiting,
        )
    }
}

/// `time` as RFC 3339 in UTC with milliseconds (`2026-12-02T05:00:00.123Z`), as the stores
/// write the times of an event's history.
///
/// ```
/// use sangho_webhook::inbox::rfc3339;
/// use std::time::{Duration, UNIX_EPOCH};
///
/// let time = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
/// assert_eq!(rfc3339(time), "2023-11-14T22:13:20.123Z");
/// ```
pub fn rfc3339(time: SystemTime) -> String {
    let since_epoch = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let seconds = since_epoch.as_secs();
    let (days, second_of_day) = (seconds / 86_400, seconds % 86_400);
    // Howard Hinnant's days-to-civil, for days since 1970-01-01.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60,
        since_epoch.subsec_millis()
    )
}
