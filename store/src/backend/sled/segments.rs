//! Segment files: where a format-2 database keeps the bodies of chunks and
//! blobs, outside sled's B-tree.
//!
//! sled keeps a value in its B-tree pages, or in a file of its own per page
//! once it is large, and holds what it reads in its cache: reading a long
//! log through sled copies every chunk into fresh memory that stays there.
//! A segment file is plain bytes, appended to and never rewritten; sled
//! keeps a [`SegmentRef`] (file, offset, length and a checksum) in the
//! chunk's or blob's place, and a reader fetches exactly those bytes with
//! `pread`, on any thread, into memory it owns.
//!
//! An append writes its bodies to the current segment file and syncs it
//! before the sled batch that refers to them is applied: a crash in
//! between leaves only bytes nothing refers to at the end of a file (the
//! next write goes after them). A reference is checked on every read (its
//! checksum is blake3 of the bytes), so damage is reported, never misread.
//!
//! Files are `segments/NNNNNNNN` in the database directory, numbered from
//! 1; a new one starts once the current one passes [`SEGMENT_MAX_BYTES`].
//!
//! A bulk append (`bulk.rs`) writes its bodies as it goes, long before the
//! batch that makes them visible, into files of its own named
//! `NNNNNNNN.bulk` ([`Segments::bulk_file`]). Its commit batch adds the key
//! `keys::segment_file(N)` for each of them (to the blob tree as well when
//! it stores blob references there); once the commit is durable the files
//! take their plain names ([`Segments::finish_committed`]). Opening the
//! database ([`Segments::recover`]) renames the `.bulk` files whose key
//! exists and deletes the others: what an interrupted bulk append wrote is
//! reclaimed whole. Readers look for the plain name, then the `.bulk` one.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use serde::{Deserialize, Serialize};

use crate::backend::sled::durable::{io_error, sync_directory};
use crate::error::{StoreError, StoreResult};

/// A segment file is closed to new writes once it passes this size.
pub(crate) const SEGMENT_MAX_BYTES: u64 = 256 * 1024 * 1024;

/// The directory of the segment files, inside the database directory.
const DIRECTORY: &str = "segments";

/// The suffix of a segment file a bulk append is writing, or committed but
/// not yet renamed.
const BULK_SUFFIX: &str = ".bulk";

/// Where some bytes are in the segment files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SegmentRef {
    /// The file's number.
    pub file: u32,
    /// Where the bytes start.
    pub offset: u64,
    /// How many bytes.
    pub len: u64,
    /// The first 16 bytes of blake3 of the bytes.
    pub check: [u8; 16],
}

/// The checksum of `bytes` kept in a [`SegmentRef`].
fn checksum(bytes: &[u8]) -> [u8; 16] {
    let hash = blake3::hash(bytes);
    let mut check = [0; 16];
    check.copy_from_slice(&hash.as_bytes()[..16]);
    check
}

/// The file being appended to.
struct Writer {
    number: u32,
    file: File,
    len: u64,
}

/// A segment file a bulk append writes, named `NNNNNNNN.bulk` until its
/// commit is durable.
pub(crate) struct BulkFile {
    pub number: u32,
    file: File,
    pub len: u64,
}

impl BulkFile {
    /// Appends `bodies` after what the file holds, without syncing; their
    /// references, in order.
    pub(crate) fn write(&mut self, bodies: &[&[u8]]) -> StoreResult<Vec<SegmentRef>> {
        let (refs, end) = references(self.number, self.len, bodies);
        if let Err(error) = write_all(&mut self.file, bodies) {
            self.len = self.file.metadata().map_or(end, |m| m.len());
            return Err(StoreError::Io(error));
        }
        self.len = end;
        Ok(refs)
    }

    /// Makes what was written durable.
    pub(crate) fn sync(&self) -> StoreResult<()> {
        self.file.sync_data().map_err(StoreError::Io)
    }
}

/// What the segment files' writers share.
#[derive(Default)]
struct State {
    /// The file appends write to, once opened.
    current: Option<Writer>,
    /// The highest file number in the directory or handed out, plain or
    /// `.bulk`, once read.
    highest: Option<u32>,
    /// Bulk files committed and still named `.bulk`.
    committed: Vec<u32>,
    /// Files whose bodies are being moved out (`delete.rs`): appends do
    /// not go on in them.
    retired: Vec<u32>,
}

