//! What the web inspector shows of a conversation: its [`timeline`] (every
//! compaction over its turn range, which one wins each content type
//! where, pins, tokens per turn of the raw log and of the view) and
//! [`page`]s of the raw log beside the view, aligned by seq.
//!
//! Both are bounded: a timeline's token chart has at most a few thousand
//! buckets whatever the number of turns, and a page holds at most
//! [`PAGE_MAX`] records, with the view events made from them (a page of a
//! 10^6-event log reads about what it shows; its plan reads the overlay
//! entries and the turn index, as `project --turns` does).

use convstore_projection::{
    estimate_chars, tokens_for_chars, Overlay, Plan, Span, Summary, ToolPolicy, ViewEvent,
};
use convstore_store::event::ReasoningPolicy;
use convstore_store::{
    ConversationId, Event, EventKind, Store, StoreError, Timestamp, ToolNames, Turn,
};
use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::explain::{overlay_json, policy_text};
use crate::pipeline::{self, Scope};

/// The most records a [`page`] holds.
pub const PAGE_MAX: u64 = 1000;

/// The most buckets of a [`timeline`]'s token chart.
pub const BUCKETS_MAX: usize = 4000;

/// Texts longer than this are cut in a page (the rest is one `recall`
/// away).
pub const TEXT_MAX: usize = 4000;

/// A conversation's compactions and tokens along its turns.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Timeline {
    /// Records in scope.
    pub events: u64,
    /// Turns they span.
    pub turns: u64,
    /// The newest record in scope (`None` for an empty log).
    pub as_of: Option<u64>,
    /// The timestamp of that record.
    pub last_activity: Option<Timestamp>,
    /// Every compaction in scope, in log order.
    pub overlays: Vec<Overlay>,
    /// Disjoint turn spans with their winners (indices into `overlays`).
    pub spans: Vec<Span>,
    /// Pinned turn ranges (kept out of automatic compaction).
    pub pins: Vec<(u64, u64)>,
    /// Turns a bucket of the token chart spans.
    pub bucket_turns: u64,
    /// Tokens per bucket (four characters a token): raw log, view.
    pub tokens: Vec<(u64, u64)>,
    /// Tokens of the whole raw log and of the whole view (counted from
    /// their characters once, as `stats` counts them, not summed from the
    /// rounded buckets).
    pub totals: (u64, u64),
    /// The `profile` each compaction was stored with, by seq.
    pub profiles: std::collections::HashMap<u64, String>,
}

/// The timeline of the records in `scope`, its token chart in at most
/// `buckets` buckets (at least one, at most [`BUCKETS_MAX`]). Reads the
/// whole log once for the raw tokens and projects it once for the view's,
/// each decoded on every core.
pub fn timeline(
    store: &Store,
    id: &ConversationId,
    scope: Scope,
    buckets: usize,
) -> Result<Timeline> {
    let turns = scope.turns(store, id)?;
    let last_turn = turns.checked_sub(1);
    let buckets = buckets.clamp(1, BUCKETS_MAX) as u64;
    let bucket_turns = turns.div_ceil(buckets).max(1);
    let count = turns.div_ceil(bucket_turns) as usize;
    let raw = Plan::assemble(
        Vec::new(),
        ToolNames::default(),
        last_turn,
        scope.end,
        |_| Ok::<_, StoreError>(None),
    )?;
    let view = pipeline::plan(store, id, scope, None)?;
    let mut tokens = vec![(0u64, 0u64); count];
    let (raw_chars, view_chars) = rayon::join(
        || chars_per_bucket(store, id, scope, &raw, bucket_turns, count),
        || chars_per_bucket(store, id, scope, &view, bucket_turns, count),
    );
    let (raw_chars, view_chars) = (raw_chars?, view_chars?);
    for (slot, (r, v)) in tokens.iter_mut().zip(raw_chars.iter().zip(&view_chars)) {
        *slot = (tokens_for_chars(*r), tokens_for_chars(*v));
    }
    let totals = (
        tokens_for_chars(raw_chars.iter().sum()),
        tokens_for_chars(view_chars.iter().sum()),
    );
    let mut profiles = std::collections::HashMap::new();
    for row in crate::stats::compactions(store, id, scope.end)? {
        if let (Some(seq), Some(profile)) = (row["seq"].as_u64(), row["profile"].as_str()) {
            profiles.insert(seq, profile.to_owned());
        }
    }
    let last_activity = match scope.end {
        0 => None,
        end => store
            .scan(id, end - 1..end)?
            .next()
            .transpose()?
            .map(|r| r.event.timestamp),
    };
    Ok(Timeline {
        events: scope.end,
        turns,
        as_of: scope.end.checked_sub(1),
        last_activity,
        overlays: view.resolution().overlays.clone(),
        spans: view.resolution().spans.clone(),
        pins: store.pins(id)?,
        bucket_turns,
        tokens,
        totals,
        profiles,
    })
}

