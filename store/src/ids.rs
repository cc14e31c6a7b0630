//! Conversation identifiers: [`ConversationId`].

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::hash::{from_hex, hex};

/// A conversation's id: 16 random bytes, fixed at creation, unique in a
/// database. Being random, short prefixes of its hex form tell conversations
/// apart. An id is not a chain address: two conversations with equal
/// histories have equal heads and distinct ids.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ConversationId([u8; 16]);

impl ConversationId {
    /// A new id for a conversation created now.
    pub fn generate() -> Self {
        let mut bytes = [0u8; 16];
        if getrandom::getrandom(&mut bytes).is_err() {
            // No entropy source: hash the clock and the process id instead.
            // The store retries on the (unlikely) collision.
            let seed = format!(
                "{:?}{}",
                chrono::Utc::now().timestamp_nanos_opt(),
                std::process::id()
            );
            bytes.copy_from_slice(&crate::hash::BlobHash::of(seed.as_bytes()).as_bytes()[..16]);
        }
        Self(bytes)
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// From raw bytes.
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }

    /// Lower-case hex, 32 characters.
    pub fn hex(&self) -> String {
        hex(&self.0)
    }

    /// Parses 32 hex characters.
    pub fn from_hex(text: &str) -> Option<Self> {
        from_hex(text).map(Self)
    }

    /// The first 12 hex characters, for display.
    pub fn short(&self) -> String {
        self.hex()[..12].to_owned()
    }

    /// The short id as a query takes it (`id:…`), for an unnamed
    /// conversation: given back to a command it names this conversation,
    /// where a bare prefix given to one that writes would name a new one.
    pub fn query(&self) -> String {
        format!("{}{}", crate::store::ID_MARKER, self.short())
    }
}

impl fmt::Display for ConversationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

impl fmt::Debug for ConversationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConversationId({})", self.hex())
    }
}
