//! `convstore list` and `convstore stats`.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use convstore_engine::projection::Tokenizer;
use convstore_engine::stats::{self, Pass};
use convstore_engine::store::EventType;
use convstore_engine::Engine;
use serde_json::Value;

use crate::args::{ListArgs, StatsArgs};
use crate::output::{self, Notes};

pub(crate) fn list(engine: &Engine, args: &ListArgs) -> Result<ExitCode> {
    let store = engine.store();
    let mut conversations = store.conversations()?;
    conversations.sort_by_key(|c| (c.created, c.id));
    let mut out = output::stdout();
    if args.json {
        let items: Vec<Value> = conversations.iter().map(stats::info_json).collect();
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

pub(crate) fn run(engine: &Engine, args: &StatsArgs, notes: &Notes) -> Result<ExitCode> {
    let store = engine.store();
    let id = store.resolve(&args.conversation)?;
    // Tokens as a model would read them: of the raw history, and of the view.
    let tokenizer =
        Tokenizer::named(&args.tokenizer).map_err(|e| anyhow::anyhow!("--tokenizer: {e}"))?;
    let len = store.info(&id)?.len;
    let counting = output::Progress::bar(notes, len, "counting the log");
    let mut viewing = None;
    let value = stats::report(store, &id, &tokenizer, &mut |pass, n| match pass {
        Pass::Log => counting.inc(n),
        Pass::View => {
            counting.finish();
            let bar = output::Progress::bar(notes, len, "counting the view");
            bar.attach(store);
            viewing = Some(bar);
        }
    })?;
    if let Some(bar) = viewing {
        bar.finish();
    }
    store.set_progress(None);
    render(&value, args.json)?;
    Ok(ExitCode::SUCCESS)
}

/// Prints a conversation's counts ([`stats::report`], computed here or by
/// a server): the JSON itself with `json`, else the tables.
pub(crate) fn render(value: &Value, json: bool) -> Result<()> {
    let mut out = output::stdout();
    if json {
        writeln!(out, "{value}")?;
        out.flush()?;
        return Ok(());
    }
    let number = |v: &Value| v.as_u64().unwrap_or(0);
    let text = |v: &Value| v.as_str().map_or("-".to_owned(), str::to_owned);
    let label = value["name"].as_str().map_or_else(
        || text(&value["id"]).chars().take(12).collect(),
        str::to_owned,
    );
    writeln!(out, "conversation  {label} ({})", text(&value["id"]))?;
    writeln!(out, "events        {}", number(&value["events"]))?;
    writeln!(out, "turns         {}", number(&value["turns"]))?;
    writeln!(out, "head          {}", text(&value["head"]))?;
    writeln!(out, "created       {}", text(&value["created"]))?;
    if let Some(fork) = value.get("fork").filter(|f| f.is_object()) {
        writeln!(
            out,
            "forked from   {} ({}): shares its first {} records",
            text(&fork["parent_label"]),
            text(&fork["parent"]),
            number(&fork["shared"])
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
        let k = &value["kinds"][kind.as_str()];
        if number(&k["events"]) > 0 || number(&k["view_events"]) > 0 {
            rows.push(vec![
                kind.as_str().to_owned(),
                number(&k["events"]).to_string(),
                number(&k["bytes"]).to_string(),
                number(&k["tokens"]).to_string(),
                number(&k["view_events"]).to_string(),
                number(&k["view_tokens"]).to_string(),
            ]);
        }
    }
    rows.push(vec![
        "total".to_owned(),
        number(&value["events"]).to_string(),
        number(&value["bytes"]).to_string(),
        number(&value["tokens"]).to_string(),
        number(&value["view_events"]).to_string(),
        number(&value["view_tokens"]).to_string(),
    ]);
    output::table(&mut out, &rows)?;
    writeln!(out)?;
    writeln!(
        out,
        "bytes: size as appended (record + texts; texts gc or redact dropped still count); ~tokens: {}",
        match value["tokenizer"].as_str() {
            Some("chars4") | None => "characters a model reads / 4".to_owned(),
            Some(exact) => format!("counted with {exact}"),
        }
    )?;
    let compactions = value["compactions"].as_array().cloned().unwrap_or_default();
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
                output::range(number(&c["from_turn"]), number(&c["to_turn"])),
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
    out.flush()?;
    Ok(())
}
