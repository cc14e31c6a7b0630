//! Bulk appends (`Store::begin_bulk`): all or nothing however large, the
//! same log as one append, in every store format, and what an interrupted
//! one leaves is reclaimed when the database is opened.

#![allow(clippy::unwrap_used)]

use convstore_store::{Seq, Turn};
use std::path::{Path, PathBuf};

use convstore_store::event::{Compaction, ReasoningPolicy};
use convstore_store::{
    testing, AppendOptions, BulkTarget, ConversationId, Event, EventKind, Json, Outranking, Store,
    StoreError, Timestamp,
};

/// Event `i`: every kind, long texts (blobs) among them, some repeated.
fn event(i: u64) -> Event {
    let timestamp = Timestamp::from_micros(1_720_000_000_000_000 + i as i64).unwrap();
    let text = if i % 7 == 3 {
        format!("{} {}", "a long result ".repeat(120), i % 3)
    } else {
        format!("event {i} {}", "z".repeat((i % 200) as usize))
    };
    let kind = match i % 9 {
        0 => EventKind::TurnStart,
        1 => EventKind::User { text },
        2 => EventKind::ToolCall {
            id: format!("c{i}"),
            name: format!("tool{}", i % 3),
            arguments: Json::from_value(&serde_json::json!({ "n": i })),
        },
        3 => EventKind::ToolResult {
            id: format!("c{}", i - 1),
            content: text,
            is_error: false,
        },
        4 => EventKind::Reasoning { text },
        5 if i % 45 == 5 => EventKind::Compaction(Compaction {
            from_turn: 0,
            to_turn: i / 9,
            summary: None,
            reasoning: Some(ReasoningPolicy::Strip),
            tool_calls: None,
            revert: None,
            info: None,
        }),
        _ => EventKind::Assistant { text },
    };
    Event::new(timestamp, kind)
}

fn events(range: std::ops::Range<u64>) -> Vec<Event> {
    range.map(event).collect()
}

/// Compactions `range` over turns far apart (`i * gap ..= i * gap + 2`):
/// a range key each.
fn spread(range: std::ops::Range<u64>, gap: u64, reasoning: ReasoningPolicy) -> Vec<Event> {
    range
        .map(|i| {
            let timestamp = Timestamp::from_micros(1_720_000_000_000_000 + i as i64).unwrap();
            let compaction = Compaction {
                from_turn: i * gap,
                to_turn: i * gap + 2,
                summary: None,
                reasoning: Some(reasoning),
                tool_calls: None,
                revert: None,
                info: None,
            };
            Event::new(timestamp, EventKind::Compaction(compaction))
        })
        .collect()
}

fn log(store: &Store, id: &ConversationId) -> Vec<Event> {
    store
        .scan(id, 0..u64::MAX)
        .unwrap()
        .map(|r| r.unwrap().event)
        .collect()
}

