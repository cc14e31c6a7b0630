use super::*;
use crate::json::parse_event;

fn event(line: &str) -> Event {
    parse_event(line, Timestamp::from_micros(0).unwrap()).unwrap()
}

/// Pins the format (I2): the canonical bytes of a fixed event and its address
/// as the first record of a chain. If this test fails, the format changed:
/// every stored head would change with it.
#[test]
fn record_address_is_stable() {
    let e = event(
        r#"{"type":"tool_call","id":"c1","name":"fs_read_file","arguments":{"path":"a.rs"},"timestamp":"2025-01-05T04:00:00.000000Z","meta":{"k":"v"}}"#,
    );
    let record = encode_event(&e, Layout::Plain);
    assert_eq!(
        crate::hash::hex(&record.bytes),
        "fd00e07017db550c000100097b226b223a2276227d040263310c66735f726561645f66696c65000f\
         7b2270617468223a22612e7273227d"
    );
    assert_eq!(
        Address::ROOT.child(&record.bytes).hex(),
        "19fd74f7191e4031fedde99feba53dd1f852eb2a4df817b02bb7204b62ca388b"
    );
}

#[test]
fn long_texts_move_to_blobs_and_come_back() {
    let long = "x".repeat(INLINE_MAX + 1);
    let e = event(&format!(r#"{{"type":"user","text":"{long}"}}"#));
    let record = encode_event(&e, Layout::Plain);
    assert_eq!(record.blobs.len(), 1);
    assert!(record.bytes.len() < 100);
    let decoded = decode_record(&record.bytes).unwrap();
    let back = record_to_event(&decoded, &mut |blob| {
        assert_eq!(blob.len as usize, long.len());
        Ok(long.clone())
    })
    .unwrap();
    assert_eq!(back, e);
}

#[test]
fn texts_up_to_the_limit_stay_inline() {
    let text = "y".repeat(INLINE_MAX);
    let e = event(&format!(r#"{{"type":"assistant","text":"{text}"}}"#));
    assert!(encode_event(&e, Layout::Plain).blobs.is_empty());
}

#[test]
fn garbage_does_not_decode() {
    for bytes in [&[][..], &[0xff; 3], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 99]] {
        assert!(decode_record(bytes).is_err());
    }
}

#[test]
fn an_envelope_is_read_as_bincode_writes_it() {
    let record: Vec<u8> = (0..=255u8).collect();
    for time in [
        0,
        1,
        -1,
        250,
        251,
        70_000,
        4_102_444_800_000_000,
        -1_000_000_000_000,
    ] {
        for reason_len in [0, 3, 250, 251, 70_000] {
            let reason = "r".repeat(reason_len);
            for record_len in [0, 1, 250, 251, 256] {
                let envelope = Envelope {
                    address: crate::hash::Address::from_bytes([7; 32]),
                    time: crate::event::Timestamp::from_micros(time).unwrap(),
                    by: [9; 16],
                    reason: &reason,
                    record: &record[..record_len],
                };
                let bytes = encode(&envelope);
                assert_eq!(
                    read_envelope(&bytes).as_ref(),
                    Some(&envelope),
                    "time {time}, reason {reason_len}, record {record_len}"
                );
                // Cut short or with bytes after it: not an envelope.
                assert_eq!(read_envelope(&bytes[..bytes.len() - 1]), None);
                let mut longer = bytes.clone();
                longer.push(0);
                assert_eq!(read_envelope(&longer), None);
            }
        }
    }
}

/// Pins format 7's committed layout: the stored bytes of the event of
/// [`record_address_is_stable`] and its address, which hashes the mark,
/// the frame and each text's blake3 hash and length, not the texts; the address was
/// also computed with the Python `blake3` package.
#[test]
fn committed_record_address_is_stable() {
    let e = event(
        r#"{"type":"tool_call","id":"c1","name":"fs_read_file","arguments":{"path":"a.rs"},"timestamp":"2025-01-05T04:00:00.000000Z","meta":{"k":"v"}}"#,
    );
    let record = encode_event(&e, Layout::Committed);
    let (meta, arguments) = (&br#"{"k":"v"}"#[..], &br#"{"path":"a.rs"}"#[..]);
    // The plain bytes without the short texts: each is its variant's tag.
    let frame = [
        &hex_bytes("fd00e07017db550c0001")[..],
        &[3, 4, 2],
        b"c1",
        &[12],
        b"fs_read_file",
        &[3],
    ]
    .concat();
    let stored = [
        &[COMMITTED_MARK, frame.len() as u8][..],
        &frame,
        &[0, 9],
        meta,
        &[0, 15],
        arguments,
    ]
    .concat();
    assert_eq!(record.bytes, stored);
    let hashed = [
        &Address::ROOT.as_bytes()[..],
        &[COMMITTED_MARK],
        &frame,
        BlobHash::of(meta).as_bytes(),
        &9u64.to_le_bytes(),
        BlobHash::of(arguments).as_bytes(),
        &15u64.to_le_bytes(),
    ]
    .concat();
    assert_eq!(
        link(&Address::ROOT, &record.bytes).as_bytes(),
        BlobHash::of(&hashed).as_bytes()
    );
    assert_eq!(
        link(&Address::ROOT, &record.bytes).hex(),
        "6f1355a8d9847bc073bb63023612a60596e4a520c96170a21dd7e88990c4e756"
    );
    // Chained from the digests gathered while encoding: the same address.
    assert!(!record.digests.bytes.is_empty());
    assert_eq!(
        record.address_after(&Address::ROOT),
        link(&Address::ROOT, &record.bytes)
    );
    // Counted as its plain encoding, in either layout.
    assert_eq!(record.size, encode_event(&e, Layout::Plain).size);
    let back = decode_record(&record.bytes).unwrap();
    let again = record_to_event(&back, &mut |_| unreachable!()).unwrap();
    assert_eq!(again, e);
}

#[test]
fn a_committed_record_s_lengths_take_their_shortest_encoding_only() {
    let e = event(r#"{"type":"user","text":"hello","timestamp":"2025-01-05T04:00:00.000000Z"}"#);
    let record = encode_event(&e, Layout::Committed);
    let address = link(&Address::ROOT, &record.bytes);
    assert!(decode_record(&record.bytes).is_ok());
    // The same lengths written longer: the frame's (after the mark), then
    // the text's (the last entry, tag 0 and its length before "hello").
    let frame_len = record.bytes[1];
    let longer_frame = [&[COMMITTED_MARK, 251, frame_len, 0][..], &record.bytes[2..]].concat();
    let at = record.bytes.len() - b"hello".len() - 1;
    assert_eq!(&record.bytes[at - 1..=at], &[0, 5]);
    let longer_text = [&record.bytes[..at], &[252, 5, 0, 0, 0][..], b"hello"].concat();
    for bytes in [longer_frame, longer_text] {
        assert!(decode_record(&bytes).is_err(), "{bytes:?}");
        assert_ne!(link(&Address::ROOT, &bytes), address, "{bytes:?}");
    }
}

fn hex_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// A committed record redacted keeps its frame and the text's hash, which
/// hash to its kept address: `redaction_proven` proves it, and fails it
/// when any other field or a remaining text was changed. A plain record's redaction is proven
/// only when the text was a blob.
#[test]
fn a_committed_redaction_proves_the_other_fields() {
    let parent = Address::ROOT.child(b"parent");
    let e = event(
        r#"{"type":"tool_result","id":"c1","content":"secret","is_error":false,"meta":{"k":"v"}}"#,
    );
    for layout in [Layout::Committed, Layout::Plain] {
        let record = encode_event(&e, layout).bytes;
        assert_eq!(redaction_proven(&parent, &record), Ok(true));
        let address = link(&parent, &record);
        let redacted = redact_inline(&decode_record(&record).unwrap());
        let stored = |inner: &[u8]| {
            Envelope {
                address,
                time: crate::event::Timestamp::from_micros(0).unwrap(),
                by: [1; 16],
                reason: "r",
                record: inner,
            }
            .stored()
        };
        let honest = stored(&encode_record(&redacted, layout));
        assert_eq!(link(&parent, &honest), address);
        let read = decode_record(&honest).unwrap();
        assert!(matches!(
            read.body,
            BodyRepr::ToolResult {
                content: TextRepr::Redacted(_),
                ..
            }
        ));
        // A plain record redacted of a short text: only its address stands.
        assert_eq!(
            redaction_proven(&parent, &honest),
            Ok(layout == Layout::Committed)
        );
        // Another field changed under the kept address.
        let mut forged = redacted.clone();
        if let BodyRepr::ToolResult { is_error, .. } = &mut forged.body {
            *is_error = true;
        }
        let forged = stored(&encode_record(&forged, layout));
        match layout {
            Layout::Committed | Layout::Sealed => {
                assert!(redaction_proven(&parent, &forged).is_err());
            }
            Layout::Plain | Layout::SealedView => {
                assert_eq!(redaction_proven(&parent, &forged), Ok(false));
            }
        }
    }
    // A committed record's text changed: its address changes with it.
    let record = encode_event(&e, Layout::Committed).bytes;
    let mut flipped = record.clone();
    let at = flipped.len() - 2;
    flipped[at] ^= 1;
    assert_ne!(link(&parent, &flipped), link(&parent, &record));
    // A plain record whose redacted text was a blob is proven.
    let long = "x".repeat(INLINE_MAX + 1);
    let e = event(&format!(r#"{{"type":"user","text":"{long}"}}"#));
    let record = encode_event(&e, Layout::Plain).bytes;
    let address = link(&parent, &record);
    let redacted = redact_blob(&decode_record(&record).unwrap());
    let inner = encode_record(&redacted, Layout::Plain);
    let honest = Envelope {
        address,
        time: crate::event::Timestamp::from_micros(0).unwrap(),
        by: [1; 16],
        reason: "r",
        record: &inner,
    }
    .stored();
    assert_eq!(redaction_proven(&parent, &honest), Ok(true));
}

fn redact_inline<'a>(record: &RecordRepr<'a>) -> RecordRepr<'a> {
    let mut record = record.clone();
    if let BodyRepr::ToolResult { content, .. } = &mut record.body {
        if let TextRepr::Inline(s) = *content {
            *content = TextRepr::Redacted(BlobRef {
                hash: BlobHash::of(s.as_bytes()),
                len: s.len() as u64,
            });
        }
    }
    record
}

fn redact_blob<'a>(record: &RecordRepr<'a>) -> RecordRepr<'a> {
    let mut record = record.clone();
    for text in record.texts_mut() {
        if let TextRepr::Blob(blob) = *text {
            *text = TextRepr::Redacted(blob);
        }
    }
    record
}

/// Committed bytes that are cut or padded, or a frame read as a plain
/// record: errors, never a panic or a misread.
#[test]
fn damaged_committed_records_do_not_decode() {
    let e = event(r#"{"type":"user","text":"hello","meta":{"k":"v"}}"#);
    let record = encode_event(&e, Layout::Committed).bytes;
    for cut in 1..record.len() {
        assert!(decode_record(&record[..cut]).is_err(), "cut at {cut}");
    }
    let mut longer = record.clone();
    longer.push(0);
    assert!(decode_record(&longer).is_err());
    // The frame alone, read as a plain record.
    let (frame, _) = split_committed(&record[1..]).unwrap();
    assert!(decode_record(frame).is_err());
}

/// `peek_event_type` reads the type a full decode gives, for every kind,
/// with and without meta, short and long texts, in both layouts, redacted
/// or not; and nothing for bytes that are not a record.
#[test]
fn the_peeked_type_is_the_decoded_one() {
    let long = "x".repeat(INLINE_MAX + 1);
    let lines = [
        r#"{"type":"turn_start"}"#.to_owned(),
        r#"{"type":"user","text":"hi","meta":{"k":"v"}}"#.to_owned(),
        format!(r#"{{"type":"user","text":"hi","meta":{{"k":"{long}"}}}}"#),
        format!(r#"{{"type":"assistant","text":"{long}"}}"#),
        r#"{"type":"reasoning","text":"because"}"#.to_owned(),
        r#"{"type":"tool_call","id":"c1","name":"f","arguments":{"a":1}}"#.to_owned(),
        format!(r#"{{"type":"tool_result","id":"c1","content":"{long}","is_error":false}}"#),
        r#"{"type":"tool_result","id":"c1","content":"ok","is_error":true,"meta":{}}"#.to_owned(),
        r#"{"type":"system","text":"be brief"}"#.to_owned(),
        r#"{"type":"config","delta":{"model":"m"}}"#.to_owned(),
        r#"{"type":"extension","name":"x","payload":{"p":2}}"#.to_owned(),
        r#"{"type":"compaction","from_turn":0,"to_turn":3,"summary":"s","reasoning":"strip"}"#
            .to_owned(),
    ];
    let mut kinds = std::collections::HashSet::new();
    for line in &lines {
        let e = event(line);
        for layout in [Layout::Plain, Layout::Committed] {
            let bytes = encode_event(&e, layout).bytes;
            let decoded = decode_record(&bytes).unwrap();
            let kind = decoded.body.event_type();
            assert_eq!(peek_event_type(&bytes), Some(kind), "{line} {layout:?}");
            kinds.insert(kind);
            let redacted = redact_blob(&redact_inline(&decoded));
            let inner = encode_record(&redacted, layout);
            let stored = Envelope {
                address: Address::ROOT,
                time: crate::event::Timestamp::from_micros(0).unwrap(),
                by: [1; 16],
                reason: "r",
                record: &inner,
            }
            .stored();
            assert_eq!(
                peek_event_type(&stored),
                Some(kind),
                "{line} {layout:?} redacted"
            );
        }
    }
    assert_eq!(kinds.len(), EventType::ALL.len());
    for garbage in [&[][..], &[0xFE], &[0xFF, 1, 2], &[5, 2], &[5, 0, 200]] {
        assert_eq!(peek_event_type(garbage), None, "{garbage:?}");
    }
}

/// An encrypted database's record keeps a long text beside its frame, not
/// as a blob; redacted, it keeps that entry's kind, so its address, what
/// its redaction proves and its size are those of the record appended.
#[test]
fn a_sealed_record_keeps_long_texts_and_redacts_them_as_short_ones() {
    let parent = Address::ROOT.child(b"parent");
    let long = "z".repeat(INLINE_MAX * 3);
    let e = event(&format!(
        r#"{{"type":"tool_result","id":"c1","content":"{long}","is_error":false}}"#
    ));
    let encoded = encode_event(&e, Layout::Sealed);
    assert!(encoded.blobs.is_empty());
    assert_eq!(Layout::of(&encoded.bytes), Layout::Committed);
    let address = encoded.address_after(&parent);
    assert_eq!(link(&parent, &encoded.bytes), address);
    let record = decode_record(&encoded.bytes).unwrap();
    let size = record_size(&encoded.bytes, &record);
    assert_eq!(size, encoded.size);
    let redacted = redact_inline(&record);
    let honest = Envelope {
        address,
        time: crate::event::Timestamp::from_micros(0).unwrap(),
        by: [1; 16],
        reason: "r",
        record: &encode_redacted(&redacted, &encoded.bytes),
    }
    .stored();
    assert_eq!(redaction_proven(&parent, &honest), Ok(true));
    assert_eq!(record_size(&honest, &decode_record(&honest).unwrap()), size);
    // By its length alone the text would have been taken for a blob.
    let by_length = Envelope {
        address,
        time: crate::event::Timestamp::from_micros(0).unwrap(),
        by: [1; 16],
        reason: "r",
        record: &encode_record(&redacted, Layout::Committed),
    }
    .stored();
    assert!(redaction_proven(&parent, &by_length).is_err());
}

/// The stored bytes of a record of kind `kind` (0..8) with texts of
/// `len` bytes: committed or plain, a short text redacted, a redaction's
/// envelope, or damaged (cut short or a bit flipped).
fn record_of_kind(kind: u8, len: usize, salt: u8) -> Vec<u8> {
    let text: String = (0..len)
        .map(|i| char::from(b'a' + (i as u8 ^ salt) % 26))
        .collect();
    let e = event(&format!(
        r#"{{"type":"tool_call","id":"c{salt}","name":"n","arguments":{{"t":"{text}"}},"meta":{{"m":"{salt}"}}}}"#
    ));
    let committed = encode_event(&e, Layout::Committed).bytes;
    match kind {
        0 => committed,
        1 => encode_event(&e, Layout::Plain).bytes,
        2 => {
            let mut record = decode_record(&committed).unwrap();
            let body = text.len() as u64;
            for t in record.texts_mut() {
                if let TextRepr::Inline(s) = *t {
                    if s.len() as u64 >= body {
                        *t = TextRepr::Redacted(BlobRef {
                            hash: BlobHash::of(s.as_bytes()),
                            len: s.len() as u64,
                        });
                    }
                }
            }
            encode_record(&record, Layout::Committed)
        }
        3 => {
            let mut bytes = vec![REDACTED_MARK];
            bytes.extend(std::iter::repeat_n(salt, 40));
            bytes
        }
        4 => vec![REDACTED_MARK, salt],
        5 => committed[..committed.len() / 2].to_vec(),
        6 => {
            let mut bytes = committed;
            let at = usize::from(salt) % bytes.len();
            bytes[at] ^= 1 << (salt % 8);
            bytes
        }
        _ => encode_event(&event(r#"{"type":"turn_start"}"#), Layout::Committed).bytes,
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// `link_runs` gives each record the address `link` gives it, one
    /// after another, whatever the records and however many runs.
    #[test]
    fn runs_of_records_link_as_one_by_one(
        runs in proptest::collection::vec(
            (proptest::prelude::any::<[u8; 32]>(),
             proptest::collection::vec((0u8..8, 0usize..2100, proptest::prelude::any::<u8>()), 0..40)),
            0..20)
    ) {
        let stored: Vec<(Address, Vec<Vec<u8>>)> = runs
            .iter()
            .map(|(parent, records)| {
                let records = records.iter().map(|&(k, len, salt)| record_of_kind(k, len, salt));
                (Address::from_bytes(*parent), records.collect())
            })
            .collect();
        let runs: Vec<(Address, Vec<&[u8]>)> = stored
            .iter()
            .map(|(parent, records)| (*parent, records.iter().map(Vec::as_slice).collect()))
            .collect();
        let together = link_runs(&runs);
        proptest::prop_assert_eq!(together.len(), runs.len());
        for ((parent, records), addresses) in runs.iter().zip(&together) {
            let mut at = *parent;
            let one_by_one: Vec<Address> = records
                .iter()
                .map(|bytes| {
                    at = link(&at, bytes);
                    at
                })
                .collect();
            proptest::prop_assert_eq!(&one_by_one, addresses);
        }
    }
}
