//! OpenAI messages from any JSON: events or an error, never a panic; the
//! messages written back from those events are a valid list.
#![no_main]

use convstore_projection::openai::{to_messages, validate};
use convstore_projection::ViewEvent;
use convstore_store::interop::openai::from_message;
use convstore_store::Timestamp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let now = Timestamp::from_micros(0).expect("epoch");
    let mut notes = Vec::new();
    let Ok(events) = from_message(value, now, &mut notes) else {
        return;
    };
    let view: Vec<ViewEvent> = events
        .into_iter()
        .enumerate()
        .map(|(seq, event)| ViewEvent {
            seq: seq as u64,
            turn: 0,
            summary_of: None,
            event,
        })
        .collect();
    let messages = to_messages(&view);
    // Arguments that were not a JSON object are written back as they came,
    // which no valid list can hold: only lists without them must validate.
    let raw_arguments = view.iter().any(|v| {
        v.event
            .meta
            .as_ref()
            .is_some_and(|m| m.as_str().contains("\"arguments\""))
    });
    if !raw_arguments {
        validate(&messages.messages).expect("valid messages");
    }
});
