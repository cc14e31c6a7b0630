//! Streams a stored conversation through the projection engine.
//!
//! The plan comes from what the store keeps beside the log (overlay entries,
//! call directories, turn index); then one pass reads the records in
//! windows, decodes and transforms each window's chunks in parallel and
//! hands the view events, in order, to a sink. Memory is bounded by the
//! window, not by the log.

use convstore_projection::{
    estimate_chars, resolve, tokens_for_chars, LogEvent, Overlay, Plan, Projector, Resolution, Run,
    Tokenizer, ViewEvent,
};
use convstore_store::{merge_ranges, Outranking, Seq, Turn};
use convstore_store::{
    ConversationId, Event, EventKind, EventType, RawChunk, Store, StoreError, StoredOverlay,
    Timestamp, ToolNames,
};

use crate::error::{Error, Result};
use rayon::prelude::*;

/// A point in a log's history: a record's seq or a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsOf {
    /// Records `0..=SEQ`.
    Seq(u64),
    /// Records up to the newest one at or before this time.
    Time(Timestamp),
}

impl AsOf {
    /// A seq (digits) or a time: RFC 3339, or `YYYY-MM-DD HH:MM:SS[.frac]`
    /// in UTC (as JP's `events.json` writes times); `None` for anything
    /// else.
    pub fn parse(text: &str) -> Option<AsOf> {
        if let Ok(seq) = text.parse::<u64>() {
            return Some(AsOf::Seq(seq));
        }
        Timestamp::parse_rfc3339(text)
            .or_else(|| {
                let (date, time) = text.split_once(' ')?;
                let zoned = time.ends_with('Z') || time.contains('+') || time.contains('-');
                let utc = if zoned { "" } else { "Z" };
                Timestamp::parse_rfc3339(&format!("{date}T{time}{utc}"))
            })
            .map(AsOf::Time)
    }
}

/// Records read before their chunks are decoded and transformed together.
const WINDOW_RECORDS: usize = 16 * 1024;

/// Which part of the log to project.
#[derive(Debug, Clone, Copy)]
pub struct Scope {
    /// Records `0..end`.
    pub end: u64,
}

impl Scope {
    /// The whole log, or as of a point: the records up to a seq (an error
    /// if there is no such record) or up to the newest record at or before
    /// a time (an error if every record is newer).
    pub fn as_of(store: &Store, id: &ConversationId, as_of: Option<AsOf>) -> Result<Scope> {
        let len = store.info(id)?.len;
        match as_of {
            None => Ok(Scope { end: len }),
            Some(AsOf::Seq(seq)) if seq >= len => Err(StoreError::NoSuchRecord { seq, len }.into()),
            Some(AsOf::Seq(seq)) => Ok(Scope { end: seq + 1 }),
            Some(AsOf::Time(time)) => match store.newest_at_or_before(id, time)? {
                Some(seq) => Ok(Scope { end: seq + 1 }),
                None => Err(Error::NothingAsOf(time)),
            },
        }
    }

    /// How many turns the records in scope span.
    pub fn turns(self, store: &Store, id: &ConversationId) -> Result<u64> {
        if self.end == 0 {
            return Ok(0);
        }
        Ok(store.turn_of(id, Seq(self.end - 1))?.0 + 1)
    }
}

/// The projector of the records in `scope`, plus `extra` (an event that
/// would be appended next, for dry runs). It reads only what the store keeps
/// for this: the overlay entries, the chunks' call directories and the turn
/// index; no record is decoded but the few that start summary runs.
pub fn plan(
    store: &Store,
    id: &ConversationId,
    scope: Scope,
    extra: Option<(u64, u64, &Event)>,
) -> Result<Projector> {
    if extra.is_some() {
        return plan_under(store, id, scope, extra, None);
    }
    let overlays = overlays_under(store, id, scope.end, None)?;
    let projector = assemble(store, id, scope, overlays, ToolNames::new(), None)?;
    let names = match results_shown(store, id, scope.end, &projector)? {
        Some(calls) => {
            let calls: std::collections::HashSet<&str> = calls.iter().map(String::as_str).collect();
            store.tool_names_of(id, scope.end, &calls)?
        }
        None => store.tool_names(id, scope.end)?,
    };
    Ok(projector.with_names(names))
}

