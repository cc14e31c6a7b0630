//! Encryption at rest: the master key, the keyring of per-conversation
//! data keys it wraps, and the sealing of one stored value.
//!
//! A database created with a key ([`crate::OpenOptions::encryption`])
//! stores every value that holds a conversation's payloads (its chunks,
//! overlay and call directories, views, pending redactions) sealed with
//! XChaCha20-Poly1305 under that conversation's own data key
//! ([`crate::backend::encrypted`]). The data keys are random, each
//! wrapped by the master key, and kept in a keyring file beside the key
//! file, outside the database: a copy or backup of the database holds no
//! key, and deleting a conversation removes its data key from the
//! keyring, which leaves every copy of its bytes (in a backup, in sled's
//! file before it reuses the space) unreadable: crypto-shredding.
//!
//! Addresses hash the plaintext, so `verify` with the key is unchanged;
//! without it, `verify` checks the sealed values' checksums and the chain
//! of chunk headers ([`Sealed::header`]) against each conversation's
//! head.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

use crate::error::{StoreError, StoreResult};
use crate::ids::ConversationId;

/// The first byte of a sealed value.
const SEALED_MARK: u8 = 0xE7;
/// A sealed value's fixed part: the mark, the header's length, the nonce
/// and the checksum of the ciphertext.
const SEALED_FIXED: usize = 1 + 1 + NONCE + CHECK;
const NONCE: usize = 24;
const CHECK: usize = 16;
/// Poly1305's tag, after the ciphertext.
const TAG: usize = 16;

/// The keyring file's first bytes.
const KEYRING_MAGIC: &[u8; 8] = b"CVSKEYR1";
/// A keyring entry: the database's key scope and the conversation's id
/// ([`Slot`]), whether its key is live, and (live) the wrapped key: nonce,
/// 32 bytes of key and the tag.
const WRAPPED: usize = NONCE + 32 + TAG;

/// Where a data key is in the keyring: a database's key scope (16 random
/// bytes made with the database, kept by its backups, new for a `copy`)
/// and the conversation's id. A backup shares its database's keys, so
/// deleting a conversation shreds it in the backups too; a copy has keys
/// of its own.
pub(crate) type Slot = [u8; 32];

/// The slot of conversation `id` in key scope `scope`.
pub(crate) fn slot(scope: &[u8; 16], id: &ConversationId) -> Slot {
    let mut slot = [0u8; 32];
    slot[..16].copy_from_slice(scope);
    slot[16..].copy_from_slice(id.as_bytes());
    slot
}

/// The conversation of a slot.
fn slot_id(slot: &Slot) -> ConversationId {
    let mut id = [0u8; 16];
    id.copy_from_slice(&slot[16..]);
    ConversationId::from_bytes(id)
}

/// The environment variable naming a key file when the configuration
/// does not.
pub const KEY_FILE_VARIABLE: &str = "CONVSTORE_KEY_FILE";

/// A master key's check: the first bytes of a keyed hash of a fixed
/// string, stored in the database and the keyring so that the wrong key
/// is named as such rather than taken for damage.
pub(crate) type KeyCheck = [u8; 16];

