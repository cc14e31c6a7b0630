//! Warnings about tool call ids: a `tool_result` whose id no `tool_call`
//! ever had, and a `tool_call` that reuses an id. Neither is refused (the
//! projection names such results `unknown`, and a later call with an id
//! renames its earlier results, SPEC §4), but both are usually mistakes.

use std::collections::HashSet;

use convstore_store::{ConversationId, Event, EventKind, Store, ToolNames};

use crate::error::Result;

/// The tool calls and results of an input, in order, by position (an
/// NDJSON line, an event index).
#[derive(Debug, Default)]
pub struct CallCheck {
    /// Each call id of the input, with the position of its first call.
    calls: hashbrown::HashMap<String, usize>,
    /// Calls that reuse an id called earlier in the input.
    repeated: Vec<(usize, String)>,
    /// Results whose id no earlier call of the input had.
    unmatched: Vec<(usize, String)>,
}

/// Examples named before the rest are counted.
const SHOWN: usize = 3;

impl CallCheck {
    /// Notes the call or result `event` at `position`.
    pub fn observe(&mut self, position: usize, event: &Event) {
        match &event.kind {
            EventKind::ToolCall { id, .. } => match self.calls.entry_ref(id.as_str()) {
                hashbrown::hash_map::EntryRef::Occupied(_) => {
                    self.repeated.push((position, id.clone()));
                }
                hashbrown::hash_map::EntryRef::Vacant(slot) => {
                    slot.insert(position);
                }
            },
            EventKind::ToolResult { id, .. } if !self.calls.contains_key(id) => {
                self.unmatched.push((position, id.clone()));
            }
            _ => {}
        }
    }

    /// Whether the log's calls are needed to finish the check.
    pub fn needs_log(&self) -> bool {
        !self.calls.is_empty() || !self.unmatched.is_empty()
    }

    /// The call ids of the input, and those its results name: what to
    /// look up in the log.
    pub fn ids(&self) -> HashSet<&str> {
        self.calls
            .keys()
            .chain(self.unmatched.iter().map(|(_, id)| id))
            .map(String::as_str)
            .collect()
    }

    /// The warnings (`what` names a position: `line`, `event`): results
    /// whose id was never called, in the input or in `log`, and calls that
    /// reuse an id of the input or of `log`; the first few of each, then
    /// how many more.
    pub fn warnings(self, log: Option<&ToolNames>, what: &str) -> Vec<String> {
        let in_log = |id: &str| log.is_some_and(|l| l.get(id).is_some());
        let mut repeated = self.repeated;
        repeated.extend(
            self.calls
                .iter()
                .filter(|(id, _)| in_log(id))
                .map(|(id, &at)| (at, id.clone())),
        );
        repeated.sort_unstable();
        let orphans: Vec<(usize, String)> = self
            .unmatched
            .into_iter()
            .filter(|(_, id)| !self.calls.contains_key(id) && !in_log(id))
            .collect();
        let mut out = Vec::new();
        each(&orphans, &mut out, |(at, id)| {
            format!("{what} {at}: tool_result for call id \"{id}\", which no tool_call has")
        });
        each(&repeated, &mut out, |(at, id)| {
            format!(
                "{what} {at}: tool_call reuses the call id \"{id}\" (results name the latest call)"
            )
        });
        out
    }

    /// [`CallCheck::warnings`] for an append of what was observed to the
    /// first `len` records of `id` (`None`: a new conversation).
    pub fn against(
        self,
        store: &Store,
        log: Option<(&ConversationId, u64)>,
        what: &str,
    ) -> Result<Vec<String>> {
        if !self.needs_log() {
            return Ok(Vec::new());
        }
        let names = match log {
            Some((id, len)) => Some(store.tool_names_of(id, len, &self.ids())?),
            None => None,
        };
        Ok(self.warnings(names.as_ref(), what))
    }
}

fn each(
    items: &[(usize, String)],
    out: &mut Vec<String>,
    say: impl Fn(&(usize, String)) -> String,
) {
    for item in items.iter().take(SHOWN) {
        out.push(say(item));
    }
    if items.len() > SHOWN {
        out.push(format!("... and {} more like it", items.len() - SHOWN));
    }
}
