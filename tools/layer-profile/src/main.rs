//! The layer's benchmark cases (those of `cargo bench -p sangho-webhook-benches --bench
//! layer`), run in turns: 30 rounds of 200 calls, inputs prepared outside the timed part,
//! rotating order. It prints each case's fastest and median round and its ratio to the
//! unavoidable work (HMAC-SHA256 plus parsing `id` and `type`): on a machine shared with other
//! work, the interleaved minimum is the steadier ratio.
//!
//! ```text
//! cargo run --release -p sangho-layer-profile
//! ```
//!
//! For a profiler, one case alone, its inputs prepared outside the function `profiled`:
//!
//! ```text
//! cargo build --release -p sangho-layer-profile
//! valgrind --tool=callgrind --toggle-collect='*profiled*' \
//!     target/release/layer-profile --case layer/new_event --calls 2000
//! ```
//!
//! (`SANGHO_PROFILE_CASE` and `SANGHO_PROFILE_CALLS` set the same.)

use std::{
    hint::black_box,
    sync::atomic::{AtomicU64, Ordering},
};

use clap::Parser;
use http::{Request, StatusCode};
use sangho_webhook::{
    WebhookBody,
    signature::Secret,
    store::MokaStore,
    testing::{Delivery, NullStore, fixtures},
};
use sangho_webhook_benches::layer::{
    EVENT_SIZE, EVENT_TYPE, Needed, Requests, at_fixed_time, by_hand, claim_and_complete, delivery,
    handler, hmac_matches, through, timestamp_and_tag,
};
use tower::{Layer, ServiceExt, service_fn};

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "layer-profile",
    about = "Runs the layer's benchmark cases in turns and prints their ratios to the unavoidable work; or one case alone, for a profiler"
)]
struct Args {
    /// Run only this case (layer/new_event, layer/duplicate, unavoidable_work…), --calls times
    #[arg(long, value_name = "NAME", env = "SANGHO_PROFILE_CASE")]
    case: Option<String>,
    /// The calls of the case run alone
    #[arg(
        long,
        value_name = "N",
        env = "SANGHO_PROFILE_CALLS",
        default_value_t = 1000
    )]
    calls: usize,
}

/// One case of the interleaved check: prepares its inputs, then runs them (timed).
struct Case<'a> {
    name: &'static str,
    prepare: Box<dyn FnMut(usize) -> Requests + 'a>,
    run: Box<dyn FnMut(Requests) + 'a>,
}

/// The interleaved check (see the crate docs); or, for a profiler, `calls` calls of the case
/// `name`.
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
    let fresh = |n: usize| -> Vec<Request<WebhookBody>> {
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
                        let mut request = Request::new(WebhookBody::default());
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

/// The profiled part of a case: `valgrind --tool=callgrind --toggle-collect='*profiled*'`
/// counts only this.
#[inline(never)]
fn profiled(run: &mut dyn FnMut(Requests), inputs: Requests) {
    run(inputs);
}

fn main() {
    let args = Args::parse();
    interleaved_check(args.case.map(|name| (name, args.calls)));
}
