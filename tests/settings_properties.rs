//! For any settings, `build()` either refuses them or a delivery never panics: not in the
//! request's future, not in a renewal, not in a completion retry. Durations are drawn from the
//! whole range, `Duration::MAX` and values near it included.

mod common;

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

use common::{FaultyStore, TYPE, builder, secret};
use proptest::prelude::*;
use sangho_webhook::testing::{CountingHandler, Delivery, fixtures, send};
use tower::Layer;

/// Panics anywhere in the process, background tasks included (tokio catches those).
static PANICS: AtomicUsize = AtomicUsize::new(0);

fn count_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        previous(info);
    }));
}

/// Any duration, with the edges weighted: zero, around a second, hours, and near the maximum.
fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        (0u32..1_000_000_000).prop_map(|nanos| Duration::MAX - Duration::from_nanos(nanos.into())),
        (0u64..10_000).prop_map(Duration::from_millis),
        (0u64..200_000).prop_map(Duration::from_secs),
        (0u64..u64::MAX).prop_map(Duration::from_secs),
    ]
}

/// A duration that is accepted more often than not where `build()` bounds it, and any
/// duration otherwise: so that most cases reach a delivery.
fn mostly_within(low: u64, high: u64) -> impl Strategy<Value = Duration> {
    prop_oneof![
        3 => (low..=high).prop_map(Duration::from_secs),
        1 => duration(),
    ]
}

/// How many cases were built and delivered.
static DELIVERED: AtomicUsize = AtomicUsize::new(0);

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn settings_are_refused_or_a_delivery_never_panics(
        lease in mostly_within(1, 3600),
        max_processing_time in mostly_within(1, 12 * 3600),
        completion_retry in mostly_within(0, 3600),
        store_timeout in mostly_within(1, u64::MAX),
        retention in mostly_within(3601, u64::MAX),
        tolerance in mostly_within(300, u64::MAX),
        retry_after in duration(),
    ) {
        static HOOK: std::sync::Once = std::sync::Once::new();
        HOOK.call_once(count_panics);
        let store = FaultyStore::default();
        let layer = builder(store.clone())
            .with_lease(lease)
            .with_max_processing_time(max_processing_time)
            .with_completion_retry(completion_retry)
            .with_store_timeout(store_timeout)
            .with_retention(retention)
            .with_short_retention_allowed(true)
            .with_tolerance(tolerance)
            .with_retry_after(retry_after)
            .build();
        let Ok(layer) = layer else { return Ok(()) };
        let before = PANICS.load(Ordering::SeqCst);
        // Time is paused: the renewals and the completion retries run their whole course at
        // once, however long the settings make them.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(async {
            // A handler slower than its first poll, outliving some renewals, whose first
            // completion fails (so it is retried in the background).
            let handler = CountingHandler::new().with_delay(lease.min(Duration::from_secs(3600)) * 2);
            store.faults.set_completions_fail(true);
            let service = layer.clone().layer(handler);
            let request = Delivery::event("evt_settings", TYPE)
                .signed(&secret(), fixtures::NOW)
                .into_request();
            let answer = send(&service, request).await;
            prop_assert!(answer.status.is_success(), "{answer:?}");
            store.faults.set_completions_fail(false);
            let drained = layer.drain(Duration::from_secs(48 * 3600)).await;
            prop_assert!(drained.is_complete());
            Ok(())
        })?;
        prop_assert_eq!(PANICS.load(Ordering::SeqCst), before, "a delivery panicked");
        DELIVERED.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn the_settings_property_reaches_deliveries() {
    settings_are_refused_or_a_delivery_never_panics();
    let delivered = DELIVERED.load(Ordering::SeqCst);
    assert!(
        delivered >= 12,
        "only {delivered} of the cases were delivered"
    );
}
