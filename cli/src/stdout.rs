//! Standard output that never keeps the database held by a slow reader.
//!
//! A command reads the store and writes what it read. Written straight to
//! a pipe, the output stalls as soon as the reader stops reading
//! (`convstore log chat | less`, `| sleep 12`), and the command, still
//! holding the database, blocks every writer. So to a pipe, a terminal or
//! a socket, output is *paced*: only as many bytes are written as the
//! reader has room for right now (the pipe's free space; a terminal or
//! socket that polls writable takes `PIPE_BUF`), and the rest waits in a
//! spool (memory, then a temporary file past 64 MiB). A reader that keeps
//! up sees the output as it is made, and one that closes early (`| head`)
//! stops the command early; a slow one gets the spool once the command
//! has released the database ([`drain`], called after the store is
//! dropped). To a file or `/dev/null`, writes never block and go straight
//! through.

use std::fs::File;
use std::io::{self, IsTerminal, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

/// Set once a write to stdout failed because the reader closed it.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// What the spool holds and how stdout is written.
static STATE: Mutex<Option<State>> = Mutex::new(None);

/// Bytes kept in memory before the spool moves to a temporary file.
const MEMORY_BYTES: usize = 64 << 20;

/// The most written to a terminal or socket at once when it polls
/// writable (POSIX promises room for `PIPE_BUF`).
const PIPE_BUF: usize = 4096;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A regular file, `/dev/null`: writes do not wait on a reader.
    Direct,
    /// A pipe: its free space is its size less what waits in it.
    Pipe,
    /// A terminal or socket: writable when poll says so.
    Polled,
}

struct State {
    kind: Kind,
    /// Spooled bytes in memory, from `head` on.
    memory: Vec<u8>,
    head: usize,
    /// Past [`MEMORY_BYTES`], the spool is this file (bytes `read..len`),
    /// and new bytes go after it.
    file: Option<(File, u64, u64)>,
}

impl State {
    fn new() -> State {
        let stdout = io::stdout();
        let kind = match rustix::fs::fstat(stdout.as_fd()) {
            Ok(stat) => {
                let kind = rustix::fs::FileType::from_raw_mode(stat.st_mode);
                match kind {
                    rustix::fs::FileType::Fifo => Kind::Pipe,
                    rustix::fs::FileType::Socket => Kind::Polled,
                    rustix::fs::FileType::CharacterDevice if stdout.is_terminal() => Kind::Polled,
                    _ => Kind::Direct,
                }
            }
            Err(_) => Kind::Direct,
        };
        State {
            kind,
            memory: Vec::new(),
            head: 0,
            file: None,
        }
    }

    fn spooled(&self) -> bool {
        self.head < self.memory.len() || self.file.as_ref().is_some_and(|(_, r, l)| r < l)
    }

    /// How many bytes stdout takes now without waiting.
    fn room(&self) -> usize {
        room_now(self.kind)
    }

    /// Writes `bytes` to stdout without waiting; returns how many went.
    fn write_now(&self, bytes: &[u8]) -> io::Result<usize> {
        let room = self.room().min(bytes.len());
        if room == 0 {
            return Ok(0);
        }
        write_fd(&bytes[..room])
    }

    /// Moves what the reader has room for from the spool to stdout.
    fn pump(&mut self) -> io::Result<()> {
        let kind = self.kind;
        if let Some((file, read, len)) = &mut self.file {
            while *read < *len {
                let room = room_now(kind).min((*len - *read) as usize).min(1 << 20);
                if room == 0 {
                    return Ok(());
                }
                let mut buf = vec![0; room];
                file.read_exact_at(&mut buf, *read)?;
                let wrote = write_fd(&buf)?;
                *read += wrote as u64;
                if wrote < room {
                    return Ok(());
                }
            }
            return Ok(());
        }
        while self.head < self.memory.len() {
            let wrote = self.write_now(&self.memory[self.head..])?;
            if wrote == 0 {
                break;
            }
            self.head += wrote;
        }
        if self.head == self.memory.len() {
            self.memory.clear();
            self.head = 0;
        } else if self.head > self.memory.len() / 2 {
            self.memory.drain(..self.head);
            self.head = 0;
        }
        Ok(())
    }

