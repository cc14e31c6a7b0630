//! What `Store::open` wraps around sled's own open: a panic in sled's
//! recovery becomes an error, a failed open leaves no file behind, and a
//! full disk does not stop a database from opening.
//!
//! **Panics.** sled 0.34.7 panics on some damaged files while recovering
//! (`tried to serialize Uninitialized` when a page's base is missing from
//! the log it replays). The panic is caught and reported as corruption; the
//! panic hook stays silent for it (see [`guarded`]).
//!
//! **Nothing left behind.** sled writes a snapshot of its page table
//! (`snap.<lsn>.generating`, renamed when complete) at every open that
//! finds log entries written since its last snapshot. An open that fails
//! while writing it (a full disk, a file size limit) left that file, which
//! the next open took for a crash's leftover. An open that fails now
//! removes the unfinished snapshots it created, holding sled's lock on the
//! `db` file while it does (a file another process is writing is left
//! alone).
//!
//! **A full disk.** sled cannot open a database written since its last
//! open without room for that snapshot, so on a full disk even reads
//! failed. convstore keeps [`RESERVE`], a file of preallocated space beside
//! sled's files: when sled's open fails for want of space, the reserve is
//! deleted, the open retried, and the reserve allocated again at once (as
//! much of it as fits), so that the space freed goes to opening, not to
//! the writes that follow. Its size is [`RESERVE_MIN`] or, for a large
//! database, twice its snapshot plus a segment of sled's log.

use std::collections::HashSet;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

/// The file of preallocated space in a database directory.
pub(crate) const RESERVE: &str = "convstore.reserve";
/// The smallest reserve kept.
const RESERVE_MIN: u64 = 4 * 1024 * 1024;
/// The largest reserve kept.
const RESERVE_MAX: u64 = 64 * 1024 * 1024;
/// sled's log segment (its default `segment_size`): the most a recovery
/// writes besides the snapshot (the tail of the segment it stops in).
const SLED_SEGMENT: u64 = 512 * 1024;

/// Opens sled with `config` for the database directory `path`; see the
/// module documentation.
pub(crate) fn open(path: &Path, config: &sled::Config) -> sled::Result<sled::Db> {
    let before = unfinished(path);
    let mut opened = guarded(|| config.open());
    if let Err(sled::Error::Io(e)) = &opened {
        if no_space(e) {
            remove_created(path, &before);
            if release_reserve(path) {
                opened = guarded(|| config.open());
                if opened.is_ok() {
                    keep_reserve(path, true);
                }
            }
            if let Err(sled::Error::Io(e)) = &opened {
                if no_space(e) {
                    opened = Err(sled::Error::Io(io::Error::new(
                        e.kind(),
                        "no space left on device: sled writes a snapshot when it opens a \
                         database written to since its last open, and there is no room \
                         for it; free some space and try again",
                    )));
                }
            }
        }
    }
    match &opened {
        Ok(_) => keep_reserve(path, false),
        Err(_) => remove_created(path, &before),
    }
    opened
}

/// Whether `error` is a full disk or an exhausted quota.
pub(crate) fn no_space(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    ) || matches!(error.raw_os_error(), Some(28 | 122))
        || error.to_string().contains("No space left on device")
}

/// Runs `open`, turning a panic inside sled into a corruption error; the
/// panic hook prints nothing for panics raised in sled's (or its
/// dependencies') code meanwhile.
pub(crate) fn guarded<T>(open: impl FnOnce() -> sled::Result<T>) -> sled::Result<T> {
    match caught(open) {
        Ok(result) => result,
        Err(message) => Err(sled::Error::Io(describe_panic(&message))),
    }
}

/// Runs `f`; `None` if it panicked in sled's (or its dependencies') code,
/// which the panic hook does not print meanwhile. For reading damaged
/// files, where sled may panic rather than fail.
pub(crate) fn quiet<T>(f: impl FnOnce() -> T) -> Option<T> {
    caught(f).ok()
}

/// Runs `f`, catching a panic (its message) quietly.
fn caught<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    install_quiet_hook();
    QUIET.fetch_add(1, Ordering::SeqCst);
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    QUIET.fetch_sub(1, Ordering::SeqCst);
    result.map_err(|payload| {
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default()
    })
}