fn files(db: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(db.join("segments"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.to_string_lossy().ends_with(suffix));
    files.sort();
    files
}

/// A database of format `format` in `dir`.
fn database(dir: &tempfile::TempDir, format: u32) -> PathBuf {
    let db = dir.path().join("db");
    if format != convstore_store::FORMAT_VERSION {
        testing::set_format_version(&db, format).unwrap();
    }
    db
}

const NO_SYNC: AppendOptions = AppendOptions::new().unsynced(true);

/// Pushed in pieces, invisible until the commit, then the same log (and
/// head) as one append of the same events, in every format; on a
/// conversation with staged records too.
#[test]
fn a_bulk_append_is_one_append_made_visible_at_its_commit() {
    for format in [1, 2, 3, 4, 5, 6] {
        for memory in [0, 64 * 1024, u64::MAX] {
            let dir = tempfile::tempdir().unwrap();
            let db = database(&dir, format);
            let store = Store::open(&db).unwrap();
            store.set_bulk_memory_bytes(memory);
            let all = events(0..16_000);

            // A new conversation.
            let mut bulk = store
                .begin_bulk(BulkTarget::New { name: Some("new") }, &NO_SYNC)
                .unwrap();
            for piece in all[..3_000].chunks(777) {
                bulk.push(piece).unwrap();
                assert_eq!(store.find("new").unwrap(), None);
            }
            let (id, appended) = bulk.commit().unwrap();
            assert_eq!((appended.first_seq, appended.count), (0, 3_000));

            // Small appends (staged in format 3), then a bulk append after
            // them.
            for e in &all[3_000..3_010] {
                store
                    .append(&id, std::slice::from_ref(e), &AppendOptions::default())
                    .unwrap();
            }
            let before = store.info(&id).unwrap();
            let mut bulk = store
                .begin_bulk(BulkTarget::Existing(id), &AppendOptions::default())
                .unwrap();
            // Small pushes, then large ones (each part of a push encoded
            // while the part before is written, once the spill began).
            let (small, large) = all[3_010..].split_at(1_990);
            for piece in small.chunks(500).chain(large.chunks(4_567)) {
                bulk.push(piece).unwrap();
            }
            assert_eq!(store.info(&id).unwrap().head, before.head);
            let (_, appended) = bulk.commit().unwrap();
            assert_eq!((appended.first_seq, appended.count), (3_010, 12_990));

            let (plain, reference) = store
                .create_and_append(None, &all, &AppendOptions::default())
                .unwrap();
            assert_eq!(appended.head, reference.head, "format {format}");
            assert_eq!(log(&store, &id), all);
            assert!(store.verify_all().unwrap().is_ok());
            let turns = |id| {
                store
                    .turn_records(id, Turn(100)..=Turn(120), Seq(u64::MAX))
                    .unwrap()
            };
            assert_eq!(turns(&id), turns(&plain));
            assert_eq!(
                store.overlays(&id, u64::MAX).unwrap().len(),
                store.overlays(&plain, u64::MAX).unwrap().len()
            );
            drop(store);
            let store = Store::open(&db).unwrap();
            assert_eq!(log(&store, &id), all);
            assert!(files(&db, ".bulk").is_empty());
            if format == 1 {
                assert!(files(&db, "").is_empty());
            }
            // Later appends go on after it.
            store
                .append(&id, &events(16_000..16_300), &AppendOptions::default())
                .unwrap();
            assert!(store.verify_all().unwrap().is_ok());
        }
    }
}

/// Format 4 keeps a chunk's compactions in one directory beside it,
/// whichever way they arrive (bulk, one large append, small staged appends
/// then settled); formats 1 to 3 keep a key per compaction; format 5 also
/// files them by turn range, format 6 without their records, format 8 with
/// their timestamps. All read back the same overlays.
#[test]
fn compactions_are_kept_in_a_directory_per_chunk_from_format_4_and_by_range_from_5() {
    // Compactions timestamped out of log order, so that rank and seq part,
    // over the second half of the turns before them.
    let mut all = events(0..5_000);
    for (i, e) in all.iter_mut().enumerate() {
        if let EventKind::Compaction(c) = &mut e.kind {
            c.from_turn = c.to_turn / 2;
            let scrambled = (i as i64 * 7_919) % 5_000;
            e.timestamp = Timestamp::from_micros(1_720_000_000_000_000 + scrambled).unwrap();
        }
    }
    let compactions = all
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Compaction(_)))
        .count();
    assert!(compactions > 100);
    let mut read = Vec::new();
    for format in [3, 4, 5, 6, 8] {
        let dir = tempfile::tempdir().unwrap();
        let db = database(&dir, format);
        let store = Store::open(&db).unwrap();
        store.set_bulk_memory_bytes(64 * 1024);
        let mut bulk = store
            .begin_bulk(BulkTarget::New { name: Some("bulk") }, &NO_SYNC)
            .unwrap();
        for piece in all[..2_000].chunks(300) {
            bulk.push(piece).unwrap();
        }
        let (id, _) = bulk.commit().unwrap();
        store
            .append(&id, &all[2_000..4_000], &AppendOptions::default())
            .unwrap();
        for e in &all[4_000..] {
            store
                .append(&id, std::slice::from_ref(e), &AppendOptions::default())
                .unwrap();
        }
        let (directories, single) = testing::overlay_keys(&store, &id).unwrap();
        if format >= 4 {
            assert_eq!(single, 0);
            assert!(
                directories > 0 && directories * 3 < compactions,
                "{directories}"
            );
        } else {
            assert_eq!((directories, single), (0, compactions));
        }
        let overlays = store.overlays(&id, u64::MAX).unwrap();
        assert_eq!(overlays.len(), compactions);
        // As of a record in the middle: the compactions before it only.
        let half = store.overlays(&id, 2_500).unwrap();
        assert_eq!(
            half.len(),
            all[..2_500]
                .iter()
                .filter(|e| matches!(e.kind, EventKind::Compaction(_)))
                .count()
        );
        assert!(store.verify_all().unwrap().is_ok());
        drop(store);
        let store = Store::open(&db).unwrap();
        assert_eq!(store.overlays(&id, u64::MAX).unwrap(), overlays);
        read.push(format!("{overlays:?}"));
        if format < 5 {
            continue;
        }
        // Reopened, so that no overlay is cached: format 6 reads each
        // record from its chunk's overlay directory (settled or staged).
        drop(store);
        let store = Store::open(&db).unwrap();
        // Format 5 files them by turn range too, a key per level and
        // bucket of each append: the compactions meeting some turns are
        // exactly those of the whole list that meet them.
        let ranges = testing::overlay_range_keys(&store, &id).unwrap();
        assert!(ranges > 0 && ranges < compactions, "{ranges}");
        let len = store.info(&id).unwrap().len;
        for turns in [vec![(0, 0)], vec![(3, 9), (40, 41)], vec![(100, u64::MAX)]] {
            let meets = |o: &&convstore_store::StoredOverlay| match &o.event.kind {
                EventKind::Compaction(c) => turns
                    .iter()
                    .any(|&(a, b)| c.from_turn <= b && a <= c.to_turn),
                _ => false,
            };
            let want: Vec<_> = overlays.iter().filter(meets).cloned().collect();
            assert_eq!(store.overlays_meeting(&id, len, &turns, &[]).unwrap(), want);
        }
        // Those that outrank one, over some turns: from format 8 exactly
        // those; before, every one meeting the turns.
        let rank = |o: &convstore_store::StoredOverlay| (o.event.timestamp, o.seq);
        let middle = rank(&overlays[overlays.len() / 2]);
        let outranking = [Outranking {
            from: 50,
            to: 300,
            rank: middle,
        }];
        let want: Vec<_> = overlays
            .iter()
            .filter(|o| match &o.event.kind {
                EventKind::Compaction(c) => {
                    let meets = c.from_turn <= 300 && 50 <= c.to_turn;
                    c.from_turn <= 1 || (meets && (format < 8 || rank(o) > middle))
                }
                _ => false,
            })
            .cloned()
            .collect();
        let got = store
            .overlays_meeting(&id, len, &[(0, 1)], &outranking)
            .unwrap();
        assert_eq!(got, want, "format {format}");
        if format >= 8 {
            let all_meeting = overlays.iter().filter(|o| match &o.event.kind {
                EventKind::Compaction(c) => c.from_turn <= 300 && 50 <= c.to_turn,
                _ => false,
            });
            assert!(got.len() < all_meeting.count(), "{}", got.len());
        }
        // A lost range key is found by verify.
        testing::drop_an_overlay_range_key(&store, &id).unwrap();
        let report = store.verify_all().unwrap();
        assert!(
            format!("{report:?}").contains("overlay range index does not match"),
            "{report:?}"
        );
    }
    assert!(read.windows(2).all(|w| w[0] == w[1]));
}