/// The ids of the calls whose names the view of `projector` over records
/// `0..end` needs (of the results it shows stripped), when its stream
/// passes over most of the records (see [`Passing`]): the chunks it will
/// read are read for them first (their results, `config` and `system`
/// records only), and the names are looked up for those ids alone
/// ([`Store::tool_names_of`], from the end back) rather than in a table of
/// every call of the log. `None` where the stream reads a quarter of the
/// records or more, or summarizes nothing.
fn results_shown(
    store: &Store,
    id: &ConversationId,
    end: u64,
    projector: &Projector,
) -> Result<Option<Vec<String>>> {
    let Some(mut passing) = Passing::new(store, id, 0, end, projector)? else {
        return Ok(None);
    };
    // The chunks the stream will read, in order (each as the stream
    // decides: after the `config` and `system` records read before it).
    let read = |kind| {
        !matches!(
            kind,
            EventType::ToolResult | EventType::Config | EventType::System
        )
    };
    // At the least the stream reads the chunks whose turns the view does
    // not drop whole: too many of those, and nothing is read here.
    let mut least = 0;
    for chunk in store.chunks(id, 0, end)? {
        let chunk = chunk?;
        if !passing.drops_turns(&chunk, projector) {
            least += chunk.len() as u64;
        }
    }
    if least.saturating_mul(4) > end {
        return Ok(None);
    }
    let mut calls = Vec::new();
    let mut records = 0;
    for chunk in store.chunks(id, 0, end)? {
        let chunk = chunk?;
        if passing.drops(&chunk, projector) {
            continue;
        }
        records += chunk.len() as u64;
        if records.saturating_mul(4) > end {
            return Ok(None);
        }
        let mut kept = 0;
        for (seq, turn, event) in chunk.events(store, 0, end, |_, _, kind| read(kind))? {
            match event.kind {
                EventKind::ToolResult { id: call, .. } if projector.names_result(seq, turn) => {
                    calls.push(call);
                }
                EventKind::Config { .. } | EventKind::System { .. } => kept += 1,
                _ => {}
            }
        }
        passing.saw(chunk.owner(), kept);
    }
    Ok(Some(calls))
}

/// Like [`plan`], with `base` ranked below every overlay of the log (a
/// view's profile): it decides only what no compaction of the log sets.
pub fn plan_under(
    store: &Store,
    id: &ConversationId,
    scope: Scope,
    extra: Option<(u64, u64, &Event)>,
    base: Option<Overlay>,
) -> Result<Projector> {
    let (overlays, names) = plan_reads(store, id, scope.end, base)?;
    assemble(store, id, scope, overlays, names, extra)
}

/// The projectors of the records in `scope` without and with `extra` (an
/// event that would be appended next: a compaction's before and after),
/// from one read of the overlays and tool names.
pub fn plan_pair(
    store: &Store,
    id: &ConversationId,
    scope: Scope,
    extra: (u64, u64, &Event),
) -> Result<(Projector, Projector)> {
    let (overlays, names) = plan_reads(store, id, scope.end, None)?;
    let before = assemble(store, id, scope, overlays.clone(), names.clone(), None)?;
    let after = assemble(store, id, scope, overlays, names, Some(extra))?;
    Ok((before, after))
}

/// The two largest reads of a plan, side by side: the overlays of records
/// `0..end` (after `base`) and the tool names of their calls.
fn plan_reads(
    store: &Store,
    id: &ConversationId,
    end: u64,
    base: Option<Overlay>,
) -> Result<(Vec<Overlay>, ToolNames)> {
    let (overlays, names) = rayon::join(
        || overlays_under(store, id, end, base),
        || store.tool_names(id, end),
    );
    Ok((overlays?, names?))
}

/// The projector of the records in `scope` from their overlays and tool
/// names, plus `extra` (see [`plan`]).
fn assemble(
    store: &Store,
    id: &ConversationId,
    scope: Scope,
    mut overlays: Vec<Overlay>,
    mut names: ToolNames,
    extra: Option<(u64, u64, &Event)>,
) -> Result<Projector> {
    let end = scope.end;
    let mut last_turn = match end {
        0 => None,
        _ => Some(store.turn_of(id, Seq(end - 1))?.0),
    };
    if let Some((seq, turn, event)) = extra {
        match &event.kind {
            EventKind::Compaction(c) => {
                overlays.push(Overlay::from_compaction(seq, event.timestamp, c));
            }
            EventKind::ToolCall { id: call, name, .. } => {
                names.insert(call, name);
            }
            _ => {}
        }
        last_turn = Some(last_turn.map_or(turn, |t| t.max(turn)));
    }
    // The extra event counts among the records, as it will once appended
    // (a summary run to the end names it in its recall hint).
    let projected = extra.map_or(end, |(seq, ..)| end.max(seq + 1));
    Ok(Plan::assemble(
        overlays,
        names,
        last_turn,
        projected,
        first_conversation(store, id, end),
    )?)
}

