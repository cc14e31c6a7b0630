//! Token counts: a fast estimate (four characters a token, see
//! [`estimate_chars`]) and exact BPE counts ([`Tokenizer`]: cl100k_base or
//! o200k_base, embedded, offline).
//!
//! The exact counts come from GitHub's `bpe-openai` (a linear-time BPE,
//! several times faster than tiktoken, with the same pre-tokenization:
//! its counts equal tiktoken's, which tests check on the real JP
//! conversations and on random text). A text is counted once per
//! tokenizer: longer texts are remembered by their hash
//! ([`Tokenizer::count`]), so a log whose texts repeat (content-addressed
//! blobs, a view counted after its raw log) costs one count per distinct
//! text.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Mutex, PoisonError};

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
        bpe: &'static bpe_openai::Tokenizer,
        /// The counts of the texts counted so far.
        memo: Box<Memo>,
    },
}

/// The tokens of `text`: what `bpe.count` gives (its normalization is
/// none for cl100k and o200k), with the count of each short piece of the
/// pre-tokenization (a word, mostly) remembered per thread, since words
/// repeat and a piece's encoder costs more than looking its count up.
fn count_pieces(bpe: &'static bpe_openai::Tokenizer, text: &str) -> usize {
    /// A piece's count, by its bytes.
    type Pieces = hashbrown::HashMap<Box<[u8]>, u32>;
    thread_local! {
        /// Per tokenizer (by address), the pieces this thread counted.
        static PIECES: std::cell::RefCell<Vec<(usize, Pieces)>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }
    let tag = std::ptr::from_ref(bpe) as usize;
    PIECES.with_borrow_mut(|tokenizers| {
        let at = tokenizers
            .iter()
            .position(|(t, _)| *t == tag)
            .unwrap_or_else(|| {
                tokenizers.push((tag, Pieces::new()));
                tokenizers.len() - 1
            });
        let pieces = &mut tokenizers[at].1;
        let mut total = 0;
        for piece in bpe.split(text).map(str::as_bytes) {
            if piece.len() > PIECE_MAX_BYTES {
                total += bpe.bpe.count(piece);
                continue;
            }
            if let Some(&n) = pieces.get(piece) {
                total += n as usize;
                continue;
            }
            let n = bpe.bpe.count(piece);
            if pieces.len() >= PIECES_MAX {
                pieces.clear();
            }
            pieces.insert(piece.into(), n as u32);
            total += n;
        }
        total
    })
}

/// Pieces longer than this are counted every time.
const PIECE_MAX_BYTES: usize = 24;

/// The most pieces a thread remembers (then it starts again).
const PIECES_MAX: usize = 1 << 16;

/// Texts shorter than this are counted every time (remembering costs
/// about as much as counting them).
const MEMO_MIN_BYTES: usize = 64;

/// The most texts remembered; past it, new texts are counted each time.
const MEMO_MAX_TEXTS: usize = 1 << 22;

/// Token counts of texts by their blake3 hash (128 bits of it), in shards
/// so that threads counting at once seldom wait for each other.
#[derive(Default)]
pub struct Memo {
    shards: [Mutex<HashMap<u128, u32, BuildHasherDefault<Prehashed>>>; 16],
}

/// The hasher of a key that is a hash already.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }

    fn write_u128(&mut self, n: u128) {
        self.0 = n as u64;
    }
}

impl Memo {
    /// The count of `text`, counted with `count` unless remembered.
    fn count(&self, text: &str, count: impl FnOnce(&str) -> usize) -> u64 {
        if text.len() < MEMO_MIN_BYTES {
            return count(text) as u64;
        }
        let hash = blake3::hash(text.as_bytes());
        let key = u128::from_le_bytes(hash.as_bytes()[..16].try_into().unwrap_or_default());
        let shard = &self.shards[(key >> 124) as usize];
        if let Some(&n) = shard
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
        {
            return u64::from(n);
        }
        let n = count(text);
        let mut map = shard.lock().unwrap_or_else(PoisonError::into_inner);
        if map.len() < MEMO_MAX_TEXTS / self.shards.len() {
            map.insert(key, u32::try_from(n).unwrap_or(u32::MAX));
        }
        n as u64
    }
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
}

impl Tokenizer {
    /// The tokenizer named `chars4`, `cl100k` (cl100k_base) or `o200k`
    /// (o200k_base).
    pub fn named(name: &str) -> Result<Tokenizer, TokenizerError> {
        let (name, bpe) = match name {
            "chars4" => return Ok(Tokenizer::Chars4),
            "cl100k" | "cl100k_base" => ("cl100k", bpe_openai::cl100k_base()),
            "o200k" | "o200k_base" => ("o200k", bpe_openai::o200k_base()),
            other => return Err(TokenizerError::Unknown(other.to_owned())),
        };
        Ok(Tokenizer::Bpe {
            name,
            bpe,
            memo: Box::default(),
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
            Tokenizer::Bpe { bpe, memo, .. } => {
                let mut tokens = 0;
                for_each_text(event, |s| tokens += memo.count(s, |s| count_pieces(bpe, s)));
                tokens
            }
        }
    }
}
