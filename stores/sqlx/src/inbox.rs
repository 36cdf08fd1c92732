//! Inbox mode over the store's table: [`Inbox`] for [`SqlStore`], written once for every
//! dialect (each supplies its `queries/<dialect>/inbox_*.sql`).

use std::{
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use async_trait::async_trait;
use bytes::Bytes;
use sangho_webhook::{
    inbox::{
        Discarded, EventRecord, EventState, EventSummary, FailedAttempt, Failure, Filter, Inbox,
        InboxGauges, InboxStats, NextAttempt, Receipt, ReceivedEvent, Replay, Replayed, TakeOrder,
        TakenEvent,
    },
    store::{ClaimToken, Claimant, Completion, Release, Renewal, StoreError},
};

use crate::{
    SqlStore,
    dialect::{Bind, Dialect, Driver, KeyOf, RecordRow, StatsRow, SummaryRow, micros},
    group_commit::{Many, Write, WriteError},
    queries::{InboxQueries, Query},
    turns::LentTake,
};

/// The most history a row keeps, in bytes (as the statements cut it).
const HISTORY_LIMIT: usize = 8192;

/// The default limit of [`Inbox::list`] when the filter sets none.
pub(crate) const DEFAULT_LIST_LIMIT: u32 = 100;

fn millis(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| {
        i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
    })
}

fn time(millis: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(millis).unwrap_or(0))
}