/// The seq of the first conversation event of a turn among records
/// `0..end`, as a plan places summaries by it.
pub(crate) fn first_conversation<'a>(
    store: &'a Store,
    id: &'a ConversationId,
    end: u64,
) -> impl Fn(u64) -> convstore_store::StoreResult<Option<u64>> + 'a {
    move |turn| {
        store
            .first_conversation_seq(id, Turn(turn), Seq(end))
            .map(|s| s.map(|s| s.0))
    }
}

/// The overlays of records `0..end` (after `base`, if given) resolved as
/// far as turns `ranges` (inclusive) go, in a stream whose last turn is
/// `last_turn`: the spans over those turns and the summary runs that meet
/// them are exactly those of resolving every overlay; spans and runs
/// elsewhere are not. Reads the overlays that meet `ranges`, then, when a
/// summary wins there, those that meet its compaction's range (its run
/// ends where another summary takes over, inside that range): the cost
/// follows the turns asked about, not the number of compactions.
pub fn resolve_turns(
    store: &Store,
    id: &ConversationId,
    end: u64,
    last_turn: u64,
    ranges: &[(u64, u64)],
    base: Option<&Overlay>,
) -> Result<Resolution> {
    let ranges = merge_ranges(ranges.to_vec());
    resolve_widening(store, id, end, last_turn, &ranges, base, |run| {
        Ok(run_meets(run, &ranges))
    })
}

/// The overlays that meet `ranges` (merged, ascending) resolved, then, where
/// `widen` says so of a summary run, again with those that meet its
/// compaction's range and outrank that compaction (format 8; before it,
/// every one that meets the range): exact over `ranges` and over the whole
/// of each run widened, since a run ends only where a compaction that
/// outranks its own takes over. A database that does not file overlays by
/// range, or ranges that cover every turn, have every overlay read at once.
fn resolve_widening(
    store: &Store,
    id: &ConversationId,
    end: u64,
    last_turn: u64,
    ranges: &[(u64, u64)],
    base: Option<&Overlay>,
    mut widen: impl FnMut(&Run) -> Result<bool>,
) -> Result<Resolution> {
    let read = |ranges: &[(u64, u64)], outranking: &[Outranking]| -> Result<Resolution> {
        let mut overlays: Vec<Overlay> = base.into_iter().cloned().collect();
        overlays.extend(
            store
                .overlays_meeting(id, end, ranges, outranking)?
                .iter()
                .filter_map(overlay_of),
        );
        Ok(resolve(overlays, Some(last_turn)))
    };
    if !store.files_overlays_by_range()
        || ranges
            .first()
            .is_some_and(|&(a, b)| a == 0 && b >= last_turn)
    {
        // Every overlay is read (the database does not file them by range,
        // or every turn is asked about): exact everywhere.
        let overlays = overlays_under(store, id, end, base.cloned())?;
        return Ok(resolve(overlays, Some(last_turn)));
    }
    let first = read(ranges, &[])?;
    let mut wider = ranges.to_vec();
    let mut outranking = Vec::new();
    for run in &first.runs {
        if !widen(run)? {
            continue;
        }
        let overlay = &first.overlays[run.overlay];
        let Some((from, to)) = overlay.covered(last_turn) else {
            continue;
        };
        // The base (first, when given) loses to every overlay of the log.
        let is_base = base.is_some() && run.overlay == 0;
        if store.files_overlays_by_rank() && !is_base {
            outranking.push(Outranking {
                from,
                to,
                rank: (overlay.timestamp, overlay.seq),
            });
        } else {
            wider.push((from, to));
        }
    }
    let wider = merge_ranges(wider);
    if wider == ranges && outranking.is_empty() {
        return Ok(first);
    }
    read(&wider, &outranking)
}