/// What a panic in sled's open means. sled does not check its page
/// table's allocation: under an address space limit (`ulimit -v`) too low
/// for it, it panics on the null pointer (`converting zero into Owned`)
/// in a debug build and crashes in a release one. Any other panic is its
/// recovery failing on what it reads.
fn describe_panic(message: &str) -> io::Error {
    if message.contains("converting zero into") || message.contains("memory allocation") {
        let limit = address_space_limit().map_or(String::new(), |l| {
            format!(" (the address space limit, ulimit -v, is {} MiB)", l >> 20)
        });
        return io::Error::new(
            io::ErrorKind::OutOfMemory,
            format!("not enough memory for sled's page table{limit}"),
        );
    }
    io::Error::other(format!(
        "sled failed while recovering its files ({message}); they may be damaged: \
         `convstore salvage` copies out what can still be read"
    ))
}

/// The process's address space limit (`ulimit -v`) in bytes, if one is
/// set (Linux: read from `/proc/self/limits`).
pub fn address_space_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max address space"))?;
    let soft = line
        .trim_start_matches("Max address space")
        .split_whitespace()
        .next()?;
    soft.parse().ok()
}

/// How many guarded opens are running.
static QUIET: AtomicUsize = AtomicUsize::new(0);
static HOOK: Once = Once::new();

fn install_quiet_hook() {
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            let in_sled = info.location().is_some_and(|l| {
                let file = l.file();
                // sled from the registry (`sled-0.34.7/`) or the
                // patched one convstore builds (`vendor/sled/`).
                file.contains("sled-")
                    || file.contains("vendor/sled/")
                    || file.contains("crossbeam")
            });
            if !(in_sled && QUIET.load(Ordering::SeqCst) > 0) {
                previous(info);
            }
        }));
    });
}

/// The names of the unfinished snapshot files in `path`.
fn unfinished(path: &Path) -> HashSet<PathBuf> {
    crate::backend::sled::unfinished_snapshots(path)
        .into_iter()
        .collect()
}

/// Removes the unfinished snapshots that appeared in `path` since `before`
/// was listed: the ones a failed open wrote. Holds sled's lock on the `db`
/// file meanwhile; if another process has it, leaves them.
fn remove_created(path: &Path, before: &HashSet<PathBuf>) {
    let created: Vec<PathBuf> = unfinished(path)
        .into_iter()
        .filter(|file| !before.contains(file))
        .collect();
    if created.is_empty() {
        return;
    }
    let Ok(lock) = std::fs::File::open(path.join("db")) else {
        return;
    };
    if fs2::FileExt::try_lock_exclusive(&lock).is_err() {
        return;
    }
    for file in created {
        let _ = std::fs::remove_file(file);
    }
}

/// Deletes the reserve; whether there was one.
fn release_reserve(path: &Path) -> bool {
    std::fs::remove_file(path.join(RESERVE)).is_ok()
}

/// The reserve a database needs: room for its snapshot twice and a
/// segment of sled's log.
fn reserve_size(path: &Path) -> u64 {
    let snapshot = crate::backend::sled::state::snapshots(path)
        .iter()
        .filter_map(|(_, file)| std::fs::metadata(file).ok())
        .map(|m| m.len())
        .max()
        .unwrap_or(0);
    (2 * snapshot + 2 * SLED_SEGMENT).clamp(RESERVE_MIN, RESERVE_MAX)
}

/// Allocates the reserve, or grows it to the size the database needs.
/// Best effort: on a full disk it is left smaller (after a release, as
/// much as fits, halving down to a mebibyte) or absent.
fn keep_reserve(path: &Path, released: bool) {
    let file = path.join(RESERVE);
    let wanted = reserve_size(path);
    let current = std::fs::metadata(&file).map_or(0, |m| m.len());
    if current >= wanted && !released {
        return;
    }
    let Ok(handle) = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&file)
    else {
        return;
    };
    let mut size = wanted;
    loop {
        if fs2::FileExt::allocate(&handle, size).is_ok() && handle.sync_all().is_ok() {
            return;
        }
        if !released || size <= 1024 * 1024 {
            break;
        }
        size /= 2;
    }
    // Whatever could not be allocated is not a reserve.
    if current == 0 || released {
        drop(handle);
        let _ = std::fs::remove_file(&file);
    }
}
