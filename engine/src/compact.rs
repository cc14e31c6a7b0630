//! Creating a compaction: [`compact`] resolves a request (profile, flags,
//! bounds) into a compaction, has a summarizer write its summary, tallies
//! the view before and after, and appends it unless it would change
//! nothing, not shrink the view, or was only a dry run.

use convstore_projection::bounds::{widen_summary_range, Bound, Conversation};
use convstore_projection::config::{Config, SummaryConfig};
use convstore_projection::Tokenizer;
use convstore_store::event::{Compaction, ReasoningPolicy, ToolCallPolicy};
use convstore_store::{
    Address, AppendOptions, AutoState, ConversationId, Event, EventKind, Json, Store, Timestamp,
};
use convstore_store::{Seq, StoreError, Turn};
use serde_json::{json, Map, Value};

use crate::error::{Error, Result};
use crate::pipeline::{self, Scope, Tally};
use crate::replan::Replan;
use crate::summarizers::{self, Secrets};

/// What to compact, and how.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
#[allow(clippy::struct_excessive_bools)] // one per request flag
pub struct CompactRequest {
    /// The profile whose policies apply (flags override them). Without it
    /// and without any policy, the configured default profile applies.
    pub profile: Option<String>,
    /// The reasoning policy.
    pub reasoning: Option<ReasoningPolicy>,
    /// The tool call policy (the configured per-tool hints are added).
    pub tool_calls: Option<ToolCallPolicy>,
    /// A summary text.
    pub summary: Option<String>,
    /// Have a summarizer write the summary: the profile's, else the
    /// built-in extractive one.
    pub summarize: bool,
    /// Restore the raw view over the range.
    pub revert: bool,
    /// Instructions added to the summarizer's.
    pub instructions: Option<String>,
    /// Store it even if it does not shrink the view.
    pub force: bool,
    /// The first turn (default 0).
    pub from: Option<Bound>,
    /// The last turn (default: the configured `keep_last`, else the last
    /// turn). Past the last turn, it is clamped to it.
    pub to: Option<Bound>,
    /// Show what it would do; store nothing.
    pub dry_run: bool,
    /// Recall hints on or off (`None`: as the profile says, else off).
    pub recall_hints: Option<bool>,
}

/// What [`compact`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Appended.
    Stored,
    /// Not appended: a dry run.
    DryRun,
    /// Not appended: the view would not change.
    Noop,
    /// Not appended: the view would not shrink (and it was not forced).
    Inflated,
}

impl Status {
    /// `stored`, `dry_run`, `noop`, `inflated`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Stored => "stored",
            Status::DryRun => "dry_run",
            Status::Noop => "noop",
            Status::Inflated => "inflated",
        }
    }
}

/// What a compaction did to the view.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CompactReport {
    /// Whether it was stored, and if not why.
    pub status: Status,
    /// The profile applied, if any.
    pub profile: Option<String>,
    /// The bookkeeping stored with it (profile, summarizer, model,
    /// prompt hash, first and last address, tokens, tokenizer, created by).
    pub provenance: Map<String, Value>,
    /// The range it covers (widened over the summaries it meets).
    pub from_turn: u64,
    /// The last turn it covers.
    pub to_turn: u64,
    /// The range asked for, before widening.
    pub requested: (u64, u64),
    /// The view before.
    pub before: Tally,
    /// The view after (as it would be).
    pub after: Tally,
    /// The head after it was stored.
    pub head: Option<Address>,
}

impl CompactReport {
    /// As `compact --json` prints it: status, profile, provenance, the
    /// range (and the one asked for), tokens before and after, the head
    /// if stored, and per kind of event the events, characters and tokens
    /// before and after.
    pub fn to_json(&self) -> Value {
        let mut kinds = Map::new();
        for kind in convstore_store::EventType::ALL {
            let (b, a) = (self.before.of(kind), self.after.of(kind));
            if b.0 + a.0 > 0 {
                kinds.insert(
                    kind.as_str().to_owned(),
                    json!({
                        "events_before": b.0, "events_after": a.0,
                        "chars_before": b.1, "chars_after": a.1,
                        "tokens_before": self.before.tokens_of(kind), "tokens_after": self.after.tokens_of(kind),
                    }),
                );
            }
        }
        json!({
            "status": self.status.as_str(),
            "profile": self.profile,
            "provenance": Value::Object(self.provenance.clone()),
            "from_turn": self.from_turn,
            "to_turn": self.to_turn,
            "requested": [self.requested.0, self.requested.1],
            "tokens_before": self.before.total_tokens(),
            "tokens_after": self.after.total_tokens(),
            "head": self.head.map(|h| h.hex()),
            "kinds": kinds,
        })
    }
}

