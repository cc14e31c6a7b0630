use super::*;

fn turns(types: &[EventType]) -> Vec<u64> {
    let mut tracker = TurnTracker::new();
    types.iter().map(|t| tracker.next(*t)).collect()
}

use EventType::{Assistant, Compaction as Comp, Config, System, TurnStart, User};

#[test]
fn events_before_the_first_turn_start_are_turn_zero() {
    assert_eq!(turns(&[User, Assistant, TurnStart, User]), [0, 0, 1, 1]);
}

#[test]
fn leading_config_and_system_do_not_open_a_turn() {
    assert_eq!(turns(&[Config, System, TurnStart, User]), [0, 0, 0, 0]);
}

#[test]
fn turn_start_counts_as_a_conversation_event() {
    assert_eq!(turns(&[TurnStart, TurnStart, TurnStart]), [0, 1, 2]);
}

#[test]
fn compaction_and_config_inside_a_turn_do_not_open_one() {
    assert_eq!(
        turns(&[TurnStart, User, Comp, Config, TurnStart, Comp, TurnStart]),
        [0, 0, 0, 0, 1, 1, 2]
    );
}

#[test]
fn turn_count_is_zero_for_an_empty_stream() {
    let tracker = TurnTracker::new();
    assert_eq!(tracker.turn_count(0), 0);
    let mut tracker = TurnTracker::new();
    tracker.next(Config);
    assert_eq!(tracker.turn_count(1), 1);
}

#[test]
fn timestamps_print_in_utc_with_microseconds() {
    let t = Timestamp::parse_rfc3339("2025-01-05T05:00:00.1234567+01:00").unwrap();
    assert_eq!(t.to_string(), "2025-01-05T04:00:00.123456Z");
    let t = Timestamp::parse_rfc3339("1970-01-01T00:00:00Z").unwrap();
    assert_eq!(t.as_micros(), 0);
    assert_eq!(t.to_string(), "1970-01-01T00:00:00.000000Z");
}

#[test]
fn timestamps_format_like_chrono_across_the_whole_range() {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let span = (END_MICROS - MIN_MICROS) as u64;
    let mut samples: Vec<i64> = vec![MIN_MICROS, END_MICROS - 1, 0, -1, 951_782_400_000_000];
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        samples.push(MIN_MICROS + (x % span) as i64);
    }
    for micros in samples {
        let expected = chrono::DateTime::from_timestamp_micros(micros)
            .unwrap()
            .format("%Y-%m-%dT%H:%M:%S%.6fZ")
            .to_string();
        assert_eq!(Timestamp(micros).to_string(), expected, "{micros}");
    }
}

#[test]
fn timestamps_before_the_epoch_truncate_toward_the_past() {
    let t = Timestamp::parse_rfc3339("1969-12-31T23:59:59.9999999Z").unwrap();
    assert_eq!(t.to_string(), "1969-12-31T23:59:59.999999Z");
}

#[test]
fn timestamps_outside_rfc3339_years_are_refused() {
    assert!(Timestamp::from_micros(i64::MAX).is_none());
    assert!(Timestamp::from_micros(i64::MIN).is_none());
    assert!(Timestamp::parse_rfc3339("2025-01-05 04:00:00").is_none());
    assert!(Timestamp::parse_rfc3339("yesterday").is_none());
}
