//! `examples/axum.rs`: the layer sits on the webhook route only, so its neighbours and unknown
//! paths answer as they would without it.
//!
//! The example's file is compiled into this test, so what is tested is what users read.

#[allow(dead_code)]
#[path = "../examples/axum.rs"]
mod example;

mod common;

use common::{SpyStore, TYPE, layer, secret};
use http::{Request, StatusCode, header};
use http_body_util::Full;
use sangho_webhook::{
    signature::Secret,
    store::MokaStore,
    testing::{Delivery, fixtures, send},
};

fn get(path: &str) -> Request<Full<bytes::Bytes>> {
    Request::get(path).body(Full::default()).unwrap()
}

#[tokio::test]
async fn the_health_check_beside_the_webhook_route_answers_200() {
    let app = example::app(layer(MokaStore::new()));
    assert_eq!(send(&app, get("/health")).await.status, StatusCode::OK);
}

#[tokio::test]
async fn an_unknown_path_answers_404() {
    let app = example::app(layer(MokaStore::new()));
    assert_eq!(
        send(&app, get("/nowhere")).await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn a_get_on_the_webhook_route_answers_405_without_the_layer() {
    let store = SpyStore::default();
    let app = example::app(layer(store.clone()));

    let answer = send(&app, get("/webhooks/sangho")).await;
    assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(answer.headers[header::ALLOW], "POST");

    // Signed, so that only the method is wrong: the layer does not even claim it.
    let mut signed = Delivery::event("evt_axum_get", TYPE)
        .signed(&secret(), fixtures::NOW)
        .into_request();
    *signed.method_mut() = http::Method::GET;
    assert_eq!(
        send(&app, signed).await.status,
        StatusCode::METHOD_NOT_ALLOWED
    );
    assert_eq!(store.operations(), 0, "the layer never saw either request");
}

#[tokio::test]
async fn the_webhook_route_receives_a_signed_event() {
    let app = example::app(layer(MokaStore::new()));
    let delivery = Delivery::event("evt_axum", TYPE).signed(&secret(), fixtures::NOW);
    let answer = send(&app, delivery.into_request()).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json(), serde_json::json!({ "received": true }));
}

/// The SQLite mode records a `payment_intent.succeeded` in `payments` with the event's
/// completion: the redelivery is a duplicate, and the payment is recorded once.
#[tokio::test]
async fn the_sqlite_mode_records_the_payment_with_the_completion() {
    let dir = std::env::temp_dir().join(format!(
        "sangho-axum-example-{}-{:?}",
        std::process::id(),
        std::time::SystemTime::now()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("shop.db").display());
    let webhooks = example::webhooks(Secret::new(fixtures::SECRET).unwrap(), &url)
        .await
        .expect("the SQLite store and the payments table");
    let payments = webhooks.payments.clone().expect("a SQL store has payments");
    let app = example::app_with_payments(webhooks.layer, webhooks.payments);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let body = r#"{"id":"evt_paid","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","amount":500}}}"#;
    let deliver = || {
        send(
            &app,
            Delivery::body(body).signed(&secret(), now).into_request(),
        )
    };

    let first = deliver().await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.json(), serde_json::json!({ "received": true }));
    let again = deliver().await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.json()["duplicate"], true);

    let example::Payments::Sqlite(store) = payments else {
        panic!("the SQLite mode");
    };
    let rows: Vec<(String, Option<i64>)> =
        sangho_webhook_sqlx::sqlx::query_as("SELECT event_id, amount FROM payments")
            .fetch_all(store.pool())
            .await
            .unwrap();
    assert_eq!(rows, vec![("evt_paid".to_owned(), Some(500))]);
    if let Some(purge) = webhooks.purge {
        purge.stop().await;
    }
    store.pool().close().await;
    let _ = std::fs::remove_dir_all(&dir);
}
