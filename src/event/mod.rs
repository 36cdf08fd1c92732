//! The verified event the layer hands to the handler.

mod claim;
mod head;

use std::{borrow::Cow, fmt};

use bytes::Bytes;
use bytestring::ByteString;
use serde::{Deserialize, de::DeserializeOwned};

pub use claim::{CompletionHold, DeliveryClaim};

/// The longest event id the layer accepts (the SQL schema's `VARCHAR(50)`).
pub const MAX_EVENT_ID_LEN: usize = 50;
/// The longest event type the layer accepts (the SQL schema's `VARCHAR(100)`).
pub const MAX_EVENT_TYPE_LEN: usize = 100;

/// A verified Sangho event, inserted into the request extensions before the handler runs.
///
/// The layer requires only a string `id` and `type`. The standard fields beside them
/// (`created`, `livemode`, `api_version`) read as absent when they are missing, of another
/// type, or given twice: a signed event is never refused for a field the layer does not need,
/// since it would be refused on every redelivery and lost. A body with two `id` or two `type`
/// keys is refused, because another parser (the handler's) could read the other value than
/// the one the layer deduplicated on. `data` stays raw bytes until the handler asks for it with
/// [`data_object`](Self::data_object). The raw bytes are the exact, signed body, shared with
/// the request body (cloning a `SanghoEvent` does not copy them).
///
/// ```
/// use axum::Json;
/// use sangho_webhook::SanghoEvent;
/// use serde::Deserialize;
///
/// #[derive(Deserialize)]
/// struct PaymentIntent { id: String, amount: u64 }
///
/// async fn handler(event: SanghoEvent) -> Json<serde_json::Value> {
///     if event.event_type() == "payment_intent.succeeded" {
///         if let Ok(intent) = event.data_object::<PaymentIntent>() {
///             println!("{} paid {}", intent.id, intent.amount);
///         }
///     }
///     Json(serde_json::json!({ "received": true }))
/// }
/// # let _ = axum::routing::post::<_, _, ()>(handler);
/// ```
#[derive(Clone)]
pub struct SanghoEvent {
    id: SharedText,
    event_type: SharedText,
    created: Option<i64>,
    livemode: Option<bool>,
    api_version: Option<SharedText>,
    raw: Bytes,
    claim: Option<DeliveryClaim>,
}

/// Why a verified body is not an acceptable event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EventError {
    /// The body is not JSON.
    #[error("the body is not JSON")]
    NotJson,
    /// The body is JSON, but not an object with exactly one string `id` and one string
    /// `type`.
    #[error("the body is not an event: it needs one string `id` and one string `type`")]
    NotAnEvent,
    /// The id is not 1 to 50 characters of `[A-Za-z0-9_-]`.
    #[error("the event id must be 1 to 50 characters of [A-Za-z0-9_-]")]
    InvalidId,
    /// The type is not 1 to 100 printable ASCII characters.
    #[error("the event type must be 1 to 100 printable ASCII characters")]
    InvalidType,
}

/// Why the event's JSON does not deserialize into the type asked for, from
/// [`SanghoEvent::data_object`] or [`SanghoEvent::deserialize`]. The JSON error, with its line
/// and column, is the [`source`](std::error::Error::source).
///
/// ```
/// use std::error::Error;
///
/// use sangho_webhook::SanghoEvent;
///
/// let body = r#"{"id":"evt_1","type":"charge.succeeded","data":{"object":{"amount":"5"}}}"#;
/// let event = SanghoEvent::parse(body.into()).unwrap();
/// let error = event.data_object::<std::collections::HashMap<String, u64>>().unwrap_err();
/// assert!(error.source().is_some());
/// ```
#[derive(Debug)]
pub struct DeserializeError {
    part: &'static str,
    target: &'static str,
    source: serde_json::Error,
}

impl DeserializeError {
    fn new<T>(part: &'static str, source: serde_json::Error) -> Self {
        Self {
            part,
            target: std::any::type_name::<T>(),
            source,
        }
    }

