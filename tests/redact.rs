//! Redaction: the text goes from the record, its staged copy, its views
//! and its blob; every address stays, so the chain verifies; a fork
//! sharing the record reads it redacted; a redaction event is appended.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use convstore_engine::views;
use convstore_store::{
    AppendOptions, ConversationId, Event, EventKind, RedactField, Store, StoreError, Timestamp,
};
use support::backends::Place;

fn user(text: &str) -> Event {
    Event::new(
        Timestamp::now(),
        EventKind::User {
            text: text.to_owned(),
        },
    )
}

fn texts(store: &Store, id: &ConversationId) -> Vec<String> {
    let len = store.info(id).unwrap().len;
    (0..len)
        .map(|seq| match store.record(id, seq).unwrap().event.kind {
            EventKind::User { text } => text,
            EventKind::Config { delta } => delta.as_str().to_owned(),
            other => format!("{other:?}"),
        })
        .collect()
}

#[test]
fn a_redacted_text_is_gone_and_the_chain_still_verifies() {
    for place in Place::each() {
        let store = place.open();
        let long = "SECRET-LONG ".repeat(200);
        let events = vec![
            user("hello"),
            user("key sk-SECRET-1"),
            user(&long),
            user("bye"),
        ];
        let (id, _) = store
            .create_and_append(Some("c"), &events, &AppendOptions::default())
            .unwrap();
        if place.name() == "postgres" {
            let refused = store.redact(&id, 1, None, "leak");
            assert!(
                matches!(refused, Err(StoreError::NotRedactable { .. })),
                "{refused:?}"
            );
            continue;
        }
        let (fork, _) = store
            .fork(&id, 3, Some("f"), &[user("fork's own")])
            .unwrap();
        views::refresh(&store, &id, "v", None).unwrap();
        views::refresh(&store, &fork, "v", None).unwrap();
        let before: Vec<_> = (0..4)
            .map(|s| store.record(&id, s).unwrap().address)
            .collect();

        let short = store.redact(&id, 1, None, "a key").unwrap();
        assert_eq!(
            (short.seq, short.field, short.len),
            (1, RedactField::Text, 15)
        );
        assert_eq!(short.event.first_seq, 4);
        let long_one = store.redact(&fork, 2, None, "too long").unwrap();
        assert_eq!(long_one.owner, id);
        assert!(long_one.blob_removed);

        let after: Vec<_> = (0..4)
            .map(|s| store.record(&id, s).unwrap().address)
            .collect();
        assert_eq!(before, after, "{}", place.name());
        let got = texts(&store, &id);
        assert_eq!(&got[..4], ["hello", "[redacted]", "[redacted]", "bye"]);
        assert!(got[4].contains("a key"), "{}", got[4]);
        // The fork shares records 0..3 and got its own redaction event.
        let forked = texts(&store, &fork);
        assert_eq!(
            &forked[..4],
            ["hello", "[redacted]", "[redacted]", "fork's own"]
        );
        assert!(forked[4].contains("too long"), "{}", forked[4]);

        // Views, brought up to date, equal fresh projections; none holds
        // the texts.
        for (conversation, name) in [(id, "v"), (fork, "v")] {
            let (state, _) = views::refresh(&store, &conversation, name, None).unwrap();
            assert_eq!(views::check(&store, &conversation, &state).unwrap(), None);
            let mut shown = Vec::new();
            views::read(&store, &conversation, name, |e| {
                shown.push(format!("{:?}", e.event));
                Ok(())
            })
            .unwrap();
            let shown = shown.concat();
            assert!(!shown.contains("SECRET"), "{shown}");
        }
        assert!(store.verify_all().unwrap().is_ok(), "{}", place.name());
        let listed = store.redactions(&id, true).unwrap();
        assert_eq!(
            listed
                .iter()
                .map(|r| (r.seq, r.reason.as_str()))
                .collect::<Vec<_>>(),
            [(1, "a key"), (2, "too long")]
        );

        // Twice, or a record without text: refused, nothing stored.
        let len = store.info(&id).unwrap().len;
        assert!(matches!(
            store.redact(&id, 1, None, "again"),
            Err(StoreError::NotRedactable { .. })
        ));
        assert!(matches!(
            store.redact(&id, 0, Some(RedactField::Meta), "x"),
            Err(StoreError::NotRedactable { .. })
        ));
        assert!(matches!(
            store.redact(&id, 99, None, "x"),
            Err(StoreError::NoSuchRecord { .. })
        ));
        // The redaction event itself, or without a reason: refused.
        for (seq, reason) in [(4, "x"), (3, " ")] {
            assert!(matches!(
                store.redact(&id, seq, None, reason),
                Err(StoreError::NotRedactable { .. })
            ));
        }
        assert_eq!(store.info(&id).unwrap().len, len);

        // Reopened, everything stands.
        drop(store);
        let store = place.open();
        assert_eq!(
            &texts(&store, &id)[..4],
            ["hello", "[redacted]", "[redacted]", "bye"]
        );
        assert!(store.verify_all().unwrap().is_ok());
    }
}

