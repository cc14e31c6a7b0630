//! A reproduction of a sled 0.34.7 deadlock (ARCHITECTURE.md, "sled").
//! It hangs on sled 0.34.7 from crates.io in most runs; convstore builds
//! sled with the fix in `vendor/sled` (PATCHED.md), and this test keeps it
//! fixed.
//!
//! The workload is what a chunked log does if it rewrites its last chunk on
//! every append: read the chunk, write it back one record longer, rewrite a
//! small metadata value, without flushing. The rewrites free log segments;
//! sled truncates its file when the last segment is free, and a later
//! `apply_batch` waits (holding the segment accountant's lock) for that
//! truncation, which is queued on sled's I/O thread pool behind write jobs
//! that are themselves waiting for that lock. The pool only grows when
//! more than seven jobs are queued, so nothing moves again.
//!
//! Deleting keys between flushes frees segments the same way: convstore
//! deletes the staged copies of settled records (`staging.rs`), and a
//! workload like it (an event at a time, a settle's 768 staged keys
//! deleted every 256 events, no flush) hung the unpatched sled at its
//! first settle.

use std::sync::mpsc;
use std::time::Duration;

fn rewrite_tail_workload(dir: &std::path::Path, appends: u64) {
    let db = sled::Config::new().path(dir).open().expect("open");
    let mut tail: Vec<u8> = Vec::new();
    let mut tail_key = 0u64;
    for i in 0..appends {
        let _ = db.get(b"meta").expect("get");
        let _ = db.get(tail_key.to_be_bytes()).expect("get");
        if tail.len() >= 32 * 1024 {
            tail_key = i;
            tail.clear();
        }
        tail.extend(std::iter::repeat_n(
            (i % 251) as u8,
            100 + (i as usize * 31) % 400,
        ));
        let mut batch = sled::Batch::default();
        batch.insert(&tail_key.to_be_bytes(), tail.clone());
        batch.insert(&b"meta"[..], vec![1u8; 250]);
        db.apply_batch(batch).expect("apply_batch");
    }
    db.flush().expect("flush");
}

#[test]
fn sled_rewriting_a_growing_value_without_flush_does_not_deadlock() {
    for run in 0..5 {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("db");
        let (done, finished) = mpsc::channel();
        std::thread::spawn(move || {
            rewrite_tail_workload(&path, 10_000);
            let _ = done.send(());
        });
        // The workload takes about a second; a minute is a hang.
        assert!(
            finished.recv_timeout(Duration::from_secs(60)).is_ok(),
            "run {run}: sled made no progress for a minute (deadlock)"
        );
    }
}
