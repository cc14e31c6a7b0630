//! Leaves of the patched sled split by size (`vendor/sled/PATCHED.md`,
//! change 4). sled 0.34.7 split a leaf only past sixteen entries, so a
//! small, often-written key that fell beside long values in key order (a
//! conversation's staging state beside another's overlay ranges, its
//! staged records beside call directories) shared a leaf of hundreds of
//! KiB with them and rewrote all of it at every tenth write.
//!
//! The two tests take one lock: the first counts the bytes this process
//! writes.

use std::collections::BTreeMap;
use std::sync::Mutex;

mod support;

use support::Xorshift;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Bytes this process has passed to `write`-like calls (`wchar`).
fn bytes_written() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").expect("/proc/self/io");
    io.lines()
        .find_map(|line| line.strip_prefix("wchar: "))
        .and_then(|n| n.trim().parse().ok())
        .expect("wchar in /proc/self/io")
}

#[test]
fn a_small_key_beside_long_values_does_not_rewrite_them() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().expect("dir");
    let db = sled::Config::new()
        .path(dir.path().join("db"))
        .open()
        .expect("open");
    // Sixteen 12 KiB values: one leaf of 192 KiB before the patch.
    for i in 0u8..16 {
        db.insert([b'k', i], vec![i; 12 * 1024]).expect("insert");
    }
    db.flush().expect("flush");

    let before = bytes_written();
    let updates = 2_000u32;
    for i in 0..updates {
        db.insert(b"l", &i.to_be_bytes()).expect("insert");
        if i % 10 == 9 {
            db.flush().expect("flush");
        }
    }
    db.flush().expect("flush");
    let written = bytes_written() - before;

    // Unpatched, every tenth write rewrote the 192 KiB leaf: 21 MB in all.
    // Patched, the small key's leaf holds it alone or beside one value.
    assert!(
        written < 2 * 1024 * 1024,
        "{updates} writes of a 4-byte value wrote {written} bytes"
    );
    for i in 0u8..16 {
        assert_eq!(
            db.get([b'k', i]).expect("get").expect("value").len(),
            12 * 1024
        );
    }
    assert_eq!(
        db.get(b"l").expect("get").expect("value").as_ref(),
        &(updates - 1).to_be_bytes()
    );
}

fn value(rng: &mut Xorshift, tag: u64) -> Vec<u8> {
    // Mostly short values, some long ones: leaves split by count, by
    // size, and merge back as keys go.
    let len = match rng.below(10) {
        0 | 1 => 2_000 + rng.below(18_000) as usize,
        _ => rng.below(64) as usize,
    };
    let mut v = vec![(tag % 251) as u8; len];
    if len >= 8 {
        v[..8].copy_from_slice(&tag.to_be_bytes());
    }
    v
}

fn check(db: &sled::Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, when: &str) {
    let stored: Vec<(Vec<u8>, Vec<u8>)> = db
        .iter()
        .map(|kv| {
            let (k, v) = kv.expect("iter");
            (k.to_vec(), v.to_vec())
        })
        .collect();
    let expected: Vec<(Vec<u8>, Vec<u8>)> =
        model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(stored.len(), expected.len(), "{when}: number of keys");
    for (s, e) in stored.iter().zip(&expected) {
        assert_eq!(s.0, e.0, "{when}: keys in order");
        assert_eq!(s.1, e.1, "{when}: the value of {:?}", e.0);
    }
    let backwards: Vec<Vec<u8>> = db
        .iter()
        .rev()
        .map(|kv| kv.expect("iter").0.to_vec())
        .collect();
    let mut keys: Vec<Vec<u8>> = model.keys().cloned().collect();
    keys.reverse();
    assert_eq!(backwards, keys, "{when}: keys in reverse order");
}

#[test]
fn leaves_split_by_size_keep_every_key_through_writers_deletes_and_reopening() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("db");
    // The workload takes about a second and writes a few MB. A split
    // undone by a merge and done again, without end, writes without end:
    // stop there rather than fill the disk.
    let (done, finished) = std::sync::mpsc::channel();
    let workload = {
        let path = path.clone();
        std::thread::spawn(move || {
            mixed_writers(&path, 4);
            let _ = done.send(());
        })
    };
    let started = std::time::Instant::now();
    while finished
        .recv_timeout(std::time::Duration::from_millis(100))
        .is_err()
    {
        let bytes = dir_bytes(&path);
        assert!(
            bytes < 512 * 1024 * 1024,
            "the database grew to {bytes} bytes: splits and merges without end"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(180),
            "the writers made no progress for three minutes"
        );
    }
    workload.join().expect("workload");
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// `writers` threads insert, delete and batch mixed short and long values
/// under interleaved keys; every key is then checked against a model,
/// and again after reopening.
fn mixed_writers(path: &std::path::Path, writers: u64) {
    let mut model = BTreeMap::new();
    {
        let db = sled::Config::new().path(path).open().expect("open");
        let models: Vec<BTreeMap<Vec<u8>, Vec<u8>>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..writers)
                .map(|w| {
                    let db = &db;
                    s.spawn(move || {
                        let mut rng = Xorshift(0x9E37_79B9_7F4A_7C15 ^ (w + 1));
                        let mut mine = BTreeMap::new();
                        for op in 0..6_000u64 {
                            // Keys of all writers interleave: the second
                            // byte is the writer.
                            let key = |rng: &mut Xorshift| {
                                let n = rng.below(600) as u16;
                                let mut k = vec![b'x'];
                                k.extend_from_slice(&n.to_be_bytes());
                                k.push(w as u8);
                                k
                            };
                            match rng.below(10) {
                                0..=4 => {
                                    let k = key(&mut rng);
                                    let v = value(&mut rng, op);
                                    db.insert(&k, v.clone()).expect("insert");
                                    mine.insert(k, v);
                                }
                                5..=7 => {
                                    let k = key(&mut rng);
                                    db.remove(&k).expect("remove");
                                    mine.remove(&k);
                                }
                                8 => {
                                    // A run of neighbours removed at once,
                                    // as a settle deletes staged copies.
                                    let mut batch = sled::Batch::default();
                                    let first = key(&mut rng);
                                    let start = u16::from_be_bytes([first[1], first[2]]);
                                    for n in start..start.saturating_add(40).min(600) {
                                        let mut k = vec![b'x'];
                                        k.extend_from_slice(&n.to_be_bytes());
                                        k.push(w as u8);
                                        batch.remove(k.clone());
                                        mine.remove(&k);
                                    }
                                    db.apply_batch(batch).expect("apply_batch");
                                }
                                _ => {
                                    let mut batch = sled::Batch::default();
                                    for _ in 0..8 {
                                        let k = key(&mut rng);
                                        let v = value(&mut rng, op);
                                        batch.insert(k.clone(), v.clone());
                                        mine.insert(k, v);
                                    }
                                    db.apply_batch(batch).expect("apply_batch");
                                }
                            }
                            if op % 500 == 499 {
                                db.flush().expect("flush");
                            }
                        }
                        mine
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("writer"))
                .collect()
        });
        for m in models {
            model.extend(m);
        }
        check(&db, &model, "after the writers");
        db.flush().expect("flush");
    }
    let db = sled::Config::new().path(path).open().expect("reopen");
    check(&db, &model, "after reopening");
}