/// The master key and the keyring of data keys it wraps.
pub struct Keyring {
    key_file: PathBuf,
    path: PathBuf,
    wrap: XChaCha20Poly1305,
    check: KeyCheck,
    keys: RwLock<Keys>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The keys are not shown.
        f.debug_struct("Keyring")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// The data keys read so far, and the conversations whose key was
/// deleted.
#[derive(Default)]
struct Keys {
    live: HashMap<Slot, Arc<DataKey>>,
    shredded: std::collections::HashSet<Slot>,
}

/// One conversation's data key.
pub(crate) struct DataKey {
    cipher: XChaCha20Poly1305,
}

/// Where a conversation's data key is.
pub(crate) enum KeyState {
    /// In the keyring.
    Live(Arc<DataKey>),
    /// Deleted from it, with the conversation.
    Shredded,
    /// Not in it: another keyring, or an older copy of it.
    Missing,
}

/// `path` with `suffix` after its file name: the keyring beside a key
/// file, and the keyring's lock and new files.
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

impl Keyring {
    /// The master key in `key_file` (64 hexadecimal digits) and the
    /// keyring beside it (`KEY_FILE.keyring`, made when the first data key
    /// is). Fails if the key file cannot be read or is not a key, or the
    /// keyring was made with another key.
    pub fn open(key_file: &Path) -> StoreResult<Arc<Keyring>> {
        let bad = |reason: String| StoreError::Key {
            path: key_file.to_path_buf(),
            reason,
        };
        let bytes = std::fs::read(key_file).map_err(|e| bad(e.to_string()))?;
        let text = String::from_utf8_lossy(&bytes);
        let master = parse_key(text.trim())
            .ok_or_else(|| bad("it does not hold a key (64 hexadecimal digits)".to_owned()))?;
        let ring = Keyring {
            key_file: key_file.to_path_buf(),
            path: beside(key_file, ".keyring"),
            wrap: XChaCha20Poly1305::new(
                &blake3::derive_key("convstore 1 key wrap", &master).into(),
            ),
            check: key_check(&master),
            keys: RwLock::new(Keys::default()),
        };
        // The keyring is read now so that the wrong one is named at once.
        let (_, shredded) = ring.read_file()?;
        ring.keys_mut().shredded = shredded;
        Ok(Arc::new(ring))
    }

