//! [`MemoryInbox`]: the inbox in memory, the reference for the conformance suite.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, SystemTime},
};

use bytes::Bytes;
use tokio::sync::Notify;

use super::{
    Discarded, EventRecord, EventState, EventSummary, FailedAttempt, Failure, Filter, Inbox,
    InboxStats, NextAttempt, Receipt, ReceivedEvent, Replay, Replayed, TakeOrder, TakenEvent,
    rfc3339,
};
use crate::store::{ClaimToken, Claimant, Completion, Release, Renewal, StoreError, async_trait};

/// The most history kept per event, in bytes (the oldest lines go first).
const HISTORY_LIMIT: usize = 8 * 1024;

/// An inbox in this process's memory (feature `test-util`), for tests and as the reference
/// the conformance suite checks stores against.
///
/// **Never for production**: it answers 2xx for events that a restart then loses, which is
/// exactly what inbox mode exists to prevent. Use the SQL stores of `sangho-webhook-sqlx`.
///
/// ```
/// use sangho_webhook::inbox::{Inbox, MemoryInbox, ReceivedEvent, Receipt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let inbox = MemoryInbox::new();
/// let body = bytes::Bytes::from_static(b"{}");
/// let event = ReceivedEvent::new("evt_1", "charge.succeeded", &body, &[], "/webhooks");
/// assert_eq!(inbox.receive(&event).await.unwrap(), Receipt::Stored);
/// assert_eq!(inbox.receive(&event).await.unwrap(), Receipt::Duplicate);
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryInbox {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    rows: Mutex<Rows>,
    received: Notify,
}

#[derive(Debug, Default)]
struct Rows {
    by_id: HashMap<String, Row>,
    next_sequence: u64,
}

#[derive(Debug, Clone)]
struct Row {
    sequence: u64,
    event_type: String,
    body: Bytes,
    headers: Vec<(String, String)>,
    path: String,
    received_at: SystemTime,
    /// The last replay, if any.
    replayed_at: Option<SystemTime>,
    state: EventState,
    /// Waiting: when it is due. In flight: when the lease ends. Completed: when the retention
    /// ends.
    due_at: SystemTime,
    token: Option<ClaimToken>,
    attempts: u32,
    replays: u32,
    last_error: Option<String>,
    history: String,
    ordering_key: Option<String>,
}

impl MemoryInbox {
    /// An empty inbox.
    pub fn new() -> Self {
        Self::default()
    }

    fn rows(&self) -> MutexGuard<'_, Rows> {
        self.shared
            .rows
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Row {
    /// The row as it is at `now`: a completed row past its retention is gone.
    fn is_live(&self, now: SystemTime) -> bool {
        self.state != EventState::Completed || self.due_at > now
    }

    fn is_due(&self, now: SystemTime) -> bool {
        self.is_unfinished() && self.due_at <= now
    }

    fn is_unfinished(&self) -> bool {
        matches!(self.state, EventState::Received | EventState::InFlight)
    }

    /// Whether this row keeps `other`, an event of its ordering key, from being taken: it is
    /// in flight under a live lease, or unfinished and received before it.
    fn holds_back(&self, other: &Row, now: SystemTime) -> bool {
        self.ordering_key.is_some()
            && self.ordering_key == other.ordering_key
            && self.is_unfinished()
            && (self.sequence < other.sequence
                || (self.state == EventState::InFlight && self.due_at > now))
    }

    /// Where the row stands among the due events a take chooses from (the least first).
    fn take_rank(&self, order: TakeOrder) -> (bool, u64) {
        let retry = order == TakeOrder::FreshFirst && self.attempts > 0;
        (retry, self.sequence)
    }

    fn held_by(&self, token: &ClaimToken) -> bool {
        self.state == EventState::InFlight && self.token.as_ref() == Some(token)
    }

    fn note(&mut self, now: SystemTime, line: &str) {
        self.history.push_str(&format!("{} {line}\n", rfc3339(now)));
        if self.history.len() > HISTORY_LIMIT {
            let cut = self.history.len() - HISTORY_LIMIT;
            let start = self.history[cut..]
                .find('\n')
                .map_or(self.history.len(), |newline| cut + newline + 1);
            self.history.drain(..start);
        }
    }

    fn summary(&self, event_id: &str) -> EventSummary {
        EventSummary::new(
            event_id.to_owned(),
            self.event_type.clone(),
            self.state,
            self.received_at,
            self.attempts,
            self.last_error.clone(),
        )
        .with_ordering_key(self.ordering_key.clone())
    }
}

/// The stats of `rows` at `now`.
fn stats_of<'a>(rows: impl Iterator<Item = &'a Row> + Clone, now: SystemTime) -> InboxStats {
    let mut stats = InboxStats::default();
    for row in rows.clone().filter(|row| row.is_live(now)) {
        match row.state {
            EventState::Received => stats.received += 1,
            EventState::InFlight => stats.in_flight += 1,
            EventState::Completed => stats.completed += 1,
            EventState::Dead => stats.dead += 1,
        }
    }
    stats.oldest_waiting = rows
        .filter(|row| row.state == EventState::Received && row.due_at <= now)
        .map(|row| now.duration_since(row.received_at).unwrap_or_default())
        .max();
    stats
}

