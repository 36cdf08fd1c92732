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
//! cargo bench --bench layer
//! ```
//!
//! After criterion's group, a second check runs the same cases in turns (30 rounds of 200
//! calls, inputs prepared outside the timed part, rotating order) and prints each one's
//! fastest and median round and its ratio to the unavoidable work: on a machine shared with
//! other work, the interleaved minimum is the steadier ratio.

mod common;

use std::{
    convert::Infallible,
    hint::black_box,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use bytes::Bytes;
use criterion::{BatchSize, Criterion, criterion_group};
use hmac::{Hmac, KeyInit, Mac};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use sangho_webhook::{
    SanghoWebhookLayer,
    signature::Secret,
    store::{Claim, ClaimToken, IdempotencyStore, MokaStore},
    testing::{Delivery, NullStore, fixtures},
};
use serde::Deserialize;
use sha2::Sha256;
use tower::{Layer, ServiceExt, service_fn};

const EVENT_SIZE: usize = 2048;
const EVENT_TYPE: &str = "payment_intent.succeeded";

/// The two fields the layer needs; serde skips the rest without building it.
#[derive(Deserialize)]
struct Needed<'a> {
    #[serde(borrow)]
    id: std::borrow::Cow<'a, str>,
    #[serde(rename = "type", borrow)]
    event_type: std::borrow::Cow<'a, str>,
}

/// What the layer asks of the store for a new event: a claim, then a completion.
async fn claim_and_complete(store: &MokaStore, id: &str) {
    let token = ClaimToken::generate();
    let lease = SanghoWebhookLayer::DEFAULT_LEASE;
    let claim = store.claim(id, EVENT_TYPE, &token, lease).await;
    assert!(
        matches!(claim, Ok(Claim::Acquired)),
        "a fresh id is acquired"
    );
    let retention = SanghoWebhookLayer::DEFAULT_RETENTION;
    let completed = store.complete(id, EVENT_TYPE, &token, retention).await;
    assert!(matches!(completed, Ok(true)));
}

/// The handler: answers 200 at once.
async fn handler<B>(_: Request<B>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(
        b"{\"received\":true}",
    ))))
}

/// The layer at the fixtures' fixed time.
fn at_fixed_time(secret: &Secret, store: impl IdempotencyStore) -> SanghoWebhookLayer {
    SanghoWebhookLayer::builder(secret.clone(), store)
        .with_clock(fixtures::fixed_clock)
        .build()
        .expect("valid settings")
}

