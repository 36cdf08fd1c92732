//! Reading the fields the layer needs from a verified body, in one pass, without building
//! anything else: a string `id` and `type` (each once), and the optional standard fields,
//! which read as absent when they are of another type or given twice.

use std::{borrow::Cow, fmt};

use serde::{
    Deserialize, Deserializer,
    de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor},
};

/// The fields the layer reads, borrowed from the body where the JSON has no escapes.
pub(super) struct Head<'a> {
    pub(super) id: Cow<'a, str>,
    pub(super) event_type: Cow<'a, str>,
    pub(super) created: Option<i64>,
    pub(super) livemode: Option<bool>,
    pub(super) api_version: Option<Cow<'a, str>>,
}

impl<'a> Head<'a> {
    pub(super) fn read(body: &'a [u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(body)
    }
}

impl<'de> Deserialize<'de> for Head<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(HeadVisitor)
    }
}

struct HeadVisitor;

impl<'de> Visitor<'de> for HeadVisitor {
    type Value = Head<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an event object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Head<'de>, A::Error> {
        let (mut id, mut event_type) = (None, None);
        let mut created = Optional::Unseen;
        let mut livemode = Optional::Unseen;
        let mut api_version = Optional::Unseen;
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            match &*key {
                "id" if id.is_some() => return Err(de::Error::duplicate_field("id")),
                "id" => id = Some(map.next_value::<Text<'de>>()?.0),
                "type" if event_type.is_some() => return Err(de::Error::duplicate_field("type")),
                "type" => event_type = Some(map.next_value::<Text<'de>>()?.0),
                "created" => created.see(map.next_value()?),
                "livemode" => livemode.see(map.next_value()?),
                "api_version" => api_version.see(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Head {
            id: id.ok_or_else(|| de::Error::missing_field("id"))?,
            event_type: event_type.ok_or_else(|| de::Error::missing_field("type"))?,
            created: created.get(|scalar| match scalar {
                Scalar::Integer(value) => Some(value),
                _ => None,
            }),
            livemode: livemode.get(|scalar| match scalar {
                Scalar::Bool(value) => Some(value),
                _ => None,
            }),
            api_version: api_version.get(|scalar| match scalar {
                Scalar::Text(value) => Some(value),
                _ => None,
            }),
        })
    }
}

/// An optional field: absent until seen once; seen twice, it reads as absent again.
enum Optional<'a> {
    Unseen,
    Seen(Scalar<'a>),
    Ambiguous,
}

impl<'a> Optional<'a> {
    fn see(&mut self, value: Scalar<'a>) {
        *self = match self {
            Self::Unseen => Self::Seen(value),
            _ => Self::Ambiguous,
        };
    }

    fn get<T>(self, read: impl FnOnce(Scalar<'a>) -> Option<T>) -> Option<T> {
        match self {
            Self::Seen(value) => read(value),
            _ => None,
        }
    }
}

/// Any JSON value, kept only when it is an `i64`, a boolean or a string: anything else is
/// skipped without being built.
enum Scalar<'a> {
    Integer(i64),
    Bool(bool),
    Text(Cow<'a, str>),
    Other,
}

impl<'de> Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ScalarVisitor)
    }
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Integer(value))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Scalar<'de>, E> {
        Ok(i64::try_from(value).map_or(Scalar::Other, Scalar::Integer))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Other)
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Bool(value))
    }

    fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Text(Cow::Borrowed(text)))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Text(Cow::Owned(text.to_owned())))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Other)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar<'de>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar<'de>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other)
    }
}

/// A string borrowed from the body when it has no escapes, else unescaped into a `String`.
/// (serde's own `Cow<str>` always allocates.)
struct Text<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(TextVisitor)
    }
}

struct TextVisitor;

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Text<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Text<'de>, E> {
        Ok(Text(Cow::Borrowed(text)))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Text<'de>, E> {
        Ok(Text(Cow::Owned(text.to_owned())))
    }
}