/// Whether summary run `run` has a turn in one of `ranges` (inclusive).
pub(crate) fn run_meets(run: &Run, ranges: &[(u64, u64)]) -> bool {
    ranges.iter().any(|&(a, b)| run.first <= b && a <= run.last)
}

/// The overlay of a stored compaction.
pub(crate) fn overlay_of(o: &StoredOverlay) -> Option<Overlay> {
    match &o.event.kind {
        EventKind::Compaction(c) => Some(Overlay::from_compaction(o.seq, o.event.timestamp, c)),
        _ => None,
    }
}

/// Records of a turn range up to which [`plan_turns`] looks up the names
/// of its results' calls only, rather than of every call.
const NAMED_RECORDS: u64 = 4096;

/// Like [`plan`], for a projection of turns `turns` only, with the records
/// they span among those in `scope` (what [`stream_range`] then reads).
/// The overlays are resolved as far as the view of `turns` depends on them
/// ([`resolve_window`]), only the summary runs that meet `turns` are
/// placed, and for a short range only the calls of the results the view
/// strips are named: a few turns of a long log cost about what they
/// return.
pub fn plan_turns(
    store: &Store,
    id: &ConversationId,
    scope: Scope,
    turns: std::ops::RangeInclusive<u64>,
) -> Result<(Projector, std::ops::Range<u64>)> {
    plan_turns_by(store, id, scope, turns, false)
}

/// Like [`plan_turns`], with a resolution exact over the whole of every
/// summary run that meets `turns` ([`resolve_turns`] over them and the turn
/// on each side), so that the projector also says which turns each run
/// spans (the inspector's pages name them): a run placed before `turns`
/// is looked up too.
pub fn plan_turns_with_runs(
    store: &Store,
    id: &ConversationId,
    scope: Scope,
    turns: std::ops::RangeInclusive<u64>,
) -> Result<(Projector, std::ops::Range<u64>)> {
    plan_turns_by(store, id, scope, turns, true)
}

/// [`plan_turns`], or with `whole_runs` [`plan_turns_with_runs`].
fn plan_turns_by(
    store: &Store,
    id: &ConversationId,
    scope: Scope,
    turns: std::ops::RangeInclusive<u64>,
    whole_runs: bool,
) -> Result<(Projector, std::ops::Range<u64>)> {
    let end = scope.end;
    let seqs = store.turn_records(id, Turn(*turns.start())..=Turn(*turns.end()), Seq(end))?;
    let resolution = || -> Result<Resolution> {
        if end == 0 {
            return Ok(resolve(Vec::new(), None));
        }
        let last_turn = store.turn_of(id, Seq(end - 1))?.0;
        let asked = (*turns.start(), (*turns.end()).min(last_turn));
        if asked.0 > asked.1 {
            return Ok(resolve(Vec::new(), Some(last_turn)));
        }
        if whole_runs {
            let around = (
                asked.0.saturating_sub(1),
                asked.1.saturating_add(1).min(last_turn),
            );
            return resolve_turns(store, id, end, last_turn, &[around], None);
        }
        resolve_window(store, id, end, last_turn, asked)
    };
    let place = |resolution: Resolution| -> Result<Projector> {
        let meets = |run: &Run| run.first <= *turns.end() && *turns.start() <= run.last;
        Ok(Plan::from_resolution(
            resolution,
            ToolNames::new(),
            end,
            meets,
            first_conversation(store, id, end),
        )?)
    };
    if seqs.end - seqs.start > NAMED_RECORDS {
        let (resolution, names) = rayon::join(resolution, || store.tool_names(id, end));
        return Ok((place(resolution?)?.with_names(names?), seqs));
    }
    // A short range: the calls of the results the view strips, once it is
    // known which those are (none, where the turns are summarized). The
    // range's results are read while the overlays are.
    let results = || -> Result<Vec<(u64, u64, String)>> {
        let mut results = Vec::new();
        for record in store.scan(id, seqs.clone())? {
            let record = record?;
            if let EventKind::ToolResult { id: call, .. } = record.event.kind {
                results.push((record.seq, record.turn, call));
            }
        }
        Ok(results)
    };
    let (resolution, results) = rayon::join(resolution, results);
    let (projector, results) = (place(resolution?)?, results?);
    let calls: std::collections::HashSet<&str> = results
        .iter()
        .filter(|(seq, turn, _)| projector.names_result(*seq, *turn))
        .map(|(_, _, call)| call.as_str())
        .collect();
    let names = if calls.is_empty() {
        ToolNames::new()
    } else {
        store.tool_names_of(id, end, &calls)?
    };
    Ok((projector.with_names(names), seqs))
}

