//! Writing to stdout and stderr.

use std::fmt::Write as _;
use std::io::{self, BufWriter, IsTerminal, StdoutLock, Write};
use std::path::Path;

use anyhow::{Context, Result};
use convstore_store::json;
use convstore_store::{Event, Timestamp};

/// Buffered stdout.
pub(crate) fn stdout() -> BufWriter<StdoutLock<'static>> {
    BufWriter::with_capacity(1 << 16, io::stdout().lock())
}

/// Whether `error` is stdout closing under us (`convstore log x | head`),
/// which is not a failure.
pub(crate) fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}

/// Notes on stderr (what was created, progress), silenced by `--quiet`.
pub(crate) struct Notes {
    pub quiet: bool,
}

impl Notes {
    pub(crate) fn say(&self, text: &str) {
        if !self.quiet {
            eprintln!("{text}");
        }
    }
}

/// Calls `f` with each line of `input` and its number (from 1), without the
/// line ending. A line longer than `limit` bytes is an error naming it, found
/// without reading the rest of it into memory; so is one that is not UTF-8.
pub(crate) fn for_each_line(
    mut input: impl std::io::BufRead,
    limit: u64,
    mut f: impl FnMut(usize, &str) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    use std::io::{BufRead as _, Read as _};
    let mut buf = Vec::new();
    for number in 1.. {
        buf.clear();
        let read = (&mut input)
            .take(limit.saturating_add(2))
            .read_until(b'\n', &mut buf)
            .with_context(|| format!("line {number}: cannot read"))?;
        if read == 0 {
            break;
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
        }
        if buf.len() as u64 > limit {
            anyhow::bail!(
                "line {number}: longer than the limit of {limit} bytes (--max-event-bytes)"
            );
        }
        let line =
            std::str::from_utf8(&buf).with_context(|| format!("line {number}: not UTF-8"))?;
        f(number, line)?;
    }
    Ok(())
}

/// Calls `f` with each event of the NDJSON `input` and its line number, in
/// order; blank lines are skipped. Lines are read a block (about 4 MiB) at a
/// time and the block's lines parsed side by side on rayon's threads; the
/// error is the first bad line's, whichever thread met it and however far
/// reading got.
pub(crate) fn for_each_event(
    input: impl std::io::BufRead,
    limit: u64,
    now: Timestamp,
    mut f: impl FnMut(usize, Event) -> Result<()>,
) -> Result<()> {
    let mut block = LineBlock::default();
    let read = for_each_line(input, limit, |number, line| {
        if !line.trim().is_empty() {
            block.push(number, line);
            if block.text.len() >= LineBlock::BYTES {
                block.drain(now, &mut f)?;
            }
        }
        Ok(())
    });
    // The lines read before a read error come first.
    block.drain(now, &mut f)?;
    read
}

/// Lines of NDJSON waiting to be parsed: their text end to end, and each
/// one's number and range in it.
#[derive(Default)]
struct LineBlock {
    text: String,
    lines: Vec<(usize, std::ops::Range<usize>)>,
}

impl LineBlock {
    const BYTES: usize = 4 << 20;

    fn push(&mut self, number: usize, line: &str) {
        let start = self.text.len();
        self.text.push_str(line);
        self.lines.push((number, start..self.text.len()));
    }

    /// Parses the lines in parallel and hands the events to `f` in order.
    /// The block is emptied first: after an error, from a line or from `f`,
    /// no line of it is handed to `f` again.
    fn drain(
        &mut self,
        now: Timestamp,
        f: &mut impl FnMut(usize, Event) -> Result<()>,
    ) -> Result<()> {
        use rayon::prelude::*;
        let mut text = std::mem::take(&mut self.text);
        let mut lines = std::mem::take(&mut self.lines);
        let parsed: Vec<_> = lines
            .par_iter()
            .map(|(_, range)| json::parse_event(&text[range.clone()], now))
            .collect();
        for ((number, _), event) in lines.iter().zip(parsed) {
            f(*number, event.with_context(|| format!("line {number}"))?)?;
        }
        // Keep the buffers for the next block.
        text.clear();
        lines.clear();
        self.text = text;
        self.lines = lines;
        Ok(())
    }
}

/// Whether stdin is a terminal (nothing piped in).
pub(crate) fn stdin_is_terminal() -> bool {
    io::stdin().is_terminal()
}

/// Writes rows as left-aligned columns; the last column is not padded.
pub(crate) fn table(out: &mut impl Write, rows: &[Vec<String>]) -> io::Result<()> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ", width = widths[c]);
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// Writes to a temporary file beside `path`, then renames it over `path`:
/// readers see the old file or the whole new one.
pub(crate) fn write_atomically(
    path: &Path,
    write: &mut dyn FnMut(&mut dyn Write) -> Result<()>,
) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let temp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
    {
        let mut out = BufWriter::new(temp.as_file());
        write(&mut out)?;
        out.flush()?;
    }
    temp.as_file().sync_all()?;
    temp.persist(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
