use std::fmt::Debug;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode, header};
use http_body::Body;
use http_body_util::BodyExt;
use tower_service::Service;

/// What came back from one request sent with [`send`]: its parts and its whole body.
#[derive(Debug)]
pub struct Answer {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The collected body.
    pub body: Bytes,
    /// The extensions (a [`Rejection`](crate::Rejection) is there when the layer refused).
    pub extensions: http::Extensions,
}

impl Answer {
    /// The body as JSON.
    ///
    /// # Panics
    ///
    /// If the body is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    /// The `error` code of a refusal's JSON body (`""` when there is none).
    pub fn error_code(&self) -> String {
        serde_json::from_slice::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|body| body["error"].as_str().map(str::to_owned))
            .unwrap_or_default()
    }

    /// The `Retry-After` header, if any.
    pub fn retry_after(&self) -> Option<&str> {
        self.headers
            .get(header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
    }
}

/// Sends one request through a clone of `service` (made ready first, as `tower`'s `oneshot`
/// does) and collects the answer.
///
/// ```
/// use sangho_webhook::{SanghoWebhookLayer, signature::Secret, store::MokaStore};
/// use sangho_webhook::testing::{CountingHandler, Delivery, fixtures, send};
/// use tower_layer::Layer;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let secret = Secret::new(fixtures::SECRET).unwrap();
/// let service = SanghoWebhookLayer::builder(secret.clone(), MokaStore::new())
///     .with_clock(fixtures::fixed_clock)
///     .build()
///     .unwrap()
///     .layer(CountingHandler::new());
/// let delivery = Delivery::event("evt_1", "charge.succeeded").signed(&secret, fixtures::NOW);
/// assert_eq!(send(&service, delivery.into_request()).await.status, 200);
/// # }
/// ```
///
/// # Panics
///
/// If the service fails to become ready, answers an error, or its body fails.
pub async fn send<S, ReqBody, B>(service: &S, request: Request<ReqBody>) -> Answer
where
    S: Service<Request<ReqBody>, Response = Response<B>> + Clone,
    S::Error: Debug,
    B: Body,
    B::Error: Debug,
{
    let mut service = service.clone();
    std::future::poll_fn(|cx| service.poll_ready(cx))
        .await
        .expect("the service becomes ready");
    let response = service.call(request).await.expect("the service answers");
    let (parts, body) = response.into_parts();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body: body.collect().await.expect("a readable body").to_bytes(),
        extensions: parts.extensions,
    }
}
