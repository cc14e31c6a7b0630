//! Materialized views: a projection stored in the database and kept
//! current ([`refresh`]), read without re-projecting ([`read`]), and
//! checked against a fresh projection ([`check`]).
//!
//! A view is stored as blocks of view events, each covering a range of raw
//! turns (`convstore_store::ViewBlock`). Since a view event depends only on
//! its raw event, its turn's winning policies, whether it opens a summary
//! run and the name of the latest call with its tool id, an update
//! recomputes only the turns that can have changed:
//!
//! - the last turn the view had and every new turn (new events);
//! - for each new compaction, the turns it covers and the turn after them
//!   (a summary run that continues past it starts a new run there);
//! - the first turn of each summary run that meets or touches those ranges
//!   (its injected events carry the run's turn range, which can change);
//! - the turns of results shown without a call when a call with their id
//!   arrives.
//!
//! Each dirty range widens to whole blocks. A call that gives an id seen
//! before another name renames results anywhere: the view is rebuilt.
//! The plan (overlays, call names, summary runs) is read from the store's
//! side data as for `project`; the records read are those of the dirty
//! turns only.

use convstore_store::{merge_ranges, Seq, Turn};
use std::collections::{btree_map, BTreeMap, HashMap, HashSet};

use convstore_projection::config::Config;
use convstore_projection::{Overlay, Plan, Projector, Run, ViewEvent};
use convstore_store::{
    call_bucket, Address, CallEntry, ConversationId, EventKind, EventType, Store, Timestamp,
    ToolNames, ViewBlock, ViewState, ViewUpdate,
};

use crate::error::{Error, Result};
use crate::pipeline::{self as view, Scope};

/// Where blocks of a stored view close: at the first turn boundary after
/// `events` view events or `turns` turns. An update rewrites whole blocks,
/// so they bound the work a small append costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockLimits {
    /// Events after which a block closes.
    pub events: usize,
    /// Turns after which a block closes.
    pub turns: u64,
}

impl BlockLimits {
    /// 512 events or 64 turns, whichever comes first.
    pub const DEFAULT: BlockLimits = BlockLimits {
        events: 512,
        turns: 64,
    };
}

impl Default for BlockLimits {
    fn default() -> Self {
        BlockLimits::DEFAULT
    }
}

/// What [`refresh`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refresh {
    /// The view already reflected the head.
    Current,
    /// The view was projected whole (new, or a tool call id renamed).
    Built,
    /// The view was brought up to date by recomputing these turn ranges.
    Updated(Vec<(u64, u64)>),
}

/// The base overlay of a view's profile: every turn, ranked below every
/// compaction of the log.
fn base_overlay(profile: Option<&str>) -> Result<Option<Overlay>> {
    let Some(name) = profile else {
        return Ok(None);
    };
    let config = Config::default();
    let profile = config.profile(name)?;
    if !profile.is_mechanical() {
        return Err(Error::SummaryProfile(name.to_owned()));
    }
    Ok(Some(Overlay::from_compaction(
        0,
        Timestamp::EARLIEST,
        &profile.compaction(0, u64::MAX, None, &config),
    )))
}

/// The projector of records `0..end` for a view with `profile` (a
/// mechanical profile ranked below every compaction of the log, as a
/// materialized view with that profile applies it): what a face that
/// projects "with a profile" without storing a view uses.
pub fn projector(
    store: &Store,
    id: &ConversationId,
    end: u64,
    profile: Option<&str>,
) -> Result<Projector> {
    view::plan_under(store, id, Scope { end }, None, base_overlay(profile)?)
}

/// Brings view `name` of `id` up to the conversation's head, creating it
/// (with `profile`, if given) when it does not exist. Returns its state and
/// what was done. Fails if `profile` differs from the existing view's.
///
/// Names starting with `.` are convstore's own (automatic compaction
/// measures the view `.auto`): a view of that name that does not exist yet
/// is refused here; [`refresh_with`] makes them.
pub fn refresh(
    store: &Store,
    id: &ConversationId,
    name: &str,
    profile: Option<&str>,
) -> Result<(ViewState, Refresh)> {
    if name.starts_with(RESERVED) && store.view_state(id, name)?.is_none() {
        return Err(Error::ReservedViewName(name.to_owned()));
    }
    refresh_with(store, id, name, profile, RefreshOptions::default())
}

/// The first character of the names of convstore's own views.
pub const RESERVED: char = '.';

/// How [`refresh_with`] writes a view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RefreshOptions {
    /// Where blocks close.
    pub limits: BlockLimits,
    /// Return before the update is durable (for callers that refresh after
    /// every small append; a view is rebuilt from the log anyway).
    pub no_sync: bool,
}

