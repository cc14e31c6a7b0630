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
    let record = encode_event(&e);
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
    let record = encode_event(&e);
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
    assert!(encode_event(&e).blobs.is_empty());
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