/// A bulk append to an existing conversation writes its overlay range keys
/// before the batch making its records visible (format 6; format 5 in that
/// batch, since a format-5 build would not take them back): cut short
/// there, they are invisible, verify passes, and the next open takes them
/// back, so that other compactions appended at the same seqs are the ones
/// found.
#[test]
fn range_keys_of_a_commit_cut_short_are_taken_back() {
    for format in [5, 6] {
        let dir = tempfile::tempdir().unwrap();
        let db = database(&dir, format);
        let id = {
            let store = Store::open(&db).unwrap();
            store.set_bulk_memory_bytes(0);
            let (id, _) = store
                .create_and_append(Some("c"), &events(0..2_000), &AppendOptions::default())
                .unwrap();
            let kept = testing::overlay_range_keys(&store, &id).unwrap();
            let mut bulk = store
                .begin_bulk(BulkTarget::Existing(id), &NO_SYNC)
                .unwrap();
            bulk.push(&spread(0..5_000, 1_000, ReasoningPolicy::Strip))
                .unwrap();
            testing::interrupt_bulk_commits(Some(true));
            let cut = bulk.commit();
            testing::interrupt_bulk_commits(None);
            assert!(cut.is_err());
            let written = testing::overlay_range_keys(&store, &id).unwrap();
            if format == 5 {
                // A format-5 build would not take them back: they wait for
                // the last batch.
                assert_eq!(written, kept);
            } else {
                assert!(written >= kept + 5_000, "{written}");
            }
            assert_eq!(store.info(&id).unwrap().len, 2_000);
            assert!(store.verify_all().unwrap().is_ok(), "format {format}");
            id
        };
        let store = Store::open(&db).unwrap();
        let before = testing::overlay_range_keys(&store, &id).unwrap();
        assert!(before < 100, "format {format}: {before}");
        assert!(store.verify_all().unwrap().is_ok(), "format {format}");
        // The same seqs, other compactions: those are found.
        let mut bulk = store
            .begin_bulk(BulkTarget::Existing(id), &NO_SYNC)
            .unwrap();
        let kept = spread(0..5_000, 1_000, ReasoningPolicy::Keep);
        bulk.push(&kept[..2_500]).unwrap();
        bulk.push(&kept[2_500..]).unwrap();
        bulk.commit().unwrap();
        drop(store);
        let store = Store::open(&db).unwrap();
        let found = store
            .overlays_meeting(&id, 7_000, &[(3_000_000, 3_000_000)], &[])
            .unwrap();
        assert_eq!(found.len(), 1, "format {format}");
        assert_eq!(found[0].seq, 5_000);
        assert_eq!(found[0].event, kept[3_000]);
        assert!(store.verify_all().unwrap().is_ok(), "format {format}");
    }
}

