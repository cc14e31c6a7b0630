//! Running under an address space limit (`ulimit -v`).
//!
//! glibc reserves address space for a malloc arena per thread that
//! allocates (64 MiB each, up to eight per core), so under a limit a
//! process with several threads fails to allocate at limits far above
//! what it uses: convstore aborted with `memory allocation failed` under
//! limits between 200 and 600 MiB while needing 10 MiB. Under a limit,
//! convstore runs itself again with `MALLOC_ARENA_MAX=1` (read by glibc at
//! startup; one arena, shared). And sled allocates its page table at open
//! without checking the allocation (a crash under a limit too low for it),
//! and when its I/O thread cannot be started (no address space for its
//! stack) its open waits for it for ever: below [`FLOOR`] convstore
//! refuses to run, with an error line.

use std::process::ExitCode;

/// The least address space convstore runs in.
pub(crate) const FLOOR: u64 = 128 << 20;

/// What to do before anything else, under an address space limit: run
/// again with one malloc arena (returns only if that fails), or refuse a
/// limit below [`FLOOR`]. `None`: go on.
pub(crate) fn check() -> Option<ExitCode> {
    let limit = convstore_store::address_space_limit()?;
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        use std::os::unix::process::CommandExt;
        if let Ok(exe) = std::env::current_exe() {
            let error = std::process::Command::new(exe)
                .args(std::env::args_os().skip(1))
                .env("MALLOC_ARENA_MAX", "1")
                .exec();
            // Only returns if it failed: go on in this process.
            let _ = error;
        }
    }
    if limit < FLOOR {
        crate::output::line_to_stderr(&format!(
            "error: the address space limit (ulimit -v) is {} MiB; convstore needs at least {} MiB \
             (sled allocates its page table when it opens a database)",
            limit >> 20,
            FLOOR >> 20
        ));
        return Some(ExitCode::FAILURE);
    }
    None
}
