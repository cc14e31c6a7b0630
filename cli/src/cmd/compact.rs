//! `convstore compact`: append a compaction overlay (or preview one).

use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use convstore_projection::bounds::{widen_summary_range, Bound, Conversation};
use convstore_projection::tokens_for_chars;
use convstore_store::event::{Compaction, ReasoningPolicy, ToolCallPolicy};
use convstore_store::{
    AppendOptions, ConversationId, Event, EventKind, EventType, Store, Timestamp,
};
use serde_json::{json, Map, Value};

use crate::args::{CompactArgs, ReasoningArg, ToolCallsArg};
use crate::output::{self, Notes};
use crate::view::{tally, Scope};

pub(crate) fn run(store: &Store, args: &CompactArgs, notes: &Notes) -> Result<ExitCode> {
    let id = store.resolve(&args.conversation)?;
    let info = store.info(&id)?;
    if info.len == 0 {
        bail!(
            "conversation {} is empty: there is nothing to compact",
            info.label()
        );
    }
    let reasoning = args.reasoning.map(|r| match r {
        ReasoningArg::Strip => ReasoningPolicy::Strip,
        ReasoningArg::Keep => ReasoningPolicy::Keep,
    });
    let tool_calls = args.tool_calls.map(|t| match t {
        ToolCallsArg::Strip => ToolCallPolicy::Strip,
        ToolCallsArg::StripRequests => ToolCallPolicy::StripRequests,
        ToolCallsArg::StripResponses => ToolCallPolicy::StripResponses,
        ToolCallsArg::Omit => ToolCallPolicy::Omit,
        ToolCallsArg::Keep => ToolCallPolicy::Keep,
    });
    if !args.revert && reasoning.is_none() && tool_calls.is_none() && args.summary.is_none() {
        bail!("no policy: give --reasoning, --tool-calls, --summary or --revert");
    }

    let history = history(store, &id, info.len)?;
    let now = Timestamp::now();
    let from = args
        .from
        .as_deref()
        .map(Bound::parse)
        .transpose()
        .context("--from")?;
    let to = match (&args.to, args.keep_last) {
        (Some(text), _) => Some(Bound::parse(text).context("--to")?),
        (None, Some(n)) => Some(Bound::BeforeLast(n)),
        (None, None) => None,
    };
    let asked = history.range(from, to, now)?;
    let (from_turn, to_turn) = if args.summary.is_some() {
        let summaries: Vec<(u64, u64)> = history
            .compactions
            .iter()
            .filter(|c| c.2)
            .map(|&(a, b, _)| (a, b))
            .collect();
        widen_summary_range(asked, &summaries)
    } else {
        asked
    };

    let compaction = Compaction {
        from_turn,
        to_turn,
        summary: args.summary.clone(),
        reasoning,
        tool_calls,
        revert: args.revert.then_some(true),
        info: None,
    };
    let event = Event::new(now, EventKind::Compaction(compaction));
    let last_turn = info.turns.saturating_sub(1);
    let scope = Scope { end: info.len };
    let before = tally(store, &id, scope, None)?;
    let after = tally(store, &id, scope, Some((info.len, last_turn, &event)))?;
    let (tokens_before, tokens_after) = (
        tokens_for_chars(before.total_chars()),
        tokens_for_chars(after.total_chars()),
    );

    let head = if args.dry_run {
        None
    } else {
        let mut stored = event.clone();
        if let EventKind::Compaction(c) = &mut stored.kind {
            let mut info = Map::new();
            info.insert("tokens_before".into(), json!(tokens_before));
            info.insert("tokens_after".into(), json!(tokens_after));
            c.info = Some(convstore_store::Json::from_value(&Value::Object(info)));
        }
        let options = AppendOptions {
            expect_head: Some(info.head),
            no_sync: false,
        };
        Some(store.append(&id, &[stored], &options)?.head)
    };

    let mut out = output::stdout();
    if args.json {
        let mut kinds = Map::new();
        for kind in EventType::ALL {
            let (b, a) = (before.of(kind), after.of(kind));
            if b.0 + a.0 > 0 {
                kinds.insert(
                    kind.as_str().to_owned(),
                    json!({
                        "events_before": b.0, "events_after": a.0,
                        "tokens_before": tokens_for_chars(b.1), "tokens_after": tokens_for_chars(a.1),
                    }),
                );
            }
        }
        let value = json!({
            "status": if args.dry_run { "dry_run" } else { "stored" },
            "from_turn": from_turn,
            "to_turn": to_turn,
            "requested": [asked.0, asked.1],
            "tokens_before": tokens_before,
            "tokens_after": tokens_after,
            "head": head.map(|h| h.hex()),
            "kinds": kinds,
        });
        writeln!(out, "{value}")?;
    } else {
        let widened = if asked == (from_turn, to_turn) {
            String::new()
        } else {
            format!(
                " (widened from {}..={} to cover existing summaries)",
                asked.0, asked.1
            )
        };
        writeln!(out, "range: turns {from_turn}..={to_turn}{widened}")?;
        let mut rows = vec![vec![
            "KIND".to_owned(),
            "EVENTS".to_owned(),
            "~TOKENS BEFORE".to_owned(),
            "~TOKENS AFTER".to_owned(),
        ]];
        for kind in EventType::ALL {
            let (b, a) = (before.of(kind), after.of(kind));
            if b != a {
                rows.push(vec![
                    kind.as_str().to_owned(),
                    format!("{} -> {}", b.0, a.0),
                    tokens_for_chars(b.1).to_string(),
                    tokens_for_chars(a.1).to_string(),
                ]);
            }
        }
        if rows.len() > 1 {
            output::table(&mut out, &rows)?;
        } else {
            writeln!(out, "the view would not change")?;
        }
        writeln!(
            out,
            "estimated tokens: {tokens_before} -> {tokens_after} (4 characters a token)"
        )?;
        match head {
            Some(head) => writeln!(out, "stored; head {head}")?,
            None => notes.say("dry run: nothing was stored"),
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Turn start times and existing compactions, from one pass over the log.
fn history(store: &Store, id: &ConversationId, len: u64) -> Result<Conversation> {
    let mut history = Conversation::default();
    for record in store.scan(id, 0..len)? {
        let record = record?;
        if record.turn as usize == history.turn_starts.len() {
            history.turn_starts.push(record.event.timestamp);
        }
        if let EventKind::Compaction(c) = &record.event.kind {
            let summary = c.summary.is_some() && !c.is_revert();
            history.compactions.push((c.from_turn, c.to_turn, summary));
        }
    }
    Ok(history)
}
