//! Two app instances sharing one Redis (`SANGHO_TEST_REDIS_URL`), each with its own connection
//! and layer, receive 200 concurrent deliveries of one event, trial after trial: the handler
//! runs exactly once every time.
//!
//! Trials: `SANGHO_TRIALS` (50 by default; the full run is 1000:
//! `SANGHO_TRIALS=1000 cargo test -p sangho-webhook-redis --test two_instances -- --include-ignored`).

mod common;

use std::{sync::Arc, time::Duration};

use common::{
    PrefixCleanup,
    deliver::{deliver, service},
    redis_url, unique_prefix,
};
use http::StatusCode;
use sangho_webhook::testing::{CountingHandler, conformance::unique_event_id};
use sangho_webhook_redis::RedisStore;

const DELIVERIES: usize = 200;

fn trials() -> usize {
    std::env::var("SANGHO_TRIALS")
        .ok()
        .and_then(|trials| trials.parse().ok())
        .unwrap_or(50)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs Redis: run with --include-ignored; URL from SANGHO_TEST_REDIS_URL (default redis://127.0.0.1:6379)"]
async fn two_instances_run_the_handler_once_for_200_concurrent_deliveries_every_trial() {
    let prefix = unique_prefix();
    let _cleanup = PrefixCleanup::new(redis_url(), prefix.clone());
    // One handler count across both instances: what matters is how often the event is
    // processed anywhere. The delay keeps the first delivery in flight while others arrive.
    let handler = CountingHandler::new().with_delay(Duration::from_millis(20));
    let mut instances = Vec::new();
    for _ in 0..2 {
        let store = RedisStore::connect(redis_url())
            .await
            .expect("the test Redis answers")
            .with_prefix(prefix.clone());
        instances.push(service(store, &handler, |layer| layer));
    }
    let instances = Arc::new(instances);

    let trials = trials();
    let started = std::time::Instant::now();
    let (mut doubles, mut losses, mut conflicts) = (0, 0, 0);
    for trial in 0..trials {
        let id: Arc<str> = unique_event_id("twoinst").into();
        let before = handler.calls();
        let barrier = Arc::new(tokio::sync::Barrier::new(DELIVERIES));
        let mut tasks = tokio::task::JoinSet::new();
        for n in 0..DELIVERIES {
            let (instances, id, barrier) = (instances.clone(), id.clone(), barrier.clone());
            tasks.spawn(async move {
                barrier.wait().await;
                deliver(&instances[n % 2], &id).await.0
            });
        }
        while let Some(joined) = tasks.join_next().await {
            match joined.expect("a delivery task") {
                StatusCode::OK => {}
                StatusCode::CONFLICT => conflicts += 1,
                other => panic!("trial {trial}: a delivery answered {other}"),
            }
        }
        // Lost: every delivery answered, and the handler never ran.
        if handler.calls() == before {
            losses += 1;
        }
        // A redelivery afterwards, to either instance, is a duplicate.
        for instance in instances.iter() {
            assert_eq!(deliver(instance, &id).await.0, StatusCode::OK);
        }
        doubles += (handler.calls() - before).saturating_sub(1);
    }
    eprintln!(
        "two instances, one Redis: {trials} trials of {DELIVERIES} concurrent deliveries in \
         {:?}: {doubles} doubles, {losses} losses, {conflicts} deliveries answered 409",
        started.elapsed()
    );
    assert_eq!((doubles, losses), (0, 0));
}