/// The resolution the view of turns `asked` (inclusive, within
/// `0..=last_turn`) depends on: exact over `asked` and the turn on each
/// side of it, so that whether a summary run goes on past either end is
/// known, and exact over the whole of each summary run whose summary the
/// view places (its first dropped event is in `asked`, and it names the
/// run's turns). A run that holds a conversation event of the turn before
/// `asked` places its summary there, outside the view, so where it begins
/// and ends is not looked up: a few turns inside a summary of the whole
/// log read the compactions around those turns, not all of them.
pub fn resolve_window(
    store: &Store,
    id: &ConversationId,
    end: u64,
    last_turn: u64,
    asked: (u64, u64),
) -> Result<Resolution> {
    let (a, b) = asked;
    let around = (a.saturating_sub(1), b.saturating_add(1).min(last_turn));
    // Whether turn `a - 1` has a conversation event: then a run holding it
    // places its summary there, before `asked`, wherever the run begins.
    let mut placed_before = None;
    resolve_widening(store, id, end, last_turn, &[around], None, |run| {
        if !run_meets(run, &[asked]) {
            return Ok(false);
        }
        if run.first >= a {
            // Exact where it begins (the winner at `a - 1` is another);
            // where it ends too, unless it goes on past `b`.
            return Ok(run.last > b);
        }
        // Where the run begins is exact only as far back as `a - 1`.
        if placed_before.is_none() {
            let first = store.first_conversation_seq(id, Turn(a - 1), Seq(end))?;
            placed_before = Some(first.is_some());
        }
        Ok(placed_before == Some(false))
    })
}

/// The overlays of records `0..end`, in log order, after `base` if given:
/// among equal `(timestamp, seq)` the resolution ranks an overlay by its
/// position, so the base loses to every overlay of the log.
pub fn overlays_under(
    store: &Store,
    id: &ConversationId,
    end: u64,
    base: Option<Overlay>,
) -> Result<Vec<Overlay>> {
    let mut overlays: Vec<Overlay> = base.into_iter().collect();
    overlays.extend(store.overlays(id, end)?.iter().filter_map(overlay_of));
    Ok(overlays)
}

/// Projects the records in `scope` with `projector`, calling `sink` with
/// each view event in order. Reads chunks in windows of about 16 Ki records,
/// decodes and transforms a window's chunks in parallel, and hands the view
/// events to `sink` in log order: memory is bounded by the window.
pub fn stream(
    store: &Store,
    id: &ConversationId,
    scope: Scope,
    projector: &Projector,
    mut sink: impl FnMut(&ViewEvent) -> Result<()>,
) -> Result<()> {
    stream_map(
        store,
        id,
        scope,
        projector,
        |view| view,
        |view| {
            for event in &view {
                sink(event)?;
            }
            Ok(())
        },
    )
}

/// Like [`stream`], but `finish` maps each chunk's view events on the
/// worker threads (to formatted bytes, say) and `sink` receives the results
/// in log order.
pub fn stream_map<T: Send>(
    store: &Store,
    id: &ConversationId,
    scope: Scope,
    projector: &Projector,
    finish: impl Fn(Vec<ViewEvent>) -> T + Sync,
    sink: impl FnMut(T) -> Result<()>,
) -> Result<()> {
    stream_range(store, id, 0..scope.end, projector, finish, sink)
}