    /// Adds `bytes` to the end of the spool.
    fn spool(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.file.is_none() && self.memory.len() - self.head + bytes.len() > MEMORY_BYTES {
            let file = tempfile::tempfile()?;
            let pending = &self.memory[self.head..];
            file.write_all_at(pending, 0)?;
            self.file = Some((file, 0, pending.len() as u64));
            self.memory = Vec::new();
            self.head = 0;
        }
        match &mut self.file {
            Some((file, _, len)) => {
                file.write_all_at(bytes, *len)?;
                *len += bytes.len() as u64;
            }
            None => self.memory.extend_from_slice(bytes),
        }
        Ok(())
    }

    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.kind == Kind::Direct {
            return io::stdout().lock().write_all(bytes);
        }
        self.pump()?;
        let mut rest = bytes;
        if !self.spooled() {
            let wrote = self.write_now(rest)?;
            rest = &rest[wrote..];
        }
        if !rest.is_empty() {
            self.spool(rest)?;
        }
        Ok(())
    }

    /// Writes the whole spool, waiting on the reader as long as it takes.
    fn drain(&mut self) -> io::Result<()> {
        let mut out = io::stdout().lock();
        if let Some((file, read, len)) = &mut self.file {
            let mut buf = vec![0; 1 << 20];
            while *read < *len {
                let n = buf.len().min((*len - *read) as usize);
                file.read_exact_at(&mut buf[..n], *read)?;
                out.write_all(&buf[..n])?;
                *read += n as u64;
            }
        }
        out.write_all(&self.memory[self.head..])?;
        self.memory.clear();
        self.head = 0;
        out.flush()
    }
}

/// How many bytes stdout of this kind takes now without waiting.
fn room_now(kind: Kind) -> usize {
    let stdout = io::stdout();
    let fd = stdout.as_fd();
    match kind {
        Kind::Direct => usize::MAX,
        Kind::Pipe => {
            // The pipe holds pages: what waits in it may occupy one
            // page more than its size rounds up to (a page the reader
            // has partly taken), so that much is kept back.
            let size = rustix::pipe::fcntl_getpipe_size(fd).unwrap_or(0);
            let waiting = rustix::io::ioctl_fionread(fd).unwrap_or(size as u64) as usize;
            size.saturating_sub(waiting.div_ceil(PIPE_BUF) * PIPE_BUF + PIPE_BUF)
        }
        Kind::Polled => {
            use rustix::event::{poll, PollFd, PollFlags, Timespec};
            let mut fds = [PollFd::new(&fd, PollFlags::OUT)];
            let now = Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            match poll(&mut fds, Some(&now)) {
                Ok(n) if n > 0 && fds[0].revents().contains(PollFlags::OUT) => PIPE_BUF,
                _ => 0,
            }
        }
    }
}

/// One `write` on stdout's descriptor, past std's own buffer.
fn write_fd(bytes: &[u8]) -> io::Result<usize> {
    let stdout = io::stdout();
    loop {
        match rustix::io::write(stdout.as_fd(), bytes) {
            Ok(n) => return Ok(n),
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::AGAIN) => return Ok(0),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Remembers a closed pipe, however the error travels afterwards, and
/// says that it was standard output that failed.
fn note<T>(result: io::Result<T>) -> io::Result<T> {
    result.map_err(|e| {
        if e.kind() == io::ErrorKind::BrokenPipe {
            CLOSED.store(true, Ordering::Relaxed);
        }
        io::Error::new(e.kind(), format!("cannot write to standard output: {e}"))
    })
}

/// Standard output, paced (see the module documentation). Unbuffered:
/// wrap it in a `BufWriter`.
pub(crate) struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let mut state = STATE.lock().unwrap_or_else(PoisonError::into_inner);
        note(state.get_or_insert_with(State::new).write_all(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        let mut state = STATE.lock().unwrap_or_else(PoisonError::into_inner);
        match state.as_mut() {
            Some(state) if state.kind == Kind::Direct => note(io::stdout().lock().flush()),
            Some(state) => note(state.pump()),
            None => Ok(()),
        }
    }
}

/// Writes what the spool still holds, waiting on the reader. Called once
/// the command is done with the database.
pub(crate) fn drain() -> io::Result<()> {
    let mut state = STATE.lock().unwrap_or_else(PoisonError::into_inner);
    match state.as_mut() {
        Some(state) => note(state.drain()),
        None => Ok(()),
    }
}

/// Whether a write to stdout met a closed pipe.
pub(crate) fn closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}
