//! Two views side by side: [`diff`] aligns them by raw seq and says, per
//! turn, what one shows that the other strips, drops or summarizes, with
//! the token change per content type.
//!
//! A side is a conversation as of a point (its whole log, `@SEQ`, `@TIME`),
//! optionally with a profile applied on top: the view as if a compaction
//! with the profile's policies were appended over every turn (a summary
//! profile's summarizer runs, as `compact --dry-run` would run it).
//! Records are aligned by seq while both sides have the same record (the
//! same address): a fork and its parent share their records up to the fork
//! point; past it, each side's records are its own.

use std::collections::BTreeMap;

use convstore_projection::{estimate_chars, tokens_for_chars, ViewEvent};
use convstore_store::{ConversationId, Event, EventKind, EventType, Store, Timestamp};

use crate::error::{Error, Result};
use crate::pipeline::{self, AsOf, Scope};
use crate::summarizers::{self, Secrets};
use convstore_projection::config::Config;

/// One side of a diff.
#[derive(Debug, Clone)]
pub struct Side {
    /// The conversation.
    pub conversation: ConversationId,
    /// As of a record or a time (`None`: the whole log).
    pub as_of: Option<AsOf>,
    /// A profile applied over every turn, on top of the log's compactions.
    pub profile: Option<String>,
}

impl Side {
    /// The side `text` names in `store`: a conversation, or `CONV@SEQ` /
    /// `CONV@TIME` (as of a record or a time; a name that holds `@`
    /// names its conversation), with `profile` over it.
    pub fn resolve(store: &Store, text: &str, profile: Option<String>) -> Result<Side> {
        if let Some(id) = store.find(text)? {
            return Ok(Side {
                conversation: id,
                as_of: None,
                profile,
            });
        }
        if let Some((conv, point)) = text.rsplit_once('@') {
            let as_of = AsOf::parse(point).ok_or_else(|| {
                Error::Invalid(format!(
                    "{text}: \"{point}\" is neither a record seq nor an RFC 3339 time"
                ))
            })?;
            return Ok(Side {
                conversation: store.resolve(conv)?,
                as_of: Some(as_of),
                profile,
            });
        }
        Ok(Side {
            conversation: store.resolve(text)?,
            as_of: None,
            profile,
        })
    }
}

/// What a view does with one raw record.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Fate {
    /// Shown as it is.
    Shown,
    /// Shown with its arguments or content stripped.
    Stripped,
    /// Not shown (reasoning stripped, calls and results omitted).
    Dropped,
    /// Replaced by a summary of these turns.
    Summarized(u64, u64),
    /// Not in this side's log (past its as-of point, or another record).
    Absent,
}

impl Fate {
    /// `shown`, `stripped`, `dropped`, `summarized`, `absent`.
    pub fn as_str(self) -> &'static str {
        match self {
            Fate::Shown => "shown",
            Fate::Stripped => "stripped",
            Fate::Dropped => "dropped",
            Fate::Summarized(..) => "summarized",
            Fate::Absent => "absent",
        }
    }
}

/// A group of records of one turn and kind whose fates differ the same
/// way.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Change {
    /// Their kind.
    #[serde(with = "convstore_store::readable::event_type")]
    pub kind: EventType,
    /// What side A does with them.
    pub a: Fate,
    /// What side B does with them.
    pub b: Fate,
    /// Their seqs.
    pub seqs: Vec<u64>,
    /// Tokens they take in A's view.
    pub tokens_a: u64,
    /// Tokens they take in B's view.
    pub tokens_b: u64,
}

/// The changes of one turn.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TurnDiff {
    /// The raw turn.
    pub turn: u64,
    /// Its changes.
    pub changes: Vec<Change>,
}

/// A summary injected in a side's view.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Injected {
    /// The seq it stands at (the first record it replaces).
    pub seq: u64,
    /// The turns it replaces.
    pub turns: (u64, u64),
    /// Tokens of its three events.
    pub tokens: u64,
}

/// What a side is, resolved.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct SideInfo {
    /// The conversation.
    #[serde(with = "convstore_store::readable::id")]
    pub conversation: ConversationId,
    /// Its name.
    pub name: Option<String>,
    /// Records in scope.
    pub records: u64,
    /// The profile applied, if any.
    pub profile: Option<String>,
    /// Tokens of the view per event type (four characters a token).
    pub tokens: [u64; 10],
    /// Its injected summaries.
    pub summaries: Vec<Injected>,
}

/// Two views compared.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Diff {
    /// Side A.
    pub a: SideInfo,
    /// Side B.
    pub b: SideInfo,
    /// Records both sides hold (the same record at the same seq).
    pub shared: u64,
    /// Per turn, what differs (turns where nothing differs are left out).
    pub turns: Vec<TurnDiff>,
}

/// One side's view, per raw record.
struct Projected {
    info: SideInfo,
    /// Per seq: (turn, kind, address bytes, fate, tokens in the view).
    records: Vec<(u64, EventType, [u8; 32], Fate, u64)>,
}

fn view_tokens(event: &Event) -> u64 {
    tokens_for_chars(estimate_chars(event))
}

/// A side's view: the conversation's as of its point, with its profile
/// applied over every turn.
pub fn view(
    store: &Store,
    side: &Side,
    config: &Config,
    secrets: &Secrets,
) -> Result<Vec<ViewEvent>> {
    let id = &side.conversation;
    let scope = Scope::as_of(store, id, side.as_of)?;
    let extra = match &side.profile {
        None => None,
        Some(name) => Some(profile_compaction(store, id, scope, name, config, secrets)?),
    };
    let last_turn = scope.turns(store, id)?.saturating_sub(1);
    let projector = pipeline::plan(
        store,
        id,
        scope,
        extra.as_ref().map(|e| (scope.end, last_turn, e)),
    )?;
    let mut view: Vec<ViewEvent> = Vec::new();
    pipeline::stream(store, id, scope, &projector, |v| {
        view.push(v.clone());
        Ok(())
    })?;
    Ok(view)
}