#[async_trait]
impl Inbox for MemoryInbox {
    async fn receive(&self, event: &ReceivedEvent<'_>) -> Result<Receipt, StoreError> {
        let now = SystemTime::now();
        let mut rows = self.rows();
        if rows
            .by_id
            .get(event.event_id)
            .is_some_and(|row| row.is_live(now))
        {
            return Ok(Receipt::Duplicate);
        }
        let sequence = rows.next_sequence;
        rows.next_sequence += 1;
        rows.by_id.insert(
            event.event_id.to_owned(),
            Row {
                sequence,
                event_type: event.event_type.to_owned(),
                body: event.body.clone(),
                headers: event.headers.to_vec(),
                path: event.path.to_owned(),
                received_at: now,
                replayed_at: None,
                state: EventState::Received,
                due_at: now,
                token: None,
                attempts: 0,
                replays: 0,
                last_error: None,
                history: String::new(),
                ordering_key: event.ordering_key.map(str::to_owned),
            },
        );
        drop(rows);
        self.shared.received.notify_waiters();
        Ok(Receipt::Stored)
    }

    async fn take(
        &self,
        token: &ClaimToken,
        lease: Duration,
        order: TakeOrder,
    ) -> Result<Option<TakenEvent>, StoreError> {
        let now = SystemTime::now();
        let mut rows = self.rows();
        let Some(event_id) = rows
            .by_id
            .iter()
            .filter(|(_, row)| row.is_due(now))
            .filter(|(_, row)| {
                row.ordering_key.is_none()
                    || !rows.by_id.values().any(|other| other.holds_back(row, now))
            })
            .min_by_key(|(_, row)| row.take_rank(order))
            .map(|(event_id, _)| event_id.clone())
        else {
            return Ok(None);
        };
        let row = rows.by_id.get_mut(&event_id).expect("the row just found");
        if row.state == EventState::InFlight {
            row.note(now, &format!("attempt {}: the lease ran out", row.attempts));
            row.last_error = Some("the lease ran out".to_owned());
        }
        row.state = EventState::InFlight;
        row.due_at = now + lease;
        row.token = Some(*token);
        row.attempts += 1;
        Ok(Some(
            TakenEvent::new(
                event_id,
                row.event_type.clone(),
                row.body.clone(),
                row.headers.clone(),
                row.path.clone(),
                row.received_at,
                row.replayed_at.unwrap_or(row.received_at),
                row.attempts,
                *token,
            )
            .with_ordering_key(row.ordering_key.clone()),
        ))
    }

    async fn renew(&self, claimant: &Claimant<'_>, lease: Duration) -> Result<Renewal, StoreError> {
        let now = SystemTime::now();
        let mut rows = self.rows();
        Ok(match rows.by_id.get_mut(claimant.event_id) {
            Some(row) if row.held_by(claimant.token) => {
                row.due_at = now + lease;
                Renewal::Held
            }
            Some(row)
                if row.state == EventState::Completed
                    && row.token.as_ref() == Some(claimant.token) =>
            {
                Renewal::Held
            }
            _ => Renewal::TakenOver,
        })
    }

    async fn complete(
        &self,
        claimant: &Claimant<'_>,
        retention: Duration,
    ) -> Result<Completion, StoreError> {
        let now = SystemTime::now();
        let mut rows = self.rows();
        Ok(match rows.by_id.get_mut(claimant.event_id) {
            Some(row)
                if row.token.as_ref() == Some(claimant.token)
                    && matches!(row.state, EventState::InFlight | EventState::Completed) =>
            {
                row.state = EventState::Completed;
                row.due_at = now + retention;
                Completion::Recorded
            }
            _ => Completion::TakenOver,
        })
    }

    async fn fail(
        &self,
        claimant: &Claimant<'_>,
        attempt: &FailedAttempt<'_>,
    ) -> Result<Failure, StoreError> {
        let now = SystemTime::now();
        let mut rows = self.rows();
        let Some(row) = rows
            .by_id
            .get_mut(claimant.event_id)
            .filter(|row| row.held_by(claimant.token))
        else {
            return Ok(Failure::NotHeld);
        };
        row.note(now, &format!("attempt {}: {}", row.attempts, attempt.error));
        row.last_error = Some(attempt.error.to_owned());
        match attempt.next {
            NextAttempt::After(delay) => {
                row.state = EventState::Received;
                row.due_at = now + delay;
            }
            NextAttempt::Dead => {
                row.state = EventState::Dead;
                row.note(now, "dead");
            }
        }
        Ok(Failure::Recorded)
    }