/// The segment files of one database.
pub struct Segments {
    dir: PathBuf,
    /// A file is closed to new writes once it passes this size.
    pub max_bytes: u64,
    /// Files opened for reading, by number.
    readers: RwLock<HashMap<u32, Arc<File>>>,
    state: Mutex<State>,
    /// Where bodies moved out of removed files went, by their old file and
    /// offset: for a reader that read a reference just before it was
    /// rewritten.
    moved: RwLock<HashMap<(u32, u64), SegmentRef>>,
}

impl Segments {
    /// The segment files in database directory `db` (none need exist yet).
    pub(crate) fn new(db: &Path) -> Self {
        Segments {
            dir: db.join(DIRECTORY),
            max_bytes: SEGMENT_MAX_BYTES,
            readers: RwLock::new(HashMap::new()),
            state: Mutex::new(State::default()),
            moved: RwLock::new(HashMap::new()),
        }
    }

    fn path(&self, number: u32) -> PathBuf {
        self.dir.join(format!("{number:08}"))
    }

    fn bulk_path(&self, number: u32) -> PathBuf {
        self.dir.join(format!("{number:08}{BULK_SUFFIX}"))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends `bodies` to the current segment file, one after the other,
    /// and syncs the file: when this returns, they are durable. Their
    /// references are in the order of `bodies`.
    pub(crate) fn write(&self, bodies: &[&[u8]]) -> StoreResult<Vec<SegmentRef>> {
        let total: u64 = bodies.iter().map(|b| b.len() as u64).sum();
        let mut state = self.state();
        let writer = match state.current.take() {
            Some(w) if state.retired.contains(&w.number) => {
                let number = self.highest(&mut state)?.max(w.number) + 1;
                self.create(&mut state, number)?
            }
            Some(w) if w.len == 0 || w.len + total <= self.max_bytes => w,
            Some(w) => {
                let number = self.highest(&mut state)?.max(w.number) + 1;
                self.create(&mut state, number)?
            }
            None => self.open_last(&mut state)?,
        };
        let writer = state.current.insert(writer);
        let (refs, end) = references(writer.number, writer.len, bodies);
        let written = write_all(&mut writer.file, bodies).and_then(|()| writer.file.sync_data());
        if let Err(error) = written {
            // Whatever part was written is garbage nothing refers to; go on
            // after it.
            writer.len = writer.file.metadata().map_or(end, |m| m.len());
            return Err(StoreError::Io(error));
        }
        writer.len = end;
        Ok(refs)
    }

    /// The highest file number in the directory or handed out.
    fn highest(&self, state: &mut State) -> StoreResult<u32> {
        if let Some(highest) = state.highest {
            return Ok(highest);
        }
        let highest = self
            .numbered_files()?
            .into_iter()
            .map(|(number, _)| number)
            .max()
            .unwrap_or(0);
        state.highest = Some(highest);
        Ok(highest)
    }

    /// Every segment file in the directory: its number, and whether it is
    /// a `.bulk` file.
    fn numbered_files(&self) -> StoreResult<Vec<(u32, bool)>> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_error(&self.dir, &e)),
        };
        Ok(entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name();
                let name = name.to_str()?;
                match name.strip_suffix(BULK_SUFFIX) {
                    Some(number) => Some((number.parse().ok()?, true)),
                    None => Some((name.parse().ok()?, false)),
                }
            })
            .collect())
    }

    /// The writer for the highest-numbered plain file, appending after
    /// whatever it holds (a new file if there is none).
    fn open_last(&self, state: &mut State) -> StoreResult<Writer> {
        let last = self
            .numbered_files()?
            .into_iter()
            .filter(|(_, bulk)| !bulk)
            .map(|(number, _)| number)
            .max();
        let Some(number) = last.filter(|n| !state.retired.contains(n)) else {
            let number = self.highest(state)? + 1;
            return self.create(state, number);
        };
        let path = self.path(number);
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| io_error(&path, &e))?;
        let len = file.metadata().map_err(|e| io_error(&path, &e))?.len();
        Ok(Writer { number, file, len })
    }

    /// Creates segment file `number` and makes its name durable.
    fn create(&self, state: &mut State, number: u32) -> StoreResult<Writer> {
        let path = self.path(number);
        let file = self.create_file(state, number, &path)?;
        let len = file.metadata().map_err(|e| io_error(&path, &e))?.len();
        Ok(Writer { number, file, len })
    }

    /// Creates the file at `path` as file `number` and makes its name
    /// durable (and the directory's, if it is new).
    fn create_file(&self, state: &mut State, number: u32, path: &Path) -> StoreResult<File> {
        let new_directory = !self.dir.exists();
        fs::create_dir_all(&self.dir).map_err(|e| io_error(&self.dir, &e))?;
        if new_directory {
            if let Some(parent) = self.dir.parent() {
                sync_directory(parent)?;
            }
        }
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .map_err(|e| io_error(path, &e))?;
        sync_directory(&self.dir)?;
        state.highest = Some(state.highest.unwrap_or(0).max(number));
        Ok(file)
    }

    /// A new file for a bulk append, numbered after every other, named
    /// `NNNNNNNN.bulk` (durably) until [`Segments::finish_committed`].
    pub(crate) fn bulk_file(&self) -> StoreResult<BulkFile> {
        let mut state = self.state();
        let number = self.highest(&mut state)? + 1;
        let path = self.bulk_path(number);
        let file = self.create_file(&mut state, number, &path)?;
        Ok(BulkFile {
            number,
            file,
            len: 0,
        })
    }

    /// Notes bulk files whose commit batch was applied: they take their
    /// plain names at the next [`Segments::finish_committed`].
    pub(crate) fn committed(&self, numbers: impl IntoIterator<Item = u32>) {
        let mut state = self.state();
        for number in numbers {
            if !state.committed.contains(&number) {
                state.committed.push(number);
            }
        }
    }

    /// Whether bulk files wait for [`Segments::finish_committed`].
    pub(crate) fn has_committed(&self) -> bool {
        !self.state().committed.is_empty()
    }

    /// Gives the committed bulk files their plain names; called once their
    /// commit is durable. Appends go on in the last of them if it is the
    /// highest-numbered file.
    pub(crate) fn finish_committed(&self) -> StoreResult<()> {
        let mut state = self.state();
        if state.committed.is_empty() {
            return Ok(());
        }
        let numbers = std::mem::take(&mut state.committed);
        for &number in &numbers {
            let (from, to) = (self.bulk_path(number), self.path(number));
            fs::rename(&from, &to).map_err(|e| io_error(&from, &e))?;
        }
        sync_directory(&self.dir)?;
        let last = numbers.iter().copied().max().unwrap_or(0);
        if state.current.as_ref().is_some_and(|w| w.number < last) {
            state.current = None;
        }
        Ok(())
    }

    /// Deletes the files of a bulk append that was not committed: nothing
    /// refers to them.
    pub(crate) fn abandon(&self, numbers: impl IntoIterator<Item = u32>) {
        for number in numbers {
            let _ = fs::remove_file(self.bulk_path(number));
        }
    }

    /// Keeps appends out of file `number`, whose bodies are about to be
    /// moved to other files.
    pub(crate) fn retire(&self, number: u32) {
        let mut state = self.state();
        if !state.retired.contains(&number) {
            state.retired.push(number);
        }
    }

    /// Notes that the body at `from` is now at `to` (its file is about to
    /// be removed).
    pub(crate) fn moved(&self, from: &SegmentRef, to: SegmentRef) {
        self.moved
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((from.file, from.offset), to);
    }

    /// Overwrites the body `at` refers to with zeros and syncs its file:
    /// for a body nothing refers to any more whose bytes must not stay on
    /// disk (a redacted text). A file already gone is no error.
    pub(crate) fn scrub(&self, at: &SegmentRef) -> StoreResult<()> {
        self.scrub_all(std::slice::from_ref(at))
    }

    /// [`Segments::scrub`] of every body in `bodies`, syncing each file
    /// once. The file system is asked to free the blocks they held (a hole
    /// punched: the range reads as zeros and `du` drops); where it cannot,
    /// zeros are written over them.
    pub(crate) fn scrub_all(&self, bodies: &[SegmentRef]) -> StoreResult<()> {
        let mut by_file: BTreeMap<u32, Vec<&SegmentRef>> = BTreeMap::new();
        for at in bodies {
            by_file.entry(at.file).or_default().push(at);
        }
        for (number, bodies) in by_file {
            for path in [self.path(number), self.bulk_path(number)] {
                let file = match OpenOptions::new().write(true).open(&path) {
                    Ok(file) => file,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(io_error(&path, &e)),
                };
                let size = file.metadata().map_err(|e| io_error(&path, &e))?.len();
                for at in &bodies {
                    let end = at.offset.saturating_add(at.len).min(size);
                    if at.offset < end {
                        zero_range(&file, at.offset, end - at.offset)
                            .map_err(|e| io_error(&path, &e))?;
                    }
                }
                file.sync_data().map_err(|e| io_error(&path, &e))?;
                break;
            }
        }
        Ok(())
    }

    /// Deletes files `numbers` (under either name) for good: nothing
    /// refers to them any more. A file already gone is no error. Returns
    /// the bytes they held.
    pub(crate) fn remove(&self, numbers: &[u32]) -> StoreResult<u64> {
        let mut state = self.state();
        state.committed.retain(|n| !numbers.contains(n));
        state.retired.retain(|n| !numbers.contains(n));
        if state
            .current
            .as_ref()
            .is_some_and(|w| numbers.contains(&w.number))
        {
            // Appends go on in a new file.
            state.current = None;
        }
        drop(state);
        self.readers
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|n, _| !numbers.contains(n));
        let mut bytes = 0;
        for &number in numbers {
            for path in [self.path(number), self.bulk_path(number)] {
                let len = fs::metadata(&path).map_or(0, |m| m.len());
                match fs::remove_file(&path) {
                    Ok(()) => bytes += len,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io_error(&path, &e)),
                }
            }
        }
        if !numbers.is_empty() {
            sync_directory(&self.dir)?;
        }
        Ok(bytes)
    }

    /// Settles the `.bulk` files an interrupted process left: renamed to
    /// their plain names if `committed(N)` (their commit was applied),
    /// else deleted. Called when the database is opened, before any write.
    /// Returns the files deleted.
    pub(crate) fn recover(
        &self,
        committed: &dyn Fn(u32) -> StoreResult<bool>,
    ) -> StoreResult<Vec<PathBuf>> {
        let mut deleted = Vec::new();
        let mut changed = false;
        for (number, bulk) in self.numbered_files()? {
            if !bulk {
                continue;
            }
            let path = self.bulk_path(number);
            if committed(number)? {
                let to = self.path(number);
                if to.exists() {
                    // Not a state convstore leaves; readers find the plain
                    // file, and nothing is destroyed.
                    continue;
                }
                fs::rename(&path, &to).map_err(|e| io_error(&path, &e))?;
            } else {
                fs::remove_file(&path).map_err(|e| io_error(&path, &e))?;
                deleted.push(path);
            }
            changed = true;
        }
        if changed {
            sync_directory(&self.dir)?;
        }
        Ok(deleted)
    }

    /// The bytes `at` refers to, checked against its checksum; `what` names
    /// them in errors.
    pub(crate) fn read(&self, at: &SegmentRef, what: &dyn Fn() -> String) -> StoreResult<Vec<u8>> {
        let corrupt = |problem: String| StoreError::Corrupt {
            what: format!("{}: {problem}", what()),
        };
        // A file the database refers to that is gone, or shorter than the
        // reference, is damage; any other failure is the system's (a disk
        // error, a permission, too many open files), said as such.
        let failed = |e: io::Error, place: String| match e.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::UnexpectedEof => {
                corrupt(format!("{place}: {e}"))
            }
            kind => StoreError::Io(crate::error::io_at(
                kind,
                format!("{}: {place}: {e}", what()),
            )),
        };
        let file = match self.reader(at.file) {
            Ok(file) => file,
            Err(e) => {
                let moved = self
                    .moved
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get(&(at.file, at.offset))
                    .copied();
                match moved {
                    Some(to) if to.check == at.check => return self.read(&to, what),
                    _ => return Err(failed(e, format!("segment file {:08}", at.file))),
                }
            }
        };
        let len = usize::try_from(at.len).map_err(|_| corrupt("too long".to_owned()))?;
        // A damaged length, or too little memory, is an error, not an abort.
        let mut bytes = Vec::new();
        bytes.try_reserve_exact(len).map_err(|_| {
            StoreError::Io(io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("{}: cannot allocate {len} bytes to read it", what()),
            ))
        })?;
        bytes.resize(len, 0);
        read_exact_at(&file, &mut bytes, at.offset).map_err(|e| {
            failed(
                e,
                format!("segment file {:08} at offset {}", at.file, at.offset),
            )
        })?;
        if checksum(&bytes) != at.check {
            return Err(corrupt(format!(
                "segment file {:08} at offset {} does not match its checksum",
                at.file, at.offset
            )));
        }
        Ok(bytes)
    }

    fn reader(&self, number: u32) -> io::Result<Arc<File>> {
        if let Some(file) = self
            .readers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&number)
        {
            return Ok(Arc::clone(file));
        }
        // A committed bulk file is renamed once its commit is durable:
        // look for either name, and for the plain one again if the rename
        // came in between.
        let file = match File::open(self.path(number)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                match File::open(self.bulk_path(number)) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => File::open(self.path(number)),
                    opened => opened,
                }
            }
            opened => opened,
        };
        let file = Arc::new(file?);
        self.readers
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(number, Arc::clone(&file));
        Ok(file)
    }

    /// Bytes the segment files occupy.
    pub(crate) fn size_on_disk(&self) -> u64 {
        fs::read_dir(&self.dir).map_or(0, |entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
    }
}

