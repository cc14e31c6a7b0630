//! `convstore compact`: append a compaction overlay (or preview one).

use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use convstore_projection::bounds::{widen_summary_range, Bound, Conversation, RangeError};
use convstore_projection::config::{Config, SummaryConfig};
use convstore_projection::Tokenizer;
use convstore_store::event::{Compaction, ReasoningPolicy, ToolCallPolicy};
use convstore_store::{
    Address, AppendOptions, ConversationId, Event, EventKind, EventType, Store, Timestamp,
};
use serde_json::{json, Map, Value};

use crate::args::{CompactArgs, ReasoningArg, ToolCallsArg};
use crate::cmd::project::turns_note;
use crate::output::{self, Notes};
use crate::summarizers;
use crate::view::{tally_with, Scope};

pub(crate) fn run(
    store: &Store,
    args: &CompactArgs,
    config: &Config,
    notes: &Notes,
) -> Result<ExitCode> {
    let id = store.resolve_exact(&args.conversation)?;
    let info = store.info(&id)?;
    if info.len == 0 {
        bail!(
            "conversation {} is empty: there is nothing to compact",
            info.label()
        );
    }
    let tokenizer =
        Tokenizer::named(&args.tokenizer).map_err(|e| anyhow::anyhow!("--tokenizer: {e}"))?;
    let flag_reasoning = args.reasoning.map(|r| match r {
        ReasoningArg::Strip => ReasoningPolicy::Strip,
        ReasoningArg::Keep => ReasoningPolicy::Keep,
    });
    let flag_tools = args.tool_calls.map(|t| match t {
        ToolCallsArg::Strip => ToolCallPolicy::Strip,
        ToolCallsArg::StripRequests => ToolCallPolicy::StripRequests,
        ToolCallsArg::StripResponses => ToolCallPolicy::StripResponses,
        ToolCallsArg::Omit => ToolCallPolicy::Omit,
        ToolCallsArg::Keep => ToolCallPolicy::Keep,
    });
    let explicit = args.revert
        || flag_reasoning.is_some()
        || flag_tools.is_some()
        || args.summary.is_some()
        || args.summarize;
    // A profile: the one named, or the configured default when no policy
    // is given. Flags override its policies.
    let profile = match &args.profile {
        Some(name) => Some(config.profile(name).map_err(anyhow::Error::msg)?),
        None if !explicit => Some(
            config
                .profile(&config.compaction.default_profile)
                .map_err(anyhow::Error::msg)?,
        ),
        None => None,
    };
    let reasoning = flag_reasoning.or(profile.as_ref().and_then(|p| p.reasoning));
    let tool_calls = flag_tools
        .or_else(|| profile.as_ref().and_then(|p| p.tool_calls.clone()))
        .map(|p| config.tool_policy(p));
    let summary_spec: Option<SummaryConfig> = if args.summary.is_some() || args.revert {
        None
    } else {
        match profile.as_ref().and_then(|p| p.summary.clone()) {
            Some(spec) => Some(spec),
            None if args.summarize => config.profile("heavy").map_err(anyhow::Error::msg)?.summary,
            None => None,
        }
    };
    if args.instructions.is_some() && summary_spec.is_none() {
        bail!("--instructions: no summarizer runs (give --summarize or a profile with a summary)");
    }

    let history = history(store, &id, info.len)?;
    let now = Timestamp::now();
    let from = args
        .from
        .as_deref()
        .map(|text| Bound::parse(text).with_context(|| format!("--from {text}")))
        .transpose()?;
    let (to, to_flag) = match (&args.to, args.keep_last) {
        (Some(text), _) => (
            Some(Bound::parse(text).with_context(|| format!("--to {text}"))?),
            format!("--to {text}"),
        ),
        (None, Some(n)) => (Some(Bound::BeforeLast(n)), format!("--keep-last {n}")),
        (None, None) if config.compaction.keep_last > 0 => {
            let n = config.compaction.keep_last;
            (
                Some(Bound::BeforeLast(n)),
                format!("keep_last = {n} (configuration)"),
            )
        }
        (None, None) => (None, "the last turn".to_owned()),
    };
    let keeps = args.to.is_none() && to.is_some();
    let from_flag = args
        .from
        .as_deref()
        .map_or_else(|| "turn 0".to_owned(), |t| format!("--from {t}"));
    let note = turns_note(info.turns);
    let asked = history.range(from, to, now).map_err(|e| match e {
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
        RangeError::AfterLast { .. } => {
            anyhow::anyhow!("{from_flag}: names no turn ({note})")
        }
    })?;
    let summarizes = args.summary.is_some() || summary_spec.is_some();
    let (from_turn, to_turn) = if summarizes {
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
    let last_turn = info.turns.saturating_sub(1);

    // The summary, written from the raw events of the widened range.
    let mut provenance = Map::new();
    if let Some(p) = &profile {
        provenance.insert("profile".into(), json!(p.name));
    }
    let summary = match (&args.summary, &summary_spec) {
        (Some(text), _) => Some(text.clone()),
        (None, Some(spec)) => {
            let summarizer = summarizers::make(spec, args.instructions.as_deref())?;
            let raw = summarizers::raw_events(store, &id, from_turn, to_turn, info.len)?;
            let text = summarizers::run(&*summarizer, &raw)?;
            summarizers::record_provenance(&*summarizer, &mut provenance);
            Some(text)
        }
        (None, None) => None,
    };
    if !args.revert && reasoning.is_none() && tool_calls.is_none() && summary.is_none() {
        bail!("no policy: the profile sets none; give --reasoning, --tool-calls, --summary or --revert");
    }
    let (first_address, last_address) =
        covered_addresses(store, &id, from_turn, to_turn.min(last_turn), info.len)?;
    if let Some(a) = first_address {
        provenance.insert("first_address".into(), json!(a.hex()));
    }
    if let Some(a) = last_address {
        provenance.insert("last_address".into(), json!(a.hex()));
    }
    provenance.insert("created_by".into(), json!("manual"));

    let compaction = Compaction {
        from_turn,
        to_turn,
        summary,
        reasoning,
        tool_calls,
        revert: args.revert.then_some(true),
        info: None,
    };
    let restores = args.revert || only_keeps(&compaction);
    let event = Event::new(now, EventKind::Compaction(compaction));
    let scope = Scope { end: info.len };
    let before = tally_with(store, &id, scope, None, &tokenizer)?;
    let after = tally_with(
        store,
        &id,
        scope,
        Some((info.len, last_turn, &event)),
        &tokenizer,
    )?;
    let (tokens_before, tokens_after) = (before.total_tokens(), after.total_tokens());
    // A compaction that changes nothing is not stored; one that does not
    // shrink the view is refused unless forced (a revert or keep restores
    // on purpose).
    let status = if before == after {
        Status::Noop
    } else if !restores && tokens_after >= tokens_before && !args.force {
        Status::Inflated
    } else if args.dry_run {
        Status::DryRun
    } else {
        Status::Stored
    };

    let head = if status == Status::Stored {
        let mut stored = event.clone();
        if let EventKind::Compaction(c) = &mut stored.kind {
            provenance.insert("tokens_before".into(), json!(tokens_before));
            provenance.insert("tokens_after".into(), json!(tokens_after));
            if let Tokenizer::Bpe { name, .. } = &tokenizer {
                provenance.insert("tokenizer".into(), json!(name));
            }
            c.info = Some(convstore_store::Json::from_value(&Value::Object(
                provenance.clone(),
            )));
        }
        let options = AppendOptions {
            expect_head: Some(info.head),
            no_sync: false,
        };
        let head = store.append(&id, &[stored], &options)?.head;
        // A manual compaction that succeeds lets automatic ones summarize
        // again after a summarizer failure.
        if store.auto_state(&id)?.summarizer_failed {
            store.set_auto_state(&id, convstore_store::AutoState::default())?;
        }
        Some(head)
    } else {
        None
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
                        "tokens_before": before.tokens_of(kind), "tokens_after": after.tokens_of(kind),
                    }),
                );
            }
        }
        let value = json!({
            "status": status.as_str(),
            "profile": profile.as_ref().map(|p| p.name.clone()),
            "provenance": Value::Object(provenance.clone()),
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
                " (widened from {} to cover existing summaries)",
                output::range(asked.0, asked.1)
            )
        };
        writeln!(out, "status: {}", status.as_str())?;
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
            let (b, a) = (before.of(kind), after.of(kind));
            if b != a {
                rows.push(vec![
                    kind.as_str().to_owned(),
                    format!("{} -> {}", b.0, a.0),
                    before.tokens_of(kind).to_string(),
                    after.tokens_of(kind).to_string(),
                ]);
            }
        }
        if rows.len() > 1 {
            output::table(&mut out, &rows)?;
        } else {
            writeln!(out, "the view would not change")?;
        }
        let counted = match &tokenizer {
            Tokenizer::Chars4 => "4 characters a token".to_owned(),
            exact @ Tokenizer::Bpe { .. } => format!("counted with {}", exact.name()),
        };
        writeln!(out, "tokens: {tokens_before} -> {tokens_after} ({counted})")?;
        match head {
            Some(head) => writeln!(out, "stored; head {head}")?,
            None => match status {
                Status::Noop => notes.say("noop: the view would not change; nothing was stored"),
                Status::DryRun => notes.say("dry run: nothing was stored"),
                Status::Stored | Status::Inflated => {}
            },
        }
    }
    out.flush()?;
    if status == Status::Inflated && !args.dry_run {
        bail!(
            "inflated: the compaction would not shrink the view ({tokens_before} -> {tokens_after} tokens); nothing was stored (--force stores it anyway)"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// What `compact` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Stored,
    DryRun,
    Noop,
    Inflated,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Stored => "stored",
            Status::DryRun => "dry_run",
            Status::Noop => "noop",
            Status::Inflated => "inflated",
        }
    }
}

/// Whether a compaction sets only keep policies: it restores, on purpose.
fn only_keeps(c: &Compaction) -> bool {
    c.summary.is_none()
        && c.reasoning.is_none_or(|r| r == ReasoningPolicy::Keep)
        && c.tool_calls
            .as_ref()
            .is_none_or(|t| *t == ToolCallPolicy::Keep)
}

/// The addresses of the first and last raw records of turns `from..=to`.
fn covered_addresses(
    store: &Store,
    id: &ConversationId,
    from: u64,
    to: u64,
    len: u64,
) -> Result<(Option<Address>, Option<Address>)> {
    let seqs = store.turn_records(id, from, to, len)?;
    if seqs.is_empty() {
        return Ok((None, None));
    }
    let (first, last) = (seqs.start, seqs.end - 1);
    Ok((
        Some(store.record(id, first)?.address),
        Some(store.record(id, last)?.address),
    ))
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
