//! The whole layer over `MokaStore`: arbitrary deliveries (signed or not, tampered, stale,
//! flooded with `v1` entries, chunked, with a matching or differing id header), concurrent or
//! not, with handlers that succeed, fail, err or are dropped mid-flight. Invariants:
//!
//! - the handler is never called for a body that does not verify;
//! - never two concurrent handler runs for one event id;
//! - a refused delivery never touches the store (its ids are never seen by the store).

#![no_main]

use std::{
    collections::VecDeque,
    convert::Infallible,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use arbitrary::Arbitrary;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};
use libfuzzer_sys::fuzz_target;
use sangho_webhook::{
    SanghoEvent, SanghoWebhookLayer, WebhookBody,
    signature::{Secret, verify},
    store::{
        Claim, Claimant, Completion, IdempotencyStore, MokaStore, Release, Renewal, StoreError,
        async_trait,
    },
    testing::fixtures,
};
use tower::{Layer, ServiceExt};

#[derive(Arbitrary, Debug)]
struct Attempt {
    event: u8,
    signing: Signing,
    extra_v1: u8,
    chunk_sizes: Vec<u8>,
    header_id: HeaderId,
    outcome: Outcome,
    /// Starts together with the previous attempt instead of after it.
    concurrent: bool,
}

#[derive(Arbitrary, Debug)]
enum Signing {
    Valid,
    WrongSecret,
    Stale(u16),
    Tampered(u8),
    Garbage(String),
    Missing,
    /// A verified body that is anything at all.
    ValidRawBody(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
enum HeaderId {
    Absent,
    Same,
    Other,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Outcome {
    Ok,
    ServerError,
    Error,
    /// The handler yields this many times before answering 200.
    Slow(u8),
    /// The delivery is dropped after this many polls.
    Dropped(u8),
}

/// The ids the store was asked about.
#[derive(Default)]
struct Seen(Mutex<Vec<String>>);

struct SpyStore {
    inner: MokaStore,
    seen: Arc<Seen>,
}

impl SpyStore {
    fn see(&self, id: &str) {
        self.seen.0.lock().unwrap().push(id.to_owned());
    }
}

#[async_trait]
impl IdempotencyStore for SpyStore {
    async fn claim(&self, claimant: Claimant<'_>, lease: Duration) -> Result<Claim, StoreError> {
        self.see(claimant.event_id);
        self.inner.claim(claimant, lease).await
    }

    async fn renew(&self, claimant: Claimant<'_>, lease: Duration) -> Result<Renewal, StoreError> {
        self.see(claimant.event_id);
        self.inner.renew(claimant, lease).await
    }

    async fn complete(&self, claimant: Claimant<'_>, retention: Duration) -> Result<Completion, StoreError> {
        self.see(claimant.event_id);
        self.inner.complete(claimant, retention).await
    }

    async fn release(&self, claimant: Claimant<'_>) -> Result<Release, StoreError> {
        self.see(claimant.event_id);
        self.inner.release(claimant).await
    }
}

/// Takes an id off the running list when dropped.
struct Unmark(Arc<Mutex<Vec<String>>>, String);

impl Drop for Unmark {
    fn drop(&mut self) {
        self.0.lock().unwrap().retain(|other| *other != self.1);
    }
}

/// A body delivered in the given chunks.
struct Chunked(VecDeque<Bytes>);

impl Body for Chunked {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(|chunk| Ok(Frame::data(chunk))))
    }
}

fn chunked(body: &Bytes, sizes: &[u8]) -> Chunked {
    let mut chunks = VecDeque::new();
    let mut rest = body.clone();
    for size in sizes {
        if rest.is_empty() {
            break;
        }
        let size = usize::from(*size).clamp(1, rest.len());
        chunks.push_back(rest.split_to(size));
    }
    if !rest.is_empty() {
        chunks.push_back(rest);
    }
    Chunked(chunks)
}

/// One request, and whether its event is genuinely signed (its id may reach the store).
fn request(secret: &Secret, index: usize, attempt: &Attempt) -> (Request<Chunked>, bool) {
    let good_id = format!("evt_{}", attempt.event % 3);
    let bad_id = format!("evt_bad_{index}");
    let event = |id: &str| {
        Bytes::from(format!(
            r#"{{"id":"{id}","type":"payment_intent.succeeded","created":{},"data":{{"object":{{}}}}}}"#,
            fixtures::NOW
        ))
    };
    let (body, header, genuine) = match &attempt.signing {
        Signing::Valid => {
            let body = event(&good_id);
            let header = secret.sign(fixtures::NOW, &body);
            (body, Some(header), true)
        }
        Signing::ValidRawBody(raw) => {
            let body = Bytes::copy_from_slice(raw);
            let header = secret.sign(fixtures::NOW, &body);
            (body, Some(header), true)
        }
        Signing::WrongSecret => {
            let body = event(&bad_id);
            let other = Secret::new("whsec_someone_else").unwrap();
            (body.clone(), Some(other.sign(fixtures::NOW, &body)), false)
        }
        Signing::Stale(age) => {
            let body = event(&bad_id);
            let at = fixtures::NOW - 301 - i64::from(*age);
            (body.clone(), Some(secret.sign(at, &body)), false)
        }
        Signing::Tampered(position) => {
            let signed = event(&bad_id);
            let header = secret.sign(fixtures::NOW, &signed);
            let mut body = signed.to_vec();
            let at = usize::from(*position) % body.len();
            body[at] ^= 0x01;
            (Bytes::from(body), Some(header), false)
        }
        Signing::Garbage(header) => (event(&bad_id), Some(header.clone()), false),
        Signing::Missing => (event(&bad_id), None, false),
    };
    let mut builder = Request::post("/webhooks/sangho");
    if let Some(mut header) = header {
        for _ in 0..attempt.extra_v1 % 12 {
            header.push_str(",v1=");
            header.push_str(&"0".repeat(64));
        }
        if let Ok(value) = http::HeaderValue::from_str(&header) {
            builder = builder.header("sangho-signature", value);
        }
    }
    builder = match attempt.header_id {
        HeaderId::Absent => builder,
        HeaderId::Same => builder.header("sangho-event-id", good_id.as_str()),
        HeaderId::Other => builder.header("sangho-event-id", "evt_elsewhere"),
    };
    (builder.body(chunked(&body, &attempt.chunk_sizes)).unwrap(), genuine)
}

fuzz_target!(|attempts: Vec<Attempt>| {
    if attempts.len() > 12 {
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(run(attempts));
});

async fn run(attempts: Vec<Attempt>) {
    let secret = Secret::new(fixtures::SECRET).unwrap();
    let seen = Arc::new(Seen::default());
    let store = SpyStore {
        inner: MokaStore::new(),
        seen: seen.clone(),
    };
    let layer = SanghoWebhookLayer::builder(secret.clone(), store)
        .with_clock(fixtures::fixed_clock)
        .build()
        .unwrap();
    let running: Arc<Mutex<Vec<String>>> = Arc::default();
    let handled: Arc<Mutex<Vec<String>>> = Arc::default();
    let calls = Arc::new(AtomicUsize::new(0));

    let mut bad_ids = Vec::new();
    let mut tasks = tokio::task::JoinSet::new();
    for (index, attempt) in attempts.iter().enumerate() {
        let (request, genuine) = request(&secret, index, attempt);
        if !genuine {
            bad_ids.push(format!("evt_bad_{index}"));
        }
        let outcome = attempt.outcome;
        let handler = {
            let (secret, running, handled, calls) =
                (secret.clone(), running.clone(), handled.clone(), calls.clone());
            tower::service_fn(move |request: Request<WebhookBody>| {
                let (secret, running, handled, calls) =
                    (secret.clone(), running.clone(), handled.clone(), calls.clone());
                async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    let event = request.extensions().get::<SanghoEvent>().cloned().unwrap();
                    let header = request.headers()["sangho-signature"].to_str().unwrap().to_owned();
                    let body = request.into_body().collect().await.unwrap().to_bytes();
                    let now = fixtures::fixed_clock();
                    assert!(
                        verify(&header, &body, &[secret], now, Duration::from_secs(300)).is_ok(),
                        "the handler was called for a body that does not verify"
                    );
                    let id = event.id().to_owned();
                    {
                        let mut running = running.lock().unwrap();
                        assert!(!running.contains(&id), "two concurrent runs of {id}");
                        running.push(id.clone());
                    }
                    // Unmarked however the handler ends, including being dropped mid-run.
                    let _running = Unmark(running, id.clone());
                    handled.lock().unwrap().push(id.clone());
                    if let Outcome::Slow(yields) = outcome {
                        for _ in 0..yields % 16 {
                            tokio::task::yield_now().await;
                        }
                    }
                    let status = match outcome {
                        Outcome::ServerError => StatusCode::INTERNAL_SERVER_ERROR,
                        Outcome::Error => return Err(std::io::Error::other("handler error")),
                        _ => StatusCode::OK,
                    };
                    let mut response = Response::new(Full::new(Bytes::new()));
                    *response.status_mut() = status;
                    Ok(response)
                }
            })
        };
        let service = layer.clone().layer(handler);
        let delivery = async move {
            let mut future = std::pin::pin!(service.oneshot(request));
            match outcome {
                Outcome::Dropped(polls) => {
                    for _ in 0..polls % 8 {
                        if std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx)))
                            .await
                            .is_ready()
                        {
                            return;
                        }
                        tokio::task::yield_now().await;
                    }
                }
                _ => {
                    if let Ok(response) = future.await {
                        let status = response.status();
                        assert!(status != StatusCode::INTERNAL_SERVER_ERROR || matches!(outcome, Outcome::ServerError));
                    }
                }
            }
        };
        if !attempt.concurrent {
            while tasks.join_next().await.is_some() {}
        }
        tasks.spawn(delivery);
    }
    while tasks.join_next().await.is_some() {}
    // Let background settlements run.
    for _ in 0..8 {
        tokio::task::yield_now().await;
    }
    let seen = seen.0.lock().unwrap();
    let handled = handled.lock().unwrap();
    for bad in &bad_ids {
        assert!(!seen.contains(bad), "the store saw refused id {bad}");
        assert!(!handled.contains(bad), "the handler saw refused id {bad}");
    }
}
