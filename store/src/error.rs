//! Errors of the store: [`StoreError`].

use std::path::PathBuf;

use crate::hash::Address;

/// Errors from opening, reading or writing a convstore database.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Another process has the database open.
    #[error("the database at {} is {}", path.display(), if waited.is_zero() { "in use by another process".to_owned() } else { format!("still in use by another process after {} s", waited.as_secs_f64()) })]
    Locked {
        /// The database directory.
        path: PathBuf,
        /// How long the open waited for it.
        waited: std::time::Duration,
    },
    /// There is no database at the path (and the open was not asked to
    /// create one).
    #[error("no database at {}", path.display())]
    NoDatabase {
        /// The path.
        path: PathBuf,
    },
    /// The database was written by a newer or unknown format version.
    #[error("the database at {path} has format version {found}; this convstore reads versions 1 to {supported} only")]
    UnsupportedFormat {
        /// The database directory.
        path: PathBuf,
        /// The version found.
        found: u32,
        /// The newest version this build reads and writes.
        supported: u32,
    },
    /// A database server's convstore schema is newer than this build's.
    #[error("the database at {location} has schema version {found}; this convstore knows versions 1 to {supported} only: upgrade convstore")]
    UnsupportedSchema {
        /// Where the database is (without a password).
        location: String,
        /// The version found.
        found: u32,
        /// The newest version this build knows.
        supported: u32,
    },
    /// The directory holds a sled database that convstore did not create.
    #[error("{} is not a convstore database", path.display())]
    NotConvstore {
        /// The database directory.
        path: PathBuf,
    },
    /// sled could not open the database files.
    #[error("cannot open the database at {path}: {reason}")]
    Open {
        /// The database directory.
        path: PathBuf,
        /// What sled said, with advice when there is any.
        reason: String,
    },
    /// Stored bytes are not what convstore wrote.
    #[error("corrupt data: {what}")]
    Corrupt {
        /// What is corrupt, and how.
        what: String,
    },
    /// No conversation has this name, id or id prefix.
    #[error("{}{}", no_conversation(query), hint.as_ref().map(|h| format!(" ({h})")).unwrap_or_default())]
    NoSuchConversation {
        /// What was looked for.
        query: String,
        /// What the caller may have meant.
        hint: Option<String>,
    },
    /// A query that cannot name a conversation.
    #[error("\"{query}\": {reason}")]
    InvalidQuery {
        /// What was looked for.
        query: String,
        /// Why it names nothing.
        reason: &'static str,
    },
    /// An id prefix matches several conversations.
    #[error("\"{query}\" matches several conversations: {}", candidates.join(", "))]
    AmbiguousConversation {
        /// What was looked for.
        query: String,
        /// The ids it matches (at most a few).
        candidates: Vec<String>,
    },
    /// A conversation already has this name.
    #[error("a conversation named \"{name}\" already exists")]
    NameTaken {
        /// The name.
        name: String,
    },
    /// The name cannot be used.
    #[error("invalid {what} name \"{}\": {reason}", shorten(name))]
    InvalidName {
        /// What it would name: `conversation` or `view`.
        what: &'static str,
        /// The name.
        name: String,
        /// Why not.
        reason: &'static str,
    },
    /// Two view names of a conversation share a key (the first 8 bytes of
    /// the name's hash): the second cannot be created.
    #[error(
        "view \"{}\" cannot be stored beside view \"{}\" (their keys collide); choose another name",
        shorten(name),
        shorten(other)
    )]
    ViewKeyCollision {
        /// The view asked for.
        name: String,
        /// The stored view with the same key.
        other: String,
    },
    /// `--expect-head` did not match: someone else appended first.
    #[error("conflict: the head is {actual}, not the expected {expected}; nothing was stored")]
    HeadMismatch {
        /// The head the caller expected.
        expected: Address,
        /// The head found.
        actual: Address,
    },
    /// An idempotency key was used before for another request.
    #[error("the idempotency key was used for another request; nothing was stored")]
    IdempotencyKeyReused,
    /// An event is larger than the store's limit; nothing was stored.
    #[error("event {index} of the append is {size} bytes, more than the limit of {limit} bytes")]
    EventTooLarge {
        /// Its position in the append (0-based).
        index: usize,
        /// Its size: record plus blobs.
        size: u64,
        /// The limit ([`crate::Store::max_event_bytes`]).
        limit: u64,
    },
    /// An append with no events.
    #[error("nothing to append")]
    EmptyAppend,
    /// A requested record is past the end of the log.
    #[error("record {seq} does not exist (the conversation has {len} record{})", if *len == 1 { "" } else { "s" })]
    NoSuchRecord {
        /// The record asked for.
        seq: u64,
        /// How many records there are.
        len: u64,
    },
    /// A record that cannot be redacted as asked.
    #[error("record {seq} cannot be redacted: {why}")]
    NotRedactable {
        /// The record.
        seq: u64,
        /// Why not.
        why: String,
    },
    /// An operation this backend does not offer yet.
    #[error("{what} is not supported on a database server yet")]
    Unsupported {
        /// The operation.
        what: String,
    },
    /// Reading or writing the database files failed (a full disk, a file
    /// size limit, a failing device); what was acknowledged before is kept.
    #[error("I/O error on the database: {}", describe_io(.0))]
    Io(std::io::Error),
    /// The backend failed.
    #[error("database error: {0}")]
    Backend(Box<dyn std::error::Error + Send + Sync>),
    /// The connection to a database server was lost after a write was sent
    /// and before its answer came, and what it finds now cannot tell
    /// whether the write was applied.
    #[error("database error: {what}; whether the write was applied is not known")]
    OutcomeUnknown {
        /// What failed.
        what: String,
    },
    /// Another writer sharing the backend changed what a write was planned
    /// from; nothing was stored.
    #[error("conflict: {what}; nothing was stored")]
    Conflict {
        /// What changed.
        what: String,
    },
    /// A conversation that forks depend on cannot be deleted alone.
    #[error(
        "conversation \"{}\" has {} fork{} ({}{}): delete {} too (--with-forks), or copy {} to another database first",
        shorten(conversation),
        forks.len(),
        if forks.len() == 1 { "" } else { "s" },
        forks.iter().take(5).map(|f| shorten(f)).collect::<Vec<_>>().join(", "),
        if forks.len() > 5 { ", ..." } else { "" },
        if forks.len() == 1 { "it" } else { "them" },
        if forks.len() == 1 { "it" } else { "them" }
    )]
    HasForks {
        /// The conversation, by name or id.
        conversation: String,
        /// Its forks (and theirs), by name or id.
        forks: Vec<String>,
    },
    /// Records a destination's older format cannot hold: those of format 7
    /// (committed) copied into a database of an earlier format, whose
    /// builds would misread them; the copy stores nothing.
    #[error(
        "the destination database is format {format}, which cannot hold the format-{needs} records copied; copy into a new database (it gets the current format)"
    )]
    OlderFormat {
        /// The destination's format.
        format: u32,
        /// The format the records need.
        needs: u32,
    },
    /// An encrypted database's payloads cannot be read or written as
    /// asked: no key is configured, or a conversation's data key is not
    /// in the keyring (deleted with it, or another keyring).
    #[error("encrypted: {what}")]
    Encrypted {
        /// What cannot be done, and why.
        what: String,
    },
    /// The key file or the keyring cannot be used.
    #[error("key file or keyring {}: {reason}", path.display())]
    Key {
        /// The file.
        path: PathBuf,
        /// Why not.
        reason: String,
    },
    /// A copy (backup, salvage) cannot be written where it was asked to go.
    #[error("cannot write to {}: {reason}", path.display())]
    Destination {
        /// Where the copy was to go.
        path: PathBuf,
        /// Why it cannot.
        reason: String,
    },
}

