//! Bytes per remembered event in `MokaStore`: the resident memory of the process before and
//! after claiming and completing 1 000 000 fresh events (28-byte ids, the 72-hour retention),
//! divided by the number of events. Linux only (`/proc/self/statm`).
//!
//! ```text
//! cargo bench -p sangho-webhook-benches --bench memory
//! SANGHO_MEMORY_EVENTS=200000 cargo bench -p sangho-webhook-benches --bench memory
//! ```

use std::time::Duration;

use sangho_webhook::store::{Claim, ClaimToken, Claimant, Completion, IdempotencyStore, MokaStore};

const TYPE: &str = "payment_intent.succeeded";

/// The resident set size, in bytes.
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux /proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|field| field.parse().ok())
        .expect("statm's second field is the resident page count");
    pages * 4096
}

fn main() {
    if std::env::args().any(|argument| argument == "--list") {
        return; // `cargo bench -- --list` and `cargo test --benches` ask for the benchmark names
    }
    let events: usize = std::env::var("SANGHO_MEMORY_EVENTS")
        .ok()
        .and_then(|events| events.parse().ok())
        .unwrap_or(1_000_000);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let store = MokaStore::with_capacity(events as u64 * 2);
    let (lease, retention) = (Duration::from_secs(30), Duration::from_secs(72 * 3600));
    // 28-byte ids, like the provider's: `evt_` and 24 characters.
    let ids: Vec<String> = (0..events).map(|n| format!("evt_{n:024}")).collect();
    let before = resident_bytes();
    runtime.block_on(async {
        for id in &ids {
            let token = ClaimToken::generate();
            let claim = store.claim(Claimant::new(id, TYPE, &token), lease).await;
            assert_eq!(claim.expect("claimed"), Claim::Acquired);
            let completion = store.complete(Claimant::new(id, TYPE, &token), retention);
            assert_eq!(completion.await.expect("completed"), Completion::Recorded);
        }
    });
    store.run_pending_tasks();
    let after = resident_bytes();
    let per_event = (after.saturating_sub(before)) as f64 / events as f64;
    println!(
        "MokaStore: {events} completed events, resident {:.1} MiB -> {:.1} MiB: {per_event:.0} bytes per event",
        before as f64 / 1048576.0,
        after as f64 / 1048576.0
    );
    drop(ids);
}
