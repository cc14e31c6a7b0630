//! Automatic compaction: [`run`] measures a conversation's view and, when
//! [`convstore_projection::auto::decide`] says so, appends a compaction —
//! what `append --auto` does after each append, and what a server would
//! call after each turn.
//!
//! The view is measured through a materialized view named `auto` (kept
//! current incrementally, so a check costs the new events and the view's
//! size, not the log's). A summary is written by the profile's summarizer
//! from the raw events of the (widened) range; if that fails, this and
//! later automatic runs use mechanical policies (strip reasoning, strip
//! tool calls) until a manual compaction succeeds.

use convstore_store::{Seq, Turn};
use std::collections::BTreeMap;

use convstore_projection::auto::{decide, AutoInput, Decision};
use convstore_projection::bounds::widen_summary_range;
use convstore_projection::config::{Config, Profile, SummarizerKind};
use convstore_projection::estimate_chars;
use convstore_projection::summarize::{Extractive, Summarizer};
use convstore_projection::{tokens_for_chars, SUMMARY_HEADER};
use convstore_store::event::{Compaction, ReasoningPolicy, ToolCallPolicy};
use convstore_store::{
    AppendOptions, AutoState, ConversationId, Event, EventKind, Json, Store, Timestamp,
};
use serde_json::{json, Map, Value};

use crate::error::Result;
use crate::pipeline::{self, Scope};
use crate::replan::Replan;
use crate::summarizers::{self, Secrets};
use crate::views::{self as materialize, RefreshOptions};

/// The materialized view automatic compaction measures.
pub const VIEW: &str = ".auto";

/// What an automatic compaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AutoReport {
    /// The turns it covers.
    pub from: u64,
    /// The last turn it covers.
    pub to: u64,
    /// The profile it applied (`default` after a summarizer failure).
    pub profile: String,
    /// It folded the summaries into one.
    pub fold: bool,
    /// The view's tokens before and after.
    pub tokens_before: u64,
    /// The view's tokens after.
    pub tokens_after: u64,
    /// The summarizer failed, with this error; mechanical policies were used.
    pub summarizer_error: Option<String>,
    /// The view needed compacting but nothing was stored, for this reason
    /// (the compaction would not have made the view smaller); the other
    /// fields say what was tried.
    pub skipped: Option<String>,
}

/// What the `auto` view holds, measured.
struct Measure {
    /// Characters of the view, and its tokens (estimated from them).
    chars: u64,
    tokens: u64,
    turn_tokens: Vec<u64>,
    /// `(first turn, tokens)` of each summary run.
    summary_runs: Vec<(u64, u64)>,
    model: Option<String>,
}

fn measure(store: &Store, id: &ConversationId, no_sync: bool) -> Result<Measure> {
    let options = RefreshOptions {
        no_sync,
        ..RefreshOptions::default()
    };
    materialize::refresh_with(store, id, VIEW, None, options)?;
    let mut chars = 0;
    let mut turn_chars: Vec<u64> = Vec::new();
    let mut runs: BTreeMap<u64, u64> = BTreeMap::new();
    let mut model = None;
    materialize::read(store, id, VIEW, |v| {
        let c = estimate_chars(&v.event);
        chars += c;
        let turn = v.turn as usize;
        if turn_chars.len() <= turn {
            turn_chars.resize(turn + 1, 0);
        }
        turn_chars[turn] += c;
        if let Some((first, _)) = v.summary_of {
            *runs.entry(first).or_default() += c;
        }
        if let EventKind::Config { delta } = &v.event.kind {
            if let Ok(Value::Object(d)) = serde_json::from_str::<Value>(delta.as_str()) {
                if let Some(m) = d.get("model").and_then(Value::as_str) {
                    model = Some(m.to_owned());
                }
            }
        }
        Ok(())
    })?;
    let turns = store.info(id)?.turns as usize;
    turn_chars.resize(turns.max(turn_chars.len()), 0);
    Ok(Measure {
        chars,
        tokens: tokens_for_chars(chars),
        turn_tokens: turn_chars.into_iter().map(tokens_for_chars).collect(),
        summary_runs: runs
            .into_iter()
            .map(|(first, chars)| (first, tokens_for_chars(chars)))
            .collect(),
        model,
    })
}

/// How many times [`run`] plans when appends land between its decision
/// and its write (see [`Replan`]).
const ATTEMPTS: usize = 3;

