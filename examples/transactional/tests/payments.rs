//! The transactional example's handler: a `payment_intent.succeeded` is recorded in
//! `payments` with the event's completion, once.

use http::StatusCode;
use sangho_example_transactional as example;
use sangho_examples_support::Store;
use sangho_webhook::{
    signature::Secret,
    testing::{
        Delivery,
        fixtures::{self, secret},
        send,
    },
};

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
    let store = Store::connect(&url).await.expect("the SQLite store");
    let payments = example::Payments::of(&store).expect("a SQL store has payments");
    payments.migrate().await.expect("the payments table");
    let webhooks = store.webhooks(Secret::new(fixtures::SECRET).unwrap());
    let app = example::app(webhooks.layer, payments.clone());
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
