//! `convstore search`: ranked full-text search across conversations;
//! `convstore reindex`: the search index built anew.

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use convstore_engine::search::{Hit, SearchQuery, Visibility};
use convstore_engine::store::EventType;
use convstore_engine::Engine;
use serde_json::json;

use crate::args::{ReindexArgs, SearchArgs};
use crate::output::{self, Notes};

pub(crate) fn run(engine: &Engine, args: &SearchArgs, notes: &Notes) -> Result<ExitCode> {
    let store = engine.store();
    let conversation = match &args.conv {
        Some(query) => Some(store.resolve(query).context("--conv")?),
        None => None,
    };
    let kinds: Vec<EventType> = args
        .kind
        .iter()
        .map(|k| EventType::from_name(k).context("a kind checked by clap"))
        .collect::<Result<_>>()?;
    let query = SearchQuery {
        text: args.query.clone(),
        conversation,
        kinds,
        since: args.since,
        limit: usize::try_from(args.limit).unwrap_or(usize::MAX),
    };
    // As `Engine::search`, timed in its two parts for `--stats`.
    let started = Instant::now();
    let index = engine.search_index()?;
    let caught_up = index.catch_up(store, None)?;
    let checked = started.elapsed();
    let searching = Instant::now();
    let hits = index.search(store, &query)?;
    let searched = searching.elapsed();
    if args.stats {
        notes.say(&format!(
            "{} in {:.2} ms; the index checked against the logs in {:.2} ms ({} indexed)",
            output::plural(hits.len() as u64, "hit"),
            searched.as_secs_f64() * 1e3,
            checked.as_secs_f64() * 1e3,
            output::plural(caught_up.records, "new record"),
        ));
    }
    render(&hits, args.json)
}

/// Prints search hits (found here, or by a server).
pub(crate) fn render(hits: &[Hit], json: bool) -> Result<ExitCode> {
    let mut out = output::stdout();
    if json {
        let values: Vec<_> = hits.iter().map(Hit::to_json).collect();
        writeln!(out, "{}", serde_json::Value::Array(values))?;
    } else {
        for h in hits {
            let label = h.name.clone().unwrap_or_else(|| h.conversation.query());
            let view = match h.visibility {
                Visibility::Summarized(a, b) => {
                    format!(
                        "summarized ({})",
                        output::range(a, b).trim_start_matches("turns ")
                    )
                }
                other => other.as_str().to_owned(),
            };
            writeln!(
                out,
                "{label}  seq {}  turn {}  {}  [{view}]  score {:.2}",
                h.seq,
                h.turn,
                h.kind.as_str(),
                h.score
            )?;
            writeln!(out, "    {}", marked(&h.snippet, &h.highlights))?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The snippet on one line, matches between `**`.
fn marked(snippet: &str, highlights: &[(usize, usize)]) -> String {
    let mut out = String::with_capacity(snippet.len() + 8);
    let mut at = 0;
    for &(start, end) in highlights {
        if start < at
            || end > snippet.len()
            || !snippet.is_char_boundary(start)
            || !snippet.is_char_boundary(end)
        {
            continue;
        }
        out.push_str(&snippet[at..start]);
        out.push_str("**");
        out.push_str(&snippet[start..end]);
        out.push_str("**");
        at = end;
    }
    out.push_str(&snippet[at..]);
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub(crate) fn reindex(engine: &Engine, args: &ReindexArgs, _notes: &Notes) -> Result<ExitCode> {
    let started = Instant::now();
    let done = engine.reindex()?;
    reindexed(
        done.conversations,
        done.records,
        started.elapsed(),
        args.json,
    )
}

/// Prints what `reindex` did (here, or by a server).
pub(crate) fn reindexed(
    conversations: u64,
    records: u64,
    took: std::time::Duration,
    json: bool,
) -> Result<ExitCode> {
    let mut out = output::stdout();
    if json {
        writeln!(
            out,
            "{}",
            json!({ "conversations": conversations, "records": records })
        )?;
    } else {
        let took = format!(" in {:.1} s", took.as_secs_f64());
        writeln!(
            out,
            "indexed {} of {}{took}",
            output::plural(records, "record"),
            output::plural(conversations, "conversation"),
        )?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
