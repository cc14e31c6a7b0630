//! `convstore recall`: the raw events behind any part of a view, and
//! answers to a model's `recall` tool calls; `convstore tools`: that tool's
//! definition.

use std::io::{Read, Write};
use std::process::ExitCode;

use anyhow::{Context, Result};
use convstore_engine::recall::{self, Target, ToolFormat};
use convstore_engine::store::json::write_log_record;
use convstore_engine::Engine;

use crate::args::{RecallArgs, RecallFormat, ToolsArgs, ToolsFormat};
use crate::output;

pub(crate) fn run(engine: &Engine, args: &RecallArgs) -> Result<ExitCode> {
    let store = engine.store();
    let id = store.resolve(&args.conversation)?;
    let mut out = output::stdout();
    if let Some(call) = &args.tool_call {
        let text = if call == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("--tool-call -: reading stdin")?;
            text
        } else {
            call.clone()
        };
        let call = recall::parse_tool_call(&text).context("--tool-call")?;
        let answer = recall::answer_tool_call(store, &id, &call, args.max_tokens)?;
        writeln!(out, "{}", answer.message())?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let target = if let Some(handle) = &args.target {
        Target::parse_handle(handle).context("a handle parsed by clap")?
    } else if let Some(call) = &args.call {
        Target::Call(call.clone())
    } else if let Some(seq) = args.summary_of {
        Target::SummaryOf(seq)
    } else {
        anyhow::bail!("give SEQ, FROM..TO, --call, --summary-of or --tool-call");
    };
    let scope = crate::cmd::scope(store, &id, args.as_of)?;
    let found = recall::recall(store, &id, scope, &target)?;
    let mut line = Vec::with_capacity(1024);
    for record in &found.records {
        match args.format {
            RecallFormat::Ndjson => {
                line.clear();
                write_log_record(record, &mut line);
                line.push(b'\n');
                out.write_all(&line)?;
            }
            RecallFormat::Text => out.write_all(recall::record_text(record).as_bytes())?,
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn tools(args: &ToolsArgs) -> Result<ExitCode> {
    let format = match args.format {
        ToolsFormat::Openai => ToolFormat::Openai,
        ToolsFormat::Anthropic => ToolFormat::Anthropic,
    };
    let mut out = output::stdout();
    writeln!(
        out,
        "{}",
        serde_json::to_string_pretty(&recall::tool_schema(format))?
    )?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
