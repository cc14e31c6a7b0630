//! Any bytes: an event or an error, never a panic; a parsed event writes
//! back to JSON that parses to the same event.
#![no_main]

use convstore_store::json::{event_to_string, parse_event};
use convstore_store::Timestamp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let now = Timestamp::from_micros(0).expect("epoch");
    if let Ok(event) = parse_event(text, now) {
        let written = event_to_string(&event);
        let again = parse_event(&written, now).expect("written events parse");
        assert_eq!(again, event);
        assert_eq!(event_to_string(&again), written);
    }
});
