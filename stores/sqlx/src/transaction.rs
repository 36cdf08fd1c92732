//! [`SqlStore::complete_in`]: the event's completion recorded inside the handler's own database
//! transaction, so that the handler's effects and the completion commit together, or not at all.

use std::time::Duration;

use sangho_webhook::{CompletionHold, SanghoEvent};
use sqlx::{Database, Transaction};

use crate::{
    SqlStore,
    dialect::{Bind, Dialect, Driver, micros},
};

/// Why [`SqlStore::complete_in`] did not record the completion. On any of them, roll the
/// transaction back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompleteInError {
    /// The event carries no claim: it was not delivered through the webhook layer (an event
    /// parsed by hand, or a layer without a store), so there is no delivery to complete.
    #[error(
        "the event {event_id} has no delivery claim: it did not come through the webhook layer"
    )]
    NoClaim {
        /// The event's id.
        event_id: String,
    },
    /// Another delivery holds or completed the event: this delivery's lease ran out and the
    /// event was taken over. Committing now would apply the handler's effects a second time:
    /// roll the transaction back (and answer with an error, so that nothing is acknowledged).
    #[error(
        "another delivery holds or completed the event {event_id}: this delivery's claim was taken over; roll the transaction back"
    )]
    TakenOver {
        /// The event's id.
        event_id: String,
    },
    /// The database failed (kept as the source). The transaction is most likely aborted.
    #[error("database error while completing the event in the transaction")]
    Database(#[from] sqlx::Error),
}