fn delivery(secret: &Secret, id: &str) -> Delivery {
    let body = fixtures::sized_event_body(id, EVENT_TYPE, EVENT_SIZE);
    Delivery::body(body).signed(secret, fixtures::NOW)
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
    group.bench_function("layer/new_event", |b| {
        b.to_async(&runtime).iter_batched(
            || {
                let id = format!("evt_bench_{}", next_id.fetch_add(1, Ordering::Relaxed));
                delivery(&secret, &id).into_request()
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

    let null_store = at_fixed_time(&secret, NullStore).layer(service_fn(handler));
    group.bench_function("layer/new_event_null_store", |b| {
        b.to_async(&runtime).iter_batched(
            || {
                let id = format!("evt_bench_{}", next_id.fetch_add(1, Ordering::Relaxed));
                delivery(&secret, &id).into_request()
            },
            |request| {
                let service = null_store.clone();
                async move {
                    let response = service.oneshot(request).await.expect("infallible");
                    debug_assert_eq!(response.status(), StatusCode::OK);
                    response
                }
            },
            BatchSize::SmallInput,
        )
    });

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

/// Sends each request through `service`, one after the other.
fn through<S>(runtime: &tokio::runtime::Runtime, service: &S, requests: Vec<Request<Full<Bytes>>>)
where
    S: tower::Service<Request<Full<Bytes>>, Error = Infallible> + Clone,
{
    runtime.block_on(async {
        for request in requests {
            let response = service.clone().oneshot(request).await;
            black_box(response.map_err(|never| match never {}).ok());
        }
    })
}

type Requests = Vec<Request<Full<Bytes>>>;

/// One case of the interleaved check: prepares its inputs, then runs them (timed).
struct Case<'a> {
    name: &'static str,
    prepare: Box<dyn FnMut(usize) -> Requests + 'a>,
    run: Box<dyn FnMut(Requests) + 'a>,
}

/// The interleaved check (see the crate docs); or, for a profiler, `calls` calls of one case.
fn interleaved_check(profile: Option<(String, usize)>) {
    const ROUNDS: usize = 30;
    const CALLS: usize = 200;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let secret = Secret::new(fixtures::SECRET).expect("the fixture secret is not empty");
    let moka = at_fixed_time(&secret, MokaStore::new()).layer(service_fn(handler));
    let null = at_fixed_time(&secret, NullStore).layer(service_fn(handler));
    let store = MokaStore::new();
    let next_id = AtomicU64::new(0);
    let fresh = |n: usize| -> Vec<Request<Full<Bytes>>> {
        (0..n)
            .map(|_| {
                let id = format!("evt_check_{}", next_id.fetch_add(1, Ordering::Relaxed));
                delivery(&secret, &id).into_request()
            })
            .collect()
    };
    let duplicate = delivery(&secret, "evt_check_duplicate");
    let first = runtime.block_on(moka.clone().oneshot(duplicate.clone().into_request()));
    assert_eq!(first.expect("infallible").status(), StatusCode::OK);
    let forged = Delivery::body(fixtures::sized_event_body(
        "evt_check_forged",
        EVENT_TYPE,
        EVENT_SIZE,
    ))
    .signed(
        &Secret::new("whsec_not_the_secret").expect("not empty"),
        fixtures::NOW,
    );
    let header = secret.sign(fixtures::NOW, duplicate.body_bytes());
    let (timestamp, tag) = timestamp_and_tag(&header);

    let mut cases = [
        Case {
            name: "unavoidable_work",
            prepare: Box::new(fresh),
            run: Box::new(|requests| {
                for request in requests {
                    black_box(by_hand(request));
                }
            }),
        },
        Case {
            name: "unavoidable_work_one_body",
            prepare: Box::new(|n| (0..n).map(|_| duplicate.clone().into_request()).collect()),
            run: Box::new(|requests| {
                let body = duplicate.body_bytes();
                for _ in requests {
                    assert!(hmac_matches(timestamp, &tag, black_box(body)));
                    let needed: Needed<'_> = serde_json::from_slice(body).expect("an event");
                    black_box((needed.id, needed.event_type));
                }
            }),
        },
        Case {
            name: "layer/new_event",
            prepare: Box::new(fresh),
            run: Box::new(|requests| through(&runtime, &moka, requests)),
        },
        Case {
            name: "layer/new_event_null_store",
            prepare: Box::new(fresh),
            run: Box::new(|requests| through(&runtime, &null, requests)),
        },
        Case {
            name: "layer/duplicate",
            prepare: Box::new(|n| (0..n).map(|_| duplicate.clone().into_request()).collect()),
            run: Box::new(|requests| through(&runtime, &moka, requests)),
        },
        Case {
            name: "layer/rejected_signature",
            prepare: Box::new(|n| (0..n).map(|_| forged.clone().into_request()).collect()),
            run: Box::new(|requests| through(&runtime, &moka, requests)),
        },
        Case {
            name: "inner_service_alone",
            prepare: Box::new(|n| (0..n).map(|_| duplicate.clone().into_request()).collect()),
            run: Box::new(|requests| {
                runtime.block_on(async {
                    for request in requests {
                        black_box(handler(request).await.expect("infallible"));
                    }
                })
            }),
        },
        Case {
            name: "moka_store_alone",
            // The fresh event id travels in the URI, so that nothing is formatted while timed.
            prepare: Box::new(|n| {
                (0..n)
                    .map(|_| {
                        let id = next_id.fetch_add(1, Ordering::Relaxed);
                        let mut request = Request::new(Full::new(Bytes::new()));
                        *request.uri_mut() =
                            format!("/evt_store_check_{id}").parse().expect("a path");
                        request
                    })
                    .collect()
            }),
            run: Box::new(|requests| {
                runtime.block_on(async {
                    for request in requests {
                        let id = &request.uri().path()[1..];
                        claim_and_complete(&store, id).await;
                    }
                })
            }),
        },
    ];

    if let Some((name, calls)) = profile {
        let case = cases
            .iter_mut()
            .find(|case| case.name == name)
            .unwrap_or_else(|| panic!("no case named {name}"));
        let inputs = (case.prepare)(calls);
        profiled(&mut case.run, inputs);
        return;
    }
    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(ROUNDS); cases.len()];
    for round in 0..ROUNDS {
        for k in 0..cases.len() {
            let index = (round + k) % cases.len();
            let case = &mut cases[index];
            let inputs = (case.prepare)(CALLS);
            let began = std::time::Instant::now();
            (case.run)(inputs);
            times[index].push(began.elapsed().as_secs_f64() * 1e9 / CALLS as f64);
        }
    }
    let summary: Vec<(f64, f64)> = times
        .iter_mut()
        .map(|t| {
            t.sort_by(f64::total_cmp);
            (t[0], t[t.len() / 2])
        })
        .collect();
    let (base_min, base_median) = summary[0];
    eprintln!("interleaved check (per call; ratio to the unavoidable work):");
    for (case, (min, median)) in cases.iter().zip(&summary) {
        eprintln!(
            "  {:<28} min {min:>8.0} ns  median {median:>8.0} ns  ratio: min {:.2}x, median {:.2}x",
            case.name,
            min / base_min,
            median / base_median,
        );
    }
}

/// The timestamp and the decoded `v1` of a `t=…,v1=…` header (one `v1`).
fn timestamp_and_tag(header: &str) -> (&str, [u8; 32]) {
    let (timestamp, v1) = header
        .strip_prefix("t=")
        .and_then(|rest| rest.split_once(",v1="))
        .expect("t=…,v1=…");
    let mut tag = [0u8; 32];
    base16ct::lower::decode(v1, &mut tag).expect("hex");
    (timestamp, tag)
}

/// Raw HMAC-SHA256 of `"<timestamp>." + body`, keyed per call, compared with `tag`.
fn hmac_matches(timestamp: &str, tag: &[u8; 32], body: &[u8]) -> bool {
    let mut mac = Hmac::<Sha256>::new_from_slice(fixtures::SECRET.as_bytes()).expect("any key");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.verify_slice(tag).is_ok()
}

/// What a receiver written by hand does with each delivery, and no more: reads the signature
/// header, decodes its `v1`, computes the HMAC of `"<t>." + body` (keyed per call) and compares
/// it, and parses `id` and `type`. The request is dropped here, as the layer drops it.
fn by_hand(request: Request<Full<Bytes>>) -> (usize, usize) {
    let (parts, body) = request.into_parts();
    let body = ready_data(body);
    let header = parts
        .headers
        .get(&sangho_webhook::SIGNATURE_HEADER)
        .and_then(|value| value.to_str().ok())
        .expect("a signature header");
    let (timestamp, tag) = timestamp_and_tag(header);
    assert!(hmac_matches(timestamp, &tag, &body));
    let needed: Needed<'_> = serde_json::from_slice(&body).expect("an event");
    (needed.id.len(), needed.event_type.len())
}

/// The bytes of a body that is ready at once (a `Full`), without a runtime.
fn ready_data(body: Full<Bytes>) -> Bytes {
    use http_body::Body;
    let mut body = std::pin::pin!(body);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match body.as_mut().poll_frame(&mut context) {
        std::task::Poll::Ready(Some(Ok(frame))) => frame.into_data().expect("a data frame"),
        _ => Bytes::new(),
    }
}

/// The profiled part of a case: `valgrind --tool=callgrind --toggle-collect='*profiled*'`
/// counts only this.
#[inline(never)]
fn profiled(run: &mut dyn FnMut(Requests), inputs: Requests) {
    run(inputs);
}

criterion_group!(benches, layer);

fn main() {
    // For profilers, one case alone, its inputs prepared outside `profiled`:
    // `SANGHO_PROFILE_CASE=layer/new_event SANGHO_PROFILE_CALLS=2000 <bench binary>`
    if let Ok(name) = std::env::var("SANGHO_PROFILE_CASE") {
        let calls = std::env::var("SANGHO_PROFILE_CALLS")
            .ok()
            .and_then(|calls| calls.parse().ok())
            .unwrap_or(1000);
        return interleaved_check(Some((name, calls)));
    }
    benches();
    if common::is_plain_bench_run() {
        interleaved_check(None);
    }
    Criterion::default().configure_from_args().final_summary();
}