/// Like [`stream_map`], over the records `seqs` only (the projector still
/// decides as for its whole scope).
pub fn stream_range<T: Send>(
    store: &Store,
    id: &ConversationId,
    seqs: std::ops::Range<u64>,
    projector: &Projector,
    finish: impl Fn(Vec<ViewEvent>) -> T + Sync,
    mut sink: impl FnMut(T) -> Result<()>,
) -> Result<()> {
    let (start, end) = (seqs.start, seqs.end);
    let mut passing = Passing::new(store, id, start, end, projector)?;
    // While `config` or `system` records are still to be read, the first
    // window is one chunk: they are mostly in it, and the windows after
    // it can pass over chunks.
    let mut window_records = match &passing {
        Some(p) if p.waiting() => 1,
        _ => WINDOW_RECORDS,
    };
    let mut chunks = store.chunks(id, start, end)?;
    loop {
        let mut window: Vec<RawChunk> = Vec::new();
        let (mut records, mut passed) = (0, 0);
        for chunk in chunks.by_ref() {
            let chunk = chunk?;
            if passing.as_ref().is_some_and(|p| p.drops(&chunk, projector)) {
                passed += chunk.len();
                continue;
            }
            records += chunk.len();
            window.push(chunk);
            if records >= window_records {
                break;
            }
        }
        window_records = WINDOW_RECORDS;
        if window.is_empty() {
            store.advance(passed as u64);
            return Ok(());
        }
        // The `config` and `system` records read, per chunk, while some
        // are still to be read.
        let counting = passing.as_ref().is_some_and(Passing::waiting);
        let owners: Vec<ConversationId> = window.iter().map(|c| *c.owner()).collect();
        let kept = std::sync::Mutex::new(vec![0u64; window.len()]);
        let outputs = projector.decode_transform_map(
            window.into_iter().enumerate().collect(),
            |(at, chunk): (usize, RawChunk)| {
                let reading = |seq, turn, kind| projector.reading(seq, turn, kind);
                chunk.events_read(store, start, end, reading).map(|events| {
                    let held = if counting {
                        events
                            .iter()
                            .filter(|(.., e)| kept_by_every_view(e))
                            .count()
                    } else {
                        0
                    };
                    if held > 0 {
                        kept.lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)[at] = held as u64;
                    }
                    events
                        .into_iter()
                        .map(|(seq, turn, event)| LogEvent { seq, turn, event })
                        .collect()
                })
            },
            &finish,
        )?;
        if let Some(passing) = passing.as_mut().filter(|_| counting) {
            let kept = kept
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for (owner, seen) in owners.iter().zip(kept) {
                passing.saw(owner, seen);
            }
        }
        for output in outputs {
            sink(output)?;
        }
        store.advance((records + passed) as u64);
    }
}

/// Whether `event` is of a kind every view keeps (`config`, `system`).
fn kept_by_every_view(event: &Event) -> bool {
    matches!(
        event.kind.event_type(),
        EventType::Config | EventType::System
    )
}

/// Which chunks a stream passes over unread: those whose turns (from the
/// turn index, [`Store::chunk_turns`]) the view drops whole
/// ([`Projector::drops_whole`]) and which hold no `config` or `system`
/// event (every view keeps those). Where those are is not indexed, only
/// how many records of each kind a conversation's own keys hold: a chunk
/// is known to hold none once every one its owner holds has been read
/// (a conversation's configuration is mostly at its start). A summary of
/// most of a long log then costs the reading of what it leaves, not of
/// the log.
struct Passing {
    turns: convstore_store::ChunkTurns,
    /// Per owner of the records read, the `config` and `system` records
    /// it holds that have not been read yet.
    unseen: Vec<(ConversationId, u64)>,
}

impl Passing {
    /// `None` where the view summarizes nothing.
    fn new(
        store: &Store,
        id: &ConversationId,
        start: u64,
        end: u64,
        projector: &Projector,
    ) -> Result<Option<Passing>> {
        if projector.resolution().runs.is_empty() {
            return Ok(None);
        }
        Ok(Some(Passing {
            turns: store.chunk_turns(id, start, end)?,
            unseen: store.kind_counts(id, end, &[EventType::Config, EventType::System])?,
        }))
    }

    /// Whether the view drops `chunk` whole.
    fn drops(&self, chunk: &RawChunk, projector: &Projector) -> bool {
        let none_kept = self
            .unseen
            .iter()
            .any(|(owner, unseen)| owner == chunk.owner() && *unseen == 0);
        none_kept && self.drops_turns(chunk, projector)
    }

    /// Whether the view drops every record of `chunk` but its `config` and
    /// `system` ones.
    fn drops_turns(&self, chunk: &RawChunk, projector: &Projector) -> bool {
        chunk
            .turns(&self.turns)
            .is_some_and(|t| projector.drops_whole(t, chunk.seqs()))
    }