impl<D: Dialect> SqlStore<D> {
    /// Records `event` as completed **inside the transaction open on `connection`**: the
    /// handler's own writes and the event's completion then commit together, or not at all.
    /// Pass `&mut *tx` of a [`sqlx::Transaction`] on this store's database, call it last,
    /// just before `commit`, with the layer's retention (72 hours by default).
    ///
    /// Without it, a handler commits its writes, and the layer records the completion in a
    /// second round trip once the handler answered 2xx. A process that dies between the two
    /// (a deploy's SIGKILL, the out-of-memory killer, a lost node) leaves the event in flight;
    /// after the lease the provider's redelivery takes it over and **its effects are applied
    /// twice**. With `complete_in`, a redelivery after such a crash finds the event completed
    /// (and answers a duplicate), or finds nothing committed at all (and processes it).
    ///
    /// It runs the store's complete statement on the connection, the same owner-checked
    /// upsert the layer uses: it succeeds unless another delivery holds or completed the
    /// event. When this delivery's claim was taken over (its lease ran out, for example during
    /// a pause longer than the lease), it answers [`CompleteInError::TakenOver`]: roll back,
    /// so that the second delivery's effects are the only ones.
    ///
    /// What the layer does afterwards:
    ///
    /// - **2xx**: it completes the event as usual. After a commit that is a repeated
    ///   completion by the same token: it succeeds and changes nothing. If the transaction
    ///   rolled back and the handler still answers 2xx, that completion records the event, so
    ///   it is not lost (and not processed again).
    /// - **any other answer**: it releases the claim. After a commit that changes nothing (the
    ///   event is completed); after a rollback the next delivery processes the event.
    ///
    /// Once the completion is written, the event's claim is held by the transaction
    /// ([`DeliveryClaim::hold_completion`](sangho_webhook::DeliveryClaim::hold_completion)):
    /// the layer stops renewing it, so no renewal waits on the row the transaction has locked.
    /// Commit with the returned [`HeldCompletion::commit`]. If the transaction rolls back or
    /// its commit fails, the dropped [`HeldCompletion`] gives the claim back to the layer's
    /// renewals, so the handler can retry its transaction under a live claim. Commit promptly:
    /// meanwhile another delivery of the same event waits for the commit (PostgreSQL and
    /// MariaDB: the row's lock), then answers a duplicate or 409; it waits at most the store's
    /// [lock timeout](SqlStore#lock-waits) (2 s by default), and is answered 503 after that
    /// (the provider retries).
    ///
    /// **SQLite** runs one writer at a time, and holds its write lock for the whole
    /// transaction from its first write: while the handler's transaction is open, every other
    /// delivery's claim (of any event) waits for it, up to the connection's busy timeout (2 s
    /// with `SqliteStore::connect`), and is answered 503 after that. Keep these transactions
    /// short.
    ///
    /// **PostgreSQL**: run the transaction at READ COMMITTED (the default). At REPEATABLE READ
    /// or SERIALIZABLE, a renewal of the claim committed after the transaction's snapshot makes
    /// the statement fail with a serialization error ([`CompleteInError::Database`]): retry the
    /// whole transaction.
    ///
    /// Only the SQL stores can join a transaction: the in-memory `MokaStore` and the Redis
    /// store have no `complete_in`, so a handler written for it does not compile against them.
    ///
    /// What it does not cover: effects outside this database (a call to another service, an
    /// email) are not part of the transaction. Give them their own idempotency key (the event
    /// id), or defer them until after the commit (an outbox table written in the same
    /// transaction).
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use std::time::Duration;
    /// use sangho_webhook::SanghoEvent;
    /// use sangho_webhook_sqlx::{CompleteInError, SqliteStore, sqlx};
    ///
    /// /// Records the payment and the event's completion in one transaction.
    /// async fn record_payment(store: &SqliteStore, event: &SanghoEvent) -> Result<(), CompleteInError> {
    ///     let mut tx = store.pool().begin().await?;
    ///     sqlx::query("INSERT INTO payments (event_id, event_type) VALUES (?1, ?2)")
    ///         .bind(event.id())
    ///         .bind(event.event_type())
    ///         .execute(&mut *tx)
    ///         .await?;
    ///     // On an error, `tx` is dropped: rolled back.
    ///     let completion = store.complete_in(&mut *tx, event, Duration::from_secs(72 * 3600)).await?;
    ///     completion.commit(tx).await?;
    ///     Ok(())
    /// }
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// - [`CompleteInError::NoClaim`]: the event did not come through the webhook layer;
    /// - [`CompleteInError::TakenOver`]: another delivery holds or completed the event;
    /// - [`CompleteInError::Database`]: the statement failed.
    ///
    /// Roll the transaction back on any of them.
    pub async fn complete_in(
        &self,
        connection: &mut <D::Database as Database>::Connection,
        event: &SanghoEvent,
        retention: Duration,
    ) -> Result<HeldCompletion, CompleteInError> {
        let Some(claim) = event.claim() else {
            return Err(CompleteInError::NoClaim {
                event_id: event.id().to_owned(),
            });
        };
        let token = claim.token();
        let binds = [
            Bind::Text(event.id()),
            Bind::Text(event.event_type()),
            Bind::Text(token.as_str()),
            Bind::Int(micros(retention)),
        ];
        let complete = &self.queries().complete;
        let owner = D::Database::fetch_text_in(connection, complete, &binds).await?;
        if owner.as_deref() != Some(token.as_str()) {
            return Err(CompleteInError::TakenOver {
                event_id: event.id().to_owned(),
            });
        }
        // The transaction now holds the row's lock until it ends: the layer stops renewing.
        Ok(HeldCompletion {
            hold: claim.hold_completion(),
        })
    }
}

/// The event's completion, written in the handler's transaction and not committed yet; from
/// [`SqlStore::complete_in`].
///
/// [`commit`](Self::commit) commits the transaction. Dropped without it (the transaction rolled
/// back, or its commit failed), it gives the event's claim back to the layer, which renews it
/// again while the handler retries or answers.
#[must_use = "commit the transaction with `HeldCompletion::commit`"]
#[derive(Debug)]
pub struct HeldCompletion {
    hold: CompletionHold,
}

impl HeldCompletion {
    /// Commits `transaction`, which holds the completion: the handler's writes and the
    /// event's completion are then durable together.
    ///
    /// # Errors
    ///
    /// The commit's error. Nothing was committed (or, if the connection broke during the
    /// commit, the outcome is unknown): the layer renews the claim again, and the handler can
    /// retry or answer with an error.
    pub async fn commit<DB: Database>(
        self,
        transaction: Transaction<'_, DB>,
    ) -> Result<(), sqlx::Error> {
        transaction.commit().await?;
        self.hold.committed();
        Ok(())
    }
}
