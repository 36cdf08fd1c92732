//! Per-object ordering and the order of takes (see [per-object
//! ordering](crate::inbox#per-object-ordering)).

use std::borrow::Cow;

use sha2::{Digest, Sha256};

use crate::SanghoEvent;

/// The longest ordering key stored as given, in bytes. A longer key is stored as
/// `sha256:` followed by the hex of its SHA-256 (71 bytes), so that it fits every store's
/// column and still tells keys apart.
pub const MAX_ORDERING_KEY_LEN: usize = 200;

/// The key as the inbox stores it: itself up to [`MAX_ORDERING_KEY_LEN`] bytes, or its hash.
///
/// ```
/// use sangho_webhook::inbox::stored_ordering_key;
///
/// assert_eq!(stored_ordering_key("in_1Nq"), "in_1Nq");
/// let long = "x".repeat(500);
/// assert!(stored_ordering_key(&long).starts_with("sha256:"));
/// assert_eq!(stored_ordering_key(&long).len(), 71);
/// ```
pub fn stored_ordering_key(key: &str) -> Cow<'_, str> {
    if key.len() <= MAX_ORDERING_KEY_LEN {
        return Cow::Borrowed(key);
    }
    let digest = Sha256::digest(key.as_bytes());
    let mut stored = String::from("sha256:");
    for byte in digest.iter() {
        stored.push_str(&format!("{byte:02x}"));
    }
    Cow::Owned(stored)
}

/// The ordering key most handlers want: the id of the event's object, `data.object.id`
/// (`None` when the event has no such string).
///
/// ```
/// use sangho_webhook::{SanghoEvent, inbox::object_id};
///
/// let body = br#"{"id":"evt_1","type":"invoice.paid","data":{"object":{"id":"in_1Nq"}}}"#;
/// let event = SanghoEvent::parse(bytes::Bytes::from_static(body)).unwrap();
/// assert_eq!(object_id(&event).as_deref(), Some("in_1Nq"));
/// ```
pub fn object_id(event: &SanghoEvent) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Object {
        id: String,
    }
    event.data_object::<Object>().ok().map(|object| object.id)
}

/// Which due event a [`take`](super::Inbox::take) hands out first (an ordering key's rule
/// comes before either: an event whose key is busy is not due for a take).
///
/// ```
/// use sangho_webhook::inbox::TakeOrder;
///
/// assert_eq!(TakeOrder::default(), TakeOrder::FreshFirst);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TakeOrder {
    /// Events on their first attempt (since their receipt or their last replay) before
    /// retries, each in the order of receipt: a backlog of failing retries never delays a new
    /// event by more than one handler run. Retries wait while new events are due.
    #[default]
    FreshFirst,
    /// Every due event in the order of receipt, retries and new events alike.
    Receipt,
}