/// Checks `id` and compacts it if automatic compaction is enabled and its
/// view needs it. `no_sync` makes the writes return before they are
/// durable (as `append --no-sync`). Appends that another client makes
/// meanwhile (through a server) have it plan again from the new head,
/// keeping what it decided ([`Replan`]).
pub fn run(
    store: &Store,
    id: &ConversationId,
    config: &Config,
    secrets: &Secrets,
    no_sync: bool,
) -> Result<Option<AutoReport>> {
    // A summarizer that failed in an earlier attempt is reported still.
    let mut summarizer_error = None;
    Replan::run(store, id, ATTEMPTS, |replan| {
        run_once(
            store,
            id,
            config,
            secrets,
            no_sync,
            replan,
            &mut summarizer_error,
        )
    })
}

/// One attempt of [`run`]; `replan.decided` holds the turns to compact
/// and whether as a fold.
fn run_once(
    store: &Store,
    id: &ConversationId,
    config: &Config,
    secrets: &Secrets,
    no_sync: bool,
    replan: &mut Replan<'_, (u64, u64, bool)>,
    summarizer_error: &mut Option<String>,
) -> Result<Option<AutoReport>> {
    let auto = &config.compaction.auto;
    if !auto.enabled {
        return Ok(None);
    }
    let before = measure(store, id, no_sync)?;
    let window = before
        .model
        .as_ref()
        .and_then(|m| auto.context_windows.get(m).copied())
        .or(auto.context_window);
    let Some(window) = window else {
        // Without a window there is nothing to measure against.
        return Ok(None);
    };
    let info = store.info(id)?;
    let mut next_uncovered = 0;
    let mut summaries: Vec<(u64, u64)> = Vec::new();
    for o in store.overlays(id, info.len)? {
        if let EventKind::Compaction(c) = &o.event.kind {
            next_uncovered = next_uncovered.max(c.to_turn.saturating_add(1));
            if c.summary.is_some() && !c.is_revert() {
                summaries.push((c.from_turn, c.to_turn));
            }
        }
    }
    let pins = store.pins(id)?;
    let input = AutoInput {
        window,
        view_tokens: before.tokens,
        turn_tokens: &before.turn_tokens,
        summary_runs: &before.summary_runs,
        next_uncovered,
        summaries: &summaries,
        pins: &pins,
    };
    let (from, to, fold) = match replan.decided {
        Some(decided) => decided,
        None => match decide(auto, &input) {
            Decision::Compact { from, to, fold, .. } => *replan.decided.insert((from, to, fold)),
            Decision::Skip(_) => return Ok(None),
        },
    };

    let mut profile = config.profile(&auto.profile)?;
    let state = store.auto_state(id)?;
    let mut provenance = Map::new();
    let (from, to, summary) = match profile.summary.clone() {
        Some(spec) if !state.summarizer_failed => {
            let (from, to) = widen_summary_range((from, to), &summaries);
            // The extractive summary is sized to the window: a fold's must
            // stay well under the share that triggers the next fold (its
            // user messages and answers get an eighth of it each).
            let raw = summarizers::raw_events(store, id, from, to, info.len)?;
            let written = replan.summary(from, to, raw, |raw| {
                let summarizer: Box<dyn Summarizer> =
                    if spec.summarizer == SummarizerKind::Extractive {
                        let usable = window.saturating_sub(auto.reserve_tokens);
                        let budget = (auto.fold_ratio * usable as f64 * 4.0 / 8.0) as usize;
                        Box::new(Extractive {
                            budget: budget.max(100),
                        })
                    } else {
                        summarizers::make(&spec, None, secrets)?
                    };
                summarizers::write(&*summarizer, raw)
            });
            match written {
                Ok(written) => {
                    let text = &written.text;
                    // A summary no smaller than what it replaces would inflate
                    // the view: store nothing.
                    let replaced: u64 = before
                        .turn_tokens
                        .iter()
                        .take((to + 1) as usize)
                        .skip(from as usize)
                        .sum();
                    let added = tokens_for_chars(
                        (SUMMARY_HEADER.chars().count() + text.chars().count()) as u64,
                    );
                    if added >= replaced {
                        return Ok(Some(AutoReport {
                            from,
                            to,
                            profile: profile.name,
                            fold,
                            tokens_before: before.tokens,
                            tokens_after: before.tokens,
                            summarizer_error: None,
                            skipped: Some(format!(
                                "the summary of turns {from}..{to} ({added} tokens) would not be smaller than what it replaces ({replaced} tokens)"
                            )),
                        }));
                    }
                    provenance.extend(written.provenance.clone());
                    (from, to, Some(text.clone()))
                }
                Err(e) => {
                    store.set_auto_state(
                        id,
                        AutoState {
                            summarizer_failed: true,
                        },
                    )?;
                    *summarizer_error = Some(format!("{e:#}"));
                    (from, to, None)
                }
            }
        }
        _ => (from, to, None),
    };
    if profile.summary.is_some() && summary.is_none() {
        // Mechanical fallback; a fold has nothing to fold then.
        profile = Profile {
            name: "default".to_owned(),
            reasoning: Some(ReasoningPolicy::Strip),
            tool_calls: Some(ToolCallPolicy::Strip),
            summary: None,
            recall_hints: profile.recall_hints,
        };
    }
    let mut compaction: Compaction = profile.compaction(from, to, summary, config);
    // What it does to the turns it covers, measured before it is stored:
    // nothing (stored nowhere), or the tokens the view will have.
    let last_turn = info.turns.saturating_sub(1);
    let probe = Event::new(Timestamp::now(), EventKind::Compaction(compaction.clone()));
    let range_before = range_chars(store, id, info.len, from, to, None)?;
    let range_after = range_chars(store, id, info.len, from, to, Some((last_turn, &probe)))?;
    if range_after == range_before {
        return Ok(Some(AutoReport {
            from,
            to,
            skipped: Some(format!(
                "profile {} changes nothing in turns {from}..{to}",
                profile.name
            )),
            profile: profile.name,
            fold,
            tokens_before: before.tokens,
            tokens_after: before.tokens,
            summarizer_error: summarizer_error.clone(),
        }));
    }
    // The view's characters once the compaction is in (only its turns
    // change), estimated as the measure after it will: what is stored is
    // what is reported.
    let tokens_after = tokens_for_chars((before.chars + range_after).saturating_sub(range_before));
    provenance.insert("profile".into(), json!(profile.name));
    provenance.insert("created_by".into(), json!("auto"));
    provenance.insert("tokens_before".into(), json!(before.tokens));
    provenance.insert("tokens_after".into(), json!(tokens_after));
    if profile.recall_hints {
        provenance.insert("recall_hints".into(), json!(true));
    }
    compaction.info = Some(Json::from_value(&Value::Object(provenance.clone())));
    let options = AppendOptions::new()
        .expecting(Some(info.head))
        .unsynced(no_sync);
    let events = [Event::new(
        probe.timestamp,
        EventKind::Compaction(compaction),
    )];
    replan.append(store, id, &events, &options)?;
    let after = measure(store, id, no_sync)?;
    Ok(Some(AutoReport {
        from,
        to,
        profile: profile.name,
        fold,
        tokens_before: before.tokens,
        tokens_after: after.tokens,
        summarizer_error: summarizer_error.clone(),
        skipped: None,
    }))
}