fn project_side(
    store: &Store,
    side: &Side,
    config: &Config,
    secrets: &Secrets,
) -> Result<Projected> {
    let id = &side.conversation;
    let scope = Scope::as_of(store, id, side.as_of)?;
    let view = view(store, side, config, secrets)?;
    let mut tokens = [0u64; 10];
    let mut summaries = Vec::new();
    let mut shown: BTreeMap<u64, u64> = BTreeMap::new();
    let mut summarized: Vec<(u64, u64)> = Vec::new();
    for v in &view {
        let t = view_tokens(&v.event);
        tokens[v.event.kind.event_type().index()] += t;
        if let Some(turns) = v.summary_of {
            match summaries.last_mut() {
                Some(Injected { seq, tokens, .. }) if *seq == v.seq => *tokens += t,
                _ => {
                    summaries.push(Injected {
                        seq: v.seq,
                        turns,
                        tokens: t,
                    });
                    summarized.push(turns);
                }
            }
            continue;
        }
        *shown.entry(v.seq).or_default() += t;
    }
    let mut records = Vec::with_capacity(scope.end as usize);
    for record in store.scan(id, 0..scope.end)? {
        let record = record?;
        let kind = record.event.kind.event_type();
        let fate = if kind == EventType::Compaction {
            Fate::Dropped
        } else if shown.contains_key(&record.seq) {
            if stripped(&record.event, &view, record.seq) {
                Fate::Stripped
            } else {
                Fate::Shown
            }
        } else if let Some(&(a, b)) = summarized
            .iter()
            .find(|(a, b)| (*a..=*b).contains(&record.turn))
        {
            Fate::Summarized(a, b)
        } else {
            Fate::Dropped
        };
        let tokens = shown.get(&record.seq).copied().unwrap_or(0);
        records.push((record.turn, kind, *record.address.as_bytes(), fate, tokens));
    }
    let info = store.info(id)?;
    Ok(Projected {
        info: SideInfo {
            conversation: *id,
            name: info.name,
            records: scope.end,
            profile: side.profile.clone(),
            tokens,
            summaries,
        },
        records,
    })
}

/// Whether the view's event at `seq` differs from the record (its text
/// stripped to one of the same length, say).
fn stripped(raw: &Event, view: &[ViewEvent], seq: u64) -> bool {
    let at = view.partition_point(|v| v.seq < seq);
    view[at..]
        .iter()
        .take_while(|v| v.seq == seq)
        .any(|v| v.summary_of.is_none() && v.event.kind != raw.kind)
}

/// The compaction a profile would append over every turn in `scope`.
fn profile_compaction(
    store: &Store,
    id: &ConversationId,
    scope: Scope,
    name: &str,
    config: &Config,
    secrets: &Secrets,
) -> Result<Event> {
    let turns = scope.turns(store, id)?;
    if turns == 0 {
        return Err(Error::EmptyConversation(
            store.info(id)?.label(),
            "diff with a profile",
        ));
    }
    let profile = config.profile(name)?;
    let summary = match &profile.summary {
        Some(spec) => {
            let summarizer = summarizers::make(spec, None, secrets)?;
            let raw = summarizers::raw_events(store, id, 0, turns - 1, scope.end)?;
            Some(summarizers::run(&*summarizer, &raw)?)
        }
        None => None,
    };
    Ok(Event::new(
        Timestamp::now(),
        EventKind::Compaction(profile.compaction(0, turns - 1, summary, config)),
    ))
}

/// Compares side `a` with side `b`.
pub fn diff(store: &Store, a: &Side, b: &Side, config: &Config, secrets: &Secrets) -> Result<Diff> {
    let pa = project_side(store, a, config, secrets)?;
    let pb = project_side(store, b, config, secrets)?;
    let shared = pa
        .records
        .iter()
        .zip(&pb.records)
        .take_while(|(x, y)| x.2 == y.2)
        .count();
    let mut turns: BTreeMap<u64, BTreeMap<(EventType, Fate, Fate), Change>> = BTreeMap::new();
    let mut note = |turn: u64, kind: EventType, fa: Fate, fb: Fate, seq: u64, ta: u64, tb: u64| {
        let change = turns
            .entry(turn)
            .or_default()
            .entry((kind, fa, fb))
            .or_insert_with(|| Change {
                kind,
                a: fa,
                b: fb,
                seqs: Vec::new(),
                tokens_a: 0,
                tokens_b: 0,
            });
        change.seqs.push(seq);
        change.tokens_a += ta;
        change.tokens_b += tb;
    };
    for (seq, (x, y)) in pa.records.iter().zip(&pb.records).take(shared).enumerate() {
        if x.3 != y.3 && x.1 != EventType::Compaction {
            note(x.0, x.1, x.3, y.3, seq as u64, x.4, y.4);
        }
    }
    for (seq, x) in pa.records.iter().enumerate().skip(shared) {
        if x.1 != EventType::Compaction {
            note(x.0, x.1, x.3, Fate::Absent, seq as u64, x.4, 0);
        }
    }
    for (seq, y) in pb.records.iter().enumerate().skip(shared) {
        if y.1 != EventType::Compaction {
            note(y.0, y.1, Fate::Absent, y.3, seq as u64, 0, y.4);
        }
    }
    Ok(Diff {
        a: pa.info,
        b: pb.info,
        shared: shared as u64,
        turns: turns
            .into_iter()
            .map(|(turn, changes)| TurnDiff {
                turn,
                changes: changes.into_values().collect(),
            })
            .collect(),
    })
}