    /// Whether `config` or `system` records are still to be read.
    fn waiting(&self) -> bool {
        self.unseen.iter().any(|&(_, unseen)| unseen > 0)
    }

    /// `seen` `config` and `system` records of `owner` were read.
    fn saw(&mut self, owner: &ConversationId, seen: u64) {
        for (o, unseen) in &mut self.unseen {
            if o == owner {
                *unseen = unseen.saturating_sub(seen);
            }
        }
    }
}

/// Whether streaming the view of `projector` reads most of records
/// `0..end` of `id`: for the choice of reading the database's files ahead
/// ([`Store::prefetch`]). No when the view summarizes at least half of the
/// turns, whose chunks its stream passes over (see [`Passing`]).
pub fn reads_most(
    store: &Store,
    id: &ConversationId,
    end: u64,
    projector: &Projector,
) -> Result<bool> {
    let turns = Scope { end }.turns(store, id)?;
    let summarized: u64 = projector
        .resolution()
        .runs
        .iter()
        .map(|run| run.last - run.first + 1)
        .sum();
    Ok(summarized.saturating_mul(2) < turns)
}

/// Reads the chunks holding records `seqs` of `id` with `read`, in
/// parallel, a window at a time, and gives `sink` what it returns, in log
/// order: for readers of the raw log that need no projection (`log`,
/// `export`). Fails as corrupt where the chunks leave a record out.
pub fn for_each_chunk<T: Send>(
    store: &Store,
    id: &ConversationId,
    seqs: std::ops::Range<u64>,
    read: impl Fn(&RawChunk) -> Result<T> + Sync,
    mut sink: impl FnMut(T) -> Result<()>,
) -> Result<()> {
    let mut chunks = store.chunks(id, seqs.start, seqs.end)?;
    let mut next = seqs.start;
    loop {
        let mut window: Vec<RawChunk> = Vec::new();
        let mut records = 0;
        // A chunk that cannot be read, or a gap, ends the walk once the
        // chunks before it are handed on: what is printed before an error
        // is every record before the damage, whatever the windows.
        let mut stop = None;
        for chunk in chunks.by_ref() {
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(e) => {
                    stop = Some(Error::from(e));
                    break;
                }
            };
            let held = chunk.seqs();
            let (start, end) = (held.start.max(next), held.end.min(seqs.end));
            if start >= end {
                continue;
            }
            if start != next {
                stop = Some(missing(store, id, next));
                break;
            }
            next = end;
            records += chunk.len();
            window.push(chunk);
            if records >= WINDOW_RECORDS {
                break;
            }
        }
        let outputs: Vec<Result<T>> = window.par_iter().map(&read).collect();
        for output in outputs {
            sink(output?)?;
        }
        store.advance(records as u64);
        if let Some(e) = stop {
            return Err(e);
        }
        if window.is_empty() {
            break;
        }
    }
    if next < seqs.end {
        return Err(missing(store, id, next));
    }
    Ok(())
}

/// Record `seq` of `id` is not where the chunks should have it: damage,
/// or a delete that took the conversation during the walk.
fn missing(store: &Store, id: &ConversationId, seq: u64) -> Error {
    let gap = convstore_store::StoreError::Corrupt {
        what: format!("conversation {id}: record {seq} is missing from the log"),
    };
    Error::Store(store.unless_deleted(id, gap))
}

/// The view's events and characters per kind, with `extra` appended.
pub fn tally(
    store: &Store,
    id: &ConversationId,
    scope: Scope,
    extra: Option<(u64, u64, &Event)>,
) -> Result<Tally> {
    tally_with(store, id, scope, extra, &Tokenizer::Chars4)
}

/// Like [`tally`], counting tokens with `tokenizer` too (on the worker
/// threads: an exact tokenizer costs tens of microseconds an event).
pub fn tally_with(
    store: &Store,
    id: &ConversationId,
    scope: Scope,
    extra: Option<(u64, u64, &Event)>,
    tokenizer: &Tokenizer,
) -> Result<Tally> {
    let projector = plan(store, id, scope, extra)?;
    let mut tally = Tally::default();
    stream_map(
        store,
        id,
        scope,
        &projector,
        |view| {
            let mut part = Tally::default();
            for v in &view {
                part.add_counted(&v.event, tokenizer);
            }
            part
        },
        |part| {
            tally.merge(&part);
            Ok(())
        },
    )?;
    Ok(tally)
}