/// A bulk append dropped, or failing its commit, stores nothing and
/// deletes what it wrote.
#[test]
fn a_bulk_append_that_is_not_committed_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = database(&dir, 3);
    let store = Store::open(&db).unwrap();
    store.set_bulk_memory_bytes(0);
    let (id, _) = store
        .create_and_append(Some("c"), &events(0..10), &AppendOptions::default())
        .unwrap();
    let head = store.info(&id).unwrap().head;

    let mut bulk = store
        .begin_bulk(
            BulkTarget::New {
                name: Some("dropped"),
            },
            &NO_SYNC,
        )
        .unwrap();
    bulk.push(&events(0..20_000)).unwrap();
    assert_eq!(files(&db, ".bulk").len(), 1);
    drop(bulk);
    assert!(files(&db, ".bulk").is_empty());
    assert_eq!(store.find("dropped").unwrap(), None);

    // The conversation changed meanwhile: a head mismatch.
    let mut bulk = store
        .begin_bulk(BulkTarget::Existing(id), &AppendOptions::default())
        .unwrap();
    bulk.push(&events(10..20_000)).unwrap();
    store
        .append(&id, &events(10..11), &AppendOptions::default())
        .unwrap();
    let error = bulk.commit().unwrap_err();
    assert!(
        matches!(error, StoreError::HeadMismatch { expected, .. } if expected == head),
        "{error}"
    );
    assert_eq!(store.info(&id).unwrap().len, 11);
    assert!(files(&db, ".bulk").is_empty());

    // The name was taken meanwhile.
    let mut bulk = store
        .begin_bulk(
            BulkTarget::New {
                name: Some("taken"),
            },
            &NO_SYNC,
        )
        .unwrap();
    bulk.push(&events(0..20_000)).unwrap();
    store.create_conversation(Some("taken")).unwrap();
    assert!(matches!(
        bulk.commit().unwrap_err(),
        StoreError::NameTaken { .. }
    ));
    assert!(files(&db, ".bulk").is_empty());

    // Checked at the start: expect_head, the name, the event size.
    let wrong = AppendOptions::new().expecting(Some(convstore_store::Address::ROOT));
    assert!(matches!(
        store.begin_bulk(BulkTarget::Existing(id), &wrong),
        Err(StoreError::HeadMismatch { .. })
    ));
    assert!(matches!(
        store.begin_bulk(BulkTarget::New { name: Some("c") }, &NO_SYNC),
        Err(StoreError::NameTaken { .. })
    ));
    store.set_max_event_bytes(1_000);
    let mut bulk = store
        .begin_bulk(BulkTarget::New { name: None }, &NO_SYNC)
        .unwrap();
    bulk.push(&events(0..3)).unwrap();
    let error = bulk.push(&events(3..4)).unwrap_err();
    assert!(
        matches!(error, StoreError::EventTooLarge { index: 3, .. }),
        "{error}"
    );
    // In a large push after the spill began, the event is named by its
    // index among all the bulk append's, whichever part it is in.
    store.set_max_event_bytes(u64::MAX);
    store.set_bulk_memory_bytes(0);
    let mut bulk = store
        .begin_bulk(BulkTarget::New { name: None }, &NO_SYNC)
        .unwrap();
    bulk.push(&events(0..100)).unwrap();
    let mut large: Vec<Event> = (0..9_000).map(|i| event(9 * i + 1)).collect();
    large[7_000] = Event::new(
        large[7_000].timestamp,
        EventKind::User {
            text: "x".repeat(4_000),
        },
    );
    store.set_max_event_bytes(2_000);
    let error = bulk.push(&large).unwrap_err();
    assert!(
        matches!(error, StoreError::EventTooLarge { index: 7_100, .. }),
        "{error}"
    );
    drop(bulk);
    store.set_max_event_bytes(u64::MAX);
    let empty = store
        .begin_bulk(BulkTarget::New { name: None }, &NO_SYNC)
        .unwrap();
    assert!(matches!(empty.commit(), Err(StoreError::EmptyAppend)));
    assert_eq!(store.conversations().unwrap().len(), 2);
    assert!(store.verify_all().unwrap().is_ok());
}

