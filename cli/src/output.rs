//! Writing to stdout and stderr.

use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use unicode_width::UnicodeWidthStr;

/// Buffered stdout, paced so that a slow reader never keeps the database
/// held (see `stdout.rs`).
pub(crate) fn stdout() -> BufWriter<crate::stdout::Stdout> {
    BufWriter::with_capacity(1 << 16, crate::stdout::Stdout)
}

/// Whether `error` is stdout closing under us (`convstore log x | head`),
/// which is not a failure: the reader has what it wanted.
pub(crate) fn is_broken_pipe(error: &anyhow::Error) -> bool {
    crate::stdout::closed()
        || error.chain().any(|cause| {
            cause
                .downcast_ref::<io::Error>()
                .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
                || cause
                    .downcast_ref::<serde_json::Error>()
                    .and_then(serde_json::Error::io_error_kind)
                    == Some(io::ErrorKind::BrokenPipe)
        })
}

/// Writes `text` and a newline to stderr. A stderr that cannot be written
/// (a full disk, a closed descriptor) loses the line but changes nothing
/// else: the exit code still says how the command went.
pub(crate) fn line_to_stderr(text: &str) {
    use std::io::Write;
    // One line, whatever a message quotes: control characters (a name
    // typed with one, a newline inside a value) and invisible ones are
    // written escaped.
    let line = convstore_store::one_line(text);
    let mut err = std::io::stderr().lock();
    let _ = err
        .write_all(line.as_bytes())
        .and_then(|()| err.write_all(b"\n"));
}

/// Notes on stderr (what was created, progress), silenced by `--quiet`.
pub(crate) struct Notes {
    pub quiet: bool,
}

impl Notes {
    pub(crate) fn say(&self, text: &str) {
        if !self.quiet {
            line_to_stderr(text);
        }
    }

    /// `warning: TEXT` on stderr (also silenced by `--quiet`).
    pub(crate) fn warn(&self, text: &str) {
        self.say(&format!("warning: {text}"));
    }
}

/// An inclusive turn range as every command writes it: `A..B`, `A` for a
/// single turn, `A..` when it has no end.
pub(crate) fn range(first: u64, last: u64) -> String {
    if first == last {
        first.to_string()
    } else if last == u64::MAX {
        format!("{first}..")
    } else {
        format!("{first}..{last}")
    }
}

/// Counts with their noun: `1 event`, `3 events`.
pub(crate) fn plural(count: u64, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

/// A size for people: `512 bytes`, `3.4 MB` (powers of 1,000).
pub(crate) fn bytes(count: u64) -> String {
    match count {
        0..1_000 => plural(count, "byte"),
        1_000..1_000_000 => format!("{:.1} kB", count as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} MB", count as f64 / 1e6),
        _ => format!("{:.2} GB", count as f64 / 1e9),
    }
}

/// Whether stdin is a terminal (nothing piped in).
pub(crate) fn stdin_is_terminal() -> bool {
    io::stdin().is_terminal()
}

/// Whether something other than white space waits on stdin (a pipe or a
/// file), looked for without blocking for more than a moment: a caller
/// that leaves stdin open and writes nothing is not kept waiting.
pub(crate) fn stdin_has_input() -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    use std::io::Read as _;
    let stdin = io::stdin();
    if stdin.is_terminal() {
        return false;
    }
    let mut fds = [PollFd::new(&stdin, PollFlags::IN)];
    let moment = Timespec {
        tv_sec: 0,
        tv_nsec: 50_000_000,
    };
    match poll(&mut fds, Some(&moment)) {
        Ok(n) if n > 0 && fds[0].revents().contains(PollFlags::IN) => {}
        _ => return false,
    }
    let mut buf = [0u8; 4096];
    match stdin.lock().read(&mut buf) {
        Ok(n) => buf[..n].iter().any(|b| !b.is_ascii_whitespace()),
        Err(_) => false,
    }
}

