//! Forking a conversation, compacted on the way if asked: [`fork`].

use convstore_projection::config::Config;
use convstore_store::{Address, ConversationId, Event, EventKind, Store, StoreError, Timestamp};
use convstore_store::{Seq, Turn};

use crate::error::{Error, Result};
use crate::summarizers::{self, Secrets};

/// Where a fork starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ForkAt {
    /// After the parent's last record.
    #[default]
    End,
    /// After turn T: the parent's turns `0..=T` are shared.
    Turn(u64),
    /// After record S: the parent's records `0..=S` are shared.
    Seq(u64),
}

/// What [`fork`] made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Forked {
    /// The new conversation.
    pub id: ConversationId,
    /// How many of the parent's records it shares.
    pub at: u64,
    /// Its head.
    pub head: Address,
    /// Whether a compaction was stored with it.
    pub compacted: bool,
}

/// Forks `parent` at `at`, named `name`; with `profile`, the fork's turns
/// are compacted with it in the same write (a summary is written from the
/// parent's raw events, which are the fork's).
pub fn fork(
    store: &Store,
    parent: &ConversationId,
    at: ForkAt,
    name: Option<&str>,
    profile: Option<&str>,
    config: &Config,
    secrets: &Secrets,
) -> Result<Forked> {
    let info = store.info(parent)?;
    let at = match at {
        ForkAt::Turn(turn) if turn >= info.turns => {
            return Err(Error::NoSuchTurn {
                turn,
                turns: info.turns,
            })
        }
        // Everything up to the next turn's first record.
        ForkAt::Turn(turn) => {
            store
                .turn_records(parent, Turn(0)..=Turn(turn), Seq(info.len))?
                .end
        }
        ForkAt::Seq(seq) if seq >= info.len => {
            return Err(StoreError::NoSuchRecord { seq, len: info.len }.into())
        }
        ForkAt::Seq(seq) => seq + 1,
        ForkAt::End => info.len,
    };
    let mut events = Vec::new();
    if let Some(name) = profile {
        let profile = config.profile(name)?;
        if at == 0 {
            return Err(Error::EmptyFork);
        }
        let last_turn = store.turn_of(parent, Seq(at - 1))?.0;
        let summary = match &profile.summary {
            Some(spec) => {
                let summarizer = summarizers::make(spec, None, secrets)?;
                let raw = summarizers::raw_events(store, parent, 0, last_turn, at)?;
                Some(summarizers::run(&*summarizer, &raw)?)
            }
            None => None,
        };
        events.push(Event::new(
            Timestamp::now(),
            EventKind::Compaction(profile.compaction(0, last_turn, summary, config)),
        ));
    }
    let (id, head) = store.fork(parent, at, name, &events)?;
    Ok(Forked {
        id,
        at,
        head,
        compacted: !events.is_empty(),
    })
}
