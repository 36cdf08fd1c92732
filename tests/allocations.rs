//! Heap allocations per request through the layer: a count, not a timing, so it is the same on
//! every machine. Each bound is the count measured when it was set; a change that allocates
//! more on the request path fails here and is measured in `benches/layer.rs`.

mod common;

use std::convert::Infallible;

use bytes::Bytes;
use common::{TYPE, layer, secret};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use sangho_webhook::{
    WebhookBody,
    store::{IdempotencyStore, MokaStore},
    testing::{Delivery, NullStore, fixtures},
};
use tower::{Layer, ServiceExt, service_fn};

async fn handler(_: Request<WebhookBody>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(
        b"{\"received\":true}",
    ))))
}

fn request(id: &str) -> Request<WebhookBody> {
    let body = fixtures::sized_event_body(id, TYPE, 2048);
    Delivery::body(body)
        .signed(&secret(), fixtures::NOW)
        .into_request()
}

/// The allocations of sending `request` through a layer over `store`, after one warm-up
/// request (which initialises what is initialised once per process or per store).
fn allocations_of(store: impl IdempotencyStore, warm_up: &str, measured: &str) -> u64 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let service = layer(store).layer(service_fn(handler));
    let send = |request| {
        let service = service.clone();
        runtime.block_on(async move { service.oneshot(request).await.unwrap() })
    };
    assert_eq!(send(request(warm_up)).status(), StatusCode::OK);
    let request = request(measured);
    let mut status = None;
    let counted = allocation_counter::measure(|| status = Some(send(request).status()));
    assert_eq!(status, Some(StatusCode::OK));
    counted.count_total
}

#[test]
fn a_new_event_over_moka_store_allocates_at_most_the_measured_count() {
    let count = allocations_of(MokaStore::new(), "evt_warm", "evt_new");
    println!("new event, MokaStore: {count} allocations");
    assert!(
        count <= NEW_EVENT_MOKA,
        "{count} allocations, bound {NEW_EVENT_MOKA}"
    );
}

#[test]
fn a_duplicate_over_moka_store_allocates_at_most_the_measured_count() {
    let count = allocations_of(MokaStore::new(), "evt_dup", "evt_dup");
    println!("duplicate, MokaStore: {count} allocations");
    assert!(
        count <= DUPLICATE_MOKA,
        "{count} allocations, bound {DUPLICATE_MOKA}"
    );
}

#[test]
fn a_new_event_over_a_null_store_allocates_at_most_the_measured_count() {
    let count = allocations_of(NullStore, "evt_warm", "evt_new");
    println!("new event, NullStore: {count} allocations");
    assert!(
        count <= NEW_EVENT_NULL,
        "{count} allocations, bound {NEW_EVENT_NULL}"
    );
}

// Every claim is boxed, so that a timed-out one can finish in the background (the duplicate's
// too), and a new event's handler future is boxed, so that it can move to a task of its own
// when the provider hangs up.
const NEW_EVENT_MOKA: u64 = 24;
const DUPLICATE_MOKA: u64 = 11;
const NEW_EVENT_NULL: u64 = 15;
