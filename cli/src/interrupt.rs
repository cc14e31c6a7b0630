//! Interrupts: Ctrl-C (SIGINT), SIGTERM and SIGHUP end the command as they
//! would anyway, with exit code 128 + the signal's number, but first remove
//! the temporary files of outputs not yet in place, so that an
//! interrupted `export --output big.json` leaves nothing behind. What the
//! database holds is unaffected: an interrupt is a crash to it, and every
//! write is whole or absent (see ARCHITECTURE.md, "Durability").

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

/// Temporary files to remove on an interrupt.
static TEMPORARY: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// What to say on an interrupt, if anything: a request that a server may
/// carry out all the same.
static NOTE: Mutex<Option<String>> = Mutex::new(None);

/// Starts watching for interrupts (once, at the start of a command).
pub(crate) fn install() {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
        return;
    };
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            for path in TEMPORARY
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .drain(..)
            {
                let _ = std::fs::remove_file(path);
            }
            convstore_engine::summarizers::end_running();
            convstore_engine::store::remove_unfinished_copies();
            if let Some(note) = NOTE.lock().unwrap_or_else(PoisonError::into_inner).take() {
                eprintln!("{note}");
            }
            std::process::exit(128 + signal);
        }
    });
}

/// Removes `path` if the command is interrupted.
pub(crate) fn remove_on_interrupt(path: &Path) {
    TEMPORARY
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(path.to_path_buf());
}

/// `path` is no longer temporary (renamed into place, or removed).
pub(crate) fn forget(path: &Path) {
    TEMPORARY
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .retain(|p| p != path);
}

/// Says `note` if the command is interrupted from now on (`None`: nothing).
pub(crate) fn note_on_interrupt(note: Option<String>) {
    *NOTE.lock().unwrap_or_else(PoisonError::into_inner) = note;
}
