//! axum extractors (feature `axum`): [`SanghoEvent`] itself, and [`Event<T>`] with
//! `data.object` deserialized.

use std::fmt;

use axum_core::{
    extract::{FromRequestParts, OptionalFromRequestParts},
    response::{IntoResponse, Response},
};
use http::{HeaderValue, StatusCode, header, request::Parts};
use serde::de::DeserializeOwned;

use crate::SanghoEvent;

/// Takes the verified event the layer put into the request extensions.
///
/// ```
/// use axum::{Json, Router, routing::post};
/// use sangho_webhook::{SanghoEvent, SanghoWebhookLayer, signature::Secret, store::MokaStore};
///
/// async fn handle(event: SanghoEvent) -> Json<serde_json::Value> {
///     tracing::info!(id = event.id(), "received");
///     Json(serde_json::json!({ "received": true }))
/// }
///
/// let layer = SanghoWebhookLayer::new(Secret::new("whsec_x").unwrap(), MokaStore::new());
/// let app: Router = Router::new().route("/webhooks/sangho", post(handle)).route_layer(layer);
/// # let _ = app;
/// ```
impl<S: Send + Sync> FromRequestParts<S> for SanghoEvent {
    type Rejection = EventRejection;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<SanghoEvent>()
            .cloned()
            .ok_or(EventRejection::MissingLayer)
    }
}

/// `Option<SanghoEvent>`: the verified event when the layer is in front of the handler,
/// `None` otherwise (a handler shared by a webhook route and another one), as axum's
/// `Option<Extension<T>>`.
///
/// ```
/// use axum::{Router, routing::post};
/// use sangho_webhook::SanghoEvent;
///
/// async fn handle(event: Option<SanghoEvent>) -> &'static str {
///     match event {
///         Some(_) => "a verified webhook",
///         None => "not through the webhook layer",
///     }
/// }
///
/// let app: Router = Router::new().route("/other", post(handle));
/// # let _ = app;
/// ```
impl<S: Send + Sync> OptionalFromRequestParts<S> for SanghoEvent {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<SanghoEvent>().cloned())
    }
}

/// A verified event with its `data.object` deserialized as `T`: an axum extractor.
///
/// When `data.object` does not fit `T`, the handler answers 500 `event_data_mismatch` (logged
/// at `error` with the event id and the reason): the event is genuine, the type does not
/// describe it. Since the answer is not a 2xx, the claim is released, and the provider's next
/// delivery is processed once the type is fixed.
///
/// ```
/// use axum::{Json, Router, routing::post};
/// use sangho_webhook::{Event, SanghoWebhookLayer, signature::Secret, store::MokaStore};
/// use serde::Deserialize;
///
/// #[derive(Deserialize)]
/// struct PaymentIntent { id: String, amount: u64 }
///
/// async fn paid(Event { event, object }: Event<PaymentIntent>) -> Json<serde_json::Value> {
///     tracing::info!(event = event.id(), intent = object.id, amount = object.amount, "paid");
///     Json(serde_json::json!({ "received": true }))
/// }
///
/// let layer = SanghoWebhookLayer::new(Secret::new("whsec_x").unwrap(), MokaStore::new());
/// let app: Router = Router::new().route("/webhooks/sangho", post(paid)).route_layer(layer);
/// # let _ = app;
/// ```
#[derive(Debug, Clone)]
pub struct Event<T> {
    /// The event: id, type, the standard fields and the raw body.
    pub event: SanghoEvent,
    /// `data.object`, deserialized.
    pub object: T,
}

impl<S, T> FromRequestParts<S> for Event<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = EventRejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let event = <SanghoEvent as FromRequestParts<S>>::from_request_parts(parts, state).await?;
        match event.data_object::<T>() {
            Ok(object) => Ok(Self { event, object }),
            Err(error) => {
                tracing::error!(
                    event_id = event.id(),
                    event_type = event.event_type(),
                    expected = std::any::type_name::<T>(),
                    error = %error.json(),
                    "the event's data.object does not fit the handler's type; answering 500"
                );
                let expected = std::any::type_name::<T>();
                let error = error.json();
                Err(EventRejection::DataMismatch(format!("{expected}: {error}")))
            }
        }
    }
}

/// Why an extractor could not hand over the event. Answers 500: both are the server's faults.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventRejection {
    /// The route has no `SanghoWebhookLayer`, so there is no verified event to hand over.
    MissingLayer,
    /// `data.object` does not deserialize into the handler's type (its name and the reason
    /// follow).
    DataMismatch(String),
}

impl EventRejection {
    /// The machine-readable code, as in the response body.
    pub fn code(&self) -> &'static str {
        match self {
            Self::MissingLayer => "webhook_layer_missing",
            Self::DataMismatch(_) => "event_data_mismatch",
        }
    }
}

impl fmt::Display for EventRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingLayer => f.write_str(
                "no verified Sangho event on this request: add SanghoWebhookLayer to this route",
            ),
            Self::DataMismatch(reason) => {
                write!(
                    f,
                    "the event's data.object does not fit the handler's type: {reason}"
                )
            }
        }
    }
}

impl std::error::Error for EventRejection {}

impl IntoResponse for EventRejection {
    fn into_response(self) -> Response {
        if self == Self::MissingLayer {
            tracing::error!("{self}");
        }
        let body = serde_json::json!({ "error": self.code(), "message": self.to_string() });
        let mut response = Response::new(body.to_string().into());
        *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}