/// Writes rows as left-aligned columns; the last column is not padded.
pub(crate) fn table(out: &mut impl Write, rows: &[Vec<String>]) -> io::Result<()> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| UnicodeWidthStr::width(s.as_str()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if c + 1 < row.len() {
                // Padded by hand: a width over 65,535 is out of range for
                // the formatting machinery.
                let pad = widths[c] - UnicodeWidthStr::width(cell.as_str()) + 2;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// A file written whole or not at all: the bytes go to a temporary file
/// beside the target, renamed over it by [`OutputFile::commit`]. Created
/// before any work is done, so that a path that cannot be written fails
/// the command before it stores anything.
///
/// The target is where a symbolic link leads (the link stays a link); an
/// existing file keeps its permissions, a new one gets the umask's. A
/// target that is not a regular file (`/dev/stdout`, a FIFO) is written
/// in place.
pub(crate) struct OutputFile {
    target: PathBuf,
    /// The temporary file, or `None` when writing in place.
    temp: Option<PathBuf>,
    file: std::fs::File,
    shown: String,
}

impl OutputFile {
    pub(crate) fn create(path: &Path) -> Result<OutputFile> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let shown = path.display().to_string();
        // A FIFO, a device or a pipe (`/dev/stdout`, which is a link to
        // one, not to a path) is written in place.
        if let Ok(meta) = std::fs::metadata(path) {
            if !meta.is_file() && !meta.is_dir() {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .with_context(|| format!("cannot write {shown}"))?;
                return Ok(OutputFile {
                    target: path.to_path_buf(),
                    temp: None,
                    file,
                    shown,
                });
            }
        }
        let target = follow_links(path).with_context(|| format!("cannot write {shown}"))?;
        let existing = match std::fs::metadata(&target) {
            Ok(meta) if meta.is_dir() => bail!("cannot write {shown}: it is a directory"),
            Ok(meta) if !meta.is_file() => {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&target)
                    .with_context(|| format!("cannot write {shown}"))?;
                return Ok(OutputFile {
                    target,
                    temp: None,
                    file,
                    shown,
                });
            }
            Ok(meta) => Some(meta.permissions()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("cannot write {shown}")),
        };
        let dir = target
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut attempt = 0u32;
        let (temp, file) = loop {
            let temp = dir.join(format!(
                ".{name}.{}.{attempt}.convstore-tmp",
                std::process::id()
            ));
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o666)
                .open(&temp)
            {
                Ok(file) => break (temp, file),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 100 => {
                    attempt += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound && !dir.is_dir() => {
                    bail!(
                        "cannot write {shown}: the directory {} does not exist",
                        dir.display()
                    )
                }
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!(
                            "cannot write {shown}: cannot create a temporary file in {}",
                            dir.display()
                        )
                    })
                }
            }
        };
        // From here on the temporary file is removed if this fails (Drop)
        // or the command is interrupted.
        let output = OutputFile {
            target,
            temp: Some(temp),
            file,
            shown,
        }
        .registered();
        if let Some(permissions) = existing {
            output
                .file
                .set_permissions(permissions)
                .with_context(|| format!("cannot write {}", output.shown))?;
        }
        Ok(output)
    }

    /// Registers the temporary file so that an interrupt removes it.
    fn registered(self) -> Self {
        if let Some(temp) = &self.temp {
            crate::interrupt::remove_on_interrupt(temp);
        }
        self
    }

    /// Writes with `write`, then makes the file durable and puts it in
    /// place.
    pub(crate) fn write_with(
        mut self,
        write: &mut dyn FnMut(&mut dyn Write) -> Result<()>,
    ) -> Result<()> {
        {
            let mut out = BufWriter::with_capacity(1 << 16, &mut self.file);
            // The file's own write errors name it (a full disk, a file
            // size limit); the command's other errors stay as they are.
            let shown = &self.shown;
            write(&mut out).map_err(|e| {
                let output = e.downcast_ref::<io::Error>().is_some()
                    || e.downcast_ref::<convstore_engine::Error>()
                        .is_some_and(|e| matches!(e, convstore_engine::Error::Io(_)));
                if output {
                    e.context(format!("cannot write {shown}"))
                } else {
                    e
                }
            })?;
            out.flush()
                .with_context(|| format!("cannot write {}", self.shown))?;
        }
        let Some(temp) = self.temp.take() else {
            return Ok(());
        };
        let done = self
            .file
            .sync_all()
            .and_then(|()| std::fs::rename(&temp, &self.target));
        crate::interrupt::forget(&temp);
        if let Err(e) = done {
            let _ = std::fs::remove_file(&temp);
            return Err(e).with_context(|| format!("cannot write {}", self.shown));
        }
        if let Some(dir) = self.target.parent().filter(|d| !d.as_os_str().is_empty()) {
            if let Ok(dir) = std::fs::File::open(dir) {
                let _ = dir.sync_all();
            }
        }
        Ok(())
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if let Some(temp) = &self.temp {
            let _ = std::fs::remove_file(temp);
            crate::interrupt::forget(temp);
        }
    }
}