    /// Writes a new random master key to `path` (readable by its owner
    /// only); refuses a path that exists.
    pub fn generate(path: &Path) -> std::io::Result<()> {
        let keyring = beside(path, ".keyring");
        if keyring.exists() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!(
                    "{} exists beside it, made with another key (move it away first)",
                    keyring.display()
                ),
            ));
        }
        let mut key = [0u8; 32];
        random(&mut key)?;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(path)?;
        file.write_all(format!("{}\n", crate::hash::hex(&key)).as_bytes())?;
        file.sync_all()?;
        sync_parent(path)
    }

    /// Whether the keyring file exists (it is made with the first data
    /// key).
    pub(crate) fn exists(&self) -> bool {
        self.path.exists()
    }

    /// Where the keyring file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the master key is.
    pub fn key_file(&self) -> &Path {
        &self.key_file
    }

    /// The master key's check.
    pub(crate) fn check(&self) -> KeyCheck {
        self.check
    }

    /// Where conversation `id`'s data key in key scope `scope` is. A key
    /// this process has not seen is looked up in the file again: another
    /// process sharing the keyring may have made or deleted it.
    pub(crate) fn state(&self, scope: &[u8; 16], id: &ConversationId) -> StoreResult<KeyState> {
        let at = slot(scope, id);
        if let Some(key) = self.keys_read().live.get(&at) {
            return Ok(KeyState::Live(key.clone()));
        }
        let mut keys = self.keys_mut();
        self.look_up(&mut keys, &at)
    }

    /// [`Keyring::state`] under the lock of `keys`.
    fn look_up(&self, keys: &mut Keys, at: &Slot) -> StoreResult<KeyState> {
        if let Some(key) = keys.live.get(at) {
            return Ok(KeyState::Live(key.clone()));
        }
        if !keys.shredded.contains(at) {
            let (wrapped, shredded) = self.read_file()?;
            keys.shredded = shredded;
            if let Some(bytes) = wrapped.get(at) {
                let key = Arc::new(self.unwrap_key(at, bytes)?);
                keys.live.insert(*at, key.clone());
                return Ok(KeyState::Live(key));
            }
        }
        Ok(if keys.shredded.contains(at) {
            KeyState::Shredded
        } else {
            KeyState::Missing
        })
    }

    /// Conversation `id`'s data key in key scope `scope`; an error if it
    /// was deleted or is not in the keyring.
    pub(crate) fn data_key(
        &self,
        scope: &[u8; 16],
        id: &ConversationId,
    ) -> StoreResult<Arc<DataKey>> {
        match self.state(scope, id)? {
            KeyState::Live(key) => Ok(key),
            KeyState::Shredded => Err(self.shredded(id)),
            KeyState::Missing => Err(StoreError::Encrypted {
                what: format!(
                    "conversation {id} has no data key in the keyring {} (another keyring, or \
                     an older copy of it)",
                    self.path.display()
                ),
            }),
        }
    }

    /// Makes conversation `id`'s data key in `scope` if it has none,
    /// writing the keyring durably first; a deleted one is not made again.
    pub(crate) fn make_key(&self, scope: &[u8; 16], id: &ConversationId) -> StoreResult<()> {
        let at = slot(scope, id);
        let mut keys = self.keys_mut();
        if !matches!(self.look_up(&mut keys, &at)?, KeyState::Missing) {
            return Ok(());
        }
        let mut secret = [0u8; 32];
        random(&mut secret).map_err(StoreError::Io)?;
        let wrapped = self.wrap_key(&at, &secret)?;
        // Another process may have made one between the read and the
        // file's lock: the file's wins.
        self.update(|entries| {
            entries.entry(at).or_insert(Some(wrapped));
        })?;
        self.look_up(&mut keys, &at).map(|_| ())
    }

    /// Whether conversation `id`'s data key in `scope` was deleted.
    pub(crate) fn is_shredded(&self, scope: &[u8; 16], id: &ConversationId) -> StoreResult<bool> {
        Ok(matches!(self.state(scope, id)?, KeyState::Shredded))
    }

    /// Deletes the data keys of `ids` from the keyring, durably: whatever
    /// they sealed, wherever a copy of it is, can no longer be read.
    pub(crate) fn shred(&self, scope: &[u8; 16], ids: &[ConversationId]) -> StoreResult<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let ids: Vec<Slot> = ids.iter().map(|id| slot(scope, id)).collect();
        let mut keys = self.keys_mut();
        self.update(|entries| {
            for id in &ids {
                entries.insert(*id, None);
            }
        })?;
        for id in &ids {
            keys.live.remove(id);
            keys.shredded.insert(*id);
        }
        Ok(())
    }

    fn shredded(&self, id: &ConversationId) -> StoreError {
        StoreError::Encrypted {
            what: format!(
                "conversation {id} was deleted: its data key is gone from the keyring {}",
                self.path.display()
            ),
        }
    }

    fn keys_read(&self) -> std::sync::RwLockReadGuard<'_, Keys> {
        self.keys
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn keys_mut(&self) -> std::sync::RwLockWriteGuard<'_, Keys> {
        self.keys
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn wrap_key(&self, id: &Slot, secret: &[u8; 32]) -> StoreResult<[u8; WRAPPED]> {
        let nonce = random_nonce()?;
        let sealed = self
            .wrap
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: secret,
                    aad: id,
                },
            )
            .map_err(|_| StoreError::Io(std::io::Error::other("cannot wrap a data key")))?;
        let mut out = [0u8; WRAPPED];
        out[..NONCE].copy_from_slice(&nonce);
        out[NONCE..].copy_from_slice(&sealed);
        Ok(out)
    }

    fn unwrap_key(&self, id: &Slot, wrapped: &[u8; WRAPPED]) -> StoreResult<DataKey> {
        let secret = self
            .wrap
            .decrypt(
                XNonce::from_slice(&wrapped[..NONCE]),
                Payload {
                    msg: &wrapped[NONCE..],
                    aad: id,
                },
            )
            .map_err(|_| {
                self.damaged(&format!(
                    "the data key of conversation {} does not open",
                    slot_id(id)
                ))
            })?;
        Ok(DataKey {
            cipher: XChaCha20Poly1305::new_from_slice(&secret)
                .map_err(|_| self.damaged("a data key is not 32 bytes"))?,
        })
    }

    fn damaged(&self, why: &str) -> StoreError {
        StoreError::Key {
            path: self.path.clone(),
            reason: why.to_owned(),
        }
    }

    /// The keyring file's entries: live keys, and the conversations whose
    /// key was deleted. No file: none.
    #[allow(clippy::type_complexity)]
    fn read_file(
        &self,
    ) -> StoreResult<(
        HashMap<Slot, [u8; WRAPPED]>,
        std::collections::HashSet<Slot>,
    )> {
        let entries = self.read_entries()?;
        let mut live = HashMap::new();
        let mut shredded = std::collections::HashSet::new();
        for (id, wrapped) in entries {
            match wrapped {
                Some(w) => {
                    live.insert(id, w);
                }
                None => {
                    shredded.insert(id);
                }
            }
        }
        Ok((live, shredded))
    }

    fn read_entries(&self) -> StoreResult<Vec<(Slot, Option<[u8; WRAPPED]>)>> {
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.damaged(&e.to_string())),
        };
        let bad = || self.damaged("it is not a convstore keyring, or it is damaged");
        if bytes.len() < 8 + 16 + 32 || &bytes[..8] != KEYRING_MAGIC {
            return Err(bad());
        }
        let (body, sum) = bytes.split_at(bytes.len() - 32);
        if blake3::hash(body).as_bytes() != sum {
            return Err(bad());
        }
        if body[8..24] != self.check {
            return Err(self.damaged("it was made with another master key"));
        }
        let mut rest = &body[24..];
        let mut out = Vec::new();
        while !rest.is_empty() {
            let id: Slot = rest
                .get(..32)
                .ok_or_else(bad)?
                .try_into()
                .map_err(|_| bad())?;
            match rest.get(32) {
                Some(0) => {
                    out.push((id, None));
                    rest = &rest[33..];
                }
                Some(1) => {
                    let w: [u8; WRAPPED] = rest
                        .get(33..33 + WRAPPED)
                        .ok_or_else(bad)?
                        .try_into()
                        .map_err(|_| bad())?;
                    out.push((id, Some(w)));
                    rest = &rest[33 + WRAPPED..];
                }
                _ => return Err(bad()),
            }
        }
        Ok(out)
    }

    /// Changes the keyring file under its lock (shared by every process
    /// using it): read again, `change`d, written to a new file that
    /// replaces it, durably.
    fn update(
        &self,
        change: impl FnOnce(&mut std::collections::BTreeMap<Slot, Option<[u8; WRAPPED]>>),
    ) -> StoreResult<()> {
        let io = |e: std::io::Error| self.damaged(&e.to_string());
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(beside(&self.path, ".lock"))
            .map_err(io)?;
        fs2::FileExt::lock_exclusive(&lock).map_err(io)?;
        let mut entries: std::collections::BTreeMap<_, _> =
            self.read_entries()?.into_iter().collect();
        change(&mut entries);
        let mut body = Vec::with_capacity(24 + entries.len() * (33 + WRAPPED) + 32);
        body.extend_from_slice(KEYRING_MAGIC);
        body.extend_from_slice(&self.check);
        for (id, wrapped) in &entries {
            body.extend_from_slice(id);
            match wrapped {
                Some(w) => {
                    body.push(1);
                    body.extend_from_slice(w);
                }
                None => body.push(0),
            }
        }
        let sum = *blake3::hash(&body).as_bytes();
        body.extend_from_slice(&sum);
        let tmp = beside(&self.path, ".new");
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&tmp).map_err(io)?;
        file.write_all(&body).map_err(io)?;
        file.sync_all().map_err(io)?;
        std::fs::rename(&tmp, &self.path).map_err(io)?;
        sync_parent(&self.path).map_err(io)?;
        drop(lock);
        Ok(())
    }
}

