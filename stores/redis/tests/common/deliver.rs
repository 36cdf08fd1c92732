//! Deliveries through the layer, for the fault tests.

use std::time::{Duration, Instant};

use http::StatusCode;
use sangho_webhook::{
    SanghoWebhook, SanghoWebhookLayer, SanghoWebhookLayerBuilder,
    store::IdempotencyStore,
    testing::{CountingHandler, Delivery, fixtures, send},
};
use tower::Layer as _;

pub use sangho_webhook::testing::fixtures::{EVENT_TYPE as TYPE, secret};

/// The layer over `store` with the fixtures' clock and the settings of `configure`, around
/// `handler`.
pub fn service(
    store: impl IdempotencyStore,
    handler: &CountingHandler,
    configure: impl FnOnce(SanghoWebhookLayerBuilder) -> SanghoWebhookLayerBuilder,
) -> SanghoWebhook<CountingHandler> {
    configure(SanghoWebhookLayer::builder(secret(), store).with_clock(fixtures::fixed_clock))
        .build()
        .expect("valid settings")
        .layer(handler.clone())
}

/// Delivers event `id` once; answers the status and how long it took.
pub async fn deliver(service: &SanghoWebhook<CountingHandler>, id: &str) -> (StatusCode, Duration) {
    let request = Delivery::event(id, TYPE)
        .signed(&secret(), fixtures::NOW)
        .into_request();
    let started = Instant::now();
    let answer = send(service, request).await;
    (answer.status, started.elapsed())
}

/// Delivers `id` every 100 ms until it is answered 200 (the provider's redeliveries), for at
/// most `bound`; answers the statuses seen before the 200.
pub async fn deliver_until_ok(
    service: &SanghoWebhook<CountingHandler>,
    id: &str,
    bound: Duration,
) -> Vec<StatusCode> {
    let deadline = Instant::now() + bound;
    let mut refused = Vec::new();
    loop {
        let (status, _) = deliver(service, id).await;
        if status == StatusCode::OK {
            return refused;
        }
        refused.push(status);
        assert!(
            Instant::now() < deadline,
            "{id} still refused after {bound:?}: {refused:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
