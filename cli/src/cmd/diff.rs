//! `convstore diff A B`: two views aligned by raw seq.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::ArgMatches;
use convstore_engine::diff::{Change, Diff, Fate, Side};
use convstore_engine::store::EventType;
use convstore_engine::Engine;
use serde_json::json;

use crate::args::DiffArgs;
use crate::output;

/// A side as written: `CONV`, `CONV@SEQ` or `CONV@TIME` (a name that holds
/// `@` is taken whole when it names a conversation).
/// The side `text` names (a point that does not parse is a usage error).
fn side(engine: &Engine, text: &str, profile: Option<String>) -> Result<Side> {
    Side::resolve(engine.store(), text, profile).map_err(|e| match e {
        convstore_engine::Error::Invalid(message) => crate::output::usage(message),
        other => other.into(),
    })
}

fn fate(f: Fate) -> String {
    match f {
        Fate::Summarized(a, b) if a == b => format!("summarized (turn {a})"),
        Fate::Summarized(a, b) => format!("summarized (turns {a}..{b})"),
        other => other.as_str().to_owned(),
    }
}

fn seqs(seqs: &[u64]) -> String {
    let shown: Vec<String> = seqs.iter().take(6).map(u64::to_string).collect();
    let more = if seqs.len() > 6 {
        format!(", … {} more", seqs.len() - 6)
    } else {
        String::new()
    };
    format!("seq {}{more}", shown.join(", "))
}

fn signed(n: i128) -> String {
    if n > 0 {
        format!("+{n}")
    } else {
        n.to_string()
    }
}

pub(crate) fn run(engine: &Engine, args: &DiffArgs, matches: &ArgMatches) -> Result<ExitCode> {
    let profiles = sides(args, matches)?;
    let [pa, pb] = profiles;
    let a = side(engine, &args.sides[0], pa).context("side A")?;
    let b = side(engine, &args.sides[1], pb).context("side B")?;
    let diff = engine.diff(&a, &b)?;
    render(&diff, &args.sides, args.json)
}

/// The two sides of `diff` and the profiles given after each.
pub(crate) fn sides(args: &DiffArgs, matches: &ArgMatches) -> Result<[Option<String>; 2]> {
    if args.sides.len() != 2 {
        return Err(crate::output::usage(format!(
            "diff takes two sides, A and B, {} given (diff A [--profile P] B [--profile P])",
            args.sides.len()
        )));
    }
    // Each --profile belongs to the side it follows.
    let side_at: Vec<usize> = matches
        .indices_of("sides")
        .map(Iterator::collect)
        .unwrap_or_default();
    let mut profiles: [Option<String>; 2] = [None, None];
    if let (Some(indices), Some(values)) = (
        matches.indices_of("profile"),
        matches.get_many::<String>("profile"),
    ) {
        for (at, value) in indices.zip(values) {
            let Some(which) = side_at.iter().rposition(|&s| s < at) else {
                bail!("--profile {value}: give it after the side it applies to (diff A [--profile P] B [--profile P])");
            };
            if profiles[which].replace(value.clone()).is_some() {
                bail!("--profile given twice for side {}", ["A", "B"][which]);
            }
        }
    }
    Ok(profiles)
}

/// Prints a diff (computed here, or by a server) of the sides as given.
pub(crate) fn render(diff: &Diff, written: &[String], json: bool) -> Result<ExitCode> {
    let args_sides = written;
    let label = |info: &convstore_engine::diff::SideInfo, written: &str| match &info.profile {
        Some(p) => format!("{written} --profile {p}"),
        None => written.to_owned(),
    };
    let total = |t: &[u64; 10]| t.iter().sum::<u64>();
    let mut out = output::stdout();
    if json {
        let change = |c: &Change| {
            json!({
                "kind": c.kind.as_str(),
                "a": c.a.as_str(),
                "b": c.b.as_str(),
                "summarized_turns_a": match c.a { Fate::Summarized(x, y) => Some([x, y]), _ => None },
                "summarized_turns_b": match c.b { Fate::Summarized(x, y) => Some([x, y]), _ => None },
                "seqs": c.seqs,
                "tokens_a": c.tokens_a,
                "tokens_b": c.tokens_b,
            })
        };
        let side_json = |info: &convstore_engine::diff::SideInfo, written: &str| {
            json!({
                "side": written,
                "conversation": info.conversation.hex(),
                "name": info.name,
                "records": info.records,
                "profile": info.profile,
                "summaries": info.summaries.iter().map(|s| json!({"seq": s.seq, "turns": [s.turns.0, s.turns.1], "tokens": s.tokens})).collect::<Vec<_>>(),
                "tokens": EventType::ALL.iter().filter(|k| info.tokens[k.index()] > 0).map(|k| (k.as_str().to_owned(), json!(info.tokens[k.index()]))).collect::<serde_json::Map<_, _>>(),
                "total_tokens": total(&info.tokens),
            })
        };
        let value = json!({
            "a": side_json(&diff.a, &args_sides[0]),
            "b": side_json(&diff.b, &args_sides[1]),
            "shared_records": diff.shared,
            "turns": diff.turns.iter().map(|t| json!({"turn": t.turn, "changes": t.changes.iter().map(change).collect::<Vec<_>>()})).collect::<Vec<_>>(),
            "token_change": i128::from(total(&diff.b.tokens)) - i128::from(total(&diff.a.tokens)),
        });
        writeln!(out, "{value}")?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        out,
        "A: {} ({})",
        label(&diff.a, &args_sides[0]),
        output::plural(diff.a.records, "record")
    )?;
    writeln!(
        out,
        "B: {} ({})",
        label(&diff.b, &args_sides[1]),
        output::plural(diff.b.records, "record")
    )?;
    writeln!(out, "shared: {}", output::plural(diff.shared, "record"))?;
    if diff.turns.is_empty() {
        writeln!(out, "the views treat every shared record alike")?;
    }
    for turn in &diff.turns {
        writeln!(out, "turn {}", turn.turn)?;
        for c in &turn.changes {
            writeln!(
                out,
                "  {} ×{} ({}): {} -> {}  {} tokens",
                c.kind.as_str(),
                c.seqs.len(),
                seqs(&c.seqs),
                fate(c.a),
                fate(c.b),
                signed(i128::from(c.tokens_b) - i128::from(c.tokens_a))
            )?;
        }
    }
    for (name, info) in [("A", &diff.a), ("B", &diff.b)] {
        for s in &info.summaries {
            writeln!(
                out,
                "{name}: a summary of {} at seq {} ({} tokens)",
                fate(Fate::Summarized(s.turns.0, s.turns.1))
                    .trim_start_matches("summarized (")
                    .trim_end_matches(')'),
                s.seq,
                s.tokens
            )?;
        }
    }
    let mut rows = vec![vec![
        "TOKENS".to_owned(),
        "A".to_owned(),
        "B".to_owned(),
        "CHANGE".to_owned(),
    ]];
    for kind in EventType::ALL {
        let (x, y) = (diff.a.tokens[kind.index()], diff.b.tokens[kind.index()]);
        if x > 0 || y > 0 {
            rows.push(vec![
                kind.as_str().to_owned(),
                x.to_string(),
                y.to_string(),
                signed(i128::from(y) - i128::from(x)),
            ]);
        }
    }
    let (x, y) = (total(&diff.a.tokens), total(&diff.b.tokens));
    rows.push(vec![
        "total".to_owned(),
        x.to_string(),
        y.to_string(),
        signed(i128::from(y) - i128::from(x)),
    ]);
    output::table(&mut out, &rows)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
