//! `convstore list` and `convstore stats`.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use convstore_engine::pipeline::{tally_with, Scope, Tally};
use convstore_engine::projection::Tokenizer;
use convstore_engine::store::{ConversationId, ConversationInfo, EventKind, EventType, Store};
use convstore_engine::Engine;
use serde_json::{json, Map, Value};

use crate::args::{ListArgs, StatsArgs};
use crate::output::{self, Notes};

pub(crate) fn list(engine: &Engine, args: &ListArgs) -> Result<ExitCode> {
    let store = engine.store();
    let mut conversations = store.conversations()?;
    conversations.sort_by_key(|c| (c.created, c.id));
    let mut out = output::stdout();
    if args.json {
        let items: Vec<Value> = conversations.iter().map(summary_json).collect();
        writeln!(out, "{}", Value::Array(items))?;
    } else {
        let mut rows = vec![vec![
            "ID".to_owned(),
            "NAME".to_owned(),
            "EVENTS".to_owned(),
            "TURNS".to_owned(),
            "HEAD".to_owned(),
            "CREATED".to_owned(),
        ]];
        for c in &conversations {
            rows.push(vec![
                c.id.short(),
                c.name.clone().unwrap_or_else(|| "-".to_owned()),
                c.len.to_string(),
                c.turns.to_string(),
                c.head.hex()[..12].to_owned(),
                c.created.to_string(),
            ]);
        }
        output::table(&mut out, &rows)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Each compaction with its provenance (the bookkeeping it was stored
/// with), oldest first.
fn compaction_rows(store: &Store, id: &ConversationId, len: u64) -> Result<Vec<Value>> {
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

fn summary_json(c: &ConversationInfo) -> Value {
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

pub(crate) fn run(engine: &Engine, args: &StatsArgs, notes: &Notes) -> Result<ExitCode> {
    let store = engine.store();
    let id = store.resolve(&args.conversation)?;
    let mut info = store.info(&id)?;
    // A fork's counts include the records it shares with its parent.
    info.kinds = store.kind_stats(&id)?;
    let parent = match info.fork {
        Some(point) => Some((store.info(&point.parent)?.label(), point)),
        None => None,
    };
    // Tokens as a model would read them: of the raw history, and of the view.
    let tokenizer =
        Tokenizer::named(&args.tokenizer).map_err(|e| anyhow::anyhow!("--tokenizer: {e}"))?;
    let progress = output::Progress::bar(notes, info.len, "counting the log");
    let mut raw = Tally::default();
    for record in store.scan(&id, 0..info.len)? {
        raw.add_counted(&record?.event, &tokenizer);
        progress.inc(1);
    }
    progress.finish();
    let progress = output::Progress::bar(notes, info.len, "counting the view");
    progress.attach(store);
    let view = tally_with(store, &id, Scope { end: info.len }, None, &tokenizer)?;
    progress.finish();
    store.set_progress(None);
    let compactions = compaction_rows(store, &id, info.len)?;
    let mut out = output::stdout();
    let total_bytes: u64 = info.kinds.iter().map(|k| k.bytes).sum();
    let view_events: u64 = view.events.iter().sum();
    if args.json {
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
        let mut value = summary_json(&info);
        value["bytes"] = json!(total_bytes);
        value["tokens"] = json!(raw.total_tokens());
        value["tokenizer"] = json!(tokenizer.name());
        value["view_events"] = json!(view_events);
        value["view_tokens"] = json!(view.total_tokens());
        value["kinds"] = Value::Object(kinds);
        value["compactions"] = Value::Array(compactions.clone());
        if let Some((_, point)) = &parent {
            value["fork"] = json!({"parent": point.parent.hex(), "shared": point.at, "fork_head": point.base.hex()});
        }
        writeln!(out, "{value}")?;
    } else {
        writeln!(out, "conversation  {} ({})", info.label(), info.id)?;
        writeln!(out, "events        {}", info.len)?;
        writeln!(out, "turns         {}", info.turns)?;
        writeln!(out, "head          {}", info.head)?;
        writeln!(out, "created       {}", info.created)?;
        if let Some((label, point)) = &parent {
            writeln!(
                out,
                "forked from   {label} ({}): shares its first {} records",
                point.parent, point.at
            )?;
        }
        writeln!(out)?;
        let mut rows = vec![vec![
            "KIND".to_owned(),
            "EVENTS".to_owned(),
            "BYTES".to_owned(),
            "~TOKENS".to_owned(),
            "VIEW EVENTS".to_owned(),
            "~VIEW TOKENS".to_owned(),
        ]];
        for kind in EventType::ALL {
            let stats = info.kind(kind);
            let (events, _) = view.of(kind);
            if stats.count > 0 || events > 0 {
                rows.push(vec![
                    kind.as_str().to_owned(),
                    stats.count.to_string(),
                    stats.bytes.to_string(),
                    raw.tokens_of(kind).to_string(),
                    events.to_string(),
                    view.tokens_of(kind).to_string(),
                ]);
            }
        }
        rows.push(vec![
            "total".to_owned(),
            info.len.to_string(),
            total_bytes.to_string(),
            raw.total_tokens().to_string(),
            view_events.to_string(),
            view.total_tokens().to_string(),
        ]);
        output::table(&mut out, &rows)?;
        writeln!(out)?;
        writeln!(
            out,
            "bytes: stored size (record + texts kept as blobs); ~tokens: {}",
            match tokenizer {
                Tokenizer::Chars4 => "characters a model reads / 4".to_owned(),
                ref exact @ Tokenizer::Bpe { .. } => format!("counted with {}", exact.name()),
            }
        )?;
        if !compactions.is_empty() {
            writeln!(out)?;
            let mut rows = vec![[
                "SEQ",
                "TURNS",
                "PROFILE",
                "SUMMARIZER",
                "MODEL",
                "BY",
                "TOKENS",
            ]
            .map(str::to_owned)
            .to_vec()];
            let text = |v: &Value| v.as_str().map_or("-".to_owned(), str::to_owned);
            // The newest few; --json lists them all.
            let shown = 20;
            let skipped = compactions.len().saturating_sub(shown);
            if skipped > 0 {
                writeln!(
                    out,
                    "compactions: {} (the newest {shown}; --json lists all)",
                    compactions.len()
                )?;
            }
            for c in &compactions[skipped..] {
                rows.push(vec![
                    c["seq"].to_string(),
                    output::range(
                        c["from_turn"].as_u64().unwrap_or(0),
                        c["to_turn"].as_u64().unwrap_or(0),
                    ),
                    text(&c["profile"]),
                    text(&c["summarizer"]),
                    text(&c["model"]),
                    text(&c["created_by"]),
                    match (c["tokens_before"].as_u64(), c["tokens_after"].as_u64()) {
                        (Some(b), Some(a)) => format!("{b} -> {a}"),
                        _ => "-".to_owned(),
                    },
                ]);
            }
            output::table(&mut out, &rows)?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
