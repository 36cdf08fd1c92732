//! [`EventKey`]: an event id as `MokaStore` keeps it, inline when it is short.

use std::hash::{Hash, Hasher};

/// The longest id kept inline. The provider's ids are 28 bytes (`evt_` and 24 characters).
const INLINE: usize = 30;

/// An event id: inline up to 30 bytes (the provider's ids), boxed beyond.
///
/// Every completed event's id is kept for its retention, up to a million of them, so its heap
/// allocation is worth saving: inline, the key costs 32 bytes in moka's entry instead of a
/// 16-byte pointer to another allocation (48 bytes of heap for a 28-byte id). Small-string
/// crates inline at most 23 or 24 bytes, too few for the provider's ids.
///
/// An id has one form (inline exactly when it fits), so keys compare as their fields and hash
/// as the id's bytes, without a UTF-8 check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum EventKey {
    /// Up to [`INLINE`] bytes and their length; the rest are zeros.
    Inline { len: u8, bytes: [u8; INLINE] },
    /// A longer id.
    Boxed(Box<str>),
}

impl From<&str> for EventKey {
    fn from(id: &str) -> Self {
        match u8::try_from(id.len()) {
            Ok(len) if id.len() <= INLINE => {
                let mut bytes = [0; INLINE];
                bytes[..id.len()].copy_from_slice(id.as_bytes());
                Self::Inline { len, bytes }
            }
            _ => Self::Boxed(id.into()),
        }
    }
}

impl EventKey {
    fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Self::Boxed(id) => id.as_bytes(),
        }
    }
}

impl Hash for EventKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // The id's bytes alone, in one write: equal keys have equal bytes.
        self.as_bytes().hash(state);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn short_ids_are_inline_and_long_ones_boxed_and_both_are_found_by_str() {
        let short = "evt_000000000000000000000001";
        let at_limit = "x".repeat(INLINE);
        let long = "y".repeat(INLINE + 1);
        assert!(matches!(EventKey::from(short), EventKey::Inline { .. }));
        assert!(matches!(
            EventKey::from(at_limit.as_str()),
            EventKey::Inline { .. }
        ));
        assert!(matches!(EventKey::from(long.as_str()), EventKey::Boxed(_)));
        let ids = [short, "", "évt_ünïcode", "evt_", "evt_\0", &at_limit, &long];
        let map: HashMap<EventKey, usize> = ids
            .into_iter()
            .enumerate()
            .map(|(n, id)| (EventKey::from(id), n))
            .collect();
        for (n, id) in ids.into_iter().enumerate() {
            assert_eq!(map.get(&EventKey::from(id)), Some(&n), "{id:?}");
        }
        let other = EventKey::from("evt_000000000000000000000002");
        assert_eq!(map.get(&other), None);
        assert_eq!(std::mem::size_of::<EventKey>(), 32);
    }
}
