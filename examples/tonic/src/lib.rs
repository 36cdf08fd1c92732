//! The tonic example's application: a gRPC service of its own (`EventLog`, from
//! `proto/event_log.proto`) and the Sangho webhook route, served on one port.
//!
//! [`SanghoWebhookLayer`] wraps the webhook route's `POST` only: gRPC calls never go through
//! it, and another method on the webhook route answers 405 without it. The webhook handler
//! records each processed event in an [`EventLog`], and the gRPC method `EventLog/Recent` lists
//! them.
//!
//! Run it with `cargo run -p sangho-example-tonic` (see `src/main.rs`).

use std::sync::{Arc, Mutex, PoisonError};

use axum::{Json, Router, extract::State, routing::post};
use sangho_webhook::{SanghoEvent, SanghoWebhookLayer};
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// The code generated from `proto/event_log.proto`.
#[allow(missing_docs)]
pub mod proto {
    tonic::include_proto!("sangho.example.v1");
}

use proto::{
    ReceivedEvent, RecentReply, RecentRequest,
    event_log_server::{self, EventLogServer},
};

/// The path the provider posts to.
pub const WEBHOOK_PATH: &str = "/webhooks/sangho";

/// The events the webhook route processed, shared by the webhook handler and the gRPC service.
#[derive(Clone, Debug, Default)]
pub struct EventLog {
    events: Arc<Mutex<Vec<ReceivedEvent>>>,
}

impl EventLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    fn record(&self, event: &SanghoEvent) {
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        events.push(ReceivedEvent {
            id: event.id().to_owned(),
            r#type: event.event_type().to_owned(),
        });
    }

    fn recent(&self, limit: usize) -> Vec<ReceivedEvent> {
        let events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        let skip = if limit == 0 {
            0
        } else {
            events.len().saturating_sub(limit)
        };
        events[skip..].to_vec()
    }
}

#[tonic::async_trait]
impl event_log_server::EventLog for EventLog {
    async fn recent(
        &self,
        request: tonic::Request<RecentRequest>,
    ) -> Result<tonic::Response<RecentReply>, tonic::Status> {
        let limit = usize::try_from(request.get_ref().limit).unwrap_or(usize::MAX);
        Ok(tonic::Response::new(RecentReply {
            events: EventLog::recent(self, limit),
        }))
    }
}

/// The webhook handler: the layer calls it once per event, with the verified event in the
/// request extensions.
async fn handle(State(log): State<EventLog>, event: axum::Extension<SanghoEvent>) -> Json<Value> {
    tracing::info!(
        id = event.id(),
        kind = event.event_type(),
        "received a Sangho event"
    );
    log.record(&event);
    Json(json!({ "received": true }))
}

/// The application: `POST /webhooks/sangho` through `layer`, and the `EventLog` gRPC service,
/// both reading and writing `log`. `route_layer` puts the layer behind the method check: a
/// `GET` on the webhook route answers 405.
pub fn app(layer: SanghoWebhookLayer, log: EventLog) -> Router {
    let webhooks = Router::new()
        .route(WEBHOOK_PATH, post(handle).route_layer(layer))
        .with_state(log.clone());
    let grpc = tonic::service::Routes::new(EventLogServer::new(log)).into_axum_router();
    webhooks.merge(grpc)
}

/// Serves `app` on `listener` (HTTP/1 for the webhooks, HTTP/2 for gRPC, detected per
/// connection) until `shutdown` completes (see
/// [`shutdown_signal`](sangho_examples_support::shutdown_signal)), then stops accepting and
/// lets the requests in progress, webhook deliveries and gRPC calls alike, finish.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}