/// The check of master key `key`.
fn key_check(key: &[u8; 32]) -> KeyCheck {
    let hash = blake3::keyed_hash(key, b"convstore 1 key check");
    let mut check = [0u8; 16];
    check.copy_from_slice(&hash.as_bytes()[..16]);
    check
}

fn parse_key(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut key = [0u8; 32];
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(key)
}

fn random_nonce() -> StoreResult<[u8; NONCE]> {
    let mut nonce = [0u8; NONCE];
    random(&mut nonce).map_err(StoreError::Io)?;
    Ok(nonce)
}

/// Fills `bytes` from the system's random source.
fn random(bytes: &mut [u8]) -> std::io::Result<()> {
    getrandom::getrandom(bytes).map_err(|e| std::io::Error::other(e.to_string()))
}

fn sync_parent(path: &Path) -> std::io::Result<()> {
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    File::open(parent)?.sync_all()
}

/// A sealed value, as stored: the mark, the header's length, a random
/// nonce, the first 16 bytes of blake3 of the ciphertext (checked without
/// the key), a header in clear (a chunk's: see [`ChunkHeader`]), then the
/// ciphertext with its tag. The key it is stored under, the mark and the
/// header are its associated data ([`associated`]): a value moved to
/// another key, or a header changed, does not open.
pub(crate) struct Sealed<'a> {
    pub header: &'a [u8],
    pub check: &'a [u8],
    pub nonce: &'a [u8],
    pub ciphertext: &'a [u8],
}

