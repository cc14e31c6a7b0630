//! Retention: which raw payloads `gc` drops ([`Retention`]), and the pass
//! that drops them from one conversation ([`collect`]).
//!
//! A payload is *covered* when the conversation's view at its head does
//! not show it: the view drops the event, replaces its turn with a
//! summary, or strips that payload (a result's content, a call's
//! arguments). A record a fork shares must be covered in the fork's view
//! too. Materialized views apply a profile below every compaction of the
//! log, so they show no payload the head view does not; a stored block
//! older than the head that still shows a dropped text is rewritten.

use convstore_projection::config::{parse_age, RetentionConfig};
use convstore_store::{ConversationId, DroppedPayloads, EventType, Store, Timestamp};

use crate::error::{Error, Result};
use crate::pipeline::{self, Scope};

/// Which payloads a retention pass drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Only those of records older than this many microseconds.
    pub older_than: Option<i64>,
    /// Only those the view no longer shows (see the module's doc).
    pub only_compacted: bool,
}

impl Retention {
    /// The policy `[retention]` sets, with `older_than` (a duration) and
    /// `all` (every payload, not only covered ones) given on the command
    /// line in its place. An error if it would drop every payload of every
    /// age (`all` without an age).
    pub fn new(config: &RetentionConfig, older_than: Option<&str>, all: bool) -> Result<Retention> {
        let older_than = match older_than {
            Some(text) => Some(parse_age(text).map_err(Error::Invalid)?),
            None => config
                .older_than_micros()
                .map_err(|e| Error::Invalid(e.to_string()))?,
        };
        let only_compacted = !all && config.only_compacted;
        if older_than.is_none() && !only_compacted {
            return Err(Error::Invalid(
                "dropping every payload needs an age (--older-than DURATION)".to_owned(),
            ));
        }
        Ok(Retention {
            older_than,
            only_compacted,
        })
    }

    /// Why a record's payload was dropped, as its envelope keeps it.
    pub fn reason(&self) -> String {
        let mut reason = "retention".to_owned();
        if self.only_compacted {
            reason.push_str(": covered by a compaction");
        }
        if let Some(micros) = self.older_than {
            reason.push_str(if self.only_compacted { ", " } else { ": " });
            reason.push_str("older than ");
            reason.push_str(&age_text(micros));
        }
        reason
    }
}

/// A duration in microseconds as the largest unit that divides it.
fn age_text(micros: i64) -> String {
    let seconds = micros / 1_000_000;
    for (unit, size) in [("w", 604_800), ("d", 86_400), ("h", 3600), ("m", 60)] {
        if seconds > 0 && seconds % size == 0 {
            return format!("{}{unit}", seconds / size);
        }
    }
    format!("{seconds}s")
}

/// How many times a pass is planned again when the conversation (or a
/// fork sharing its records) changed between the plan and the writes.
const ATTEMPTS: usize = 8;

/// Drops the payloads `retention` picks from `id`'s own records (see
/// [`Store::drop_payloads`]); `before_write` runs once before the first
/// write. A dry run only counts.
pub fn collect(
    store: &Store,
    id: &ConversationId,
    retention: &Retention,
    dry_run: bool,
    before_write: &mut dyn FnMut() -> convstore_store::StoreResult<()>,
) -> Result<DroppedPayloads> {
    let reason = retention.reason();
    for _ in 0..ATTEMPTS {
        let now = Timestamp::now();
        let cutoff = retention.older_than.map(|age| {
            Timestamp::from_micros(now.as_micros().saturating_sub(age))
                .unwrap_or(Timestamp::EARLIEST)
        });
        let len = store.info(id)?.len;
        let start = store.fork_point(id)?.map_or(0, |p| p.at);
        let mut expected = vec![(*id, len)];
        let shown = if retention.only_compacted {
            Some(shown_payloads(store, id, start, len, &mut expected)?)
        } else {
            None
        };
        let select = |seq: u64, time: Timestamp, _: EventType| {
            let old = cutoff.is_none_or(|c| time < c);
            let covered = shown.as_ref().is_none_or(|shown| {
                usize::try_from(seq - start)
                    .ok()
                    .and_then(|i| shown.get(i))
                    .is_some_and(|s| !s)
            });
            old && covered
        };
        if let Some(dropped) =
            store.drop_payloads(id, &expected, &select, &reason, dry_run, before_write)?
        {
            return Ok(dropped);
        }
    }
    Err(Error::Busy(format!(
        "conversation {id} kept changing while its payloads were being dropped; try again"
    )))
}

/// For each record `start..len` of `id`, whether the head view of `id`
/// or of a fork sharing the record shows its payload; adds each fork and
/// its length to `expected`.
fn shown_payloads(
    store: &Store,
    id: &ConversationId,
    start: u64,
    len: u64,
    expected: &mut Vec<(ConversationId, u64)>,
) -> Result<Vec<bool>> {
    let mut shown = vec![false; usize::try_from(len - start).unwrap_or(usize::MAX)];
    let mut holders = vec![(*id, len, len)];
    for (fork, shared) in store.sharing_forks(id)? {
        let fork_len = store.info(&fork)?.len;
        expected.push((fork, fork_len));
        holders.push((fork, fork_len, shared.min(len)));
    }
    for (holder, holder_len, end) in holders {
        if end <= start {
            continue;
        }
        let projector = pipeline::plan(store, &holder, Scope { end: holder_len }, None)?;
        pipeline::for_each_chunk(
            store,
            &holder,
            start..end,
            |chunk| {
                let drops = |seq, turn, kind| projector.drops(seq, turn, kind);
                Ok(chunk
                    .events(store, start, end, drops)?
                    .into_iter()
                    .filter(|(seq, turn, event)| projector.shows_payload(*seq, *turn, event))
                    .map(|(seq, _, _)| seq)
                    .collect::<Vec<u64>>())
            },
            |seqs| {
                for seq in seqs {
                    if let Some(slot) = usize::try_from(seq - start)
                        .ok()
                        .and_then(|i| shown.get_mut(i))
                    {
                        *slot = true;
                    }
                }
                Ok(())
            },
        )?;
    }
    Ok(shown)
}
