//! `convstore explain`: which overlay decides what a turn looks like.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Result};
use convstore_projection::{ContentType, Overlay, Summary, ToolPolicy};
use convstore_store::event::ReasoningPolicy;
use convstore_store::{OverlayIndex, Store};
use serde_json::{json, Value};

use crate::args::ExplainArgs;
use crate::output;
use crate::view::{self, Scope};

pub(crate) fn run(store: &Store, args: &ExplainArgs) -> Result<ExitCode> {
    let id = store.resolve(&args.conversation)?;
    let scope = Scope::as_of(store, &id, args.as_of)?;
    let turn = args.turn;
    let last_turn = match scope.end {
        0 => bail!("the conversation is empty: it has no turn {turn}"),
        end => store.turn_of(&id, end - 1)?,
    };
    if turn > last_turn {
        bail!("turn {turn} does not exist (the last turn is {last_turn})");
    }
    let overlays = view::overlays_under(store, &id, scope.end, None)?;
    // The interval index answers which overlays cover the turn; each covers
    // from..=min(to, last turn).
    let ranges: Vec<(u64, u64)> = overlays
        .iter()
        .map(|o| o.covered(last_turn).unwrap_or((1, 0)))
        .collect();
    let index = OverlayIndex::new(&ranges);
    let mut covering: Vec<&Overlay> = index
        .covering(turn)
        .into_iter()
        .map(|i| &overlays[i])
        .collect();
    covering.sort_by_key(|o| o.precedence());
    let winner = |kind: ContentType| {
        covering
            .iter()
            .rev()
            .find(|o| match kind {
                ContentType::Summary => o.summary.is_some(),
                ContentType::Reasoning => o.reasoning.is_some(),
                ContentType::ToolCalls => o.tool_calls.is_some(),
            })
            .map(|o| o.seq)
    };
    let winners = [
        ("summary", winner(ContentType::Summary)),
        ("reasoning", winner(ContentType::Reasoning)),
        ("tool_calls", winner(ContentType::ToolCalls)),
    ];
    let mut out = output::stdout();
    if args.json {
        let value = json!({
            "turn": turn,
            "as_of": scope.end.checked_sub(1),
            "winners": winners.iter().map(|(k, w)| ((*k).to_owned(), json!(w))).collect::<serde_json::Map<String, Value>>(),
            "covering": covering.iter().map(|o| overlay_json(o)).collect::<Vec<_>>(),
        });
        writeln!(out, "{value}")?;
    } else {
        writeln!(out, "turn {turn} (as of record {})", scope.end - 1)?;
        for (kind, seq) in winners {
            match seq.and_then(|s| covering.iter().find(|o| o.seq == s)) {
                Some(o) => writeln!(
                    out,
                    "  {kind:<10} won by the compaction at record {} ({}): {}",
                    o.seq,
                    o.timestamp,
                    policy_text(o, kind)
                )?,
                None => writeln!(out, "  {kind:<10} no compaction sets it: raw")?,
            }
        }
        if covering.is_empty() {
            writeln!(out, "no compaction covers turn {turn}")?;
        } else {
            writeln!(out, "covering compactions, oldest first:")?;
            for o in &covering {
                writeln!(
                    out,
                    "  record {:<8} {}  turns {}  {}",
                    o.seq,
                    o.timestamp,
                    output::range(o.from_turn, o.to_turn),
                    describe(o)
                )?;
            }
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn overlay_json(o: &Overlay) -> Value {
    json!({
        "seq": o.seq,
        "timestamp": o.timestamp.to_string(),
        "from_turn": o.from_turn,
        "to_turn": o.to_turn,
        "summary": o.summary.as_ref().map(|_| policy_text(o, "summary")),
        "reasoning": o.reasoning.map(|_| policy_text(o, "reasoning")),
        "tool_calls": o.tool_calls.as_ref().map(|_| policy_text(o, "tool_calls")),
    })
}

/// What `o` sets for one content type, in a few words.
fn policy_text(o: &Overlay, kind: &str) -> String {
    match kind {
        "summary" => match &o.summary {
            Some(Summary::Text(text)) => {
                let short: String = text.chars().take(60).collect();
                if short.len() < text.len() {
                    format!("summary \"{short}...\"")
                } else {
                    format!("summary \"{short}\"")
                }
            }
            Some(Summary::Keep) => "keep".to_owned(),
            None => "-".to_owned(),
        },
        "reasoning" => match o.reasoning {
            Some(ReasoningPolicy::Strip) => "strip".to_owned(),
            Some(ReasoningPolicy::Keep) => "keep".to_owned(),
            None => "-".to_owned(),
        },
        _ => match &o.tool_calls {
            Some(ToolPolicy::Keep) => "keep".to_owned(),
            Some(ToolPolicy::Omit) => "omit".to_owned(),
            Some(ToolPolicy::Strip {
                request,
                response,
                tools,
            }) => {
                let what = match (request, response) {
                    (true, true) => "strip",
                    (true, false) => "strip-requests",
                    (false, true) => "strip-responses",
                    (false, false) => "strip (neither)",
                };
                if tools.is_empty() {
                    what.to_owned()
                } else {
                    format!(
                        "{what} with {}",
                        crate::output::plural(tools.len() as u64, "per-tool hint")
                    )
                }
            }
            None => "-".to_owned(),
        },
    }
}

fn describe(o: &Overlay) -> String {
    ["summary", "reasoning", "tool_calls"]
        .iter()
        .filter(|k| policy_text(o, k) != "-")
        .map(|k| format!("{k}={}", policy_text(o, k)))
        .collect::<Vec<_>>()
        .join(" ")
}
