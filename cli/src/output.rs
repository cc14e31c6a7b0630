//! Writing to stdout and stderr.

use std::fmt::Write as _;
use std::io::{self, BufWriter, IsTerminal, StdoutLock, Write};

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