impl RefreshOptions {
    /// Blocks closed at the default limits, the update durable.
    pub const fn new() -> RefreshOptions {
        RefreshOptions {
            limits: BlockLimits::DEFAULT,
            no_sync: false,
        }
    }

    /// Blocks closed at `limits`.
    #[must_use]
    pub const fn with_limits(mut self, limits: BlockLimits) -> RefreshOptions {
        self.limits = limits;
        self
    }

    /// Without waiting for durability when `no_sync`.
    #[must_use]
    pub const fn unsynced(mut self, no_sync: bool) -> RefreshOptions {
        self.no_sync = no_sync;
        self
    }
}

impl Default for RefreshOptions {
    fn default() -> Self {
        RefreshOptions::new()
    }
}

/// [`refresh`] with `options`.
pub fn refresh_with(
    store: &Store,
    id: &ConversationId,
    name: &str,
    profile: Option<&str>,
    options: RefreshOptions,
) -> Result<(ViewState, Refresh)> {
    // A concurrent refresh of the same view in this process makes the
    // write fail its check; the work is then redone from the new state.
    for _ in 0..8 {
        match try_refresh(store, id, name, profile, options) {
            Err(e) if is_conflict(&e) => {}
            other => return other,
        }
    }
    Err(Error::ViewBusy(name.to_owned()))
}

fn is_conflict(error: &Error) -> bool {
    error.is_conflict()
}

fn try_refresh(
    store: &Store,
    id: &ConversationId,
    name: &str,
    profile: Option<&str>,
    RefreshOptions { limits, no_sync }: RefreshOptions,
) -> Result<(ViewState, Refresh)> {
    let info = store.info(id)?;
    let old = store.view_state(id, name)?;
    if old.is_none() {
        convstore_store::validate_view_name(name)?;
    }
    if let (Some(old), Some(asked)) = (&old, profile) {
        if old.profile.as_deref() != Some(asked) {
            return Err(Error::ViewProfile {
                name: name.to_owned(),
                existing: old
                    .profile
                    .as_deref()
                    .map_or("no profile".to_owned(), |p| format!("profile {p}")),
            });
        }
    }
    // The stored view to build on: not one a failed write left torn (it
    // is rebuilt whole).
    let reusable = match &old {
        Some(o) if o.len <= info.len && torn(store, id, o)?.is_none() => Some(o),
        _ => None,
    };
    if let Some(old) = reusable {
        if old.len == info.len && old.head == info.head {
            return Ok((old.clone(), Refresh::Current));
        }
    }
    let profile = old.as_ref().map_or(profile, |o| o.profile.as_deref());
    let base = base_overlay(profile)?;
    let state = ViewState {
        name: name.to_owned(),
        profile: profile.map(str::to_owned),
        len: info.len,
        head: info.head,
        events: 0,
        created: old.as_ref().map_or_else(Timestamp::now, |o| o.created),
    };
    let update = match reusable {
        Some(old) if old.len > 0 => {
            Update::incremental(store, id, old, state.clone(), base.as_ref(), limits)?
        }
        _ => None,
    };
    let (update, outcome) = match update {
        Some((update, ranges)) => (update, Refresh::Updated(ranges)),
        None => (
            Update::full(store, id, state, base, limits)?,
            Refresh::Built,
        ),
    };
    store.write_view(
        id,
        &ViewUpdate {
            expected_len: old.map(|o| o.len),
            no_sync,
            ..update
        },
    )?;
    Ok((stored_state(store, id, name)?, outcome))
}

fn stored_state(store: &Store, id: &ConversationId, name: &str) -> Result<ViewState> {
    if let Some(state) = store.view_state(id, name)? {
        return Ok(state);
    }
    // Gone with its conversation, deleted meanwhile: not found.
    store.info(id)?;
    Err(Error::ViewVanished(name.to_owned()))
}

/// Inclusive turn ranges.
type Ranges = Vec<(u64, u64)>;

/// Builds the [`ViewUpdate`]s of [`refresh`].
struct Update;

