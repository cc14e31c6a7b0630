//! `convstore compact`: append a compaction overlay (or preview one).

use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use convstore_engine::compact::{CompactRequest, Status};
use convstore_engine::error::turns_note;
use convstore_engine::projection::bounds::{Bound, RangeError};
use convstore_engine::projection::Tokenizer;
use convstore_engine::store::event::{ReasoningPolicy, ToolCallPolicy};
use convstore_engine::store::EventType;
use convstore_engine::{Engine, Error};
use serde_json::Value;

use crate::args::{CompactArgs, ReasoningArg, ToolCallsArg};
use crate::output::{self, Notes};

/// Two turn numbers in the wrong order are wrong whatever the log: a
/// usage error, with or without a server.
pub(crate) fn check_order(args: &CompactArgs) -> Result<()> {
    if let (Some(from), Some(to)) = (args.from.as_deref(), args.to.as_deref()) {
        if let (Ok(Bound::Turn(a)), Ok(Bound::Turn(b))) = (Bound::parse(from), Bound::parse(to)) {
            if a > b {
                return Err(output::usage(format!(
                    "--from {a} --to {b}: the range is inverted (from comes after to)"
                )));
            }
        }
    }
    Ok(())
}

pub(crate) fn run(engine: &Engine, args: &CompactArgs, notes: &Notes) -> Result<ExitCode> {
    check_order(args)?;
    let store = engine.store();
    let id = store.resolve_exact(&args.conversation)?;
    let info = store.info(&id)?;
    let tokenizer = Tokenizer::named(&args.tokenizer).context("--tokenizer")?;
    let from = args
        .from
        .as_deref()
        .map(|text| Bound::parse(text).with_context(|| format!("--from {text}")))
        .transpose()?;
    let keep_last = engine.config().compaction.keep_last;
    let (to, to_flag) = match (&args.to, args.keep_last) {
        (Some(text), _) => (
            Some(Bound::parse(text).with_context(|| format!("--to {text}"))?),
            format!("--to {text}"),
        ),
        (None, Some(n)) => (Some(Bound::BeforeLast(n)), format!("--keep-last {n}")),
        (None, None) if keep_last > 0 => (None, format!("keep_last = {keep_last} (configuration)")),
        (None, None) => (None, "the last turn".to_owned()),
    };
    let keeps = args.to.is_none() && (args.keep_last.is_some() || keep_last > 0);
    let mut request = CompactRequest::default();
    request.profile.clone_from(&args.profile);
    request.reasoning = args.reasoning.map(|r| match r {
        ReasoningArg::Strip => ReasoningPolicy::Strip,
        ReasoningArg::Keep => ReasoningPolicy::Keep,
    });
    request.tool_calls = args.tool_calls.map(|t| match t {
        ToolCallsArg::Strip => ToolCallPolicy::Strip,
        ToolCallsArg::StripRequests => ToolCallPolicy::StripRequests,
        ToolCallsArg::StripResponses => ToolCallPolicy::StripResponses,
        ToolCallsArg::Omit => ToolCallPolicy::Omit,
        ToolCallsArg::Keep => ToolCallPolicy::Keep,
    });
    request.summary.clone_from(&args.summary);
    request.summarize = args.summarize;
    request.revert = args.revert;
    request.instructions.clone_from(&args.instructions);
    request.force = args.force;
    request.from = from;
    request.to = to;
    request.dry_run = args.dry_run;
    if args.recall_hints {
        request.recall_hints = Some(true);
    }
    let from_flag = args
        .from
        .as_deref()
        .map_or_else(|| "turn 0".to_owned(), |t| format!("--from {t}"));
    let note = turns_note(info.turns);
    let report = engine.compact(&id, &request, &tokenizer).map_err(|e| match e {
        Error::Range(range) => match range {
            RangeError::NoTurns => anyhow::anyhow!("{} has no turns", info.label()),
            RangeError::From(e) => anyhow::anyhow!("{from_flag}: {e}"),
            RangeError::To(_) if keeps => {
                anyhow::anyhow!("{to_flag} leaves no turn to compact ({note})")
            }
            RangeError::To(e) => anyhow::anyhow!("{to_flag}: {e}"),
            RangeError::Empty { first, end } if keeps => anyhow::anyhow!(
                "{from_flag} with {to_flag} leaves no turn to compact: turn {first} is after turn {end} ({note})"
            ),
            RangeError::Empty { first, end } => anyhow::anyhow!(
                "{from_flag} {to_flag}: the range {first}..{end} is empty (from is after to)"
            ),
            RangeError::AfterLast { .. } => anyhow::anyhow!("{from_flag}: names no turn ({note})"),
        },
        Error::InstructionsWithoutSummarizer => anyhow::anyhow!(
            "--instructions: no summarizer runs (give --summarize or a profile with a summary)"
        ),
        Error::NoPolicy => anyhow::anyhow!(
            "no policy: the profile sets none; give --reasoning, --tool-calls, --summary or --revert"
        ),
        other => other.into(),
    })?;
    crate::cmd::index_warning(engine, notes);
    crate::cmd::retention_warning(engine, notes);
    let counted = match &tokenizer {
        Tokenizer::Chars4 => "4 characters a token".to_owned(),
        exact @ Tokenizer::Bpe { .. } => format!("counted with {}", exact.name()),
    };
    print_report(&report.to_json(), args, &counted, notes)
}

