//! `convstore explain`: which overlay decides what a turn looks like.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use convstore_engine::explain::{describe, policy_text};
use convstore_engine::projection::ContentType;
use convstore_engine::Engine;

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
        writeln!(out, "{}", explanation.to_json())?;
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