/// A name as errors show it: at most 60 characters, escaped as
/// [`one_line`] does.
fn shorten(name: &str) -> String {
    if name.chars().count() <= 60 {
        one_line(name)
    } else {
        let head: String = name.chars().take(57).collect();
        format!("{}... ({} bytes)", one_line(&head), name.len())
    }
}

/// `text` as one readable line: control and invisible characters (a
/// newline, a zero-width space, a direction override) escaped as `\u{1}`,
/// so that a name or a reason shown in a line of output cannot break it
/// or pass for another line. The joiners and tags that are part of how a
/// script or an emoji is written are kept (`store::hidden`).
pub fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let hidden = crate::store::hidden(text);
    for (i, c) in text.chars().enumerate() {
        let hidden = hidden.as_ref().is_some_and(|hidden| hidden[i]);
        if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') || hidden {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// An I/O error that says where it happened (the message is the whole of
/// it: where, then the system's words).
#[derive(Debug)]
pub(crate) struct IoAt(pub String);

impl std::fmt::Display for IoAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for IoAt {}

/// An I/O error of `kind`, with `message` saying where and what.
pub(crate) fn io_at(kind: std::io::ErrorKind, message: String) -> std::io::Error {
    std::io::Error::new(kind, IoAt(message))
}

/// An I/O error in words: sled hands some of them on with their debug form
/// as the message, so the kind is named instead (convstore's own, which
/// say where, are shown whole).
fn describe_io(error: &std::io::Error) -> String {
    if error
        .get_ref()
        .is_some_and(<dyn std::error::Error + Send + Sync>::is::<IoAt>)
    {
        return error.to_string();
    }
    match (error.raw_os_error(), error.kind()) {
        // A full disk, said one way whether the error carries the system's
        // code (ENOSPC) or only its kind (as sled passes some on).
        (_, std::io::ErrorKind::StorageFull) => "No space left on device".to_owned(),
        (Some(_), _) | (None, std::io::ErrorKind::Other) => error.to_string(),
        (None, kind) => kind.to_string(),
    }
}

/// Results of store operations.
pub type StoreResult<T> = Result<T, StoreError>;

/// What a query that names no conversation was taken for: an id prefix
/// (`id:PREFIX`), a full id (32 hex digits) or a name.
fn no_conversation(query: &str) -> String {
    if let Some(prefix) = query.strip_prefix(crate::store::ID_MARKER) {
        format!("no conversation's id starts with \"{prefix}\"")
    } else if crate::ConversationId::from_hex(query).is_some() {
        format!("no conversation has the id {query}")
    } else {
        format!("no conversation named \"{query}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::StoreError;

    /// A full disk reads the same whether the error carries the system's
    /// code or only its kind.
    #[test]
    fn a_full_disk_is_said_one_way() {
        let coded = StoreError::Io(std::io::Error::from_raw_os_error(28));
        let kind = StoreError::Io(std::io::ErrorKind::StorageFull.into());
        let said = "I/O error on the database: No space left on device";
        assert_eq!(coded.to_string(), said);
        assert_eq!(kind.to_string(), said);
        let other = StoreError::Io(std::io::Error::from_raw_os_error(13));
        assert_eq!(
            other.to_string(),
            "I/O error on the database: Permission denied (os error 13)"
        );
    }
}

#[cfg(test)]
mod names {
    use super::one_line;
    use crate::store::validate_name;

    /// Joiners and tags that are how a script or an emoji is written.
    const WRITTEN_WITH_JOINERS: [&str; 8] = [
        "👩\u{200d}💻 notes",  // woman technologist
        "🏳\u{fe0f}\u{200d}🌈", // rainbow flag
        "❤\u{fe0f}\u{200d}🔥", // heart on fire
        "👩🏽\u{200d}🔬",        // with a skin tone
        "\u{645}\u{6cc}\u{200c}\u{62e}\u{648}\u{627}\u{647}\u{645}", // Persian
        "\u{915}\u{94d}\u{200d}\u{937}", // Devanagari half form
        "\u{915}\u{94d}\u{200c}\u{937}", // conjunct kept apart
        "🏴\u{e0067}\u{e0062}\u{e0073}\u{e0063}\u{e0074}\u{e007f}", // Scotland
    ];

    /// The same characters where they print as nothing.
    const STRAY: [&str; 16] = [
        "a\u{200d}b",
        "a\u{200c}b",
        "\u{200d}👩",
        "👩\u{200d}",
        "👩\u{200d} b",
        "a\u{200d}👩",
        "\u{645}\u{200c}a",
        "a\u{e0067}",
        "🏴\u{e0067}\u{e0062}",
        "🏴\u{e007f}",
        "\u{915}\u{94d}\u{200d}",
        "\u{915}\u{94d}\u{200d} x",
        "a\u{94d}\u{200d}b",
        "\u{628}\u{200c}\u{64b}",
        "🏴\u{e0067}\u{e007f}",
        "🏴\u{e0020}\u{e0067}\u{e007f}",
    ];

    #[test]
    fn names_keep_the_joiners_a_script_or_an_emoji_is_written_with() {
        for name in WRITTEN_WITH_JOINERS {
            assert!(validate_name(name).is_ok(), "{name:?} refused");
            assert_eq!(one_line(name), name);
            let quoted = format!("invalid value '{name}': \"{name}\"");
            assert_eq!(one_line(&quoted), quoted);
        }
        for name in STRAY {
            let refused = validate_name(name).unwrap_err().to_string();
            assert!(
                refused.contains("invisible") || refused.contains("white space"),
                "{name:?}: {refused}"
            );
            assert!(one_line(name).contains("\\u{"), "{name:?}");
            // Quoted in a message, the same characters are escaped.
            assert!(one_line(&format!("'{name}'")).contains("\\u{"), "{name:?}");
        }
    }
}
