//! The discovery file: `convstore.server` in the database directory says
//! where the server that holds the database listens, so that a command
//! given `--db DIR` goes through it instead of failing with "in use".
//!
//! It is JSON: `{"url": "http://127.0.0.1:7377", "pid": 1234, "instance":
//! "<random hex>"}`, written (to a temporary name, then renamed) once the
//! server listens and removed when it stops. A server killed with -9
//! leaves it behind: a client believes it only if `/healthz` at that URL
//! answers with the same `instance` (a fresh random value per server
//! run), so a stale file, or another server on a reused port, is ignored.
//! It also names the directory it was written into (its device and inode
//! numbers), so a copy of the directory, file and all, is not taken for
//! the database the server holds. It holds no secret: with tokens,
//! clients bring their own.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The file's name in the database directory.
pub const FILE: &str = "convstore.server";

/// What the file says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Discovery {
    /// Where the server listens: `http://HOST:PORT`.
    pub url: String,
    /// The server's process id.
    pub pid: u32,
    /// A random value per server run; `/healthz` answers it.
    pub instance: String,
    /// The database directory's device and inode numbers (a file without
    /// them names no directory, and is not believed).
    #[serde(default)]
    pub dir: Option<(u64, u64)>,
}

impl Discovery {
    /// Whether the file names directory `db` itself, not a copy of the
    /// one it was written into.
    pub fn names(&self, db: &Path) -> bool {
        self.dir.is_some() && self.dir == dir_id(db)
    }
}

/// The device and inode numbers of directory `db`.
pub fn dir_id(db: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(db).ok()?;
    Some((meta.dev(), meta.ino()))
}

/// The file of database directory `db`.
pub fn path(db: &Path) -> PathBuf {
    db.join(FILE)
}

/// Reads the file of `db`, if there is one that parses.
pub fn read(db: &Path) -> Option<Discovery> {
    let text = std::fs::read_to_string(path(db)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Writes the file of `db`.
pub fn write(db: &Path, discovery: &Discovery) -> std::io::Result<()> {
    let target = path(db);
    let temp = db.join(format!(".{FILE}.{}", std::process::id()));
    let text = serde_json::to_string(discovery).map_err(std::io::Error::other)?;
    std::fs::write(&temp, text + "\n")?;
    std::fs::rename(&temp, &target)
}

/// Removes the file of `db` if it is still this server's.
pub fn remove(db: &Path, instance: &str) {
    if read(db).is_some_and(|d| d.instance == instance) {
        let _ = std::fs::remove_file(path(db));
    }
}

/// A fresh instance value: 16 random bytes in hex (from the time, the
/// process id and an address of the stack, hashed).
pub fn new_instance() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let local = 0u8;
    let mut hasher = blake3::Hasher::new();
    hasher.update(&nanos.to_le_bytes());
    hasher.update(&std::process::id().to_le_bytes());
    hasher.update(&(std::ptr::addr_of!(local) as usize).to_le_bytes());
    hasher.finalize().to_hex()[..32].to_owned()
}
