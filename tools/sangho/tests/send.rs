//! `sangho send` against the main example's app, served on a loopback port: what the sender
//! reports, and whether it counts the run as a success.

use std::{net::SocketAddr, time::Duration};

use clap::Parser;
use sangho_example_axum as server;
use sangho_tools::send;
use sangho_webhook::{SanghoWebhookLayer, signature::Secret, store::MokaStore};
use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};

const SECRET: &str = "whsec_send_example";

/// Every test ends within this, whatever the sender does.
const TEST_TIMEOUT: Duration = Duration::from_secs(30);

struct Server {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Server {
    /// The axum example's app with a `MokaStore`, at the real clock (the sender signs with it).
    async fn start() -> Self {
        let layer = SanghoWebhookLayer::builder(Secret::new(SECRET).unwrap(), MokaStore::new())
            .build()
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            axum::serve(listener, server::app(layer))
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
        });
        Self { addr, stop, task }
    }

    fn url(&self) -> String {
        format!("http://{}/webhooks/sangho", self.addr)
    }

    async fn stop(self) {
        self.stop.send(()).unwrap();
        self.task.await.unwrap().unwrap();
    }
}

/// The sender's arguments, parsed as from its command line (the secret given as a flag).
fn args(url: &str, secret: &str, rest: &[&str]) -> send::Args {
    let mut argv = vec!["send", "--url", url, "--secret", secret];
    argv.extend_from_slice(rest);
    send::Args::try_parse_from(argv).unwrap()
}

async fn run(args: send::Args) -> send::Report {
    let mut printed = Vec::new();
    let report = tokio::time::timeout(
        TEST_TIMEOUT,
        send::run(args, |sent| printed.push(sent.to_string())),
    )
    .await
    .expect("the sender finishes")
    .expect("the sender starts");
    assert_eq!(
        printed.len(),
        report.deliveries.len(),
        "one line per delivery"
    );
    report
}

#[tokio::test]
async fn a_single_delivery_is_processed_and_counts_as_success() {
    let server = Server::start().await;

    let report = run(args(&server.url(), SECRET, &[])).await;

    assert_eq!(report.deliveries.len(), 1);
    let sent = &report.deliveries[0];
    assert_eq!(sent.status, Some(http::StatusCode::OK));
    assert_eq!(sent.outcome, "processed");
    assert!(
        report.event_id.starts_with("evt_test_"),
        "{}",
        report.event_id
    );
    assert!(report.is_success(), "{}", report.summary());
    server.stop().await;
}

#[tokio::test]
async fn concurrent_repeats_are_processed_once_and_the_rest_deduplicated() {
    let server = Server::start().await;

    let report = run(args(
        &server.url(),
        SECRET,
        &["--repeat", "5", "--concurrency", "5"],
    ))
    .await;

    assert_eq!(report.deliveries.len(), 5);
    assert_eq!(report.count("processed"), 1, "{}", report.summary());
    assert_eq!(
        report.count("duplicate") + report.count("in_flight"),
        4,
        "{}",
        report.summary()
    );
    assert!(report.is_success(), "{}", report.summary());
    server.stop().await;
}

#[tokio::test]
async fn a_given_id_type_and_data_are_sent_and_a_redelivery_is_a_duplicate() {
    let server = Server::start().await;
    let event = [
        "--id",
        "evt_send_given",
        "--type",
        "charge.refunded",
        "--data",
        r#"{"id":"ch_1","amount":500}"#,
    ];

    let first = run(args(&server.url(), SECRET, &event)).await;
    let second = run(args(&server.url(), SECRET, &event)).await;

    assert_eq!(first.event_id, "evt_send_given");
    assert_eq!(first.count("processed"), 1, "{}", first.summary());
    assert_eq!(second.count("duplicate"), 1, "{}", second.summary());
    assert!(second.is_success());
    server.stop().await;
}

#[tokio::test]
async fn a_stale_delivery_is_refused_as_a_replay_and_counts_as_success() {
    let server = Server::start().await;

    let report = run(args(&server.url(), SECRET, &["--stale", "3600"])).await;

    let sent = &report.deliveries[0];
    assert_eq!(sent.status, Some(http::StatusCode::BAD_REQUEST));
    assert_eq!(sent.outcome, "timestamp_out_of_tolerance");
    assert!(report.is_success(), "{}", report.summary());
    server.stop().await;
}

#[tokio::test]
async fn a_stale_delivery_that_is_accepted_counts_as_failure() {
    let server = Server::start().await;

    // Within the endpoint's 300 s tolerance: accepted, which is not what --stale expects.
    let report = run(args(&server.url(), SECRET, &["--stale", "10"])).await;

    assert_eq!(report.deliveries[0].outcome, "processed");
    assert!(!report.is_success(), "{}", report.summary());
    server.stop().await;
}

#[tokio::test]
async fn a_wrong_secret_is_refused_and_counts_as_failure() {
    let server = Server::start().await;

    let report = run(args(&server.url(), "whsec_wrong", &["--repeat", "2"])).await;

    for sent in &report.deliveries {
        assert_eq!(sent.status, Some(http::StatusCode::BAD_REQUEST));
        assert_eq!(sent.outcome, "signature_mismatch");
    }
    assert!(!report.is_success(), "{}", report.summary());
    assert!(report.summary().contains("FAILED"), "{}", report.summary());
    server.stop().await;
}

#[tokio::test]
async fn an_endpoint_that_does_not_answer_counts_as_failure() {
    // A port that was just free: nothing listens there.
    let addr = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();

    let report = run(args(&format!("http://{addr}/webhooks/sangho"), SECRET, &[])).await;

    assert_eq!(report.deliveries[0].status, None);
    assert!(!report.is_success(), "{}", report.summary());
}

#[test]
fn the_command_line_refuses_a_url_without_http_and_a_zero_repeat() {
    let parse = |argv: &[&str]| send::Args::try_parse_from(argv).map(|_| ());
    assert!(parse(&["send", "--url", "127.0.0.1:3000", "--secret", "whsec_x"]).is_err());
    assert!(
        parse(&[
            "send",
            "--url",
            "http://127.0.0.1/",
            "--secret",
            "whsec_x",
            "--repeat",
            "0"
        ])
        .is_err()
    );
    assert!(
        parse(&[
            "send",
            "--url",
            "http://127.0.0.1/",
            "--secret",
            "whsec_x",
            "--data",
            "{oops"
        ])
        .is_err()
    );
}

#[tokio::test]
async fn a_secret_with_a_trailing_newline_is_refused_before_sending() {
    let result = send::run(
        args("http://127.0.0.1:9/", "whsec_x\n", &[]),
        |_: &send::Sent| panic!("nothing is sent"),
    )
    .await;
    assert!(result.is_err());
}
