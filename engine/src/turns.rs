//! Turn ranges as the faces take them: `A..B` (both ends included),
//! `A..`, `..B`, `A..=B` or `N`; and the turns of a conversation a range
//! names.

use std::ops::RangeInclusive;

use convstore_store::{ConversationId, Store};

use crate::error::{Error, Result};

/// The range `text` writes, or why it is not one.
pub fn parse(text: &str) -> std::result::Result<RangeInclusive<u64>, String> {
    let number = |s: &str| -> std::result::Result<u64, String> {
        s.trim()
            .parse()
            .map_err(|_| format!("\"{s}\" is not a turn number"))
    };
    let range = if let Some((a, b)) = text.split_once("..") {
        let a = if a.is_empty() { 0 } else { number(a)? };
        let b = if b.is_empty() {
            u64::MAX
        } else {
            number(b.trim_start_matches('='))?
        };
        a..=b
    } else {
        let n = number(text)?;
        n..=n
    };
    if range.is_empty() {
        return Err("the range is empty (from is after to)".to_owned());
    }
    Ok(range)
}

/// The turns of `id` that `text` names (`label` is how the face calls
/// the range in messages: `--turns`, `turns`), refused when it names
/// none; a range past the last turn ends there, but an open end (`A..`)
/// also covers the turns appended later.
pub fn existing(
    store: &Store,
    id: &ConversationId,
    label: &str,
    text: &str,
) -> Result<RangeInclusive<u64>> {
    let shown = format!("{label} {text}");
    let range = parse(text).map_err(|problem| Error::BadTurns {
        range: shown.clone(),
        problem,
    })?;
    let turns = store.info(id)?.turns;
    if *range.start() >= turns {
        return Err(Error::NoTurnInRange {
            range: shown,
            turns,
        });
    }
    let end = match *range.end() {
        u64::MAX => u64::MAX,
        end => end.min(turns - 1),
    };
    Ok(*range.start()..=end)
}