/// A process that stops inside a bulk append (here: the bulk append is
/// leaked, as a kill leaves it) leaves a `.bulk` file; opening the
/// database deletes it.
#[test]
fn an_interrupted_bulk_append_is_reclaimed_when_the_database_opens() {
    let dir = tempfile::tempdir().unwrap();
    let db = database(&dir, 3);
    {
        let store = Store::open(&db).unwrap();
        store.set_bulk_memory_bytes(0);
        store
            .create_and_append(Some("kept"), &events(0..4_000), &AppendOptions::default())
            .unwrap();
        let mut bulk = store
            .begin_bulk(BulkTarget::New { name: Some("lost") }, &NO_SYNC)
            .unwrap();
        bulk.push(&events(0..20_000)).unwrap();
        std::mem::forget(bulk);
    }
    let left = files(&db, ".bulk");
    assert_eq!(left.len(), 1);
    assert!(std::fs::metadata(&left[0]).unwrap().len() > 1_000_000);
    let store = Store::open(&db).unwrap();
    assert_eq!(store.reclaimed_bulk_files(), left.as_slice());
    assert!(files(&db, ".bulk").is_empty());
    assert_eq!(store.find("lost").unwrap(), None);
    let (id, _) = store
        .create_and_append(Some("lost"), &events(0..20_000), &AppendOptions::default())
        .unwrap();
    assert_eq!(log(&store, &id), events(0..20_000));
    assert!(store.verify_all().unwrap().is_ok());
}