/// How many times [`compact`] plans when appends land between its plan
/// and its write (see [`Replan`]).
const ATTEMPTS: usize = 8;

/// Resolves `request` against conversation `id` and appends the
/// compaction it describes (unless a dry run, a no-op, or inflated). The
/// summary, if one is written, comes from the raw events of the widened
/// range. The append is conditional on the head the plan was made from:
/// when another writer appends first, the compaction is planned again
/// from the new head, over the turns the first plan resolved ([`Replan`]).
pub fn compact(
    store: &Store,
    id: &ConversationId,
    request: &CompactRequest,
    config: &Config,
    tokenizer: &Tokenizer,
    secrets: &Secrets,
) -> Result<CompactReport> {
    let planned = Replan::run(store, id, ATTEMPTS, |replan| {
        try_compact(store, id, request, config, tokenizer, secrets, replan)
    });
    match planned {
        // Only another process sharing a database server can overtake
        // the last plan.
        Err(e) if e.is_conflict() => Err(Error::Store(StoreError::Conflict {
            what: format!(
                "other writers appended to the conversation while the compaction was planned, {ATTEMPTS} times"
            ),
        })),
        other => other,
    }
}

fn try_compact(
    store: &Store,
    id: &ConversationId,
    request: &CompactRequest,
    config: &Config,
    tokenizer: &Tokenizer,
    secrets: &Secrets,
    replan: &mut Replan<'_, (u64, u64)>,
) -> Result<CompactReport> {
    let info = store.info(id)?;
    if info.len == 0 {
        return Err(Error::EmptyConversation(info.label(), "compact"));
    }
    let explicit = request.revert
        || request.reasoning.is_some()
        || request.tool_calls.is_some()
        || request.summary.is_some()
        || request.summarize;
    // A profile: the one named, or the configured default when no policy
    // is given. Flags override its policies.
    let profile = match &request.profile {
        Some(name) => Some(config.profile(name)?),
        None if !explicit => Some(config.profile(&config.compaction.default_profile)?),
        None => None,
    };
    let reasoning = request
        .reasoning
        .or(profile.as_ref().and_then(|p| p.reasoning));
    let tool_calls = request
        .tool_calls
        .clone()
        .or_else(|| profile.as_ref().and_then(|p| p.tool_calls.clone()))
        .map(|p| config.tool_policy(p));
    let summary_spec: Option<SummaryConfig> = if request.summary.is_some() || request.revert {
        None
    } else {
        match profile.as_ref().and_then(|p| p.summary.clone()) {
            Some(spec) => Some(spec),
            None if request.summarize => config.profile("heavy")?.summary,
            None => None,
        }
    };
    if request.instructions.is_some() && summary_spec.is_none() {
        return Err(Error::InstructionsWithoutSummarizer);
    }

    let durations = [request.from, request.to]
        .iter()
        .any(|b| matches!(b, Some(Bound::Ago(_))));
    let history = history(store, id, info.len, durations)?;
    let now = Timestamp::now();
    let to = match request.to {
        Some(bound) => Some(bound),
        None if config.compaction.keep_last > 0 => {
            Some(Bound::BeforeLast(config.compaction.keep_last))
        }
        None => None,
    };
    // Bounds resolve against the log the first plan saw: a range that
    // moves with the head (`--keep-last`, the default last turn) would
    // otherwise have its summary written again at every plan.
    let asked = match replan.decided {
        Some(asked) => asked,
        None => *replan.decided.insert(history.range(request.from, to, now)?),
    };
    let summarizes = request.summary.is_some() || summary_spec.is_some();
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
    let summary = match (&request.summary, &summary_spec) {
        (Some(text), _) => Some(text.clone()),
        (None, Some(spec)) => {
            let raw = summarizers::raw_events(store, id, from_turn, to_turn, info.len)?;
            let written = replan.summary(from_turn, to_turn, raw, |raw| {
                let summarizer = summarizers::make(spec, request.instructions.as_deref(), secrets)?;
                summarizers::write(&*summarizer, raw)
            })?;
            provenance.extend(written.provenance.clone());
            Some(written.text.clone())
        }
        (None, None) => None,
    };
    if !request.revert && reasoning.is_none() && tool_calls.is_none() && summary.is_none() {
        return Err(Error::NoPolicy);
    }
    let (first_address, last_address) =
        covered_addresses(store, id, from_turn, to_turn.min(last_turn), info.len)?;
    if let Some(a) = first_address {
        provenance.insert("first_address".into(), json!(a.hex()));
    }
    if let Some(a) = last_address {
        provenance.insert("last_address".into(), json!(a.hex()));
    }
    provenance.insert("created_by".into(), json!("manual"));
    let recall_hints = request
        .recall_hints
        .or(profile.as_ref().map(|p| p.recall_hints))
        .unwrap_or(false);
    if recall_hints {
        provenance.insert("recall_hints".into(), json!(true));
    }

    let compaction = Compaction {
        from_turn,
        to_turn,
        summary,
        reasoning,
        tool_calls,
        revert: request.revert.then_some(true),
        // What changes the view is measured with it.
        info: recall_hints.then(|| Json::from_value(&json!({ "recall_hints": true }))),
    };
    let restores = request.revert || only_keeps(&compaction);
    let event = Event::new(now, EventKind::Compaction(compaction));
    let scope = Scope { end: info.len };
    // Both views in one pass over the log.
    let (without, with) = pipeline::plan_pair(store, id, scope, (info.len, last_turn, &event))?;
    let (before, after) = pipeline::tally_two(store, id, scope, &without, &with, tokenizer)?;
    let (tokens_before, tokens_after) = (before.total_tokens(), after.total_tokens());
    // A compaction that changes nothing is not stored; one that does not
    // shrink the view is refused unless forced (a revert or keep restores
    // on purpose).
    let status = if before == after {
        Status::Noop
    } else if !restores && tokens_after >= tokens_before && !request.force {
        Status::Inflated
    } else if request.dry_run {
        Status::DryRun
    } else {
        Status::Stored
    };

    let head = if status == Status::Stored {
        let mut stored = event;
        if let EventKind::Compaction(c) = &mut stored.kind {
            provenance.insert("tokens_before".into(), json!(tokens_before));
            provenance.insert("tokens_after".into(), json!(tokens_after));
            if let Tokenizer::Bpe { name, .. } = tokenizer {
                provenance.insert("tokenizer".into(), json!(name));
            }
            c.info = Some(Json::from_value(&Value::Object(provenance.clone())));
        }
        let options = AppendOptions::new().expecting(Some(info.head));
        let head = replan.append(store, id, &[stored], &options)?.head;
        // A manual compaction that succeeds lets automatic ones summarize
        // again after a summarizer failure.
        if store.auto_state(id)?.summarizer_failed {
            store.set_auto_state(id, AutoState::default())?;
        }
        Some(head)
    } else {
        None
    };
    Ok(CompactReport {
        status,
        profile: profile.map(|p| p.name),
        provenance,
        from_turn,
        to_turn,
        requested: asked,
        before,
        after,
        head,
    })
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
    let seqs = store.turn_records(id, Turn(from)..=Turn(to), Seq(len))?;
    if seqs.is_empty() {
        return Ok((None, None));
    }
    let (first, last) = (seqs.start, seqs.end - 1);
    Ok((
        Some(store.record(id, first)?.address),
        Some(store.record(id, last)?.address),
    ))
}

/// The turns of records `0..len` and their existing compactions (from the
/// overlay entries), and, when `times`, when each turn started (one pass
/// over the log: only a bound that is a duration needs it).
pub fn history(store: &Store, id: &ConversationId, len: u64, times: bool) -> Result<Conversation> {
    let mut history = Conversation {
        turns: Scope { end: len }.turns(store, id)?,
        ..Conversation::default()
    };
    for overlay in store.overlays(id, len)? {
        if let EventKind::Compaction(c) = &overlay.event.kind {
            let summary = c.summary.is_some() && !c.is_revert();
            history.compactions.push((c.from_turn, c.to_turn, summary));
        }
    }
    if times {
        for record in store.scan(id, 0..len)? {
            let record = record?;
            if record.turn as usize == history.turn_starts.len() {
                history.turn_starts.push(record.event.timestamp);
            }
        }
    }
    Ok(history)
}
