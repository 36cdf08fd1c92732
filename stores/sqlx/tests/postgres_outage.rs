//! A PostgreSQL outage without stopping the shared server: the store's pool connects through a
//! small TCP proxy that the test cuts (every forwarded connection dropped, new connections
//! closed at once) and restores. While it is cut, a delivery gets 503 with `Retry-After` and the
//! handler is not called; once it is restored, the same app processes the refused event once,
//! and a redelivery is a duplicate.
//!
//! Ignored by default: run with `cargo test -p sangho-webhook-sqlx -- --include-ignored`,
//! against `SANGHO_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`).

mod common;

use std::{
    str::FromStr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use common::{TYPE, postgres_store, secret};
use http::StatusCode;
use sangho_webhook::{
    SanghoWebhook, SanghoWebhookLayer,
    testing::{CountingHandler, Delivery, conformance::unique_event_id, fixtures, send},
};
use sangho_webhook_sqlx::{
    PostgresStore,
    sqlx::postgres::{PgConnectOptions, PgPoolOptions},
};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::Mutex,
    task::JoinSet,
};
use tower::Layer as _;

/// The layer's store timeout in this test.
const STORE_TIMEOUT: Duration = Duration::from_secs(2);
/// The pool's acquire timeout: shorter than the store timeout.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a refused delivery may take.
const REFUSAL_BOUND: Duration = Duration::from_secs(5);
/// How long the app may take to process deliveries again once the database is reachable.
const RECOVERY_BOUND: Duration = Duration::from_secs(10);

/// A TCP proxy on `127.0.0.1:0` to one upstream address, which can be cut and restored.
struct Proxy {
    port: u16,
    state: Arc<ProxyState>,
    accept: tokio::task::JoinHandle<()>,
}

struct ProxyState {
    /// Whether connections are forwarded; when false, new connections are closed at once.
    open: AtomicBool,
    /// The forwarding tasks of the accepted connections.
    links: Mutex<JoinSet<()>>,
}

impl Proxy {
    async fn start(upstream: (String, u16)) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let port = listener.local_addr().expect("the proxy's address").port();
        let state = Arc::new(ProxyState {
            open: AtomicBool::new(true),
            links: Mutex::new(JoinSet::new()),
        });
        let accept = tokio::spawn({
            let state = state.clone();
            async move {
                loop {
                    let Ok((mut client, _)) = listener.accept().await else {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    // Checked under the lock `cut` takes, so no link outlives a cut.
                    let mut links = state.links.lock().await;
                    if !state.open.load(Ordering::SeqCst) {
                        drop(client);
                        continue;
                    }
                    let upstream = upstream.clone();
                    links.spawn(async move {
                        if let Ok(mut server) = TcpStream::connect(upstream).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    });
                    // Reap finished links so the set does not grow.
                    while links.try_join_next().is_some() {}
                }
            }
        });
        Self {
            port,
            state,
            accept,
        }
    }

    /// Drops every forwarded connection and closes new ones at once.
    async fn cut(&self) {
        let mut links = self.state.links.lock().await;
        self.state.open.store(false, Ordering::SeqCst);
        links.abort_all();
        while links.join_next().await.is_some() {}
    }

    /// Forwards new connections again.
    async fn restore(&self) {
        let _links = self.state.links.lock().await;
        self.state.open.store(true, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// A delivery of event `id`: its status, its `Retry-After` header, its body and how long it
/// took.
async fn deliver(
    service: &SanghoWebhook<CountingHandler>,
    id: &str,
) -> (StatusCode, Option<String>, String, Duration) {
    let request = Delivery::event(id, TYPE)
        .signed(&secret(), fixtures::NOW)
        .into_request();
    let started = Instant::now();
    let answer = send(service, request).await;
    let took = started.elapsed();
    let retry_after = answer.retry_after().map(str::to_owned);
    let body = String::from_utf8_lossy(&answer.body).into_owned();
    (answer.status, retry_after, body, took)
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs PostgreSQL: run with --include-ignored; URL from SANGHO_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)"]
async fn an_outage_costs_503s_and_the_refused_event_is_processed_once_it_is_back() {
    // The table, migrated over a direct pool and dropped when the test ends.
    let direct = postgres_store("outage", 1).await;

    // The app's store connects through the proxy.
    let options = PgConnectOptions::from_str(&common::postgres_url()).expect("a valid URL");
    let proxy = Proxy::start((options.get_host().to_owned(), options.get_port())).await;
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect_with(options.host("127.0.0.1").port(proxy.port))
        .await
        .expect("PostgreSQL is reachable through the proxy");
    let store = PostgresStore::new(pool)
        .with_table_name(direct.table().as_str())
        .expect("a valid table name");
    let handler = CountingHandler::new();
    let service = SanghoWebhookLayer::builder(secret(), store)
        .with_clock(fixtures::fixed_clock)
        .with_store_timeout(STORE_TIMEOUT)
        .build()
        .expect("valid settings")
        .layer(handler.clone());

    // Up: an event is processed.
    let before = unique_event_id("before");
    let (status, _, _, _) = deliver(&service, &before).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(handler.calls(), 1);

    // Down: a new event is refused with 503 and Retry-After, in bounded time, and the handler
    // is not called.
    proxy.cut().await;
    let refused = unique_event_id("refused");
    let (status, retry_after, _, took) = deliver(&service, &refused).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        retry_after.is_some(),
        "a 503 says when to retry: {retry_after:?}"
    );
    assert!(took < REFUSAL_BOUND, "the refusal took {took:?}");
    assert_eq!(handler.calls(), 1, "the handler is not called while down");

    // Back: the same app processes the refused event, once, within a bounded time.
    proxy.restore().await;
    let started = Instant::now();
    loop {
        let (status, _, _, _) = deliver(&service, &refused).await;
        match status {
            StatusCode::OK => break,
            StatusCode::SERVICE_UNAVAILABLE if started.elapsed() < RECOVERY_BOUND => {
                assert_eq!(handler.calls(), 1, "a 503 never calls the handler");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            other => panic!(
                "the refused event should be processed once PostgreSQL is back, got {other} after {:?}",
                started.elapsed()
            ),
        }
    }
    assert_eq!(handler.calls(), 2, "the refused event is processed once");

    // Nothing duplicated: a redelivery is recognised as such.
    let (status, _, body, _) = deliver(&service, &refused).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, r#"{"received":true,"duplicate":true}"#);
    assert_eq!(handler.calls(), 2);
}