/// A commit cut short after its first groups (a process killed, a write
/// that failed) leaves no garbage for good: the new conversation's keys,
/// the blob references into its files and the files are taken back, at
/// once or when the database next opens, and the append can be run again.
#[test]
fn a_commit_cut_short_is_taken_back() {
    let unique = |range: std::ops::Range<u64>| -> Vec<Event> {
        range
            .map(|i| {
                let timestamp = Timestamp::from_micros(1_720_000_000_000_000 + i as i64).unwrap();
                let text = format!("{i} {}", "a long text of its own ".repeat(80));
                Event::new(timestamp, EventKind::User { text })
            })
            .collect()
    };
    for as_a_kill in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let db = database(&dir, convstore_store::FORMAT_VERSION);
        let (before, blobs_before) = {
            let store = Store::open(&db).unwrap();
            store.set_bulk_memory_bytes(0);
            store
                .create_and_append(Some("kept"), &events(0..4_000), &AppendOptions::default())
                .unwrap();
            let blobs = store.verify_all().unwrap().unwrap().blobs;
            let before = files(&db, "");
            let mut bulk = store
                .begin_bulk(BulkTarget::New { name: Some("lost") }, &NO_SYNC)
                .unwrap();
            bulk.push(&unique(0..5_000)).unwrap();
            testing::interrupt_bulk_commits(Some(as_a_kill));
            let cut = bulk.commit();
            testing::interrupt_bulk_commits(None);
            assert!(cut.is_err());
            (before, blobs)
        };
        let store = Store::open(&db).unwrap();
        assert_eq!(store.find("lost").unwrap(), None, "kill: {as_a_kill}");
        assert_eq!(files(&db, ""), before, "kill: {as_a_kill}");
        let report = store.verify_all().unwrap().unwrap();
        assert_eq!(report.blobs, blobs_before, "kill: {as_a_kill}");
        assert_eq!(store.conversations().unwrap().len(), 1);
        let (id, _) = store
            .create_and_append(Some("lost"), &unique(0..5_000), &AppendOptions::default())
            .unwrap();
        assert_eq!(log(&store, &id), unique(0..5_000));
        assert!(store.verify_all().unwrap().is_ok());
    }
}

/// A commit with `no_sync` is read at once (its files keep the `.bulk`
/// name until the next sync) and survives reopening.
#[test]
fn a_bulk_append_committed_without_sync_is_read_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let db = database(&dir, 3);
    let all = events(0..6_000);
    {
        let store = Store::open(&db).unwrap();
        store.set_bulk_memory_bytes(0);
        let mut bulk = store
            .begin_bulk(BulkTarget::New { name: Some("n") }, &NO_SYNC)
            .unwrap();
        bulk.push(&all).unwrap();
        let (id, _) = bulk.commit().unwrap();
        assert_eq!(files(&db, ".bulk").len(), 1);
        assert_eq!(log(&store, &id), all);
        store.flush().unwrap();
        assert!(files(&db, ".bulk").is_empty());
        // A second one, left unsynced and unrenamed until the store is
        // dropped.
        let mut bulk = store
            .begin_bulk(BulkTarget::Existing(id), &NO_SYNC)
            .unwrap();
        bulk.push(&events(6_000..9_000)).unwrap();
        bulk.commit().unwrap();
        assert_eq!(files(&db, ".bulk").len(), 1);
    }
    let store = Store::open(&db).unwrap();
    assert!(store.reclaimed_bulk_files().is_empty());
    assert!(files(&db, ".bulk").is_empty());
    let id = store.resolve("n").unwrap();
    assert_eq!(log(&store, &id), events(0..9_000));
    assert!(store.verify_all().unwrap().is_ok());
}

/// A new blob a bulk append meets twice, or that is already stored, is
/// stored once.
#[test]
fn a_bulk_append_stores_each_blob_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = database(&dir, 3);
    let store = Store::open(&db).unwrap();
    store.set_bulk_memory_bytes(0);
    let long = |n: u64| {
        Event::new(
            Timestamp::from_micros(1_720_000_000_000_000).unwrap(),
            EventKind::User {
                text: format!("{} {n}", "long ".repeat(400)),
            },
        )
    };
    store
        .create_and_append(Some("first"), &[long(0)], &AppendOptions::default())
        .unwrap();
    let repeated: Vec<Event> = (0..3_000).map(|i| long(i % 3)).collect();
    let mut bulk = store
        .begin_bulk(
            BulkTarget::New {
                name: Some("second"),
            },
            &NO_SYNC,
        )
        .unwrap();
    for piece in repeated.chunks(100) {
        bulk.push(piece).unwrap();
    }
    let (id, _) = bulk.commit().unwrap();
    assert_eq!(log(&store, &id), repeated);
    let report = store.verify_all().unwrap().unwrap();
    assert_eq!(report.blobs, 3);
}

