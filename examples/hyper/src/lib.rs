//! Receiving Sangho webhooks with hyper 1 and hyper-util, without a framework.
//!
//! The layer wraps a plain tower service (the handler); a small router in front of it sends
//! `POST /webhooks/sangho` through the layer and answers everything else itself (405 for
//! another method on the webhook path, 404 elsewhere), so the layer never sees those requests.
//! Connections are served with hyper's HTTP/1 connection builder. SIGTERM or Ctrl-C stops the
//! server gracefully: it stops accepting, lets the requests in progress finish, waits for the
//! webhook handlers still running (those whose provider hung up included), and exits 0.
//!
//! ```text
//! SANGHO_WEBHOOK_SECRET=whsec_... cargo run -p sangho-example-hyper
//! ```
//!
//! The binary (`src/main.rs`) reads the settings every example reads; of the stores, this
//! example knows `memory:` (the default). The main example (`cargo run -p sangho-example-axum`)
//! shows the SQL and Redis stores.

use std::{convert::Infallible, future::Future, time::Duration};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::{body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use sangho_webhook::{SanghoEvent, SanghoWebhookLayer, WebhookBody};
use tokio::{net::TcpListener, sync::watch, task::JoinSet};
use tower::{Layer, Service, ServiceExt, service_fn as tower_service_fn};

/// The path the provider posts to.
pub const WEBHOOK_PATH: &str = "/webhooks/sangho";

/// How long the requests in progress get to finish once the shutdown has begun.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The response body of every route.
pub type Body = BoxBody<Bytes, Infallible>;

/// The handler: the layer calls it once per event, with the verified [`SanghoEvent`] in the
/// request extensions and the raw body still in the request.
pub async fn handle(request: Request<WebhookBody>) -> Result<Response<Full<Bytes>>, Infallible> {
    let Some(event) = request.extensions().get::<SanghoEvent>() else {
        // Only reachable if the handler is mounted without the layer.
        return Ok(json(
            StatusCode::INTERNAL_SERVER_ERROR,
            r#"{"error":"no_event"}"#,
        ));
    };
    tracing::info!(
        id = event.id(),
        kind = event.event_type(),
        bytes = event.raw().len(),
        "received a Sangho event"
    );
    Ok(json(StatusCode::OK, r#"{"received":true}"#))
}

fn json(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

/// The whole application as one service: `POST /webhooks/sangho` goes through `layer` to
/// `handler`; other paths get 404, other methods on the webhook path 405. The handler answers
/// with any body of bytes that cannot fail (this example's [`handle`] answers a `Full`).
pub fn app<H, B>(
    layer: SanghoWebhookLayer,
    handler: H,
) -> impl Service<
    Request<Incoming>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Body>, Infallible>> + Send,
> + Clone
+ Send
+ 'static
where
    H: Service<Request<WebhookBody>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    H::Future: Send,
    B: http_body::Body<Data = Bytes, Error = Infallible> + Send + Sync + 'static,
{
    let webhook = layer.layer(handler);
    tower_service_fn(move |request: Request<Incoming>| {
        let webhook = webhook.clone();
        async move {
            let response = match (request.method(), request.uri().path()) {
                (&Method::POST, WEBHOOK_PATH) => webhook.oneshot(request).await?.map(|b| b.boxed()),
                (_, WEBHOOK_PATH) => {
                    let mut response = json(
                        StatusCode::METHOD_NOT_ALLOWED,
                        r#"{"error":"method_not_allowed"}"#,
                    );
                    response
                        .headers_mut()
                        .insert(header::ALLOW, header::HeaderValue::from_static("POST"));
                    response.map(|b| b.boxed())
                }
                _ => json(StatusCode::NOT_FOUND, r#"{"error":"not_found"}"#).map(|b| b.boxed()),
            };
            Ok(response)
        }
    })
}

/// Serves `app` on `listener` until `shutdown` completes, then stops accepting, lets the open
/// connections finish their requests (for up to 10 s) and returns.
pub async fn serve<A>(
    listener: TcpListener,
    app: A,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()>
where
    A: Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    A::Future: Send + 'static,
{
    let (stop, stopped) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // A full accept queue or a reset connection: keep serving.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let app = app.clone();
        let mut stopped = stopped.clone();
        connections.spawn(async move {
            let service = service_fn(move |request| app.clone().oneshot(request));
            let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                _ = stopped.changed() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(error) = result {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    let _ = stop.send(true);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("connections still open after the grace period; closing them");
        connections.shutdown().await;
    }
    Ok(())
}