/// Where `path` leads through symbolic links (at most 40 of them); the
/// path itself when it is not a link or does not exist.
fn follow_links(path: &Path) -> io::Result<PathBuf> {
    let mut current = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let link = std::fs::read_link(&current)?;
                current = match current.parent() {
                    Some(dir) if link.is_relative() => dir.join(link),
                    _ => link,
                };
            }
            _ => return Ok(current),
        }
    }
    Err(io::Error::other("too many levels of symbolic links"))
}

/// A progress bar on stderr for long work: shown only when stderr is a
/// terminal and `--quiet` is not given; otherwise every call does nothing.
pub(crate) struct Progress(Option<indicatif::ProgressBar>);

impl Progress {
    /// A bar towards `total` records (with rate and time left).
    pub(crate) fn bar(notes: &Notes, total: u64, what: &str) -> Progress {
        Self::make(notes, Some(total), what)
    }

    /// A counter with a rate, for work of unknown size.
    pub(crate) fn counter(notes: &Notes, what: &str) -> Progress {
        Self::make(notes, None, what)
    }

    fn make(notes: &Notes, total: Option<u64>, what: &str) -> Progress {
        if notes.quiet || !io::stderr().is_terminal() {
            return Progress(None);
        }
        let (bar, template) = match total {
            Some(total) => (
                indicatif::ProgressBar::new(total),
                "{msg} [{bar:30}] {human_pos}/{human_len} records, {rate}, {eta} left",
            ),
            None => (
                indicatif::ProgressBar::no_length(),
                "{msg}: {human_pos} so far, {rate}",
            ),
        };
        if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
            // Whole records a second, with thousands separated.
            let style = style.with_key(
                "rate",
                |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = write!(w, "{}/s", indicatif::HumanCount(state.per_sec() as u64));
                },
            );
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(what.to_owned());
        Progress(Some(bar))
    }

    /// `n` more done.
    pub(crate) fn inc(&self, n: u64) {
        if let Some(bar) = &self.0 {
            bar.inc(n);
        }
    }

    /// Makes `store`'s long operations (verify, projections) advance the
    /// bar.
    pub(crate) fn attach(&self, store: &convstore_store::Store) {
        if let Some(bar) = &self.0 {
            let bar = bar.clone();
            store.set_progress(Some(std::sync::Arc::new(move |n| bar.inc(n))));
        }
    }

    /// Removes the bar from the terminal.
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    /// Clears the bar, so that what is printed next (an error line) is not
    /// drawn over it.
    fn drop(&mut self) {
        self.finish();
    }
}

/// A mistake in how a command was called that parsing alone could not
/// see (flags that exclude each other, a range inverted by its own
/// numbers): like clap's errors, exit 2.
#[derive(Debug)]
pub(crate) struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// A [`Usage`] error.
pub(crate) fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Usage(message.into()))
}