impl Update {
    /// The whole view of records `0..state.len`, and its call index.
    fn full(
        store: &Store,
        id: &ConversationId,
        state: ViewState,
        base: Option<Overlay>,
        limits: BlockLimits,
    ) -> Result<ViewUpdate> {
        let n = state.len;
        let mut update = ViewUpdate {
            expected_len: None,
            state,
            removed: vec![(0, u64::MAX)],
            blocks: Vec::new(),
            reset_calls: true,
            calls: Vec::new(),
            no_sync: false,
        };
        if n == 0 {
            return Ok(update);
        }
        let projector = view::plan_under(store, id, Scope { end: n }, None, base)?;
        let last_turn = store.turn_of(id, Seq(n - 1))?.0;
        let events = project_turns(store, id, n, &projector, 0, last_turn)?;
        let mut index = CallIndex::default();
        for (call, name) in store.tool_names(id, n)?.iter() {
            index.entry(call.to_owned()).name = Some(name.to_owned());
        }
        index.add_orphans(&events, |call| projector.tool_name(call).is_some());
        update.blocks = split_into_blocks(0, last_turn, events, limits);
        update.calls = index.into_buckets();
        Ok(update)
    }

    /// The change from the stored view `old` to records `0..state.len`,
    /// with the turn ranges it recomputes; `None` when the view must be
    /// rebuilt instead.
    fn incremental(
        store: &Store,
        id: &ConversationId,
        old: &ViewState,
        state: ViewState,
        base: Option<&Overlay>,
        limits: BlockLimits,
    ) -> Result<Option<(ViewUpdate, Ranges)>> {
        let (h, n) = (old.len, state.len);
        // The view's head must still be in the log where it was.
        if store.record(id, h - 1)?.address != old.head {
            return Ok(None);
        }
        let old_last = store.turn_of(id, Seq(h - 1))?.0;
        let last_turn = store.turn_of(id, Seq(n - 1))?.0;
        let mut ranges = vec![(old_last, last_turn)];

        // New calls: a known id under another name renames results anywhere
        // (rebuild); an id whose results came first renames those.
        let mut index = CallIndex::default();
        let new_calls = store.tool_calls(id, h, n)?;
        let mut latest: HashMap<&str, &str> = HashMap::new();
        for (_, call, name) in &new_calls {
            latest.insert(call, name);
        }
        for (&call, &name) in &latest {
            index.load(store, id, &old.name, call)?;
            let entry = index.entry(call.to_owned());
            if entry.name.as_deref().is_some_and(|known| known != name) {
                return Ok(None);
            }
            ranges.extend(entry.orphans.iter().map(|&t| (t, t)));
            entry.orphans.clear();
            entry.name = Some(name.to_owned());
        }

        // New compactions: the turns they cover and the turn after them.
        let mut touched = vec![(old_last, last_turn)];
        for overlay in store
            .overlays_between(id, h, n)?
            .iter()
            .filter_map(view::overlay_of)
        {
            if let Some((first, last)) = overlay.covered(last_turn) {
                ranges.push((first, (last + 1).min(last_turn)));
                touched.push((first.saturating_sub(1), (last + 1).min(last_turn)));
            }
        }
        // A summary run's injected events, in its first turn, say which
        // turns it stands for: a run that gained or lost turns (it meets a
        // new overlay's range or the turns after the old last one, or is
        // next to them) has its first turn recomputed. Only the overlays
        // that meet those turns are read.
        let touched = merge_ranges(touched);
        let around = view::resolve_turns(store, id, n, last_turn, &touched, base)?;
        for run in &around.runs {
            if view::run_meets(run, &touched) {
                ranges.push((run.first, run.first));
            }
        }
        let ranges = widen_to_blocks(store, id, &old.name, merge_ranges(ranges))?;
        let inside = |&(a, b): &(u64, u64)| touched.iter().any(|&(c, d)| c <= a && b <= d);
        let resolution = if ranges.iter().all(inside) {
            around
        } else {
            view::resolve_turns(store, id, n, last_turn, &ranges, base)?
        };

        // The names the dirty turns' results need, and the summaries of the
        // runs that meet them.
        let mut names = ToolNames::new();
        for &(first, last) in &ranges {
            for call in result_ids(store, id, n, first, last)? {
                index.load(store, id, &old.name, &call)?;
                if let Some(name) = &index.entry(call.clone()).name {
                    names.insert(&call, name);
                }
            }
        }
        let meets = |run: &Run| view::run_meets(run, &ranges);
        let projector = Plan::from_resolution(
            resolution,
            names,
            n,
            meets,
            view::first_conversation(store, id, n),
        )?;

        let mut blocks = Vec::new();
        for &(first, last) in &ranges {
            let events = project_turns(store, id, n, &projector, first, last)?;
            index.add_orphans(&events, |call| projector.tool_name(call).is_some());
            blocks.extend(split_into_blocks(first, last, events, limits));
        }
        let update = ViewUpdate {
            expected_len: None,
            state,
            removed: ranges.clone(),
            blocks,
            reset_calls: false,
            calls: index.into_buckets(),
            no_sync: false,
        };
        Ok(Some((update, ranges)))
    }
}

