//! `convstore list` and `convstore stats`.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use convstore_store::{ConversationInfo, EventType, Store};
use serde_json::{json, Map, Value};

use crate::args::{ListArgs, StatsArgs};
use crate::output;

/// Estimated tokens for `bytes` of text: four characters a token.
fn tokens(bytes: u64) -> u64 {
    bytes.div_ceil(4)
}

pub(crate) fn list(store: &Store, args: &ListArgs) -> Result<ExitCode> {
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

fn summary_json(c: &ConversationInfo) -> Value {
    json!({
        "id": c.id.hex(),
        "name": c.name,
        "events": c.len,
        "turns": c.turns,
        "head": c.head.hex(),
        "created": c.created.to_string(),
    })
}

pub(crate) fn run(store: &Store, args: &StatsArgs) -> Result<ExitCode> {
    let info = store.info(&store.resolve(&args.conversation)?)?;
    let mut out = output::stdout();
    let total_bytes: u64 = info.kinds.iter().map(|k| k.bytes).sum();
    if args.json {
        let mut kinds = Map::new();
        for kind in EventType::ALL {
            let stats = info.kind(kind);
            kinds.insert(
                kind.as_str().to_owned(),
                json!({"events": stats.count, "bytes": stats.bytes, "tokens": tokens(stats.bytes)}),
            );
        }
        let mut value = summary_json(&info);
        value["bytes"] = json!(total_bytes);
        value["tokens"] = json!(tokens(total_bytes));
        value["kinds"] = Value::Object(kinds);
        writeln!(out, "{value}")?;
    } else {
        writeln!(out, "conversation  {} ({})", info.label(), info.id)?;
        writeln!(out, "events        {}", info.len)?;
        writeln!(out, "turns         {}", info.turns)?;
        writeln!(out, "head          {}", info.head)?;
        writeln!(out, "created       {}", info.created)?;
        writeln!(out)?;
        let mut rows = vec![vec![
            "KIND".to_owned(),
            "EVENTS".to_owned(),
            "BYTES".to_owned(),
            "~TOKENS".to_owned(),
        ]];
        for kind in EventType::ALL {
            let stats = info.kind(kind);
            if stats.count > 0 {
                rows.push(vec![
                    kind.as_str().to_owned(),
                    stats.count.to_string(),
                    stats.bytes.to_string(),
                    tokens(stats.bytes).to_string(),
                ]);
            }
        }
        rows.push(vec![
            "total".to_owned(),
            info.len.to_string(),
            total_bytes.to_string(),
            tokens(total_bytes).to_string(),
        ]);
        output::table(&mut out, &rows)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