/// A bulk append to a fork continues the fork's own records, after the
/// records it shares with its parent.
#[test]
fn a_bulk_append_to_a_fork_continues_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = database(&dir, 3);
    let store = Store::open(&db).unwrap();
    store.set_bulk_memory_bytes(0);
    let (parent, _) = store
        .create_and_append(Some("parent"), &events(0..3_000), &AppendOptions::default())
        .unwrap();
    let (fork, _) = store
        .fork(&parent, 1_000, Some("fork"), &events(1_000..1_002))
        .unwrap();
    let mut bulk = store
        .begin_bulk(BulkTarget::Existing(fork), &AppendOptions::default())
        .unwrap();
    bulk.push(&events(1_002..9_000)).unwrap();
    let (_, appended) = bulk.commit().unwrap();
    assert_eq!((appended.first_seq, appended.count), (1_002, 7_998));
    assert_eq!(log(&store, &fork), events(0..9_000));
    assert_eq!(log(&store, &parent), events(0..3_000));
    let (_, reference) = store
        .create_and_append(None, &events(0..9_000), &AppendOptions::default())
        .unwrap();
    assert_eq!(appended.head, reference.head);
    assert!(store.verify_all().unwrap().is_ok());
}

/// `verify` in a process that appends meanwhile (a server) checks each
/// conversation as it stands: appends wait for its check, so a log that
/// grows while it is read is never reported as corrupt.
#[test]
fn verify_while_appends_run_in_the_same_process_passes() {
    let dir = tempfile::tempdir().unwrap();
    let db = database(&dir, convstore_store::FORMAT_VERSION);
    let store = Store::open(&db).unwrap();
    store.set_bulk_memory_bytes(64 * 1024);
    let (id, _) = store
        .create_and_append(Some("c"), &events(0..2_000), &AppendOptions::default())
        .unwrap();
    let mut verified = 0;
    std::thread::scope(|s| {
        let appender = s.spawn(|| {
            for i in 0..60u64 {
                let more = events(2_000 + i * 300..2_000 + (i + 1) * 300);
                if i % 2 == 0 {
                    store.append(&id, &more, &NO_SYNC).unwrap();
                } else {
                    let mut bulk = store
                        .begin_bulk(BulkTarget::Existing(id), &NO_SYNC)
                        .unwrap();
                    bulk.push(&more).unwrap();
                    bulk.commit().unwrap();
                }
            }
        });
        while !appender.is_finished() {
            let report = store.verify_all().unwrap();
            assert!(report.is_ok(), "{report:?}");
            verified += 1;
        }
    });
    assert!(verified > 1, "{verified}");
    assert!(store.verify_all().unwrap().is_ok());
}

/// `Store::append` of more compactions than a bulk append keeps in memory
/// goes through one (their range keys in groups, not one batch), as one
/// append still: other appends of the process to the conversation wait
/// for it rather than make it fail.
#[test]
fn an_append_of_many_compactions_is_one_append_beside_others() {
    let dir = tempfile::tempdir().unwrap();
    let db = database(&dir, convstore_store::FORMAT_VERSION);
    let store = Store::open(&db).unwrap();
    let (id, _) = store
        .create_and_append(Some("c"), &events(0..1_000), &AppendOptions::default())
        .unwrap();
    let many = spread(0..6_000, 977, ReasoningPolicy::Strip);
    let files_before = files(&db, "").len();
    std::thread::scope(|s| {
        let small = s.spawn(|| {
            for i in 0..40 {
                store
                    .append(&id, &events(10_000 + i..10_001 + i), &NO_SYNC)
                    .unwrap();
            }
        });
        let appended = store.append(&id, &many, &AppendOptions::default()).unwrap();
        assert_eq!(appended.count, 6_000);
        small.join().unwrap();
    });
    assert!(
        files(&db, "").len() > files_before,
        "a bulk append's segment file"
    );
    let log = log(&store, &id);
    assert_eq!(log.len(), 1_000 + 6_000 + 40);
    let at = log.iter().position(|e| *e == many[0]).unwrap();
    assert_eq!(&log[at..at + 6_000], many.as_slice());
    let found = store
        .overlays_meeting(&id, 7_040, &[(977 * 3_000, 977 * 3_000)], &[])
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].event, many[3_000]);
    assert!(store.verify_all().unwrap().is_ok());
}