/// The part of a view's call index an update reads and changes, by bucket.
#[derive(Default)]
struct CallIndex {
    buckets: BTreeMap<u16, Vec<CallEntry>>,
}

impl CallIndex {
    /// Reads the bucket of `call` from the stored index, once.
    fn load(&mut self, store: &Store, id: &ConversationId, view: &str, call: &str) -> Result<()> {
        let bucket = call_bucket(call);
        if let btree_map::Entry::Vacant(slot) = self.buckets.entry(bucket) {
            slot.insert(store.view_calls(id, view, bucket)?);
        }
        Ok(())
    }

    /// The entry of `call` (created empty if absent).
    fn entry(&mut self, call: String) -> &mut CallEntry {
        let bucket = self.buckets.entry(call_bucket(&call)).or_default();
        let i = bucket.iter().position(|e| e.id == call).unwrap_or_else(|| {
            bucket.push(CallEntry {
                id: call,
                name: None,
                orphans: Vec::new(),
            });
            bucket.len() - 1
        });
        &mut bucket[i]
    }

    /// Records the turns of results in `events` whose id has no call.
    fn add_orphans(&mut self, events: &[ViewEvent], has_call: impl Fn(&str) -> bool) {
        for e in events {
            if let EventKind::ToolResult { id: call, .. } = &e.event.kind {
                if !has_call(call) {
                    let entry = self.entry(call.clone());
                    if !entry.orphans.contains(&e.turn) {
                        entry.orphans.push(e.turn);
                    }
                }
            }
        }
    }

    fn into_buckets(self) -> Vec<(u16, Vec<CallEntry>)> {
        self.buckets.into_iter().collect()
    }
}

/// The ids of the tool results among the records of turns `first..=last`
/// of records `0..n`.
fn result_ids(
    store: &Store,
    id: &ConversationId,
    n: u64,
    first: u64,
    last: u64,
) -> Result<HashSet<String>> {
    let mut ids = HashSet::new();
    let seqs = store.turn_records(id, Turn(first)..=Turn(last), Seq(n))?;
    for chunk in store.chunks(id, seqs.start, seqs.end)? {
        let only_results = |_, _, kind| kind != EventType::ToolResult;
        for (_, _, event) in chunk?.events(store, seqs.start, seqs.end, only_results)? {
            if let EventKind::ToolResult { id: call, .. } = event.kind {
                ids.insert(call);
            }
        }
    }
    Ok(ids)
}

/// Widens each range to the blocks that hold its ends, so that whole
/// blocks are replaced.
fn widen_to_blocks(
    store: &Store,
    id: &ConversationId,
    name: &str,
    ranges: Vec<(u64, u64)>,
) -> Result<Vec<(u64, u64)>> {
    let mut out = Vec::with_capacity(ranges.len());
    for (a, b) in ranges {
        let first = store.view_block_at(id, name, a)?.map_or(a, |(f, _)| f);
        let last = store
            .view_block_at(id, name, b)?
            .map_or(b, |(_, l)| l.max(b));
        out.push((first, last));
    }
    Ok(merge_ranges(out))
}

/// The view events of raw turns `first..=last` of the records `0..n`.
fn project_turns(
    store: &Store,
    id: &ConversationId,
    n: u64,
    projector: &Projector,
    first: u64,
    last: u64,
) -> Result<Vec<ViewEvent>> {
    let seqs = store.turn_records(id, Turn(first)..=Turn(last), Seq(n))?;
    let mut out = Vec::new();
    view::stream_range(
        store,
        id,
        seqs,
        projector,
        |v| v,
        |v| {
            out.extend(v);
            Ok(())
        },
    )?;
    Ok(out)
}

/// Cuts the view events of turns `first..=last` into blocks at turn
/// boundaries; the blocks tile `first..=last`.
fn split_into_blocks(
    first: u64,
    last: u64,
    events: Vec<ViewEvent>,
    limits: BlockLimits,
) -> Vec<ViewBlock> {
    let mut blocks = Vec::new();
    let mut current = ViewBlock {
        first_turn: first,
        last_turn: first,
        events: Vec::new(),
    };
    for e in events {
        if e.turn > current.last_turn {
            if current.events.len() >= limits.events || e.turn - current.first_turn >= limits.turns
            {
                current.last_turn = e.turn - 1;
                blocks.push(std::mem::replace(
                    &mut current,
                    ViewBlock {
                        first_turn: e.turn,
                        last_turn: e.turn,
                        events: Vec::new(),
                    },
                ));
            } else {
                current.last_turn = e.turn;
            }
        }
        current.events.push(e);
    }
    current.last_turn = last.max(current.last_turn);
    blocks.push(current);
    blocks
}

