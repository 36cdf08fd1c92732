//! Signature verification, side by side, at 1 KiB, 64 KiB and 1 MiB:
//!
//! - `sangho_verify`: [`sangho_webhook::signature::verify`] of a valid `Sangho-Signature`;
//! - `raw_hmac_sha256`: HMAC-SHA256 of the same bytes (`"<t>." + body`) with `hmac` + `sha2`,
//!   keyed per call and compared to the expected tag: the physical limit on this machine;
//! - `standardwebhooks` and `svix`: the peers' `verify`, each of its own valid signature over
//!   the same body with the same secret bytes (their signed content is `"<id>.<t>.<body>"`, and
//!   their signature is base64).
//!
//! ```text
//! cargo bench -p sangho-webhook-benches --bench signature
//! ```
//!
//! After criterion's groups, a second check runs the four side by side in turns (30 rounds,
//! each variant timed over the same number of calls per round, in rotating order) and prints
//! each one's fastest and median round and the ratios: on a machine shared with other work,
//! whose load comes and goes while criterion measures one variant after the other, the
//! interleaved minimum is the steadier ratio.

use sangho_webhook_benches as common;

use std::{
    hint::black_box,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use hmac::{Hmac, KeyInit, Mac};
use http::{HeaderMap, HeaderValue};
use sangho_webhook::{
    signature::{Secret, verify},
    testing::fixtures,
};
use sha2::Sha256;

const SIZES: [(usize, &str); 3] = [(1024, "1KiB"), (64 * 1024, "64KiB"), (1024 * 1024, "1MiB")];
const TOLERANCE: Duration = Duration::from_secs(300);
const MESSAGE_ID: &str = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W";

fn raw_hmac(key: &[u8], timestamp: &[u8], body: &[u8], expected: &[u8; 32]) -> bool {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(timestamp);
    mac.update(b".");
    mac.update(body);
    mac.verify_slice(expected).is_ok()
}

/// The peers' headers, signed now (they read the system clock).
fn peer_headers(signature: String, timestamp: i64) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("webhook-id", HeaderValue::from_static(MESSAGE_ID));
    headers.insert("webhook-timestamp", HeaderValue::from(timestamp));
    headers.insert(
        "webhook-signature",
        HeaderValue::from_str(&signature).expect("a base64 signature is a header value"),
    );
    headers
}

fn signatures(c: &mut Criterion) {
    #[cfg(target_arch = "x86_64")]
    eprintln!(
        "SHA-NI (cpuid `sha`) detected at run time: {}",
        std::arch::is_x86_feature_detected!("sha")
    );
    let key = fixtures::SECRET.as_bytes();
    let secret = Secret::new(fixtures::SECRET).expect("the fixture secret is not empty");
    let secrets = [secret.clone()];
    let standard = standardwebhooks::Webhook::from_bytes(key.to_vec()).expect("a key");
    let svix = svix::webhooks::Webhook::from_bytes(key.to_vec()).expect("a key");

    let mut group = c.benchmark_group("signature");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30);
    for (size, label) in SIZES {
        let body =
            fixtures::sized_event_body("evt_benchmark_signature", "payment_intent.succeeded", size);
        group.throughput(Throughput::Bytes(body.len() as u64));

        let header = secret.sign(fixtures::NOW, &body);
        let now = fixtures::fixed_clock();
        assert_eq!(verify(&header, &body, &secrets, now, TOLERANCE), Ok(()));
        group.bench_with_input(
            BenchmarkId::new("sangho_verify", label),
            &body,
            |b, body| {
                b.iter(|| {
                    verify(
                        black_box(&header),
                        black_box(body),
                        &secrets,
                        now,
                        TOLERANCE,
                    )
                })
            },
        );

        let timestamp = fixtures::NOW.to_string();
        let (_, v1) = header.split_once(",v1=").expect("t=…,v1=…");
        let mut expected = [0u8; 32];
        base16ct::lower::decode(v1, &mut expected).expect("hex");
        assert!(raw_hmac(key, timestamp.as_bytes(), &body, &expected));
        group.bench_with_input(
            BenchmarkId::new("raw_hmac_sha256", label),
            &body,
            |b, body| {
                b.iter(|| {
                    raw_hmac(
                        black_box(key),
                        black_box(timestamp.as_bytes()),
                        black_box(body),
                        &expected,
                    )
                })
            },
        );

        // The peers check against the system clock: sign with the current time.
        let now_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs() as i64;
        let signed = standard.sign(MESSAGE_ID, now_unix, &body).expect("UTF-8");
        let headers = peer_headers(signed, now_unix);
        assert!(standard.verify(&body, &headers).is_ok());
        group.bench_with_input(
            BenchmarkId::new("standardwebhooks", label),
            &body,
            |b, body| b.iter(|| standard.verify(black_box(body), black_box(&headers))),
        );

        let signed = svix.sign(MESSAGE_ID, now_unix, &body).expect("UTF-8");
        let headers = peer_headers(signed, now_unix);
        assert!(svix.verify(&body, &headers).is_ok());
        group.bench_with_input(BenchmarkId::new("svix", label), &body, |b, body| {
            b.iter(|| svix.verify(black_box(body), black_box(&headers)))
        });
    }
    group.finish();
}

