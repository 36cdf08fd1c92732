//! Through a real axum server on loopback and a real HTTP client.

mod common;

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use axum::{Extension, Json, Router, routing::post};
use bytes::Bytes;
use common::{TYPE, layer, secret};
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use sangho_webhook::{
    SanghoEvent, WebhookBody,
    store::MokaStore,
    testing::{Delivery, fixtures},
};
use serde_json::{Value, json};

/// Serves the README's app on 127.0.0.1:0; answers its address and the handler's call count.
async fn serve() -> (SocketAddr, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let handler = {
        let calls = calls.clone();
        move |Extension(event): Extension<SanghoEvent>, body: Bytes| async move {
            assert_eq!(event.raw(), &body, "the handler reads the signed body");
            calls.fetch_add(1, Ordering::SeqCst);
            Json(json!({ "received": true, "id": event.id() }))
        }
    };
    let app = Router::new()
        .route("/webhooks/sangho", post(handler))
        .layer(layer(MokaStore::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (address, calls)
}

async fn post_to(address: SocketAddr, request: Request<WebhookBody>) -> (StatusCode, Value) {
    let client = Client::builder(TokioExecutor::new()).build_http();
    let (mut parts, body) = request.into_parts();
    parts.uri = format!("http://{address}{}", parts.uri).parse().unwrap();
    let response = client
        .request(Request::from_parts(parts, body))
        .await
        .unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap())
}

#[tokio::test]
async fn axum_server_processes_an_event_once_and_acknowledges_redeliveries() {
    let (address, calls) = serve().await;
    let delivery = Delivery::event("evt_e2e", TYPE).signed(&secret(), fixtures::NOW);

    let (status, body) = post_to(address, delivery.clone().into_request()).await;
    assert_eq!(
        (status, body),
        (StatusCode::OK, json!({ "received": true, "id": "evt_e2e" }))
    );

    let (status, body) = post_to(address, delivery.into_request()).await;
    assert_eq!(
        (status, body),
        (
            StatusCode::OK,
            json!({ "received": true, "duplicate": true })
        )
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn axum_server_refuses_a_forged_delivery() {
    let (address, calls) = serve().await;
    let forged = Delivery::event("evt_forged", TYPE).with_signature_header(format!(
        "t={},v1={}",
        fixtures::NOW,
        "0".repeat(64)
    ));
    let (status, body) = post_to(address, forged.into_request()).await;
    assert_eq!(
        (status, body),
        (
            StatusCode::BAD_REQUEST,
            json!({ "error": "signature_mismatch" })
        )
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}