impl<'a> Sealed<'a> {
    /// The parts of `value`, if it is a sealed value.
    pub(crate) fn parse(value: &'a [u8]) -> Option<Sealed<'a>> {
        if value.len() < SEALED_FIXED + TAG || value[0] != SEALED_MARK {
            return None;
        }
        let header_len = usize::from(value[1]);
        let start = SEALED_FIXED + header_len;
        if value.len() < start + TAG {
            return None;
        }
        Some(Sealed {
            nonce: &value[2..2 + NONCE],
            check: &value[2 + NONCE..SEALED_FIXED],
            header: &value[SEALED_FIXED..start],
            ciphertext: &value[start..],
        })
    }

    /// Whether the ciphertext matches its checksum (no key needed).
    pub(crate) fn intact(&self) -> bool {
        blake3::hash(self.ciphertext).as_bytes()[..CHECK] == *self.check
    }
}

/// A sealed value's associated data: the key it is stored under, the
/// mark, the header's length and the header.
fn associated(key: &[u8], header: &[u8]) -> Vec<u8> {
    let mut aad = Vec::with_capacity(key.len() + 2 + header.len());
    aad.extend_from_slice(key);
    aad.push(SEALED_MARK);
    aad.extend_from_slice(&(header.len() as u8).to_le_bytes());
    aad.extend_from_slice(header);
    aad
}

impl DataKey {
    /// `plaintext` sealed for key `key`, with `header` in clear.
    pub(crate) fn seal(&self, key: &[u8], header: &[u8], plaintext: &[u8]) -> StoreResult<Vec<u8>> {
        let nonce = random_nonce()?;
        let header_len = u8::try_from(header.len()).expect("a sealed header under 256 bytes");
        let mut out = Vec::with_capacity(SEALED_FIXED + header.len() + plaintext.len() + TAG);
        out.push(SEALED_MARK);
        out.push(header_len);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&[0u8; CHECK]);
        out.extend_from_slice(header);
        let aad = associated(key, header);
        let ciphertext = self
            .cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plaintext,
                    aad: &aad,
                },
            )
            .map_err(|_| StoreError::Io(std::io::Error::other("cannot encrypt a value")))?;
        let check = blake3::hash(&ciphertext);
        out[2 + NONCE..SEALED_FIXED].copy_from_slice(&check.as_bytes()[..CHECK]);
        out.extend_from_slice(&ciphertext);
        Ok(out)
    }

    /// The plaintext of `sealed`, stored under `key`; `None` if it does
    /// not open (changed, or moved from another key).
    pub(crate) fn open(&self, key: &[u8], sealed: &Sealed<'_>) -> Option<Vec<u8>> {
        let aad = associated(key, sealed.header);
        self.cipher
            .decrypt(
                XNonce::from_slice(sealed.nonce),
                Payload {
                    msg: sealed.ciphertext,
                    aad: &aad,
                },
            )
            .ok()
    }
}

/// What a sealed chunk says in clear, for `verify` without the key: how
/// many records it holds, the address before its first and that of its
/// last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkHeader {
    pub records: u64,
    pub parent: [u8; 32],
    pub last: [u8; 32],
}

impl ChunkHeader {
    pub(crate) const LEN: usize = 8 + 32 + 32;

    pub(crate) fn bytes(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[..8].copy_from_slice(&self.records.to_le_bytes());
        out[8..40].copy_from_slice(&self.parent);
        out[40..].copy_from_slice(&self.last);
        out
    }

    pub(crate) fn parse(bytes: &[u8]) -> Option<ChunkHeader> {
        if bytes.len() != Self::LEN {
            return None;
        }
        Some(ChunkHeader {
            records: u64::from_le_bytes(bytes[..8].try_into().ok()?),
            parent: bytes[8..40].try_into().ok()?,
            last: bytes[40..].try_into().ok()?,
        })
    }
}
