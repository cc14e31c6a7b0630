//! Token counts: a fast estimate (four characters a token, see
//! [`estimate_chars`]) and exact BPE counts ([`Tokenizer`]: cl100k_base or
//! o200k_base, embedded, offline).

use convstore_store::{Event, EventKind};

/// The characters of an event that a model reads: its texts, and its JSON
/// payloads as written (`arguments`, `delta`, `payload`). Timestamps and
/// metadata are not counted.
pub fn estimate_chars(event: &Event) -> u64 {
    let mut chars = 0;
    for_each_text(event, |s| chars += s.chars().count() as u64);
    chars
}

/// Calls `f` with each text of `event` a model reads.
fn for_each_text(event: &Event, mut f: impl FnMut(&str)) {
    match &event.kind {
        EventKind::TurnStart | EventKind::Compaction(_) => {}
        EventKind::User { text }
        | EventKind::Assistant { text }
        | EventKind::Reasoning { text }
        | EventKind::System { text } => f(text),
        EventKind::ToolCall {
            name, arguments, ..
        } => {
            f(name);
            f(arguments.as_str());
        }
        EventKind::ToolResult { content, .. } => f(content),
        EventKind::Config { delta } => f(delta.as_str()),
        EventKind::Extension { payload, .. } => f(payload.as_str()),
    }
}

/// Estimated tokens for `chars` characters: `ceil(chars / 4)`.
pub fn tokens_for_chars(chars: u64) -> u64 {
    chars.div_ceil(4)
}

/// How tokens are counted.
pub enum Tokenizer {
    /// Four characters a token ([`estimate_chars`], [`tokens_for_chars`]).
    Chars4,
    /// An exact BPE tokenizer.
    Bpe {
        /// Its name (`cl100k`, `o200k`).
        name: &'static str,
        /// The encoder.
        bpe: Box<tiktoken_rs::CoreBPE>,
    },
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a tokenizer is not available.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenizerError {
    /// No tokenizer has this name.
    #[error("no tokenizer named \"{0}\" (chars4, cl100k, o200k)")]
    Unknown(String),
    /// Its tables did not load.
    #[error("cannot load {name}: {reason}")]
    Load {
        /// The tokenizer.
        name: &'static str,
        /// Why.
        reason: String,
    },
}

impl Tokenizer {
    /// The tokenizer named `chars4`, `cl100k` (cl100k_base) or `o200k`
    /// (o200k_base).
    pub fn named(name: &str) -> Result<Tokenizer, TokenizerError> {
        let (name, bpe) = match name {
            "chars4" => return Ok(Tokenizer::Chars4),
            "cl100k" | "cl100k_base" => ("cl100k", tiktoken_rs::cl100k_base()),
            "o200k" | "o200k_base" => ("o200k", tiktoken_rs::o200k_base()),
            other => return Err(TokenizerError::Unknown(other.to_owned())),
        };
        let bpe = bpe.map_err(|e| TokenizerError::Load {
            name,
            reason: e.to_string(),
        })?;
        Ok(Tokenizer::Bpe {
            name,
            bpe: Box::new(bpe),
        })
    }

    /// Its name.
    pub fn name(&self) -> &'static str {
        match self {
            Tokenizer::Chars4 => "chars4",
            Tokenizer::Bpe { name, .. } => name,
        }
    }

    /// The tokens of the texts of `event` a model reads (the same texts
    /// [`estimate_chars`] counts). For `chars4`, per event, rounded up.
    pub fn count(&self, event: &Event) -> u64 {
        match self {
            Tokenizer::Chars4 => tokens_for_chars(estimate_chars(event)),
            Tokenizer::Bpe { bpe, .. } => {
                let mut tokens = 0;
                for_each_text(event, |s| tokens += bpe.encode_ordinary(s).len() as u64);
                tokens
            }
        }
    }
}
