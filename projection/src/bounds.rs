//! Range bounds for creating a compaction (SPEC §4): [`Bound::parse`],
//! [`Conversation::from_turn`], [`Conversation::to_turn`], and summary range
//! widening ([`widen_summary_range`]).

use std::fmt;

use convstore_store::Timestamp;

/// A bound as written on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// `N`: turn N.
    Turn(u64),
    /// `-N`: N turns before the last turn.
    BeforeLast(u64),
    /// `90m`, `5h`, `2d`, ...: a time ago, in microseconds.
    Ago(i64),
    /// `last`: one past the highest `to_turn` of existing compactions.
    Last,
}

/// Why a bound or range cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundError(pub String);

impl fmt::Display for BoundError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BoundError {}

/// Why [`Conversation::range`] found no range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeError {
    /// The conversation has no turn.
    NoTurns,
    /// The `from` bound names no turn.
    From(BoundError),
    /// The `to` bound names no turn.
    To(BoundError),
    /// `from` resolved after `to`.
    Empty {
        /// The first turn `from` resolved to.
        first: u64,
        /// The last turn `to` resolved to.
        end: u64,
    },
    /// `from` resolved after the last turn.
    AfterLast {
        /// The first turn `from` resolved to.
        first: u64,
        /// The conversation's last turn.
        last: u64,
    },
}

impl fmt::Display for RangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RangeError::NoTurns => f.write_str("the conversation has no turns"),
            RangeError::From(e) => write!(f, "from: {e}"),
            RangeError::To(e) => write!(f, "to: {e}"),
            RangeError::Empty { first, end } => {
                write!(f, "the range {first}..{end} is empty (from is after to)")
            }
            RangeError::AfterLast { first, last } => {
                write!(f, "turn {first} is after the last turn ({last})")
            }
        }
    }
}

impl std::error::Error for RangeError {}

impl Bound {
    /// Parses `N`, `-N`, `last`, or a duration: a number and one of `s`,
    /// `m`, `h`, `d`, `w`.
    pub fn parse(text: &str) -> Result<Bound, BoundError> {
        let bad = || {
            BoundError(format!(
                "\"{text}\" is not a bound (expected N, -N, a duration such as 90m, 5h or 2d, or last)"
            ))
        };
        let text = text.trim();
        if text == "last" {
            return Ok(Bound::Last);
        }
        if let Some(n) = text.strip_prefix('-') {
            return n.parse().map(Bound::BeforeLast).map_err(|_| bad());
        }
        if text.bytes().all(|b| b.is_ascii_digit()) {
            return text.parse().map(Bound::Turn).map_err(|_| bad());
        }
        let unit = text.chars().last().ok_or_else(bad)?;
        let seconds: i64 = match unit {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            'w' => 604_800,
            _ => return Err(bad()),
        };
        let count: i64 = text[..text.len() - 1].parse().map_err(|_| bad())?;
        count
            .checked_mul(seconds)
            .and_then(|s| s.checked_mul(1_000_000))
            .filter(|&micros| micros >= 0)
            .map(Bound::Ago)
            .ok_or_else(bad)
    }
}

/// What resolving bounds needs to know about a conversation.
#[derive(Debug, Clone, Default)]
pub struct Conversation {
    /// How many turns it has.
    pub turns: u64,
    /// When each turn started (the timestamp of its first record), by
    /// turn: read only for a bound that is a duration ([`Bound::Ago`]),
    /// empty otherwise.
    pub turn_starts: Vec<Timestamp>,
    /// `(from_turn, to_turn, is_summary)` of every existing compaction.
    pub compactions: Vec<(u64, u64, bool)>,
}

impl Conversation {
    fn last_turn(&self) -> Result<u64, BoundError> {
        self.turns
            .checked_sub(1)
            .ok_or_else(|| BoundError("the conversation has no turns".to_owned()))
    }

    /// When each turn started, for a duration bound.
    fn starts(&self) -> Result<&[Timestamp], BoundError> {
        if self.turn_starts.len() as u64 == self.turns {
            Ok(&self.turn_starts)
        } else {
            Err(BoundError(
                "the turns' start times were not read for this bound".to_owned(),
            ))
        }
    }

    fn common(&self, bound: Bound) -> Result<Option<u64>, BoundError> {
        let last = self.last_turn()?;
        Ok(match bound {
            Bound::Turn(n) => Some(n),
            Bound::BeforeLast(n) => Some(last.checked_sub(n).ok_or_else(|| {
                BoundError(format!(
                    "{} before the last is before the first turn (the last turn is {last})",
                    if n == 1 {
                        "1 turn".to_owned()
                    } else {
                        format!("{n} turns")
                    }
                ))
            })?),
            Bound::Last => Some(
                self.compactions
                    .iter()
                    .map(|&(_, to, _)| to.saturating_add(1))
                    .max()
                    .unwrap_or(0),
            ),
            Bound::Ago(_) => None,
        })
    }

    /// `--from`: a duration is the first turn that started at most that
    /// long before `now`.
    pub fn from_turn(&self, bound: Bound, now: Timestamp) -> Result<u64, BoundError> {
        if let Some(turn) = self.common(bound)? {
            return Ok(turn);
        }
        let Bound::Ago(micros) = bound else {
            unreachable!("common() resolves every other bound")
        };
        let since = now.as_micros().saturating_sub(micros);
        self.starts()?
            .iter()
            .position(|t| t.as_micros() >= since)
            .map(|t| t as u64)
            .ok_or_else(|| BoundError("no turn started within that time".to_owned()))
    }

    /// `--to`: a duration is the last turn that started at least that long
    /// before `now`.
    pub fn to_turn(&self, bound: Bound, now: Timestamp) -> Result<u64, BoundError> {
        if let Some(turn) = self.common(bound)? {
            return Ok(turn);
        }
        let Bound::Ago(micros) = bound else {
            unreachable!("common() resolves every other bound")
        };
        let until = now.as_micros().saturating_sub(micros);
        self.starts()?
            .iter()
            .rposition(|t| t.as_micros() <= until)
            .map(|t| t as u64)
            .ok_or_else(|| BoundError("no turn started that long ago".to_owned()))
    }

    /// The range `from`/`to` give (defaults: turn 0 to the last turn),
    /// with its end clamped to the last turn (a compaction never covers
    /// turns appended after it), or an error if it is empty or inverted.
    pub fn range(
        &self,
        from: Option<Bound>,
        to: Option<Bound>,
        now: Timestamp,
    ) -> Result<(u64, u64), RangeError> {
        let last = self.last_turn().map_err(|_| RangeError::NoTurns)?;
        let first = match from {
            Some(b) => self.from_turn(b, now).map_err(RangeError::From)?,
            None => 0,
        };
        let end = match to {
            Some(b) => self.to_turn(b, now).map_err(RangeError::To)?,
            None => last,
        };
        if first > last {
            return Err(RangeError::AfterLast { first, last });
        }
        if first > end {
            return Err(RangeError::Empty { first, end });
        }
        Ok((first, end.min(last)))
    }
}

/// Widens a new summary's range to the union with every existing summary
/// range it intersects, until stable (SPEC §4).
pub fn widen_summary_range(range: (u64, u64), summaries: &[(u64, u64)]) -> (u64, u64) {
    let (mut first, mut last) = range;
    loop {
        let mut changed = false;
        for &(a, b) in summaries {
            if a <= last && first <= b && (a < first || b > last) {
                first = first.min(a);
                last = last.max(b);
                changed = true;
            }
        }
        if !changed {
            return (first, last);
        }
    }
}

#[cfg(test)]
#[path = "bounds_tests.rs"]
mod tests;