/// Characters of the view of turns `from..=to` of records `0..len`, as it is
/// or (with `extra`, the last turn and a compaction) as it would be once
/// the compaction is appended.
fn range_chars(
    store: &Store,
    id: &ConversationId,
    len: u64,
    from: u64,
    to: u64,
    extra: Option<(u64, &Event)>,
) -> Result<u64> {
    let scope = Scope { end: len };
    let projector = pipeline::plan(store, id, scope, extra.map(|(turn, e)| (len, turn, e)))?;
    let seqs = store.turn_records(id, Turn(from)..=Turn(to), Seq(len))?;
    let mut chars = 0;
    pipeline::stream_range(
        store,
        id,
        seqs,
        &projector,
        |view| view.iter().map(|v| estimate_chars(&v.event)).sum::<u64>(),
        |c| {
            chars += c;
            Ok(())
        },
    )?;
    Ok(chars)
}

/// `(from, to)` ranges of the automatic compactions in `id`'s log.
pub fn automatic_ranges(store: &Store, id: &ConversationId) -> Result<Vec<(u64, u64, bool)>> {
    let len = store.info(id)?.len;
    let mut out = Vec::new();
    for o in store.overlays(id, len)? {
        if let EventKind::Compaction(c) = &o.event.kind {
            let info: BTreeMap<String, Value> = c
                .info
                .as_ref()
                .and_then(|i| serde_json::from_str(i.as_str()).ok())
                .unwrap_or_default();
            if info.get("created_by").and_then(Value::as_str) == Some("auto") {
                out.push((c.from_turn, c.to_turn, c.summary.is_some()));
            }
        }
    }
    Ok(out)
}
