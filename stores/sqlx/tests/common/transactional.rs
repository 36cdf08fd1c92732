//! Shared pieces of the transactional-completion tests: a business table per test run, a
//! payment handler that records one row per run of its transaction (with or without
//! `complete_in`), store wrappers that time or stall the layer's renewals, and the number of
//! trials.

use std::{
    future::Future,
    path::PathBuf,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use async_trait::async_trait;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use sangho_webhook::{
    SanghoEvent, WebhookBody,
    store::{Claim, Claimant, Completion, IdempotencyStore, Release, Renewal, StoreError},
};
use sangho_webhook_sqlx::{
    CompleteInError, SqlStore,
    dialect::Dialect,
    sqlx::{self, AssertSqlSafe, Database, Pool},
};

/// The retention the handlers complete with (the layer's default).
pub const RETENTION: Duration = Duration::from_secs(72 * 3600);

/// How many times each transactional scenario runs: `SANGHO_TRIALS`, default 2.
pub fn trials() -> usize {
    std::env::var("SANGHO_TRIALS")
        .ok()
        .and_then(|trials| trials.parse().ok())
        .unwrap_or(2)
}

/// The business side of a dialect: the `payments`-style table the handlers write to. It has
/// no unique key on purpose: a second run of a committed effect shows as a second row.
pub trait Business: Dialect {
    /// `CREATE TABLE` for `table`.
    fn create_sql(table: &str) -> String {
        format!("CREATE TABLE {table} (event_id VARCHAR(50) NOT NULL, token VARCHAR(64) NOT NULL)")
    }

    /// Inserts one row for `event_id` by `token` on `connection`.
    fn insert<'a>(
        connection: &'a mut <Self::Database as Database>::Connection,
        table: &'a str,
        event_id: &'a str,
        token: &'a str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a;

    /// The tokens of the rows recorded for `event_id`.
    fn rows<'a>(
        pool: &'a Pool<Self::Database>,
        table: &'a str,
        event_id: &'a str,
    ) -> impl Future<Output = Vec<String>> + Send + 'a;

    /// Creates `table`.
    fn create<'a>(
        pool: &'a Pool<Self::Database>,
        table: &'a str,
    ) -> impl Future<Output = ()> + Send + 'a;
}

macro_rules! business {
    ($dialect:ty, $insert:literal, $rows:literal) => {
        impl Business for $dialect {
            async fn insert<'a>(
                connection: &'a mut <Self::Database as Database>::Connection,
                table: &'a str,
                event_id: &'a str,
                token: &'a str,
            ) -> Result<(), sqlx::Error> {
                sqlx::query(AssertSqlSafe(format!($insert, table = table)))
                    .bind(event_id)
                    .bind(token)
                    .execute(connection)
                    .await?;
                Ok(())
            }

            async fn rows<'a>(
                pool: &'a Pool<Self::Database>,
                table: &'a str,
                event_id: &'a str,
            ) -> Vec<String> {
                sqlx::query_scalar(AssertSqlSafe(format!($rows, table = table)))
                    .bind(event_id)
                    .fetch_all(pool)
                    .await
                    .expect("read the business rows")
            }

            async fn create<'a>(pool: &'a Pool<Self::Database>, table: &'a str) {
                sqlx::raw_sql(AssertSqlSafe(Self::create_sql(table)))
                    .execute(pool)
                    .await
                    .expect("create the business table");
            }
        }
    };
}

business!(
    sangho_webhook_sqlx::dialect::Postgres,
    "INSERT INTO {table} (event_id, token) VALUES ($1, $2)",
    "SELECT token FROM {table} WHERE event_id = $1"
);
business!(
    sangho_webhook_sqlx::dialect::Sqlite,
    "INSERT INTO {table} (event_id, token) VALUES (?1, ?2)",
    "SELECT token FROM {table} WHERE event_id = ?1"
);
#[cfg(feature = "mariadb")]
business!(
    sangho_webhook_sqlx::dialect::MariaDb,
    "INSERT INTO {table} (event_id, token) VALUES (?, ?)",
    "SELECT token FROM {table} WHERE event_id = ?"
);

/// A hook of the payment handler: an async step given the call's number (1 for the first).
pub type Hook = Arc<dyn Fn(usize) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// Wraps an async closure as a [`Hook`].
pub fn hook<F, Fut>(step: F) -> Hook
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    Arc::new(move |call| Box::pin(step(call)))
}

/// A webhook handler that records a payment: in one transaction it inserts a row in the
/// business table and (when `transactional`) completes the event with `complete_in`, then
/// commits (or rolls back, with `rollback`) and answers 200. A `complete_in` refused because
/// the claim was taken over rolls back and answers 500.
pub struct Payments<D: Dialect> {
    pub store: SqlStore<D>,
    pub table: Arc<str>,
    pub transactional: bool,
    pub rollback: bool,
    /// Runs before the transaction.
    pub before: Option<Hook>,
    /// Runs after `complete_in`, before the commit.
    pub held: Option<Hook>,
    /// Written once the transaction committed; then the handler never answers (its process
    /// is about to be killed).
    pub marker_then_hang: Option<PathBuf>,
    pub calls: Arc<AtomicUsize>,
    pub taken_over: Arc<AtomicUsize>,
    pub errors: Arc<Mutex<Vec<String>>>,
}

impl<D: Dialect> Clone for Payments<D> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            table: self.table.clone(),
            transactional: self.transactional,
            rollback: self.rollback,
            before: self.before.clone(),
            held: self.held.clone(),
            marker_then_hang: self.marker_then_hang.clone(),
            calls: self.calls.clone(),
            taken_over: self.taken_over.clone(),
            errors: self.errors.clone(),
        }
    }
}

