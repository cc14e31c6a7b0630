//! Range bounds: any text parses to a bound or an error, and resolving any
//! two bounds against any turn history gives a non-empty, ordered range or
//! an error, never a panic.
#![no_main]

use convstore_projection::bounds::{Bound, Conversation};
use convstore_store::Timestamp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (String, String, Vec<i32>, i64)| {
    let (from, to, starts, now) = input;
    let from = Bound::parse(&from).ok();
    let to = Bound::parse(&to).ok();
    let turn_starts: Vec<Timestamp> = starts
        .iter()
        .filter_map(|s| Timestamp::from_micros(i64::from(*s) * 1_000_000))
        .collect();
    let conversation = Conversation {
        turns: turn_starts.len() as u64,
        turn_starts,
        compactions: vec![(0, 3, true)],
    };
    let now = Timestamp::from_micros(now % 200_000_000_000_000_000).unwrap_or_else(Timestamp::now);
    if let Ok((first, last)) = conversation.range(from, to, now) {
        assert!(first <= last);
    }
});
