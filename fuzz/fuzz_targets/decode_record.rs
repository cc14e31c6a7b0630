//! Any bytes as a stored record: an error or an event, never a panic; a
//! decoded event encodes and decodes back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some((first, second)) = convstore_store::testing::record_roundtrip(data) {
        assert_eq!(first, second);
    }
});