/// Times each variant in turns, `rounds` times, over `calls` calls each; prints per-call times.
fn interleaved(label: &str, calls: u32, variants: &mut [(&str, &mut dyn FnMut() -> bool)]) {
    const ROUNDS: usize = 30;
    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(ROUNDS); variants.len()];
    for round in 0..ROUNDS {
        for k in 0..variants.len() {
            let index = (round + k) % variants.len();
            let (_, run) = &mut variants[index];
            let began = std::time::Instant::now();
            for _ in 0..calls {
                assert!(black_box(run()));
            }
            times[index].push(began.elapsed().as_secs_f64() * 1e9 / f64::from(calls));
        }
    }
    let summary: Vec<(f64, f64)> = times
        .iter_mut()
        .map(|t| {
            t.sort_by(f64::total_cmp);
            (t[0], t[t.len() / 2])
        })
        .collect();
    let (base_min, base_median) = summary[1];
    for ((name, _), (min, median)) in variants.iter().zip(&summary) {
        eprintln!(
            "  {label:>5} {name:<16} min {min:>11.0} ns  median {median:>11.0} ns  \
             vs raw HMAC: min {:.3}x, median {:.3}x",
            min / base_min,
            median / base_median,
        );
    }
}

/// The interleaved check (see the crate docs).
fn interleaved_checks() {
    eprintln!("interleaved check (per call; ratio > 1 is slower than raw HMAC-SHA256):");
    let key = fixtures::SECRET.as_bytes();
    let secret = Secret::new(fixtures::SECRET).expect("the fixture secret is not empty");
    let secrets = [secret.clone()];
    let standard = standardwebhooks::Webhook::from_bytes(key.to_vec()).expect("a key");
    let svix = svix::webhooks::Webhook::from_bytes(key.to_vec()).expect("a key");
    for (size, label) in SIZES {
        let body =
            fixtures::sized_event_body("evt_benchmark_signature", "payment_intent.succeeded", size);
        let header = secret.sign(fixtures::NOW, &body);
        let now = fixtures::fixed_clock();
        let timestamp = fixtures::NOW.to_string();
        let (_, v1) = header.split_once(",v1=").expect("t=…,v1=…");
        let mut expected = [0u8; 32];
        base16ct::lower::decode(v1, &mut expected).expect("hex");
        let now_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs() as i64;
        let standard_headers = peer_headers(
            standard.sign(MESSAGE_ID, now_unix, &body).expect("UTF-8"),
            now_unix,
        );
        let svix_headers = peer_headers(
            svix.sign(MESSAGE_ID, now_unix, &body).expect("UTF-8"),
            now_unix,
        );
        let calls = u32::try_from((4 * 1024 * 1024 / size).clamp(4, 2000)).unwrap_or(4);
        interleaved(
            label,
            calls,
            &mut [
                ("sangho_verify", &mut || {
                    verify(&header, black_box(&body), &secrets, now, TOLERANCE).is_ok()
                }),
                ("raw_hmac_sha256", &mut || {
                    raw_hmac(key, timestamp.as_bytes(), black_box(&body), &expected)
                }),
                ("standardwebhooks", &mut || {
                    standard.verify(black_box(&body), &standard_headers).is_ok()
                }),
                ("svix", &mut || {
                    svix.verify(black_box(&body), &svix_headers).is_ok()
                }),
            ],
        );
    }
}

criterion_group!(benches, signatures);

fn main() {
    benches();
    if common::is_plain_bench_run() {
        interleaved_checks();
    }
    Criterion::default().configure_from_args().final_summary();
}