/// The tallies of two views of the records in `scope` at once, `first`'s
/// and `second`'s (projectors of one log: before and after a compaction,
/// say): each chunk is read and decoded once, leaving out the records
/// both drop, and each record is transformed by both.
pub fn tally_two(
    store: &Store,
    id: &ConversationId,
    scope: Scope,
    first: &Projector,
    second: &Projector,
    tokenizer: &Tokenizer,
) -> Result<(Tally, Tally)> {
    let tally = |chunk: &RawChunk| -> Result<(Tally, Tally)> {
        let drops = |seq, turn, kind| first.drops(seq, turn, kind) && second.drops(seq, turn, kind);
        let events = chunk.events(store, 0, scope.end, drops)?;
        let (mut a, mut b) = (Tally::default(), Tally::default());
        let mut view = Vec::new();
        let mut count = |projector: &Projector, event: LogEvent, into: &mut Tally| {
            view.clear();
            projector.transform(event, &mut view);
            for v in &view {
                into.add_counted(&v.event, tokenizer);
            }
        };
        for (seq, turn, event) in events {
            let kind = event.kind.event_type();
            let (to_first, to_second) = (
                !first.drops(seq, turn, kind),
                !second.drops(seq, turn, kind),
            );
            if to_first && to_second {
                let copy = LogEvent {
                    seq,
                    turn,
                    event: event.clone(),
                };
                count(first, copy, &mut a);
            }
            let event = LogEvent { seq, turn, event };
            match (to_first, to_second) {
                (_, true) => count(second, event, &mut b),
                (true, false) => count(first, event, &mut a),
                (false, false) => {}
            }
        }
        Ok((a, b))
    };
    let (mut a, mut b) = (Tally::default(), Tally::default());
    for_each_chunk(store, id, 0..scope.end, tally, |(part_a, part_b)| {
        a.merge(&part_a);
        b.merge(&part_b);
        Ok(())
    })?;
    Ok((a, b))
}

/// Events, characters and (with an exact tokenizer) tokens of a view, per
/// event type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Events per type, by [`EventType::index`].
    pub events: [u64; 10],
    /// Characters a model reads per type.
    pub chars: [u64; 10],
    /// Tokens per type, counted by an exact tokenizer (none: four
    /// characters a token).
    pub tokens: Option<[u64; 10]>,
}

impl Tally {
    /// Counts one view event.
    pub fn add(&mut self, event: &Event) {
        let i = event.kind.event_type().index();
        self.events[i] += 1;
        self.chars[i] += estimate_chars(event);
    }

    /// Counts one view event, and its tokens with `tokenizer` if it is
    /// exact.
    pub fn add_counted(&mut self, event: &Event, tokenizer: &Tokenizer) {
        self.add(event);
        if let Tokenizer::Bpe { .. } = tokenizer {
            let tokens = self.tokens.get_or_insert([0; 10]);
            tokens[event.kind.event_type().index()] += tokenizer.count(event);
        }
    }

    /// Adds another tally's counts.
    pub fn merge(&mut self, other: &Tally) {
        for i in 0..10 {
            self.events[i] += other.events[i];
            self.chars[i] += other.chars[i];
        }
        if let Some(theirs) = other.tokens {
            let ours = self.tokens.get_or_insert([0; 10]);
            for i in 0..10 {
                ours[i] += theirs[i];
            }
        }
    }

    /// Characters of the whole view.
    pub fn total_chars(&self) -> u64 {
        self.chars.iter().sum()
    }

    /// Tokens of the whole view: counted, or four characters a token.
    pub fn total_tokens(&self) -> u64 {
        match &self.tokens {
            Some(tokens) => tokens.iter().sum(),
            None => tokens_for_chars(self.total_chars()),
        }
    }

    /// Tokens of one type: counted, or four characters a token.
    pub fn tokens_of(&self, kind: EventType) -> u64 {
        match &self.tokens {
            Some(tokens) => tokens[kind.index()],
            None => tokens_for_chars(self.chars[kind.index()]),
        }
    }

    /// `(events, characters)` of one type.
    pub fn of(&self, kind: EventType) -> (u64, u64) {
        (self.events[kind.index()], self.chars[kind.index()])
    }
}
