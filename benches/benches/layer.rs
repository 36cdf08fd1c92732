//! A 2 KiB event through the whole layer (`MokaStore`), side by side with what it cannot avoid:
//!
//! - `layer/new_event`: a fresh, validly signed event (unique id, signed outside the timed
//!   part): body buffering, verification, parsing, claim, handler, completion;
//! - `layer/duplicate`: the same delivery again: answered from the store, handler not called;
//! - `layer/new_event_null_store`: the same with a store that acquires every claim at once and
//!   records nothing: the layer's own cost, without a store's;
//! - `layer/rejected_signature`: a well-formed header whose `v1` does not match: 400 after
//!   the HMAC;
//! - `unavoidable_work`: HMAC-SHA256 of `"<t>." + body` (`hmac` + `sha2`, keyed per call, tag
//!   compared) plus `serde_json` of the same bytes into a struct of the two fields the layer
//!   needs (`id`, `type`): any correct receiver does at least this;
//! - `unavoidable_work_value`: the same with `serde_json::Value` (the whole document), context
//!   for handlers that parse everything;
//! - `inner_service_alone`: the handler, called directly with the same request;
//! - `moka_store_alone`: `MokaStore::claim` then `complete` of a fresh id, the store's share of
//!   `layer/new_event`.
//!
//! ```text
//! cargo bench -p sangho-webhook-benches --bench layer
//! ```
//!
//! The same cases in turns (30 rounds of 200 calls, inputs prepared outside the timed part,
//! rotating order), each one's fastest and median round and its ratio to the unavoidable work,
//! the steadier ratio on a machine shared with other work: `tools/layer-profile`
//! (`cargo run --release -p sangho-layer-profile`), which also runs one case alone for a
//! profiler.

use std::{
    convert::Infallible,
    hint::black_box,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use criterion::{
    BatchSize, BenchmarkGroup, Criterion, criterion_group, criterion_main, measurement::WallTime,
};
use http::{Request, Response, StatusCode};
use sangho_webhook::{
    WebhookBody,
    signature::Secret,
    store::MokaStore,
    testing::{Delivery, NullStore, fixtures},
};
use sangho_webhook_benches::layer::{
    EVENT_SIZE, EVENT_TYPE, Needed, at_fixed_time, claim_and_complete, delivery, handler,
    hmac_matches, timestamp_and_tag,
};
use tower::{Layer, Service, ServiceExt, service_fn};

/// Benchmarks `name`: events never seen before (a fresh id each) through `service`.
fn new_events<S, B>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    runtime: &tokio::runtime::Runtime,
    name: &str,
    service: &S,
    secret: &Secret,
    next_id: &AtomicU64,
) where
    S: Service<Request<WebhookBody>, Response = Response<B>, Error = Infallible> + Clone,
{
    group.bench_function(name, |b| {
        b.to_async(runtime).iter_batched(
            || {
                let id = format!("evt_bench_{}", next_id.fetch_add(1, Ordering::Relaxed));
                delivery(secret, &id).into_request()
            },
            |request| {
                let service = service.clone();
                async move {
                    let response = service.oneshot(request).await.expect("infallible");
                    debug_assert_eq!(response.status(), StatusCode::OK);
                    response
                }
            },
            BatchSize::SmallInput,
        )
    });
}

fn layer(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let secret = Secret::new(fixtures::SECRET).expect("the fixture secret is not empty");
    let service = at_fixed_time(&secret, MokaStore::new()).layer(service_fn(handler));

    let mut group = c.benchmark_group("layer_2KiB");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));

    let next_id = AtomicU64::new(0);
    new_events(
        &mut group,
        &runtime,
        "layer/new_event",
        &service,
        &secret,
        &next_id,
    );
    let null_store = at_fixed_time(&secret, NullStore).layer(service_fn(handler));
    let name = "layer/new_event_null_store";
    new_events(&mut group, &runtime, name, &null_store, &secret, &next_id);

    let duplicate = delivery(&secret, "evt_bench_duplicate");
    let first = runtime
        .block_on(service.clone().oneshot(duplicate.clone().into_request()))
        .expect("infallible");
    assert_eq!(first.status(), StatusCode::OK);
    group.bench_function("layer/duplicate", |b| {
        b.to_async(&runtime).iter_batched(
            || duplicate.clone().into_request(),
            |request| {
                let service = service.clone();
                async move {
                    let response = service.oneshot(request).await.expect("infallible");
                    debug_assert_eq!(response.status(), StatusCode::OK);
                    response
                }
            },
            BatchSize::SmallInput,
        )
    });

    let wrong = Secret::new("whsec_not_the_secret").expect("not empty");
    let forged = Delivery::body(fixtures::sized_event_body(
        "evt_bench_forged",
        EVENT_TYPE,
        EVENT_SIZE,
    ))
    .signed(&wrong, fixtures::NOW);
    group.bench_function("layer/rejected_signature", |b| {
        b.to_async(&runtime).iter_batched(
            || forged.clone().into_request(),
            |request| {
                let service = service.clone();
                async move {
                    let response = service.oneshot(request).await.expect("infallible");
                    debug_assert_eq!(response.status(), StatusCode::BAD_REQUEST);
                    response
                }
            },
            BatchSize::SmallInput,
        )
    });

    // The same bytes as a new event, for the baselines.
    let sample = delivery(&secret, "evt_bench_baseline");
    let body = sample.body_bytes().clone();
    let header = secret.sign(fixtures::NOW, &body);
    let (timestamp, tag) = timestamp_and_tag(&header);
    let hmac_ok = |body: &[u8]| hmac_matches(timestamp, &tag, body);
    assert!(hmac_ok(&body));

    group.bench_function("unavoidable_work", |b| {
        b.iter(|| {
            let body = black_box(&body);
            assert!(hmac_ok(body));
            let needed: Needed<'_> = serde_json::from_slice(body).expect("an event");
            black_box((needed.id, needed.event_type))
        })
    });

    group.bench_function("unavoidable_work_value", |b| {
        b.iter(|| {
            let body = black_box(&body);
            assert!(hmac_ok(body));
            black_box(serde_json::from_slice::<serde_json::Value>(body).expect("JSON"))
        })
    });

    group.bench_function("inner_service_alone", |b| {
        b.to_async(&runtime).iter_batched(
            || sample.clone().into_request(),
            |request| async move { handler(request).await.expect("infallible") },
            BatchSize::SmallInput,
        )
    });
    let store = MokaStore::new();
    let next_store_id = AtomicU64::new(0);
    group.bench_function("moka_store_alone", |b| {
        b.to_async(&runtime).iter_batched(
            || {
                format!(
                    "evt_store_{}",
                    next_store_id.fetch_add(1, Ordering::Relaxed)
                )
            },
            |id| {
                let store = &store;
                async move {
                    claim_and_complete(store, &id).await;
                }
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, layer);
criterion_main!(benches);