    /// The JSON error alone (the extractor's answer names it as it did).
    #[cfg(feature = "axum")]
    pub(crate) fn json(&self) -> &serde_json::Error {
        &self.source
    }
}

impl fmt::Display for DeserializeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the event's {} does not deserialize into `{}`",
            self.part, self.target
        )
    }
}

impl std::error::Error for DeserializeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

#[derive(Deserialize)]
struct Envelope<T> {
    data: Data<T>,
}

#[derive(Deserialize)]
struct Data<T> {
    object: T,
}

/// `true` for 1 to 50 characters of `[A-Za-z0-9_-]`.
pub fn is_valid_event_id(id: &str) -> bool {
    (1..=MAX_EVENT_ID_LEN).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `true` for 1 to 100 printable ASCII characters (space to `~`).
pub fn is_valid_event_type(event_type: &str) -> bool {
    (1..=MAX_EVENT_TYPE_LEN).contains(&event_type.len())
        && event_type.bytes().all(|b| (b' '..=b'~').contains(&b))
}

impl SanghoEvent {
    /// Parses a verified body. The bytes are kept, not copied.
    ///
    /// ```
    /// use sangho_webhook::SanghoEvent;
    ///
    /// let body = r#"{"id":"evt_1","type":"charge.refunded","created":1764500000,"data":{"object":{}}}"#;
    /// let event = SanghoEvent::parse(body.into()).unwrap();
    /// assert_eq!(event.id(), "evt_1");
    /// assert_eq!(event.event_type(), "charge.refunded");
    /// assert_eq!(event.created(), Some(1_764_500_000));
    /// ```
    pub fn parse(raw: Bytes) -> Result<Self, EventError> {
        let head = head::Head::read(&raw).map_err(|error| match error.classify() {
            serde_json::error::Category::Data => EventError::NotAnEvent,
            _ => EventError::NotJson,
        })?;
        if !is_valid_event_id(&head.id) {
            return Err(EventError::InvalidId);
        }
        if !is_valid_event_type(&head.event_type) {
            return Err(EventError::InvalidType);
        }
        Ok(Self {
            id: SharedText::new(&raw, head.id),
            event_type: SharedText::new(&raw, head.event_type),
            created: head.created,
            livemode: head.livemode,
            api_version: head.api_version.map(|text| SharedText::new(&raw, text)),
            raw,
            claim: None,
        })
    }

    /// The event id (`evt_…`), the deduplication key.
    pub fn id(&self) -> &str {
        self.id.as_str()
    }

    /// The event type, such as `payment_intent.succeeded`.
    pub fn event_type(&self) -> &str {
        self.event_type.as_str()
    }

    /// When the provider created the event, in Unix seconds, if the body says.
    pub fn created(&self) -> Option<i64> {
        self.created
    }

    /// Whether the event comes from live mode (as opposed to test mode), if the body says.
    pub fn livemode(&self) -> Option<bool> {
        self.livemode
    }

    /// The API version the event was rendered with, if the body says.
    pub fn api_version(&self) -> Option<&str> {
        self.api_version.as_ref().map(SharedText::as_str)
    }

    /// The exact, verified body.
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }

    /// This delivery's claim on the event, which the layer made before calling the handler:
    /// a store that can join the handler's own database transaction records the completion
    /// with it, so that the handler's effects and the completion commit together. `None` for
    /// an event parsed outside the layer.
    pub fn claim(&self) -> Option<&DeliveryClaim> {
        self.claim.as_ref()
    }

    /// The id and type as shared text (cloning them copies nothing).
    pub(crate) fn shared_id_and_type(&self) -> (SharedText, SharedText) {
        (self.id.clone(), self.event_type.clone())
    }

    /// The event with this delivery's claim.
    pub(crate) fn with_claim(mut self, claim: DeliveryClaim) -> Self {
        self.claim = Some(claim);
        self
    }

    /// Deserializes `data.object` into the type the handler expects for this event type.
    ///
    /// ```
    /// use sangho_webhook::SanghoEvent;
    /// use serde::Deserialize;
    ///
    /// #[derive(Deserialize)]
    /// struct Charge { amount: u64 }
    ///
    /// let body = r#"{"id":"evt_1","type":"charge.succeeded","data":{"object":{"amount":500}}}"#;
    /// let event = SanghoEvent::parse(body.into()).unwrap();
    /// assert_eq!(event.data_object::<Charge>().unwrap().amount, 500);
    /// ```
    ///
    /// # Errors
    ///
    /// A [`DeserializeError`] when the body has no `data.object` or it does not fit `T`.
    pub fn data_object<T: DeserializeOwned>(&self) -> Result<T, DeserializeError> {
        serde_json::from_slice::<Envelope<T>>(&self.raw)
            .map(|envelope| envelope.data.object)
            .map_err(|error| DeserializeError::new::<T>("data.object", error))
    }

    /// Deserializes the whole body into a type of the handler's.
    ///
    /// # Errors
    ///
    /// A [`DeserializeError`] when the body does not fit `T`.
    pub fn deserialize<T: DeserializeOwned>(&self) -> Result<T, DeserializeError> {
        serde_json::from_slice(&self.raw).map_err(|error| DeserializeError::new::<T>("body", error))
    }
}

