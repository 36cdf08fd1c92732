//! The tonic example through real clients: webhooks over HTTP/1 (hyper-util's client) and the
//! `EventLog` service over gRPC (tonic's channel), on one port.

use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use sangho_example_tonic::{
    EventLog, app,
    proto::{RecentRequest, event_log_client::EventLogClient},
    serve,
};
use sangho_webhook::{
    SanghoWebhookLayer, WebhookBody,
    signature::Secret,
    store::MokaStore,
    testing::{Delivery, fixtures},
};
use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};
use tonic::transport::Channel;

struct Server {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

async fn start() -> Server {
    let layer =
        SanghoWebhookLayer::builder(Secret::new(fixtures::SECRET).unwrap(), MokaStore::new())
            .with_clock(fixtures::fixed_clock)
            .build()
            .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel();
    let task = tokio::spawn(serve(listener, app(layer, EventLog::new()), async {
        let _ = stopped.await;
    }));
    Server { addr, stop, task }
}

async fn post(addr: SocketAddr, delivery: Delivery) -> (StatusCode, String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<WebhookBody>();
    let request = delivery.into_request();
    let (mut parts, body) = request.into_parts();
    parts.uri = format!("http://{addr}{}", parts.uri).parse().unwrap();
    let response = client
        .request(Request::from_parts(parts, body))
        .await
        .unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

async fn grpc_client(addr: SocketAddr) -> EventLogClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    EventLogClient::new(channel)
}

fn signed(id: &str) -> Delivery {
    let secret = Secret::new(fixtures::SECRET).unwrap();
    Delivery::event(id, "payment_intent.succeeded").signed(&secret, fixtures::NOW)
}

#[tokio::test]
async fn webhook_and_grpc_share_the_port_and_the_layer_guards_the_webhook_only() {
    let server = start().await;

    let (status, body) = post(server.addr, signed("evt_tonic_1")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, r#"{"received":true}"#);

    let (status, body) = post(server.addr, signed("evt_tonic_1")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains(r#""duplicate":true"#), "{body}");

    let unsigned = Delivery::event("evt_tonic_2", "payment_intent.succeeded");
    let (status, _) = post(server.addr, unsigned).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // gRPC needs no signature: the layer is on the webhook route only.
    let mut client = grpc_client(server.addr).await;
    let reply = client
        .recent(RecentRequest { limit: 0 })
        .await
        .unwrap()
        .into_inner();
    let ids: Vec<_> = reply.events.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(
        ids,
        ["evt_tonic_1"],
        "processed once, the refused one not at all"
    );
    assert_eq!(reply.events[0].r#type, "payment_intent.succeeded");

    server.stop.send(()).unwrap();
    server.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_get_on_the_webhook_route_answers_405() {
    let server = start().await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let request = Request::get(format!("http://{}/webhooks/sangho", server.addr))
        .body(Full::default())
        .unwrap();
    let response = client.request(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(response.headers()[http::header::ALLOW], "POST");

    server.stop.send(()).unwrap();
    server.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn concurrent_redeliveries_are_processed_once() {
    let server = start().await;
    let deliveries = (0..20).map(|_| tokio::spawn(post(server.addr, signed("evt_tonic_burst"))));
    for delivery in deliveries {
        let (status, _) = delivery.await.unwrap();
        assert!(
            status == StatusCode::OK || status == StatusCode::CONFLICT,
            "{status}"
        );
    }
    let mut client = grpc_client(server.addr).await;
    let reply = client.recent(RecentRequest { limit: 10 }).await.unwrap();
    assert_eq!(reply.into_inner().events.len(), 1);

    server.stop.send(()).unwrap();
    server.task.await.unwrap().unwrap();
}
