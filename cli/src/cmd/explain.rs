//! `convstore explain`: which overlay decides what a turn looks like.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use convstore_engine::projection::{ContentType, Overlay, Summary, ToolPolicy};
use convstore_engine::store::event::ReasoningPolicy;
use convstore_engine::Engine;
use serde_json::{json, Value};

use crate::args::ExplainArgs;
use crate::output;

pub(crate) fn run(engine: &Engine, args: &ExplainArgs) -> Result<ExitCode> {
    let id = engine.store().resolve(&args.conversation)?;
    let explanation = engine.explain(&id, args.as_of, args.turn)?;
    let turn = explanation.turn;
    let name = |kind: ContentType| match kind {
        ContentType::Summary => "summary",
        ContentType::Reasoning => "reasoning",
        ContentType::ToolCalls => "tool_calls",
    };
    let mut out = output::stdout();
    if args.json {
        let value = json!({
            "turn": turn,
            "as_of": explanation.as_of,
            "winners": explanation.winners.iter().map(|(k, w)| (name(*k).to_owned(), json!(w.as_ref().map(|o| o.seq)))).collect::<serde_json::Map<String, Value>>(),
            "covering": explanation.covering.iter().map(overlay_json).collect::<Vec<_>>(),
        });
        writeln!(out, "{value}")?;
    } else {
        writeln!(
            out,
            "turn {turn} (as of record {})",
            explanation.as_of.unwrap_or(0)
        )?;
        for (kind, winner) in &explanation.winners {
            let kind = name(*kind);
            match winner {
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
        if explanation.covering.is_empty() {
            writeln!(out, "no compaction covers turn {turn}")?;
        } else {
            writeln!(out, "covering compactions, oldest first:")?;
            for o in &explanation.covering {
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
                let short: String = text
                    .chars()
                    .take(60)
                    .collect::<String>()
                    .replace('\n', " ⏎ ");
                if text.chars().count() > 60 {
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