/// Prints a compaction report (as `compact --json` gives it: the engine's
/// locally, the server's through `--url`), and fails for an inflated one
/// that was not a dry run.
pub(crate) fn print_report(
    report: &Value,
    args: &CompactArgs,
    counted: &str,
    notes: &Notes,
) -> Result<ExitCode> {
    let number = |v: &Value| v.as_u64().unwrap_or(0);
    let (tokens_before, tokens_after) = (
        number(&report["tokens_before"]),
        number(&report["tokens_after"]),
    );
    let status = report["status"].as_str().unwrap_or("");
    let mut out = output::stdout();
    if args.json {
        writeln!(out, "{report}")?;
    } else {
        let (from_turn, to_turn) = (number(&report["from_turn"]), number(&report["to_turn"]));
        let requested = (
            number(&report["requested"][0]),
            number(&report["requested"][1]),
        );
        let widened = if requested == (from_turn, to_turn) {
            String::new()
        } else {
            format!(
                " (widened from {} to cover existing summaries)",
                output::range(requested.0, requested.1)
            )
        };
        writeln!(out, "status: {status}")?;
        writeln!(
            out,
            "range: turns {}{widened}",
            output::range(from_turn, to_turn)
        )?;
        let mut rows = vec![vec![
            "KIND".to_owned(),
            "EVENTS".to_owned(),
            "~TOKENS BEFORE".to_owned(),
            "~TOKENS AFTER".to_owned(),
        ]];
        for kind in EventType::ALL {
            let k = &report["kinds"][kind.as_str()];
            let b = (number(&k["events_before"]), number(&k["chars_before"]));
            let a = (number(&k["events_after"]), number(&k["chars_after"]));
            if b != a {
                rows.push(vec![
                    kind.as_str().to_owned(),
                    format!("{} -> {}", b.0, a.0),
                    number(&k["tokens_before"]).to_string(),
                    number(&k["tokens_after"]).to_string(),
                ]);
            }
        }
        if rows.len() > 1 {
            output::table(&mut out, &rows)?;
        } else {
            writeln!(out, "the view would not change")?;
        }
        writeln!(out, "tokens: {tokens_before} -> {tokens_after} ({counted})")?;
        match report["head"].as_str() {
            Some(head) => writeln!(out, "stored; head {head}")?,
            None => match status {
                "noop" => notes.say("noop: the view would not change; nothing was stored"),
                "dry_run" => notes.say("dry run: nothing was stored"),
                "inflated" if args.dry_run => notes.say(
                    "dry run: nothing was stored; the view would grow, so a run would store nothing either (--force stores it anyway)",
                ),
                _ => {}
            },
        }
    }
    out.flush()?;
    if status == Status::Inflated.as_str() && !args.dry_run {
        let inflated = Error::Inflated {
            before: tokens_before,
            after: tokens_after,
        };
        bail!("{inflated} (--force stores it anyway)");
    }
    Ok(ExitCode::SUCCESS)
}