/// The references of `bodies` written one after the other from `offset`
/// of file `number`, and where they end.
fn references(number: u32, offset: u64, bodies: &[&[u8]]) -> (Vec<SegmentRef>, u64) {
    let mut refs = Vec::with_capacity(bodies.len());
    let mut at = offset;
    for body in bodies {
        refs.push(SegmentRef {
            file: number,
            offset: at,
            len: body.len() as u64,
            check: checksum(body),
        });
        at += body.len() as u64;
    }
    (refs, at)
}

fn write_all(file: &mut File, bodies: &[&[u8]]) -> io::Result<()> {
    // One buffer, so that a batch of chunks is one write call.
    let total = bodies.iter().map(|b| b.len()).sum();
    let mut buffer = Vec::with_capacity(total);
    for body in bodies {
        buffer.extend_from_slice(body);
    }
    file.write_all(&buffer)
}

#[cfg(unix)]
fn read_exact_at(file: &File, buffer: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buffer, offset)
}

#[cfg(windows)]
fn read_exact_at(file: &File, mut buffer: &mut [u8], mut offset: u64) -> io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !buffer.is_empty() {
        match file.seek_read(buffer, offset) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                buffer = &mut buffer[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Makes `len` bytes of `file` from `offset` read as zeros: a hole punched
/// (the blocks go back to the file system), or zeros written where the
/// file system cannot punch one.
fn zero_range(file: &File, offset: u64, len: u64) -> io::Result<()> {
    use rustix::fs::{fallocate, FallocateFlags};
    use std::os::unix::fs::FileExt;
    let punch = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
    if fallocate(file, punch, offset, len).is_ok() {
        return Ok(());
    }
    let zeros = vec![0u8; len.min(1 << 20) as usize];
    let (mut at, end) = (offset, offset + len);
    while at < end {
        let n = (end - at).min(zeros.len() as u64);
        file.write_all_at(&zeros[..n as usize], at)?;
        at += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::{Segments, DIRECTORY};
    use crate::error::StoreError;

    fn segments(dir: &tempfile::TempDir, max_bytes: u64) -> Segments {
        Segments {
            max_bytes,
            ..Segments::new(dir.path())
        }
    }

    fn name() -> String {
        "bytes".to_owned()
    }

    #[test]
    fn bytes_come_back_from_any_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = segments(&dir, 100);
        let bodies: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; 30 + usize::from(i)]).collect();
        let mut refs = Vec::new();
        for pair in bodies.chunks(2) {
            let pair: Vec<&[u8]> = pair.iter().map(Vec::as_slice).collect();
            refs.extend(store.write(&pair).unwrap());
        }
        // Files close once they pass 100 bytes; a write larger than that
        // still goes whole into one file.
        assert!(refs.iter().map(|r| r.file).max().unwrap() > 3);
        let reopened = segments(&dir, 100);
        for (body, at) in bodies.iter().zip(&refs) {
            assert_eq!(&reopened.read(at, &name).unwrap(), body);
        }
        let total: u64 = bodies.iter().map(|b| b.len() as u64).sum();
        assert_eq!(reopened.size_on_disk(), total);
    }

    #[test]
    fn writes_go_after_bytes_nothing_refers_to() {
        let dir = tempfile::tempdir().unwrap();
        let first = segments(&dir, 1 << 20).write(&[b"first"]).unwrap()[0];
        // A crash between a write and the batch referring to it leaves a
        // tail that nothing refers to, possibly cut short.
        let path = dir.path().join(DIRECTORY).join("00000001");
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        file.write_all(b"torn").unwrap();
        let store = segments(&dir, 1 << 20);
        let second = store.write(&[b"second"]).unwrap()[0];
        assert_eq!(second.offset, 9);
        assert_eq!(store.read(&first, &name).unwrap(), b"first");
        assert_eq!(store.read(&second, &name).unwrap(), b"second");
    }

    #[test]
    fn bulk_files_take_their_names_once_committed_or_are_reclaimed() {
        let dir = tempfile::tempdir().unwrap();
        let store = segments(&dir, 1 << 20);
        let shared = store.write(&[b"shared"]).unwrap()[0];
        let mut kept = store.bulk_file().unwrap();
        let mut lost = store.bulk_file().unwrap();
        assert_eq!((shared.file, kept.number, lost.number), (1, 2, 3));
        let at = kept.write(&[b"kept", b"bytes"]).unwrap();
        lost.write(&[b"lost"]).unwrap();
        kept.sync().unwrap();
        // Read under the .bulk name before it is renamed.
        assert_eq!(store.read(&at[1], &name).unwrap(), b"bytes");
        store.committed([kept.number]);
        store.finish_committed().unwrap();
        let path = |n: &str| dir.path().join(DIRECTORY).join(n);
        assert!(path("00000002").exists());
        assert!(!path("00000002.bulk").exists());
        // Appends go on in the committed file, the highest plain one.
        assert_eq!(store.write(&[b"next"]).unwrap()[0].file, 2);

        // A process stopped in a bulk append: its file is deleted when the
        // database opens, unless its commit was applied.
        let mut committed = store.bulk_file().unwrap();
        committed.write(&[b"applied"]).unwrap();
        drop((store, lost, committed));
        let reopened = segments(&dir, 1 << 20);
        let deleted = reopened.recover(&|n| Ok(n == 4)).unwrap();
        assert_eq!(deleted, [path("00000003.bulk")]);
        assert!(path("00000004").exists());
        assert_eq!(reopened.read(&at[0], &name).unwrap(), b"kept");
        // A new file is numbered after every file there is.
        assert_eq!(reopened.bulk_file().unwrap().number, 5);
        reopened.abandon([5]);
        assert!(!path("00000005.bulk").exists());
    }

    #[test]
    fn damage_is_reported_not_misread() {
        let dir = tempfile::tempdir().unwrap();
        let store = segments(&dir, 1 << 20);
        let at = store.write(&[b"0123456789"]).unwrap()[0];
        let path = dir.path().join(DIRECTORY).join("00000001");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[3] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let corrupt = |r| matches!(r, Err(StoreError::Corrupt { what }) if what.starts_with("bytes: segment file 00000001"));
        assert!(corrupt(store.read(&at, &name)));
        std::fs::write(&path, &bytes[..5]).unwrap();
        assert!(corrupt(store.read(&at, &name)));
        let elsewhere = super::SegmentRef { file: 7, ..at };
        assert!(matches!(
            store.read(&elsewhere, &name),
            Err(StoreError::Corrupt { .. })
        ));
    }
}
