//! serde adapters that write values as people and other programs read
//! them (`#[serde(with = "convstore_store::readable::id")]`): a
//! conversation id as hex, an event type by its name.
//! For answers in JSON; what is stored keeps its own encodings.

/// A [`ConversationId`](crate::ConversationId) as 32 hex digits.
pub mod id {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::ConversationId;

    /// Writes the id as hex.
    pub fn serialize<S: Serializer>(id: &ConversationId, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&id.hex())
    }

    /// Reads an id written as hex.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ConversationId, D::Error> {
        let text = String::deserialize(d)?;
        ConversationId::from_hex(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("\"{text}\" is not a conversation id")))
    }
}

/// An [`EventType`](crate::EventType) by its name (`user`, `tool_result`...).
pub mod event_type {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::EventType;

    /// Writes the type's name.
    pub fn serialize<S: Serializer>(kind: &EventType, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(kind.as_str())
    }

    /// Reads a type by its name.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<EventType, D::Error> {
        let text = String::deserialize(d)?;
        EventType::from_name(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("\"{text}\" is not an event type")))
    }
}
