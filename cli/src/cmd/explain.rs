//! `convstore explain`: which overlay decides what a turn looks like.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use convstore_engine::Engine;
use serde_json::Value;

use crate::args::ExplainArgs;
use crate::output;

pub(crate) fn run(engine: &Engine, args: &ExplainArgs) -> Result<ExitCode> {
    let id = engine.store().resolve(&args.conversation)?;
    let explanation = engine.explain(&id, args.as_of, args.turn)?;
    print(&explanation.to_json(), args.json)
}

/// Prints an explanation as `Explanation::to_json` gives it (the engine's
/// locally, the server's through `--url`): as is, or as text.
pub(crate) fn print(value: &Value, json: bool) -> Result<ExitCode> {
    let mut out = output::stdout();
    if json {
        writeln!(out, "{value}")?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let number = |v: &Value| v.as_u64().unwrap_or(0);
    let turn = number(&value["turn"]);
    let empty = Vec::new();
    let covering = value["covering"].as_array().unwrap_or(&empty);
    writeln!(
        out,
        "turn {turn} (as of record {})",
        number(&value["as_of"])
    )?;
    if let Some(winners) = value["winners"].as_object() {
        for (kind, seq) in winners {
            match seq.as_u64() {
                Some(seq) => {
                    let overlay = covering.iter().find(|o| o["seq"].as_u64() == Some(seq));
                    let field = |key: &str| {
                        overlay
                            .and_then(|o| o[key].as_str())
                            .unwrap_or("-")
                            .to_owned()
                    };
                    writeln!(
                        out,
                        "  {kind:<10} won by the compaction at record {seq} ({}): {}",
                        field("timestamp"),
                        field(kind)
                    )?;
                }
                None => writeln!(out, "  {kind:<10} no compaction sets it: raw")?,
            }
        }
    }
    if covering.is_empty() {
        writeln!(out, "no compaction covers turn {turn}")?;
    } else {
        writeln!(out, "covering compactions, oldest first:")?;
        for o in covering {
            let describe = ["summary", "reasoning", "tool_calls"]
                .iter()
                .filter_map(|k| o[*k].as_str().map(|p| format!("{k}={p}")))
                .collect::<Vec<_>>()
                .join(" ");
            writeln!(
                out,
                "  record {:<8} {}  turns {}  {describe}",
                number(&o["seq"]),
                o["timestamp"].as_str().unwrap_or(""),
                output::range(number(&o["from_turn"]), number(&o["to_turn"])),
            )?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
