//! [`ToolNames`]: the latest tool name of each tool call id.
//!
//! A long log holds hundreds of thousands of call ids and a few dozen
//! tools. A `HashMap<String, String>` would allocate a string per id and per
//! name; this keeps the ids back to back in one buffer and each tool's name
//! once, so building the map for a million-event log costs one hash and
//! one probe per call, split over threads by hash shard.

use std::fmt;
use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

/// Where a call id is in its shard's `ids` and which of the shard's tools
/// it names.
#[derive(Clone, Copy)]
struct Slot {
    start: usize,
    len: usize,
    tool: usize,
    /// Whether more than one call had this id.
    repeated: bool,
}

/// The name of the latest tool call with each id: later calls with an id
/// replace earlier ones.
///
/// The ids are split into shards by hash, so that threads can fill the
/// shards of one table side by side ([`ToolNames::par_build`]).
#[derive(Clone)]
pub struct ToolNames {
    shards: Vec<Shard>,
    hasher: DefaultHashBuilder,
    /// Whether every call of the log up to its end was offered, so that
    /// each id's `repeated` is exact ([`ToolNames::never_repeated`]).
    complete: bool,
}

/// The ids of one hash shard, back to back, and their tools.
#[derive(Clone, Default)]
struct Shard {
    ids: String,
    slots: HashTable<Slot>,
    /// Every distinct tool name, and its index by name.
    tools: Vec<Box<str>>,
    tool_index: HashTable<usize>,
    /// How many of its ids more than one call had.
    repeats: usize,
}

impl Default for ToolNames {
    fn default() -> Self {
        Self::with_shards(1, DefaultHashBuilder::default())
    }
}

impl ToolNames {
    /// No call.
    pub fn new() -> Self {
        Self::default()
    }

    /// No call yet, and every call of the log will be offered in order
    /// ([`ToolNames::insert`]): the table then knows which ids were never
    /// repeated ([`ToolNames::never_repeated`]).
    pub fn complete() -> Self {
        ToolNames {
            complete: true,
            ..Self::default()
        }
    }

    fn with_shards(count: usize, hasher: DefaultHashBuilder) -> Self {
        ToolNames {
            shards: vec![Shard::default(); count.max(1)],
            hasher,
            complete: false,
        }
    }

    /// A table of `shards` shards, shard `k` filled by `fill(k, insert)`
    /// on rayon's threads: `fill` must offer every call of the log up to
    /// its end, in log order, to `insert(call, name)`, which keeps those
    /// that fall in shard `k`.
    pub fn par_build<E: Send>(
        shards: usize,
        fill: impl Fn(&mut dyn FnMut(&str, &str)) -> Result<(), E> + Sync,
    ) -> Result<Self, E> {
        use rayon::prelude::*;
        let mut names = Self::with_shards(shards, DefaultHashBuilder::default());
        names.complete = true;
        let count = names.shards.len();
        let hasher = &names.hasher;
        names
            .shards
            .par_iter_mut()
            .enumerate()
            .try_for_each(|(k, shard)| {
                fill(&mut |call, name| {
                    let hash = hasher.hash_one(call);
                    if shard_of(hash, count) == k {
                        shard.insert(hash, call, name, hasher);
                    }
                })
            })?;
        Ok(names)
    }

    /// Records a call with id `call` to tool `name`, replacing the name of
    /// an earlier call with that id.
    pub fn insert(&mut self, call: &str, name: &str) {
        let hash = self.hasher.hash_one(call);
        let k = shard_of(hash, self.shards.len());
        self.shards[k].insert(hash, call, name, &self.hasher);
    }

    /// The name of the latest call with id `call`.
    pub fn get(&self, call: &str) -> Option<&str> {
        let hash = self.hasher.hash_one(call);
        let shard = &self.shards[shard_of(hash, self.shards.len())];
        shard
            .slots
            .find(hash, |s| shard.id(s) == call)
            .map(|s| &*shard.tools[s.tool])
    }

    /// Whether no two calls had id `call`, as far as the table knows:
    /// `false` unless it was built from every call of the log
    /// ([`ToolNames::complete`], [`ToolNames::par_build`]). A reader that
    /// meets a call with this id then knows it is the latest without
    /// looking the id up; while no id repeats, this answers without a
    /// lookup either.
    pub fn never_repeated(&self, call: &str) -> bool {
        if !self.complete {
            return false;
        }
        if self.shards.iter().all(|s| s.repeats == 0) {
            return true;
        }
        let hash = self.hasher.hash_one(call);
        let shard = &self.shards[shard_of(hash, self.shards.len())];
        shard
            .slots
            .find(hash, |s| shard.id(s) == call)
            .is_none_or(|s| !s.repeated)
    }