fn count(value: i64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// A count as the statements answer it.
fn total(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// An age in milliseconds as the statements answer it.
fn age(millis: i64) -> Duration {
    Duration::from_millis(u64::try_from(millis).unwrap_or(0))
}

fn stats_of((received, in_flight, completed, dead, oldest): StatsRow) -> InboxStats {
    InboxStats::new(
        total(received),
        total(in_flight),
        total(completed),
        total(dead),
        oldest.map(age),
    )
}

fn corrupt(what: &str) -> StoreError {
    let message = format!("the inbox's table holds {what}");
    StoreError::backend(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        message,
    ))
}

fn headers_json(headers: &[(String, String)]) -> String {
    let pairs: Vec<[&str; 2]> = headers
        .iter()
        .map(|(name, value)| [name.as_str(), value.as_str()])
        .collect();
    serde_json::to_string(&pairs).expect("headers serialize")
}

fn headers_of(json: Option<&str>) -> Result<Vec<(String, String)>, StoreError> {
    let Some(json) = json else {
        return Ok(Vec::new());
    };
    let pairs: Vec<(String, String)> =
        serde_json::from_str(json).map_err(|_| corrupt("headers that are not JSON pairs"))?;
    Ok(pairs)
}

fn state_of(name: &str) -> Result<EventState, StoreError> {
    name.parse().map_err(|_| corrupt("an unknown state"))
}

/// The history's lines, oldest first; a first line cut by the statements' bound is left out.
fn history_of(history: Option<&str>) -> Vec<String> {
    let history = history.unwrap_or_default();
    let mut lines: Vec<String> = history.lines().map(str::to_owned).collect();
    if history.len() >= HISTORY_LIMIT && !lines.is_empty() {
        lines.remove(0);
    }
    lines
}

fn summary_of(row: &SummaryRow) -> Result<EventSummary, StoreError> {
    let (event_id, event_type, state, received_ms, attempts, last_error, key) = row;
    Ok(EventSummary::new(
        event_id.clone(),
        event_type.clone(),
        state_of(state)?,
        time(*received_ms),
        count(*attempts),
        last_error.clone(),
    )
    .with_ordering_key(key.clone()))
}

fn record_of(row: RecordRow) -> Result<EventRecord, StoreError> {
    let (
        id,
        kind,
        state,
        received,
        attempts,
        error,
        key,
        due,
        replays,
        headers,
        path,
        body,
        history,
    ) = row;
    let summary = summary_of(&(id, kind, state, received, attempts, error, key))?;
    Ok(EventRecord::new(
        summary,
        due.map(time),
        count(replays),
        headers_of(headers.as_deref())?,
        path.unwrap_or_default(),
        Bytes::from(body),
        history_of(history.as_deref()),
    ))
}

/// A filter's binds: state, type, since and before (Unix ms), limit, ordering key.
fn filter_binds(filter: &Filter) -> [Bind<'_>; 6] {
    [
        Bind::OptText(filter.state.map(EventState::as_str)),
        Bind::OptText(filter.event_type.as_deref()),
        Bind::OptInt(filter.since.map(millis)),
        Bind::OptInt(filter.before.map(millis)),
        Bind::Int(i64::from(filter.limit.unwrap_or(DEFAULT_LIST_LIMIT))),
        Bind::OptText(filter.ordering_key.as_deref()),
    ]
}

impl<D: Dialect> SqlStore<D> {
    /// Inbox mode's statements, or an error where the database has none yet.
    fn inbox(&self) -> Result<&InboxQueries, StoreError> {
        self.queries().inbox.as_ref().ok_or_else(|| {
            let database = <D::Database as sqlx::Database>::NAME;
            let message = format!("inbox mode is not available on {database}");
            StoreError::backend(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                message,
            ))
        })
    }

    async fn inbox_text(
        &self,
        query: &Query,
        binds: &[Bind<'_>],
    ) -> Result<Option<String>, StoreError> {
        D::inbox_text(self, query, binds)
            .await
            .map_err(|error| self.store_error(error))
    }

    /// Runs an owner-checked write of the event whose id is the first of `binds` (a worker's
    /// renewal, completion, failure or abandon; an operator's discard): whether the token
    /// held the event. Where the dialect groups inbox writes, by the writer of the event's
    /// lane, and with the others of `many`'s kind in one statement where it has one.
    ///
    /// Where a group bounds its lock waits (PostgreSQL), another transaction may hold the
    /// event's row for long (a handler's own, after its `complete_in`): a write of its own
    /// statement then runs alone, on a connection of its own, so that only it waits for the
    /// row, never a group's writer and the writes queued behind it. These writes are a few per
    /// event, and gain little from a group.
    pub(crate) async fn inbox_owned(
        &self,
        query: &Query,
        binds: &[Bind<'_>],
        many: Option<&Arc<Many>>,
    ) -> Result<bool, StoreError> {
        let alone = many.is_none() && D::GROUP_LOCK_TIMEOUT.is_some();
        if !D::GROUP_INBOX || alone {
            return Ok(self.inbox_text(query, binds).await?.is_some());
        }
        let event_id = match binds.first() {
            Some(Bind::Text(event_id)) => event_id,
            _ => "",
        };
        let binds = query.binds(binds);
        let write = Write::text(&query.sql, &binds)
            .in_lane_of(event_id)
            .in_many(many);
        let owner = self
            .write(write)
            .await
            .map_err(|error| self.write_error(error))?;
        Ok(owner.into_text().is_some())
    }

    /// A worker's take that waits for its turn, for the receipt of `event` to write the event
    /// already taken by that worker, where the dialect writes the two at once (MariaDB's
    /// `inbox_receive_taken.sql`, and the rows of `inbox_receive_many.sql`), and the event has
    /// no ordering key: no take then has to find the event, nor rewrite its row. The turns of
    /// takes lend a waiting take only while they keep up ([`crate::turns`]), so the events
    /// waiting in the table are not passed over for long. Dropped unanswered (a duplicate, a
    /// failure), the take waits for its turn again, first.
    async fn waiting_take(
        &self,
        event: &ReceivedEvent<'_>,
    ) -> Result<Option<LentTake>, StoreError> {
        Ok(match (&self.inbox()?.receive_taken, event.ordering_key) {
            (Some(_), None) => self.inbox_turns().takes.lend().await,
            _ => None,
        })
    }

    /// Hands `event`, stored already taken by `take` and received at `received` (Unix ms), to
    /// the worker whose take it is.
    async fn hand_over(
        &self,
        take: LentTake,
        event: &ReceivedEvent<'_>,
        headers: &str,
        received: i64,
    ) {
        let token = take.call().token.clone();
        let taken = (
            event.event_id.to_owned(),
            event.event_type.to_owned(),
            event.body.to_vec(),
            Some(headers.to_owned()),
            Some(event.path.to_owned()),
            received,
            received,
            1,
            None,
        );
        tracing::trace!(
            target: "sangho_webhook_sqlx::hand_off",
            event_id = event.event_id,
            "a new event handed to a worker whose take waited"
        );
        if take.answer(taken).is_ok() {
            return;
        }
        // The worker stopped waiting (its take timed out): the event is given back, due at
        // once, its attempt not counted. Should that fail, the event is taken again once its
        // lease runs out, as after a worker's crash.
        let binds = [Bind::Text(event.event_id), Bind::Text(&token)];
        let given_back = match self.inbox() {
            Ok(inbox) => self.inbox_owned(&inbox.abandon, &binds, None).await,
            Err(error) => Err(error),
        };
        match given_back {
            Ok(_) => self.inbox_wake().notify_one(),
            Err(error) => tracing::warn!(
                event_id = event.event_id,
                %error,
                "an event handed to a worker that had stopped waiting was not given back; \
                 it is taken again once its lease runs out"
            ),
        }
    }

    /// The state of an event the inbox holds, after a replay or a discard that changed nothing.
    async fn inbox_state(&self, event_id: &str) -> Result<Option<String>, StoreError> {
        self.inbox_text(&self.inbox()?.state, &[Bind::Text(event_id)])
            .await
    }
}

#[async_trait]
impl<D: Dialect> Inbox for SqlStore<D> {
    async fn receive(&self, event: &ReceivedEvent<'_>) -> Result<Receipt, StoreError> {
        let headers = headers_json(event.headers);
        let take = self.waiting_take(event).await?;
        let (token, lease) = match &take {
            Some(take) => (Some(take.call().token.as_str()), Some(take.call().lease)),
            None => (None, None),
        };
        let binds = [
            Bind::Text(event.event_id),
            Bind::Text(event.event_type),
            Bind::Bytes(event.body),
            Bind::Text(&headers),
            Bind::Text(event.path),
            Bind::OptText(event.ordering_key),
            Bind::OptText(token),
            Bind::OptInt(lease),
        ];
        let key = KeyOf::Receipt(event.ordering_key);
        let receive = self.inbox()?.receipt(take.is_some());
        let grouped = D::GROUP_INBOX
            || (D::GROUP_RECEIPTS_WITHOUT_KEY
                && self.group_commit().is_on()
                && event.ordering_key.is_none());
        let status = if grouped {
            // The receipt's statement locks its key itself, or needs no lock.
            let lane = event.ordering_key.unwrap_or(event.event_id);
            let many = self.grouped_queries().many.as_ref();
            let mut receipt = Write::text(&receive.sql, &receive.binds(&binds))
                .of_inbox_receipt()
                .in_lane_of(lane)
                .in_many(many.and_then(|many| many.receive.as_ref()));
            // Where a receipt may be written taken, every row of a group's receipts binds the
            // take's token and lease (NULL and NULL for none).
            if self.inbox()?.receive_taken.is_some() {
                receipt = receipt.with_row(&binds);
            }
            // Alone, it waits for a held row as long as a group would, then its caller runs
            // it again with the store's own bound.
            if let Some(grouped) = self.grouped_queries().inbox.as_ref() {
                receipt = receipt.grouped_as(&grouped.receipt(take.is_some()).sql);
            }
            match self.write(receipt).await {
                Ok(answer) => answer.into_text(),
                // Aborted on a deadlock (it changed nothing): the dialect's own receipt tries
                // again.
                Err(WriteError::Database(sqlx::Error::Database(error)))
                    if !D::GROUP_INBOX && D::is_conflict(&*error) =>
                {
                    D::inbox_in_key_order(self, receive, &binds, key)
                        .await
                        .map_err(|error| self.store_error(error))?
                }
                Err(error) => return Err(self.write_error(error)),
            }
        } else {
            D::inbox_in_key_order(self, receive, &binds, key)
                .await
                .map_err(|error| self.store_error(error))?
        };
        // 'stored', or 'stored <ms>' with the time it was received.
        let stored = status
            .as_deref()
            .and_then(|status| status.strip_prefix("stored"))
            .filter(|received| received.is_empty() || received.starts_with(' '));
        if let (Some(take), Some(received)) = (take, stored) {
            let received = received
                .trim_start()
                .parse()
                .map_err(|_| corrupt("a receipt time that is not a number"))?;
            self.hand_over(take, event, &headers, received).await;
            return Ok(Receipt::Stored);
        }
        Ok(match stored.map_or(status.as_deref(), |_| Some("stored")) {
            Some("stored") => {
                // One waiting worker for each stored event, not every one: a group of n
                // receipts wakes n workers, and the others' takes do not run to find nothing.
                // With no worker waiting, the wake-up is kept for the next that waits.
                self.inbox_wake().notify_one();
                D::notify_other_processes(self);
                Receipt::Stored
            }
            Some("claimed") => Receipt::ClaimedByDelivery,
            Some("duplicate") => Receipt::Duplicate,
            // No row: a concurrent receipt committed the row after this statement's snapshot,
            // or (SQLite, whose upsert answers only the rows it wrote) the statement stored
            // nothing; `inbox_state.sql` then answers 'claimed' for a live claim of a
            // direct-mode delivery.
            None => match self.inbox_state(event.event_id).await?.as_deref() {
                Some("claimed") => Receipt::ClaimedByDelivery,
                _ => Receipt::Duplicate,
            },
            Some(_) => return Err(corrupt("an unknown receipt status")),
        })
    }

    async fn take(
        &self,
        token: &ClaimToken,
        lease: Duration,
        order: TakeOrder,
    ) -> Result<Option<TakenEvent>, StoreError> {
        let query = &self.inbox()?.take;
        let fresh_first = i64::from(order == TakeOrder::FreshFirst);
        let binds = [
            Bind::Text(token.as_str()),
            Bind::Int(micros(lease)),
            Bind::Int(fresh_first),
        ];
        let row = D::inbox_taken(self, query, &binds)
            .await
            .map_err(|error| self.write_error(error))?;
        let Some((event_id, event_type, body, headers, path, received, budget, attempt, key)) = row
        else {
            return Ok(None);
        };
        Ok(Some(
            TakenEvent::new(
                event_id,
                event_type,
                Bytes::from(body),
                headers_of(headers.as_deref())?,
                path.unwrap_or_else(|| "/".to_owned()),
                time(received),
                time(budget),
                count(attempt),
                *token,
            )
            .with_ordering_key(key),
        ))
    }

    async fn renew(&self, claimant: &Claimant<'_>, lease: Duration) -> Result<Renewal, StoreError> {
        let binds = [
            Bind::Text(claimant.event_id),
            Bind::Text(claimant.token.as_str()),
            Bind::Int(micros(lease)),
        ];
        Ok(
            match self.inbox_owned(&self.inbox()?.renew, &binds, None).await? {
                true => Renewal::Held,
                false => Renewal::TakenOver,
            },
        )
    }

    async fn complete(
        &self,
        claimant: &Claimant<'_>,
        retention: Duration,
    ) -> Result<Completion, StoreError> {
        let binds = [
            Bind::Text(claimant.event_id),
            Bind::Text(claimant.token.as_str()),
            Bind::Int(micros(retention)),
        ];
        let query = &self.inbox()?.complete;
        Ok(match D::inbox_completed(self, query, &binds).await? {
            true => Completion::Recorded,
            false => Completion::TakenOver,
        })
    }

    async fn fail(
        &self,
        claimant: &Claimant<'_>,
        attempt: &FailedAttempt<'_>,
    ) -> Result<Failure, StoreError> {
        let (dead, delay) = match attempt.next {
            NextAttempt::After(delay) => (0, micros(delay)),
            NextAttempt::Dead => (1, 0),
        };
        let binds = [
            Bind::Text(claimant.event_id),
            Bind::Text(claimant.token.as_str()),
            Bind::Text(attempt.error),
            Bind::Int(dead),
            Bind::Int(delay),
        ];
        Ok(
            match self.inbox_owned(&self.inbox()?.fail, &binds, None).await? {
                true => Failure::Recorded,
                false => Failure::NotHeld,
            },
        )
    }

    async fn abandon(&self, claimant: &Claimant<'_>) -> Result<Release, StoreError> {
        let binds = [
            Bind::Text(claimant.event_id),
            Bind::Text(claimant.token.as_str()),
        ];
        Ok(
            match self
                .inbox_owned(&self.inbox()?.abandon, &binds, None)
                .await?
            {
                true => {
                    self.inbox_wake().notify_waiters();
                    D::notify_other_processes(self);
                    Release::Released
                }
                false => Release::NotHeld,
            },
        )
    }

    async fn wait_for_events(&self, at_most: Duration) {
        D::listen(self);
        let _ = tokio::time::timeout(at_most, self.inbox_wake().notified()).await;
    }

    fn receipts_are_durable(&self) -> bool {
        // The receipt commits synchronously whatever the store's setting for claims; SQLite
        // and MariaDB report their durability when `migrate` checks their settings.
        true
    }

    async fn stats(&self) -> Result<InboxStats, StoreError> {
        let query = &self.inbox()?.stats;
        let row = D::Database::fetch_stats(self.pool(), &query.sql)
            .await
            .map_err(|error| self.store_error(error))?;
        Ok(stats_of(row))
    }

    async fn gauges(&self) -> Result<InboxGauges, StoreError> {
        let query = &self.inbox()?.gauges;
        let (received, in_flight, dead, oldest) =
            D::Database::fetch_gauges(self.pool(), &query.sql)
                .await
                .map_err(|error| self.store_error(error))?;
        Ok(InboxGauges::new(
            total(received),
            total(in_flight),
            total(dead),
            oldest.map(age),
        ))
    }

    async fn stats_by_type(&self) -> Result<Vec<(String, InboxStats)>, StoreError> {
        let query = &self.inbox()?.stats_by_type;
        let rows = D::Database::fetch_type_stats(self.pool(), &query.sql)
            .await
            .map_err(|error| self.store_error(error))?;
        Ok(rows
            .into_iter()
            .map(|(kind, received, in_flight, completed, dead, oldest)| {
                (
                    kind,
                    stats_of((received, in_flight, completed, dead, oldest)),
                )
            })
            .collect())
    }

    async fn list(&self, filter: &Filter) -> Result<Vec<EventSummary>, StoreError> {
        let query = &self.inbox()?.list;
        let binds = filter_binds(filter);
        let rows = D::Database::fetch_summaries(self.pool(), &query.sql, &query.binds(&binds))
            .await
            .map_err(|error| self.store_error(error))?;
        rows.iter().map(summary_of).collect()
    }

    async fn count(&self, filter: &Filter) -> Result<u64, StoreError> {
        let query = &self.inbox()?.count;
        let binds = filter_binds(filter);
        let count = D::Database::fetch_int(self.pool(), &query.sql, &query.binds(&binds))
            .await
            .map_err(|error| self.store_error(error))?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    async fn show(&self, event_id: &str) -> Result<Option<EventRecord>, StoreError> {
        let query = &self.inbox()?.show;
        let binds = [Bind::Text(event_id)];
        let row = D::Database::fetch_record(self.pool(), &query.sql, &query.binds(&binds))
            .await
            .map_err(|error| self.store_error(error))?;
        row.map(record_of).transpose()
    }

    async fn replay(&self, event_id: &str, replay: &Replay) -> Result<Replayed, StoreError> {
        let reason = replay.reason.as_deref().unwrap_or("no reason given");
        let binds = [
            Bind::Text(event_id),
            Bind::Int(i64::from(replay.force)),
            Bind::Text(reason),
        ];
        let key = KeyOf::Replay(event_id);
        let replayed = D::inbox_in_key_order(self, &self.inbox()?.replay, &binds, key)
            .await
            .map_err(|error| self.store_error(error))?;
        if replayed.is_some() {
            self.inbox_wake().notify_waiters();
            D::notify_other_processes(self);
            return Ok(Replayed::Replayed);
        }
        Ok(match self.inbox_state(event_id).await?.as_deref() {
            Some("in_flight") => Replayed::InFlight,
            Some("completed") => Replayed::Completed,
            _ => Replayed::Unknown,
        })
    }

    async fn discard(&self, event_id: &str) -> Result<Discarded, StoreError> {
        let binds = [Bind::Text(event_id)];
        if self
            .inbox_owned(&self.inbox()?.discard, &binds, None)
            .await?
        {
            return Ok(Discarded::Discarded);
        }
        Ok(match self.inbox_state(event_id).await?.as_deref() {
            Some("in_flight") => Discarded::InFlight,
            _ => Discarded::Unknown,
        })
    }

    async fn purge_completed(&self, limit: u32) -> Result<u64, StoreError> {
        D::purge_batch(self, self.adopted_retention(), u64::from(limit))
            .await
            .map_err(StoreError::backend)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_as_json_pairs() {
        let headers = vec![
            ("content-type".to_owned(), "application/json".to_owned()),
            ("x-a".to_owned(), "1, \"2\"".to_owned()),
        ];
        assert_eq!(headers_of(Some(&headers_json(&headers))).unwrap(), headers);
        assert_eq!(headers_of(None).unwrap(), []);
    }

    #[test]
    fn a_history_cut_at_its_bound_loses_its_first_partial_line() {
        let full = format!("{}\nsecond\n", "x".repeat(HISTORY_LIMIT));
        assert_eq!(history_of(Some(&full)), ["second"]);
        assert_eq!(history_of(Some("a\nb\n")), ["a", "b"]);
    }
}