/// Characters a model reads per bucket of `bucket_turns` turns, of what
/// `projector` makes of the records in `scope`.
fn chars_per_bucket(
    store: &Store,
    id: &ConversationId,
    scope: Scope,
    projector: &convstore_projection::Projector,
    bucket_turns: u64,
    count: usize,
) -> Result<Vec<u64>> {
    let mut chars = vec![0u64; count];
    pipeline::stream_map(
        store,
        id,
        scope,
        projector,
        |view| {
            view.iter()
                .map(|v| (v.turn / bucket_turns, estimate_chars(&v.event)))
                .collect::<Vec<_>>()
        },
        |part| {
            for (bucket, n) in part {
                if let Some(slot) = chars.get_mut(bucket as usize) {
                    *slot += n;
                }
            }
            Ok(())
        },
    )?;
    Ok(chars)
}

impl Timeline {
    /// As the server answers it: overlays with what they set (and whether
    /// each is a revert), spans with the winning overlay's seq per content
    /// type, pins, and the token chart.
    pub fn to_json(&self) -> Value {
        let last = self.turns.saturating_sub(1);
        let seq_of = |i: Option<usize>| i.map(|i| self.overlays[i].seq);
        json!({
            "events": self.events,
            "turns": self.turns,
            "as_of": self.as_of,
            "last_activity": self.last_activity.map(|t| t.to_string()),
            "compactions": self.overlays.iter().map(|o| {
                let mut value = overlay_json(o);
                value["covers"] = json!(o.covered(last).map(|(a, b)| [a, b]));
                value["revert"] = json!(is_revert(o));
                value["recall_hints"] = json!(o.recall_hints);
                value["describe"] = json!(describe(o));
                value["profile"] = json!(self.profiles.get(&o.seq));
                value
            }).collect::<Vec<_>>(),
            "spans": self.spans.iter().map(|s| json!({
                "first": s.first,
                "last": s.last,
                "summary": seq_of(s.summary),
                "reasoning": seq_of(s.reasoning),
                "tool_calls": seq_of(s.tool_calls),
            })).collect::<Vec<_>>(),
            "pins": self.pins.iter().map(|(a, b)| [a, b]).collect::<Vec<_>>(),
            "bucket_turns": self.bucket_turns,
            "tokens": self.tokens.iter().map(|(r, v)| [r, v]).collect::<Vec<_>>(),
            "raw_tokens": self.totals.0,
            "projected_tokens": self.totals.1,
        })
    }
}

/// What `o` sets, in a few words: `summary "…"`, `reasoning=strip`,
/// `tool_calls=omit`.
fn describe(o: &Overlay) -> String {
    let mut parts = Vec::new();
    if o.summary.is_some() {
        parts.push(policy_text(o, "summary"));
    }
    for kind in ["reasoning", "tool_calls"] {
        let text = policy_text(o, kind);
        if text != "-" {
            parts.push(format!("{kind}={text}"));
        }
    }
    parts.join(" ")
}

/// Whether `o` is a revert: keep for all three content types.
fn is_revert(o: &Overlay) -> bool {
    matches!(o.summary, Some(Summary::Keep))
        && matches!(o.reasoning, Some(ReasoningPolicy::Keep))
        && matches!(o.tool_calls, Some(ToolPolicy::Keep))
}

/// Where a [`page`] starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// At this record.
    Seq(u64),
    /// At the first record of this turn.
    Turn(u64),
}

/// Records of the raw log beside the view events made from them.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Page {
    /// Records in scope.
    pub events: u64,
    /// The first record of the page.
    pub from: u64,
    /// One past its last record.
    pub end: u64,
    /// Each record with the view events carrying its seq (the summary
    /// events injected before it among them).
    pub rows: Vec<Row>,
    /// Per row: the turns of the summary that replaces it, if one does.
    pub summarized: Vec<Option<(u64, u64)>>,
}

/// One record and what the view makes of it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Row {
    /// Its seq.
    pub seq: u64,
    /// Its turn.
    pub turn: u64,
    /// The record's event.
    pub raw: Event,
    /// The view events with its seq, in view order.
    pub view: Vec<ViewEvent>,
}