/// Calls `sink` with each event of the stored view `name`, in order. The
/// view is read as stored: call [`refresh`] first for the current one.
pub fn read(
    store: &Store,
    id: &ConversationId,
    name: &str,
    mut sink: impl FnMut(ViewEvent) -> Result<()>,
) -> Result<()> {
    for block in store.view_blocks(id, name, 0)? {
        for e in block?.events {
            sink(e)?;
        }
    }
    Ok(())
}

/// Checks a stored view against a fresh projection of the head it
/// records: `Ok(None)` when equal, else what differs.
pub fn check(store: &Store, id: &ConversationId, state: &ViewState) -> Result<Option<String>> {
    let len = store.info(id)?.len;
    if state.len > len {
        return Ok(Some(format!(
            "it reflects {} records but the log has {len}",
            state.len
        )));
    }
    let head = match state.len.checked_sub(1) {
        Some(last) => store.record(id, last)?.address,
        None => Address::ROOT,
    };
    if head != state.head {
        return Ok(Some(format!(
            "its head {} is not record {}'s address {head}",
            state.head,
            state.len.saturating_sub(1)
        )));
    }
    let projector = projector(store, id, state.len, state.profile.as_deref())?;
    let mut fresh = Vec::new();
    view::stream(store, id, Scope { end: state.len }, &projector, |v| {
        fresh.push(v.clone());
        Ok(())
    })?;
    if let Some(problem) = torn(store, id, state)? {
        return Ok(Some(problem));
    }
    let mut stored = Vec::new();
    for block in store.view_blocks(id, &state.name, 0)? {
        stored.extend(block?.events);
    }
    if let Some(i) = (0..fresh.len().max(stored.len())).find(|&i| fresh.get(i) != stored.get(i)) {
        return Ok(Some(format!(
            "event {i} differs from a fresh projection of record {} (stored {}, fresh {})",
            state.len.saturating_sub(1),
            stored
                .get(i)
                .map_or("nothing".to_owned(), |v| format!("seq {}", v.seq)),
            fresh
                .get(i)
                .map_or("nothing".to_owned(), |v| format!("seq {}", v.seq)),
        )));
    }
    Ok(None)
}

/// What is wrong with the shape of the stored view `state`, if anything:
/// its blocks must tile turns 0 to the turn of its last record and hold
/// the events its state counts. Reads only the blocks' outline.
///
/// sled applies a batch key by key, and an insert that fails part way (a
/// full disk) cancels the batch without undoing the inserts before it,
/// which can reach the disk: a view update (state key before block keys)
/// was seen to leave a state counting 18,000 events over no blocks.
/// [`refresh`] rebuilds such a view instead of serving it.
fn torn(store: &Store, id: &ConversationId, state: &ViewState) -> Result<Option<String>> {
    let mut next_turn = 0;
    let mut events = 0;
    for block in store.view_outline(id, &state.name)? {
        if block.first_turn != next_turn {
            return Ok(Some(format!(
                "its blocks do not tile the turns: a block starts at turn {} where turn {next_turn} was expected",
                block.first_turn
            )));
        }
        next_turn = block.last_turn + 1;
        events += block.events;
    }
    let end = match state.len.checked_sub(1) {
        Some(last) => store.turn_of(id, Seq(last))?.0 + 1,
        None => 0,
    };
    if next_turn != end {
        return Ok(Some(format!(
            "its blocks cover turns up to {next_turn} (exclusive) but its records reach turn {end} (exclusive)"
        )));
    }
    if events != state.events {
        return Ok(Some(format!(
            "its state counts {} events but its blocks hold {events}",
            state.events
        )));
    }
    Ok(None)
}

/// Every stored view of every conversation of `store` against a fresh
/// projection of the head it records (what a backup checks in its copy):
/// the first that differs, in words.
pub fn check_all(store: &Store) -> std::result::Result<(), String> {
    for conversation in store.conversations().map_err(|e| e.to_string())? {
        for state in store.views(&conversation.id).map_err(|e| e.to_string())? {
            let problem = check(store, &conversation.id, &state).map_err(|e| e.to_string())?;
            if let Some(problem) = problem {
                return Err(format!(
                    "conversation {}: view \"{}\": {problem}",
                    conversation.id, state.name
                ));
            }
        }
    }
    Ok(())
}