/// A record staged after an append that went to the segment files: the
/// settled chunk before it (whose key the staged record's lookup passes)
/// is neither rewritten nor scrubbed.
#[test]
fn redacting_a_staged_record_leaves_the_chunks_before_it() {
    for place in Place::each() {
        if place.name() == "postgres" {
            continue;
        }
        let store = place.open();
        let filler: Vec<Event> = (0..3000)
            .map(|i| user(&format!("filler {i} ").repeat(10)))
            .collect();
        let (id, _) = store
            .create_and_append(Some("c"), &filler, &AppendOptions::default())
            .unwrap();
        store
            .append(&id, &[user("small secret")], &AppendOptions::default())
            .unwrap();
        let before = texts(&store, &id);
        store.redact(&id, 3000, None, "secret").unwrap();
        let after = texts(&store, &id);
        assert_eq!(after[..3000], before[..3000], "{}", place.name());
        assert_eq!(after[3000], "[redacted]");
        assert!(store.verify_all().unwrap().is_ok(), "{}", place.name());
    }
}

/// In a format-7 database a redacted record keeps its skeleton, which must
/// hash to the address it keeps: `verify` proves its other fields, and
/// fails at that record when any byte of them changes. (Before format 7 a
/// redacted record's other fields were not provable.)
#[test]
fn a_committed_redaction_proves_the_record_s_other_fields() {
    for place in Place::each() {
        if place.name() == "postgres" {
            continue;
        }
        let store = place.open();
        assert_eq!(store.format_version(), convstore_store::FORMAT_VERSION);
        let long = "LONG SECRET ".repeat(200);
        let (id, _) = store
            .create_and_append(
                Some("c"),
                &[user("hello"), user("sk-SECRET"), user(&long), user("bye")],
                &AppendOptions::default(),
            )
            .unwrap();
        store.redact(&id, 1, None, "a key").unwrap();
        store.redact(&id, 2, None, "too long").unwrap();
        let report = store.verify_all().unwrap().unwrap();
        assert_eq!((report.redacted, report.redacted_proven), (2, 2));

        // Every byte of the redacted record's kept encoding (the last ones
        // of its stored bytes: its skeleton's end and its texts' tags)
        // is covered: each change fails verify at that record.
        let bytes = convstore_store::testing::record_bytes(&store, &id, 1).unwrap();
        for back in 1..=30 {
            let at = bytes.len() - back;
            convstore_store::testing::flip_record_byte(&store, &id, 1, at, 0x01).unwrap();
            let failure = store.verify(&id).unwrap().unwrap_err();
            assert_eq!(failure.seq, Some(1), "byte {at}: {failure}");
            convstore_store::testing::flip_record_byte(&store, &id, 1, at, 0x01).unwrap();
        }
        assert!(store.verify_all().unwrap().is_ok());
    }
}

