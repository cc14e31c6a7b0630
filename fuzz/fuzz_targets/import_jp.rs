//! JP events from any JSON: an event or an error, never a panic; an event
//! written back in JP's form reads back as the same event.
#![no_main]

use convstore_store::interop::jp::{from_jp, to_jp};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let mut notes = Vec::new();
    if let Ok(event) = from_jp(value, &mut notes) {
        let again = from_jp(to_jp(&event), &mut notes).expect("a written JP event reads back");
        assert_eq!(again, event);
    }
});