    async fn abandon(&self, claimant: &Claimant<'_>) -> Result<Release, StoreError> {
        let now = SystemTime::now();
        let mut rows = self.rows();
        let Some(row) = rows
            .by_id
            .get_mut(claimant.event_id)
            .filter(|row| row.held_by(claimant.token))
        else {
            return Ok(Release::NotHeld);
        };
        row.state = EventState::Received;
        row.due_at = now;
        row.attempts = row.attempts.saturating_sub(1);
        drop(rows);
        self.shared.received.notify_waiters();
        Ok(Release::Released)
    }

    async fn wait_for_events(&self, at_most: Duration) {
        let _ = tokio::time::timeout(at_most, self.shared.received.notified()).await;
    }

    async fn stats(&self) -> Result<InboxStats, StoreError> {
        let now = SystemTime::now();
        Ok(stats_of(self.rows().by_id.values(), now))
    }

    async fn stats_by_type(&self) -> Result<Vec<(String, InboxStats)>, StoreError> {
        let now = SystemTime::now();
        let rows = self.rows();
        let mut types: Vec<&str> = rows
            .by_id
            .values()
            .filter(|row| row.is_live(now))
            .map(|row| row.event_type.as_str())
            .collect();
        types.sort_unstable();
        types.dedup();
        Ok(types
            .into_iter()
            .map(|kind| {
                let of_type = rows.by_id.values().filter(|row| row.event_type == kind);
                (kind.to_owned(), stats_of(of_type, now))
            })
            .collect())
    }

    async fn list(&self, filter: &Filter) -> Result<Vec<EventSummary>, StoreError> {
        let now = SystemTime::now();
        let rows = self.rows();
        let mut selected: Vec<_> = rows
            .by_id
            .iter()
            .filter(|(_, row)| row.is_live(now))
            .map(|(id, row)| (row.sequence, row.summary(id)))
            .filter(|(_, summary)| filter.matches(summary))
            .collect();
        selected.sort_by_key(|(sequence, _)| *sequence);
        let limit = filter.limit.map_or(usize::MAX, |limit| limit as usize);
        Ok(selected
            .into_iter()
            .take(limit)
            .map(|(_, summary)| summary)
            .collect())
    }

    async fn count(&self, filter: &Filter) -> Result<u64, StoreError> {
        let unlimited = Filter {
            limit: None,
            ..filter.clone()
        };
        Ok(self.list(&unlimited).await?.len() as u64)
    }

    async fn show(&self, event_id: &str) -> Result<Option<EventRecord>, StoreError> {
        let now = SystemTime::now();
        let rows = self.rows();
        Ok(rows
            .by_id
            .get(event_id)
            .filter(|row| row.is_live(now))
            .map(|row| {
                let due = matches!(row.state, EventState::Received | EventState::InFlight);
                EventRecord::new(
                    row.summary(event_id),
                    due.then_some(row.due_at),
                    row.replays,
                    row.headers.clone(),
                    row.path.clone(),
                    row.body.clone(),
                    row.history.lines().map(str::to_owned).collect(),
                )
            }))
    }

    async fn replay(&self, event_id: &str, replay: &Replay) -> Result<Replayed, StoreError> {
        let now = SystemTime::now();
        let mut rows = self.rows();
        let sequence = rows.next_sequence;
        let Some(row) = rows.by_id.get_mut(event_id).filter(|row| row.is_live(now)) else {
            return Ok(Replayed::Unknown);
        };
        match row.state {
            EventState::InFlight => return Ok(Replayed::InFlight),
            EventState::Completed if !replay.force => return Ok(Replayed::Completed),
            _ => {}
        }
        let forced = if row.state == EventState::Completed {
            " (forced)"
        } else {
            ""
        };
        let reason = replay.reason.as_deref().unwrap_or("no reason given");
        row.note(now, &format!("replayed{forced}: {reason}"));
        row.sequence = sequence;
        row.state = EventState::Received;
        row.due_at = now;
        row.attempts = 0;
        row.replays += 1;
        row.replayed_at = Some(now);
        row.token = None;
        rows.next_sequence += 1;
        drop(rows);
        self.shared.received.notify_waiters();
        Ok(Replayed::Replayed)
    }

    async fn discard(&self, event_id: &str) -> Result<Discarded, StoreError> {
        let now = SystemTime::now();
        let mut rows = self.rows();
        match rows.by_id.get(event_id) {
            Some(row) if row.state == EventState::InFlight && row.due_at > now => {
                Ok(Discarded::InFlight)
            }
            Some(row) if row.is_live(now) => {
                rows.by_id.remove(event_id);
                Ok(Discarded::Discarded)
            }
            _ => Ok(Discarded::Unknown),
        }
    }

    async fn purge_completed(&self, limit: u32) -> Result<u64, StoreError> {
        let now = SystemTime::now();
        let mut rows = self.rows();
        let expired: Vec<String> = rows
            .by_id
            .iter()
            .filter(|(_, row)| !row.is_live(now))
            .map(|(id, _)| id.clone())
            .take(limit as usize)
            .collect();
        for id in &expired {
            rows.by_id.remove(id);
        }
        Ok(expired.len() as u64)
    }
}