/// Each way a committed record's bytes could be changed while keeping its
/// address, so as to remove a text unseen or pass a redacted record off as
/// one that proves less, fails `verify` at that record.
#[test]
fn forged_redactions_fail_verify() {
    use convstore_store::testing::{forge, Forgery};
    let cases = [
        (Forgery::HashOutsideRedaction, 1, false),
        (Forgery::HashOutsideRedaction, 2, false),
        (Forgery::SecondTextRedacted, 1, true),
        (Forgery::PassedOffAsPlain, 1, true),
        (Forgery::TimestampChanged, 1, true),
    ];
    for (forgery, seq, redacted_first) in cases {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("db")).unwrap();
        let mut secret = user("sk-SECRET");
        secret.meta = Some(convstore_store::Json::from_value(
            &serde_json::json!({"k": "v"}),
        ));
        let (id, _) = store
            .create_and_append(
                Some("c"),
                &[user("hello"), secret, user(&"LONG SECRET ".repeat(200))],
                &AppendOptions::default(),
            )
            .unwrap();
        if redacted_first {
            store.redact(&id, seq, None, "a key").unwrap();
        }
        assert!(store.verify(&id).unwrap().is_ok());
        forge(&store, &id, seq, forgery).unwrap();
        let failure = store.verify(&id).unwrap().unwrap_err();
        assert_eq!(failure.seq, Some(seq), "{forgery:?}: {failure}");
        if matches!(forgery, Forgery::PassedOffAsPlain) {
            assert!(
                failure.problem.contains("plain record after committed"),
                "{failure}"
            );
        }
    }
}

/// A fork's own records follow its shared ones: after a committed prefix,
/// its first own record redacted and passed off as plain fails too.
#[test]
fn a_fork_s_first_own_record_passed_off_as_plain_fails_verify() {
    use convstore_store::testing::{forge, Forgery};
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("db")).unwrap();
    let (id, _) = store
        .create_and_append(
            Some("c"),
            &[user("hello"), user("there")],
            &AppendOptions::default(),
        )
        .unwrap();
    let (fork, _) = store
        .fork(&id, 2, Some("f"), &[user("fork's secret")])
        .unwrap();
    store.redact(&fork, 2, None, "a key").unwrap();
    assert!(store.verify(&fork).unwrap().is_ok());
    forge(&store, &fork, 2, Forgery::PassedOffAsPlain).unwrap();
    let failure = store.verify(&fork).unwrap().unwrap_err();
    assert_eq!(failure.seq, Some(2), "{failure}");
}

/// `verify` of a fork counts the redactions of the records it holds: its
/// own and those it shares, not its parent's after the fork point.
#[test]
fn a_fork_s_verify_counts_the_redactions_it_shares() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("db")).unwrap();
    let (id, _) = store
        .create_and_append(
            Some("c"),
            &[user("a"), user("b"), user("c"), user("d")],
            &AppendOptions::default(),
        )
        .unwrap();
    let (fork, _) = store.fork(&id, 2, Some("f"), &[user("e")]).unwrap();
    store.redact(&id, 0, None, "shared").unwrap();
    store.redact(&id, 3, None, "the parent's own").unwrap();
    store.redact(&fork, 2, None, "the fork's own").unwrap();
    let counts = |id| {
        let report = store.verify(id).unwrap().unwrap();
        (report.redacted, report.redacted_proven)
    };
    assert_eq!(counts(&fork), (2, 2));
    assert_eq!(counts(&id), (2, 2));
    let all = store.verify_all().unwrap().unwrap();
    assert_eq!((all.redacted, all.redacted_proven), (3, 3));
    let shared = store.redaction_groups_before(&id, 2).unwrap();
    assert_eq!(shared.len(), 1);
    assert_eq!(shared[0].reason, "shared");
}
