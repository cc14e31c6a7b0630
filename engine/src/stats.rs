//! A conversation's counts (`convstore stats`): events, bytes and tokens
//! per kind, of the raw log and of its view, and its compactions with
//! their provenance, as the JSON every face shows.

use convstore_projection::Tokenizer;
use convstore_store::{ConversationId, ConversationInfo, EventKind, EventType, RawChunk, Store};
use serde_json::{json, Map, Value};

use crate::error::Result;
use crate::pipeline::{self, tally_with, Scope, Tally};

/// A conversation as `list --json` shows it.
pub fn info_json(c: &ConversationInfo) -> Value {
    json!({
        "id": c.id.hex(),
        "name": c.name,
        "events": c.len,
        "turns": c.turns,
        "head": c.head.hex(),
        "created": c.created.to_string(),
        "parent": c.fork.map(|p| p.parent.hex()),
    })
}

/// Each compaction of records `0..len` with its provenance (the
/// bookkeeping it was stored with), oldest first.
pub fn compactions(store: &Store, id: &ConversationId, len: u64) -> Result<Vec<Value>> {
    let mut rows = Vec::new();
    for overlay in store.overlays(id, len)? {
        let EventKind::Compaction(c) = &overlay.event.kind else {
            continue;
        };
        let mut row = json!({
            "seq": overlay.seq,
            "from_turn": c.from_turn,
            "to_turn": c.to_turn,
        });
        if let Some(info) = &c.info {
            if let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(info.as_str()) {
                for (k, v) in fields {
                    row[k] = v;
                }
            }
        }
        rows.push(row);
    }
    Ok(rows)
}

/// The counts of `id`, tokens counted with `tokenizer`: the raw log's
/// (a fork's including the records it shares), then its view's; `tick`
/// is told how many records each pass got through.
pub fn report(
    store: &Store,
    id: &ConversationId,
    tokenizer: &Tokenizer,
    tick: &mut dyn FnMut(Pass, u64),
) -> Result<Value> {
    let mut info = store.info(id)?;
    info.kinds = store.kind_stats(id)?;
    // The chunks are decoded and counted in parallel (a text the log holds
    // many times is counted once: `Tokenizer::count`).
    let mut raw = Tally::default();
    let count = |chunk: &RawChunk| -> Result<(Tally, u64)> {
        let mut part = Tally::default();
        let records = chunk.log_records(store, 0, info.len)?;
        for record in &records {
            part.add_counted(&record.event, tokenizer);
        }
        Ok((part, records.len() as u64))
    };
    pipeline::for_each_chunk(store, id, 0..info.len, count, |(part, records)| {
        raw.merge(&part);
        tick(Pass::Log, records);
        Ok(())
    })?;
    tick(Pass::View, 0);
    let view = tally_with(store, id, Scope { end: info.len }, None, tokenizer)?;
    let mut kinds = Map::new();
    for kind in EventType::ALL {
        let stats = info.kind(kind);
        let (events, _) = view.of(kind);
        kinds.insert(
            kind.as_str().to_owned(),
            json!({
                "events": stats.count,
                "bytes": stats.bytes,
                "tokens": raw.tokens_of(kind),
                "view_events": events,
                "view_tokens": view.tokens_of(kind),
            }),
        );
    }
    let mut value = info_json(&info);
    value["bytes"] = json!(info.kinds.iter().map(|k| k.bytes).sum::<u64>());
    value["tokens"] = json!(raw.total_tokens());
    value["tokenizer"] = json!(tokenizer.name());
    value["view_events"] = json!(view.events.iter().sum::<u64>());
    value["view_tokens"] = json!(view.total_tokens());
    value["kinds"] = Value::Object(kinds);
    value["compactions"] = Value::Array(compactions(store, id, info.len)?);
    if let Some(point) = info.fork {
        value["fork"] = json!({
            "parent": point.parent.hex(),
            "parent_label": store.info(&point.parent)?.label(),
            "shared": point.at,
            "fork_head": point.base.hex(),
        });
    }
    Ok(value)
}

/// The passes of [`report`], for progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// Counting the raw log, a record at a time.
    Log,
    /// Counting the view (one call as it starts).
    View,
}