impl<D: Business> Payments<D> {
    /// A transactional (`complete_in`) handler on `table`, committing.
    pub fn new(store: SqlStore<D>, table: &str, transactional: bool) -> Self {
        Self {
            store,
            table: table.into(),
            transactional,
            rollback: false,
            before: None,
            held: None,
            marker_then_hang: None,
            calls: Arc::default(),
            taken_over: Arc::default(),
            errors: Arc::default(),
        }
    }

    /// How many times the handler was called.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// How many `complete_in` calls were refused as taken over.
    pub fn taken_over(&self) -> usize {
        self.taken_over.load(Ordering::SeqCst)
    }

    /// Any other error a handler met.
    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().unwrap().clone()
    }

    /// The tokens of the business rows of `event_id`.
    pub async fn rows(&self, event_id: &str) -> Vec<String> {
        D::rows(self.store.pool(), &self.table, event_id).await
    }

    /// One run of the handler.
    async fn handle(self, request: Request<WebhookBody>) -> Response<Full<Bytes>> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let event = request
            .extensions()
            .get::<SanghoEvent>()
            .cloned()
            .expect("the layer's event");
        if let Some(before) = &self.before {
            before(call).await;
        }
        let token = event
            .claim()
            .map(|claim| claim.token().as_str().to_owned())
            .unwrap_or_default();
        let result = async {
            let mut tx = self.store.pool().begin().await?;
            D::insert(&mut *tx, &self.table, event.id(), &token).await?;
            let completion = match self.transactional {
                true => Some(self.store.complete_in(&mut *tx, &event, RETENTION).await?),
                false => None,
            };
            if let Some(held) = &self.held {
                held(call).await;
            }
            match (self.rollback, completion) {
                (true, _) => tx.rollback().await?,
                (false, Some(completion)) => completion.commit(tx).await?,
                (false, None) => tx.commit().await?,
            }
            Ok::<_, CompleteInError>(())
        }
        .await;
        let status = match result {
            Ok(()) => StatusCode::OK,
            Err(CompleteInError::TakenOver { .. }) => {
                self.taken_over.fetch_add(1, Ordering::SeqCst);
                StatusCode::INTERNAL_SERVER_ERROR
            }
            Err(other) => {
                self.errors.lock().unwrap().push(format!("{other:?}"));
                StatusCode::INTERNAL_SERVER_ERROR
            }
        };
        if let Some(marker) = &self.marker_then_hang {
            std::fs::write(marker, b"committed").expect("write the marker");
            std::future::pending::<()>().await;
        }
        let mut response = Response::new(Full::new(Bytes::new()));
        *response.status_mut() = status;
        response
    }

    /// The handler as a tower service.
    pub fn service(
        &self,
    ) -> impl tower::Service<
        Request<WebhookBody>,
        Response = Response<Full<Bytes>>,
        Error = std::convert::Infallible,
        Future = impl Send + 'static,
    > + Clone
    + Send
    + 'static {
        let this = self.clone();
        tower::service_fn(move |request: Request<WebhookBody>| {
            let this = this.clone();
            async move { Ok(this.handle(request).await) }
        })
    }
}

/// A store whose renewals are timed ([`Renewals::longest`]), or stalled: a stalled renewal
/// answers [`Renewal::Held`] without reaching the store, as a renewal lost in a long pause would, so that
/// the claim's lease runs out while its handler still runs.
#[derive(Clone)]
pub struct Renewals<S> {
    pub store: S,
    stalled: bool,
    durations: Arc<Mutex<Vec<Duration>>>,
}

impl<S> Renewals<S> {
    /// Renewals reach `store`, and are timed.
    pub fn timed(store: S) -> Self {
        Self {
            store,
            stalled: false,
            durations: Arc::default(),
        }
    }

    /// Renewals never reach `store`.
    pub fn stalled(store: S) -> Self {
        Self {
            store,
            stalled: true,
            durations: Arc::default(),
        }
    }

    /// How many renewals ran, and the longest one.
    pub fn longest(&self) -> (usize, Duration) {
        let durations = self.durations.lock().unwrap();
        (
            durations.len(),
            durations.iter().copied().max().unwrap_or_default(),
        )
    }
}

#[async_trait]
impl<S: IdempotencyStore> IdempotencyStore for Renewals<S> {
    async fn claim(&self, claimant: Claimant<'_>, lease: Duration) -> Result<Claim, StoreError> {
        self.store.claim(claimant, lease).await
    }
    async fn renew(&self, claimant: Claimant<'_>, lease: Duration) -> Result<Renewal, StoreError> {
        if self.stalled {
            return Ok(Renewal::Held);
        }
        // Timed until it answers or is dropped (a renewal still waiting when the delivery
        // ends is dropped by the layer).
        let _timer = Timer(Instant::now(), &self.durations);
        self.store.renew(claimant, lease).await
    }
    async fn complete(
        &self,
        claimant: Claimant<'_>,
        retention: Duration,
    ) -> Result<Completion, StoreError> {
        self.store.complete(claimant, retention).await
    }
    async fn release(&self, claimant: Claimant<'_>) -> Result<Release, StoreError> {
        self.store.release(claimant).await
    }
}

/// Records how long it lived when dropped.
struct Timer<'a>(Instant, &'a Mutex<Vec<Duration>>);

impl Drop for Timer<'_> {
    fn drop(&mut self) {
        self.1.lock().unwrap().push(self.0.elapsed());
    }
}
