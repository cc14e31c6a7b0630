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

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use serde::{Deserialize, Serialize};

use crate::error::{StoreError, StoreResult};

/// A segment file is closed to new writes once it passes this size.
pub(crate) const SEGMENT_MAX_BYTES: u64 = 256 * 1024 * 1024;

/// The directory of the segment files, inside the database directory.
const DIRECTORY: &str = "segments";

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

/// The segment files of one database.
pub(crate) struct Segments {
    dir: PathBuf,
    /// A file is closed to new writes once it passes this size.
    max_bytes: u64,
    /// Files opened for reading, by number.
    readers: RwLock<HashMap<u32, Arc<File>>>,
    writer: Mutex<Option<Writer>>,
}

impl Segments {
    /// The segment files in database directory `db` (none need exist yet).
    pub(crate) fn new(db: &Path) -> Self {
        Segments {
            dir: db.join(DIRECTORY),
            max_bytes: SEGMENT_MAX_BYTES,
            readers: RwLock::new(HashMap::new()),
            writer: Mutex::new(None),
        }
    }

    fn path(&self, number: u32) -> PathBuf {
        self.dir.join(format!("{number:08}"))
    }

    /// Appends `bodies` to the current segment file, one after the other,
    /// and syncs the file: when this returns, they are durable. Their
    /// references are in the order of `bodies`.
    pub(crate) fn write(&self, bodies: &[&[u8]]) -> StoreResult<Vec<SegmentRef>> {
        let total: u64 = bodies.iter().map(|b| b.len() as u64).sum();
        let mut slot = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let writer = match slot.take() {
            Some(w) if w.len == 0 || w.len + total <= self.max_bytes => w,
            Some(w) => self.create(w.number + 1)?,
            None => self.open_last()?,
        };
        let writer = slot.insert(writer);
        let mut refs = Vec::with_capacity(bodies.len());
        let mut offset = writer.len;
        for body in bodies {
            refs.push(SegmentRef {
                file: writer.number,
                offset,
                len: body.len() as u64,
                check: checksum(body),
            });
            offset += body.len() as u64;
        }
        let written = write_all(&mut writer.file, bodies).and_then(|()| writer.file.sync_data());
        if let Err(error) = written {
            // Whatever part was written is garbage nothing refers to; go on
            // after it.
            writer.len = writer.file.metadata().map_or(offset, |m| m.len());
            return Err(StoreError::Io(error));
        }
        writer.len = offset;
        Ok(refs)
    }

    /// The writer for the highest-numbered file, appending after whatever
    /// it holds (a new file 1 if there is none).
    fn open_last(&self) -> StoreResult<Writer> {
        let last = match fs::read_dir(&self.dir) {
            Ok(entries) => entries
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .max(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_error(&self.dir, &e)),
        };
        let Some(number) = last else {
            return self.create(1);
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
    fn create(&self, number: u32) -> StoreResult<Writer> {
        fs::create_dir_all(&self.dir).map_err(|e| io_error(&self.dir, &e))?;
        let path = self.path(number);
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
            .map_err(|e| io_error(&path, &e))?;
        sync_directory(&self.dir)?;
        let len = file.metadata().map_err(|e| io_error(&path, &e))?.len();
        Ok(Writer { number, file, len })
    }

    /// The bytes `at` refers to, checked against its checksum; `what` names
    /// them in errors.
    pub(crate) fn read(&self, at: &SegmentRef, what: &dyn Fn() -> String) -> StoreResult<Vec<u8>> {
        let corrupt = |problem: String| StoreError::Corrupt {
            what: format!("{}: {problem}", what()),
        };
        let file = self
            .reader(at.file)
            .map_err(|e| corrupt(format!("segment file {:08}: {e}", at.file)))?;
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
            corrupt(format!(
                "segment file {:08} at offset {}: {e}",
                at.file, at.offset
            ))
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
        let file = Arc::new(File::open(self.path(number))?);
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

/// Makes the directory's entries (a new file's name) durable.
fn sync_directory(dir: &Path) -> StoreResult<()> {
    #[cfg(unix)]
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error(dir, &e))?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

fn io_error(path: &Path, error: &io::Error) -> StoreError {
    StoreError::Io(io::Error::new(
        error.kind(),
        format!("{}: {error}", path.display()),
    ))
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
