//! [`ToolNames`]: the latest tool name of each tool call id.
//!
//! A long log holds hundreds of thousands of call ids and a few dozen
//! tools. A `HashMap<String, String>` would allocate a string per id and per
//! name; this keeps the ids back to back in one buffer and each tool's name
//! once, so building the map for a million-event log costs one hash and
//! one probe per call.

use std::fmt;
use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

/// Where a call id is in [`ToolNames::ids`] and which tool it names.
#[derive(Clone, Copy)]
struct Slot {
    start: usize,
    len: usize,
    tool: usize,
}

/// The name of the latest tool call with each id: later calls with an id
/// replace earlier ones.
#[derive(Clone, Default)]
pub struct ToolNames {
    /// Every distinct call id, back to back.
    ids: String,
    slots: HashTable<Slot>,
    /// Every distinct tool name, and its index by name.
    tools: Vec<Box<str>>,
    tool_index: HashTable<usize>,
    hasher: DefaultHashBuilder,
}

impl ToolNames {
    /// No call.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a call with id `call` to tool `name`, replacing the name of
    /// an earlier call with that id.
    pub fn insert(&mut self, call: &str, name: &str) {
        let tool = self.tool(name);
        let hash = self.hasher.hash_one(call);
        let ids = &self.ids;
        if let Some(slot) = self
            .slots
            .find_mut(hash, |s| &ids[s.start..s.start + s.len] == call)
        {
            slot.tool = tool;
            return;
        }
        let slot = Slot {
            start: self.ids.len(),
            len: call.len(),
            tool,
        };
        self.ids.push_str(call);
        let (ids, hasher) = (&self.ids, &self.hasher);
        self.slots.insert_unique(hash, slot, |s| {
            hasher.hash_one(&ids[s.start..s.start + s.len])
        });
    }

    /// The name of the latest call with id `call`.
    pub fn get(&self, call: &str) -> Option<&str> {
        let hash = self.hasher.hash_one(call);
        self.slots
            .find(hash, |s| self.id(s) == call)
            .map(|s| &*self.tools[s.tool])
    }

    /// How many distinct call ids it holds.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether it holds no call.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Every `(call id, name)`, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.slots
            .iter()
            .map(|s| (self.id(s), &*self.tools[s.tool]))
    }

    fn id(&self, slot: &Slot) -> &str {
        &self.ids[slot.start..slot.start + slot.len]
    }

    /// The index of tool `name`, added if new.
    fn tool(&mut self, name: &str) -> usize {
        let hash = self.hasher.hash_one(name);
        let tools = &self.tools;
        if let Some(&index) = self.tool_index.find(hash, |&i| &*tools[i] == name) {
            return index;
        }
        let index = self.tools.len();
        self.tools.push(name.into());
        let (tools, hasher) = (&self.tools, &self.hasher);
        self.tool_index
            .insert_unique(hash, index, |&i| hasher.hash_one(&*tools[i]));
        index
    }
}

impl fmt::Debug for ToolNames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl PartialEq for ToolNames {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && self
                .iter()
                .all(|(call, name)| other.get(call) == Some(name))
    }
}

impl Eq for ToolNames {}

impl<'a> FromIterator<(&'a str, &'a str)> for ToolNames {
    fn from_iter<I: IntoIterator<Item = (&'a str, &'a str)>>(calls: I) -> Self {
        let mut names = ToolNames::new();
        for (call, name) in calls {
            names.insert(call, name);
        }
        names
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::ToolNames;

    #[test]
    fn the_latest_call_names_the_id() {
        let mut names = ToolNames::new();
        let mut model = HashMap::new();
        for i in 0..10_000u32 {
            let call = format!("call_{}", i % 3_001);
            let name = format!("tool_{}", i % 7);
            names.insert(&call, &name);
            model.insert(call, name);
        }
        assert_eq!(names.len(), model.len());
        for (call, name) in &model {
            assert_eq!(names.get(call), Some(name.as_str()));
        }
        assert_eq!(names.get("call_999999"), None);
        assert_eq!(names.get(""), None);
        let listed: HashMap<String, String> = names
            .iter()
            .map(|(c, n)| (c.to_owned(), n.to_owned()))
            .collect();
        assert_eq!(listed, model);
    }

    #[test]
    fn empty_ids_and_names_are_ids_and_names() {
        let names: ToolNames = [("", "a"), ("x", ""), ("", "b")].into_iter().collect();
        assert_eq!(names.get(""), Some("b"));
        assert_eq!(names.get("x"), Some(""));
        assert_eq!(names.len(), 2);
    }
}