    /// How many distinct call ids it holds.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.slots.len()).sum()
    }

    /// Whether it holds no call.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every `(call id, name)`, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.shards.iter().flat_map(|shard| {
            shard
                .slots
                .iter()
                .map(|s| (shard.id(s), &*shard.tools[s.tool]))
        })
    }
}

/// The shard of a call id with this hash (the high bits: the table inside
/// a shard uses the low ones).
fn shard_of(hash: u64, shards: usize) -> usize {
    ((hash >> 32) as usize) % shards
}

impl Shard {
    fn insert(&mut self, hash: u64, call: &str, name: &str, hasher: &DefaultHashBuilder) {
        let tool = self.tool(name, hasher);
        let ids = &self.ids;
        if let Some(slot) = self
            .slots
            .find_mut(hash, |s| &ids[s.start..s.start + s.len] == call)
        {
            slot.tool = tool;
            if !slot.repeated {
                slot.repeated = true;
                self.repeats += 1;
            }
            return;
        }
        let slot = Slot {
            start: self.ids.len(),
            len: call.len(),
            tool,
            repeated: false,
        };
        self.ids.push_str(call);
        let ids = &self.ids;
        self.slots.insert_unique(hash, slot, |s| {
            hasher.hash_one(&ids[s.start..s.start + s.len])
        });
    }

    fn id(&self, slot: &Slot) -> &str {
        &self.ids[slot.start..slot.start + slot.len]
    }

    /// The index of tool `name`, added if new.
    fn tool(&mut self, name: &str, hasher: &DefaultHashBuilder) -> usize {
        let hash = hasher.hash_one(name);
        let tools = &self.tools;
        if let Some(&index) = self.tool_index.find(hash, |&i| &*tools[i] == name) {
            return index;
        }
        let index = self.tools.len();
        self.tools.push(name.into());
        let tools = &self.tools;
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
    fn shards_filled_side_by_side_are_one_table() {
        let calls: Vec<(String, String)> = (0..5_000u32)
            .map(|i| (format!("c{}", i % 1_777), format!("t{}", i % 5)))
            .collect();
        let single: ToolNames = calls
            .iter()
            .map(|(c, n)| (c.as_str(), n.as_str()))
            .collect();
        for shards in [1, 2, 3, 8] {
            let built = ToolNames::par_build(shards, |insert| {
                for (call, name) in &calls {
                    insert(call, name);
                }
                Ok::<(), ()>(())
            })
            .unwrap();
            assert_eq!(built, single);
            assert_eq!(built.len(), 1_777);
        }
        // Which ids were called more than once is known to a table built
        // from every call, and never claimed by one that was not.
        let mut all = calls.clone();
        all.extend((0..100).map(|i| (format!("s{i}"), "t0".to_owned())));
        let counts = all.iter().fold(HashMap::new(), |mut counts, (c, _)| {
            *counts.entry(c.as_str()).or_insert(0) += 1;
            counts
        });
        let mut complete = ToolNames::complete();
        for (call, name) in &calls[..1_777] {
            complete.insert(call, name);
        }
        assert!((0..1_777).all(|i| complete.never_repeated(&format!("c{i}"))));
        complete.insert("c5", "t9");
        assert!(!complete.never_repeated("c5") && complete.never_repeated("c6"));
        assert!(complete.never_repeated("never called"));
        for shards in [1, 2, 3] {
            let built = ToolNames::par_build(shards, |insert| {
                for (call, name) in &all {
                    insert(call, name);
                }
                Ok::<(), ()>(())
            })
            .unwrap();
            for (call, count) in &counts {
                assert_eq!(built.never_repeated(call), *count == 1, "{call}");
            }
        }
        assert!(!single.never_repeated("c1"));
        assert!(!single.never_repeated("c1776"));
        let failed = ToolNames::par_build(2, |_| Err("no directory"));
        assert_eq!(failed.err(), Some("no directory"));
    }

    #[test]
    fn empty_ids_and_names_are_ids_and_names() {
        let names: ToolNames = [("", "a"), ("x", ""), ("", "b")].into_iter().collect();
        assert_eq!(names.get(""), Some("b"));
        assert_eq!(names.get("x"), Some(""));
        assert_eq!(names.len(), 2);
    }
}