/// Up to `limit` records (at most [`PAGE_MAX`]) of the records in `scope`
/// from `start`, each beside what the view makes of it.
pub fn page(
    store: &Store,
    id: &ConversationId,
    scope: Scope,
    start: Start,
    limit: u64,
) -> Result<Page> {
    let from = match start {
        Start::Seq(seq) if seq >= scope.end && !(seq == 0 && scope.end == 0) => {
            return Err(StoreError::NoSuchRecord {
                seq,
                len: scope.end,
            }
            .into())
        }
        Start::Seq(seq) => seq,
        Start::Turn(turn) => {
            let turns = scope.turns(store, id)?;
            if turn >= turns {
                return Err(Error::NoSuchTurn { turn, turns });
            }
            store
                .first_seq_of_turn(id, Turn(turn))?
                .map_or(scope.end, |s| s.0)
        }
    };
    let end = from.saturating_add(limit.clamp(1, PAGE_MAX)).min(scope.end);
    let mut rows: Vec<Row> = Vec::new();
    for record in store.scan(id, from..end)? {
        let record = record?;
        rows.push(Row {
            seq: record.seq,
            turn: record.turn,
            raw: record.event,
            view: Vec::new(),
        });
    }
    let mut summarized = vec![None; rows.len()];
    if let (Some(first), Some(last)) = (rows.first(), rows.last()) {
        // Which records a summary replaces (the view drops them all; only
        // the first carries the summary's events), and the turns of its
        // run: the resolution is exact over the whole of each run that
        // meets the page.
        let turns = first.turn..=last.turn;
        let (projector, _) = pipeline::plan_turns_with_runs(store, id, scope, turns)?;
        for (slot, row) in summarized.iter_mut().zip(&rows) {
            if let crate::search::Visibility::Summarized(a, b) = crate::search::disposition(
                projector.resolution(),
                row.turn,
                row.raw.kind.event_type(),
                None,
            ) {
                *slot = Some((a, b));
            }
        }
        let mut view: Vec<ViewEvent> = Vec::new();
        pipeline::stream_range(
            store,
            id,
            from..end,
            &projector,
            |events| events,
            |events| {
                view.extend(events);
                Ok(())
            },
        )?;
        for v in view {
            let i = (v.seq - from) as usize;
            if let Some(row) = rows.get_mut(i) {
                row.view.push(v);
            }
        }
    }
    Ok(Page {
        events: scope.end,
        from,
        end,
        rows,
        summarized,
    })
}

impl Page {
    /// As the server answers it: each row's raw event and view events as
    /// JSON (texts over [`TEXT_MAX`] characters cut, saying how much was
    /// left out), and what the view did to the record: `kept`, `changed`
    /// (stripped), `dropped` (a summary, a strip of reasoning, an omit of
    /// tool calls) or `summarized` (dropped, with a summary before it).
    pub fn to_json(&self) -> Value {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .zip(&self.summarized)
            .map(|(row, summary)| {
                let own = row.view.iter().find(|v| v.summary_of.is_none());
                let injected = row.view.iter().any(|v| v.summary_of.is_some());
                let fate = match own {
                    Some(v) if v.event == row.raw => "kept",
                    Some(_) => "changed",
                    None if injected || summary.is_some() => "summarized",
                    None => "dropped",
                };
                json!({
                    "seq": row.seq,
                    "turn": row.turn,
                    "fate": fate,
                    "summarized_by": summary.filter(|_| fate == "summarized").map(|(a, b)| [a, b]),
                    "raw": event_json(&row.raw),
                    "view": row.view.iter().map(|v| {
                        let mut value = event_json(&v.event);
                        if let Some((a, b)) = v.summary_of {
                            value["summary_of"] = json!([a, b]);
                        }
                        value
                    }).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({
            "events": self.events,
            "from": self.from,
            "end": self.end,
            "next": (self.end < self.events).then_some(self.end),
            "rows": rows,
        })
    }
}

/// An event as JSON, its long texts cut.
fn event_json(event: &Event) -> Value {
    let text = convstore_store::json::event_to_string(event);
    let mut value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    cut_texts(&mut value);
    if let EventKind::Compaction(_) = event.kind {
        value["overlay"] = json!(true);
    }
    value
}

/// Cuts every string over [`TEXT_MAX`] characters, saying how many were
/// left out.
fn cut_texts(value: &mut Value) {
    match value {
        Value::String(s) => {
            if let Some((cut, _)) = s.char_indices().nth(TEXT_MAX) {
                let left = s[cut..].chars().count();
                s.truncate(cut);
                s.push_str(" … [");
                s.push_str(&left.to_string());
                s.push_str(" more characters]");
            }
        }
        Value::Array(items) => items.iter_mut().for_each(cut_texts),
        Value::Object(fields) => fields.values_mut().for_each(cut_texts),
        _ => {}
    }
}
