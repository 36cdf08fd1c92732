//! The layer through `tower::ServiceExt::oneshot`, one file per stage of a delivery: verify
//! (the body, the signature, the event), claim and handle. The settle stage (completion,
//! release, renewal) has files of its own: `claim_guard.rs`, `completion_retry.rs`,
//! `renewal.rs`, `detached_handler.rs`.

#[path = "../common/mod.rs"]
mod common;

mod claim;
mod handle;
mod verify_body;
mod verify_event;
mod verify_signature;

use std::{
    convert::Infallible,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use common::{FaultyStore, SpyStore, TYPE, builder, layer, secret};
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use sangho_webhook::{
    Rejection, RejectionKind, SanghoEvent, WebhookBody,
    signature::Secret,
    store::{Claim, Claimant, IdempotencyStore, MokaStore, Renewal},
    testing::{Answer, CountingHandler, Delivery, fixtures, send},
};
use tower::{Layer, ServiceExt};

const NOW: i64 = fixtures::NOW;

fn event(id: &str) -> Delivery {
    Delivery::event(id, TYPE)
}

/// Sends `delivery` through a fresh layer over a spy store; answers what came back, the
/// handler and the store.
async fn deliver(delivery: Delivery) -> (Answer, CountingHandler, SpyStore) {
    let (handler, store) = (CountingHandler::new(), SpyStore::default());
    let service = layer(store.clone()).layer(handler.clone());
    let answer = send(&service, delivery.into_request()).await;
    (answer, handler, store)
}

/// Sends `delivery` and checks that it was refused with `kind`, without calling the handler or
/// touching the store.
async fn assert_refused(delivery: Delivery, kind: RejectionKind) {
    let (answer, handler, store) = deliver(delivery).await;
    assert_eq!(answer.status, kind.status(), "{kind:?}");
    assert_eq!(answer.error_code(), kind.code());
    assert_eq!(
        answer.extensions.get::<Rejection>().map(Rejection::kind),
        Some(kind)
    );
    assert_eq!(handler.calls(), 0, "the handler must not run for {kind:?}");
    assert_eq!(
        store.operations(),
        0,
        "the store must not be touched for {kind:?}"
    );
}

fn signed_with_header(id: &str, header: impl FnOnce(&str) -> String) -> Delivery {
    let valid = secret().sign(NOW, event(id).body_bytes());
    event(id).with_signature_header(header(&valid))
}

fn v1_of(header: &str) -> &str {
    header.split_once(",v1=").unwrap().1
}

const CHUNK: usize = 100;

/// An endless body of 100-byte chunks that counts how often it is polled.
struct EndlessBody {
    polled: Arc<AtomicUsize>,
}

impl http_body::Body for EndlessBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        self.polled.fetch_add(1, Ordering::SeqCst);
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from_static(
            &[b'x'; CHUNK],
        )))))
    }
}

/// A request whose body is endless and counts its polls, with `signature` as its header.
fn endless_request(signature: Option<String>) -> (Request<EndlessBody>, Arc<AtomicUsize>) {
    let polled = Arc::new(AtomicUsize::new(0));
    let body = EndlessBody {
        polled: polled.clone(),
    };
    let mut request = Request::post("/webhooks/sangho");
    if let Some(signature) = signature {
        request = request.header("sangho-signature", signature);
    }
    (request.body(body).unwrap(), polled)
}