/// Text read from the signed body: a slice of it (nothing copied) when the JSON string had no
/// escapes, else its own unescaped copy. Checked as UTF-8 once, when it is made, and read
/// without a check after that.
#[derive(Clone)]
pub(crate) struct SharedText(ByteString);

impl SharedText {
    /// `text`, which `serde_json` read from `raw`.
    fn new(raw: &Bytes, text: Cow<'_, str>) -> Self {
        match text {
            Cow::Borrowed(text) => Self(
                ByteString::try_from(raw.slice_ref(text.as_bytes()))
                    .expect("the bytes of a `str` are UTF-8"),
            ),
            Cow::Owned(text) => Self(ByteString::from(text)),
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SharedText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for SharedText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// Shows the id, the type, the standard fields and the body's length; never the body, which
/// holds payment and personal data.
impl fmt::Debug for SanghoEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SanghoEvent")
            .field("id", &self.id)
            .field("event_type", &self.event_type)
            .field("created", &self.created)
            .field("livemode", &self.livemode)
            .field("api_version", &self.api_version)
            .field("body_len", &self.raw.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<SanghoEvent, EventError> {
        SanghoEvent::parse(Bytes::copy_from_slice(body.as_bytes()))
    }

    #[test]
    fn parse_keeps_the_standard_fields_and_the_raw_bytes() {
        let body = r#"{"id":"evt_3PqL","type":"payment_intent.succeeded","created":1764500000,"livemode":false,"api_version":"2026-01-01","data":{"object":{"x":1}},"extra":[1,2]}"#;
        let event = parse(body).unwrap();
        assert_eq!(event.id(), "evt_3PqL");
        assert_eq!(event.event_type(), "payment_intent.succeeded");
        assert_eq!(event.created(), Some(1_764_500_000));
        assert_eq!(event.livemode(), Some(false));
        assert_eq!(event.api_version(), Some("2026-01-01"));
        assert_eq!(event.raw().as_ref(), body.as_bytes());
    }

    #[test]
    fn parse_tells_not_json_from_not_an_event() {
        assert_eq!(parse("not json").unwrap_err(), EventError::NotJson);
        assert_eq!(parse(r#"{"id":"evt_1""#).unwrap_err(), EventError::NotJson);
        assert_eq!(parse("[]").unwrap_err(), EventError::NotAnEvent);
        assert_eq!(
            parse(r#"{"type":"a"}"#).unwrap_err(),
            EventError::NotAnEvent
        );
        assert_eq!(
            parse(r#"{"id":7,"type":"a"}"#).unwrap_err(),
            EventError::NotAnEvent
        );
        assert_eq!(
            parse(r#"{"id":"evt_1","type":null}"#).unwrap_err(),
            EventError::NotAnEvent
        );
    }

    #[test]
    fn optional_fields_of_another_type_read_as_absent() {
        for (field, value) in [
            ("created", "1764500000.5"),
            ("created", r#""2026-01-01T00:00:00Z""#),
            ("created", "9223372036854775808"),
            ("created", "-1e3"),
            ("livemode", "0"),
            ("livemode", r#""false""#),
            ("api_version", "20260101"),
            ("api_version", "null"),
            ("created", r#"{"nested":[1,2]}"#),
        ] {
            let body = format!(r#"{{"id":"evt_1","type":"t","{field}":{value}}}"#);
            let event = parse(&body).unwrap_or_else(|error| panic!("{body}: {error}"));
            assert_eq!(event.id(), "evt_1");
            assert_eq!(
                (event.created(), event.livemode(), event.api_version()),
                (None, None, None),
                "{body}"
            );
        }
    }

    #[test]
    fn an_optional_field_given_twice_reads_as_absent() {
        let event = parse(r#"{"id":"e","type":"t","created":1,"created":2}"#).unwrap();
        assert_eq!(event.created(), None);
    }

    #[test]
    fn a_duplicate_id_or_type_is_refused() {
        for body in [
            r#"{"id":"evt_a","type":"t","id":"evt_b"}"#,
            r#"{"id":"evt_a","type":"t","type":"u"}"#,
            r#"{"id":"evt_a","id":"evt_a","type":"t"}"#,
        ] {
            assert_eq!(parse(body).unwrap_err(), EventError::NotAnEvent, "{body}");
        }
    }

    #[test]
    fn escaped_ids_are_read_unescaped() {
        let event = parse(r#"{"id":"evt\u005f1","type":"t"}"#).unwrap();
        assert_eq!(event.id(), "evt_1");
    }

    #[test]
    fn debug_shows_the_id_and_the_length_but_not_the_body() {
        let event =
            parse(r#"{"id":"evt_1","type":"t","data":{"card":"4242424242424242"}}"#).unwrap();
        let debug = format!("{event:?}");
        assert!(
            debug.contains("evt_1") && debug.contains("body_len"),
            "{debug}"
        );
        assert!(!debug.contains("4242"), "{debug}");
    }

    #[test]
    fn id_rules() {
        assert!(is_valid_event_id(&"a".repeat(50)));
        assert!(!is_valid_event_id(&"a".repeat(51)));
        assert!(!is_valid_event_id(""));
        assert!(!is_valid_event_id("evt/1"));
        assert!(!is_valid_event_id("evt.1"));
        assert!(!is_valid_event_id("evt_é"));
        assert!(is_valid_event_id("evt_A-z_09"));
    }

    #[test]
    fn type_rules() {
        assert!(is_valid_event_type(&"a".repeat(100)));
        assert!(!is_valid_event_type(&"a".repeat(101)));
        assert!(!is_valid_event_type(""));
        assert!(!is_valid_event_type("a\nb"));
        assert!(!is_valid_event_type("é"));
        assert!(is_valid_event_type("payment_intent.succeeded"));
    }

    #[test]
    fn data_object_reads_the_nested_object() {
        #[derive(Deserialize)]
        struct Object {
            amount: u64,
        }
        let event = parse(r#"{"id":"e","type":"t","data":{"object":{"amount":5}}}"#).unwrap();
        assert_eq!(event.data_object::<Object>().unwrap().amount, 5);
        let event = parse(r#"{"id":"e","type":"t"}"#).unwrap();
        assert!(event.data_object::<Object>().is_err());
    }

    #[test]
    fn a_deserialize_error_names_the_part_and_keeps_the_json_error_as_its_source() {
        use std::error::Error as _;

        let event = parse(r#"{"id":"e","type":"t","data":{"object":{"amount":"5"}}}"#).unwrap();
        let error = event.data_object::<u64>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "the event's data.object does not deserialize into `u64`"
        );
        let source = error.source().expect("the JSON error");
        assert!(source.downcast_ref::<serde_json::Error>().is_some());
        let error = event.deserialize::<u64>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "the event's body does not deserialize into `u64`"
        );
        assert!(error.source().is_some());
    }
}
