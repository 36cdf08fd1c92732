//! The tonic example's process: SIGTERM stops it gracefully, with exit status 0.
//!
//! The test runs the example's binary, as `cargo run -p sangho-example-tonic` does (see
//! `ExampleProcess`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::StatusCode;
use sangho_examples_support::testing::{ExampleProcess, read_answer, send_raw};
use sangho_webhook::{
    signature::Secret,
    testing::{Delivery, fixtures},
};

/// The example's binary.
const EXAMPLE: &str = env!("CARGO_BIN_EXE_sangho-example-tonic");

#[tokio::test]
async fn sigterm_stops_the_example_with_exit_status_0() {
    let mut example =
        ExampleProcess::start(EXAMPLE, &[("SANGHO_WEBHOOK_SECRET", fixtures::SECRET)]);
    let address = example.wait_listening().await;
    // Serving: a delivery signed now (the process runs at the real clock) is processed.
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let delivery = Delivery::event("evt_tonic_process", "payment_intent.succeeded")
        .signed(&Secret::new(fixtures::SECRET).unwrap(), now);
    let (status, body) = read_answer(send_raw(address, delivery.into_request()).await).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    example.signal("TERM");
    let status = example.wait(Duration::from_secs(10)).await;
    let output = example.output();
    assert_eq!(status.code(), Some(0), "{status}: {output}");
    assert!(output.contains("SIGTERM: shutting down"), "{output}");
    assert!(output.contains("stopped: nothing left running"), "{output}");
}
