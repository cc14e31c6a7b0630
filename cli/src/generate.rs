//! The generator behind `convstore gen`: a deterministic synthetic conversation, written straight
//! into the store, for benchmarks.
//!
//! Shape `small`: turns of ten events (turn_start, user, reasoning, then
//! three tool calls with their results, then an assistant message, or fewer
//! tool calls and a second reasoning); texts drawn from the size mix 55%
//! 50-199 B, 33% 200-449 B, 10% 450-999 B, 2% 1-4 KB. Compactions are spread
//! over the log at random points after the first turns: random ranges over
//! the turns so far (a few past the last), 10% summaries (their ranges
//! widened over the summaries they meet, as `compact` does), 45% strip
//! reasoning and tool calls, 45% another tool-call policy. The same seed
//! gives the same events and so the same head.

use anyhow::{bail, Result};
use convstore_projection::bounds::widen_summary_range;
use convstore_store::event::{Compaction, ReasoningPolicy, ToolCallPolicy};
use convstore_store::{AppendOptions, ConversationId, Event, EventKind, Json, Store, Timestamp};

/// Events appended per batch.
const BATCH: usize = 10_000;
/// 2024-01-01T00:00:00Z: generated timestamps count microseconds from here.
const EPOCH_MICROS: i64 = 1_704_067_200_000_000;

/// splitmix64: small, fast, and the same everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    fn percent(&mut self) -> u64 {
        self.next() % 100
    }
}

const FILLER: &str = "The parser reads the header, then each record in turn; a record that fails its checksum stops the scan and names its offset. ";

/// A text of the small shape's size mix.
fn text(rng: &mut Rng) -> String {
    let p = rng.percent();
    let len = match p {
        0..=54 => rng.range(50, 199),
        55..=87 => rng.range(200, 449),
        88..=97 => rng.range(450, 999),
        _ => rng.range(1000, 4000),
    } as usize;
    let offset = (rng.next() % FILLER.len() as u64) as usize;
    let mut out = String::with_capacity(len);
    while out.len() < len {
        let piece = &FILLER[if out.is_empty() { offset } else { 0 }..];
        out.push_str(&piece[..piece.len().min(len - out.len())]);
    }
    out
}

/// Writes a conversation named `name` of `events` events, `compactions` of
/// them compactions, generated from `seed`; returns its id.
pub fn generate(
    store: &Store,
    name: &str,
    events: u64,
    compactions: u64,
    seed: u64,
) -> Result<ConversationId> {
    if events == 0 {
        bail!("--events must be at least 1");
    }
    if compactions > events {
        bail!("--compactions cannot exceed --events");
    }
    if store.find_name(name)?.is_some() {
        bail!("a conversation named \"{name}\" already exists");
    }
    let mut rng = Rng(seed);
    // Where the compactions go: distinct seqs, after the first few turns
    // when there is room.
    let first = if events - compactions >= 30 { 30 } else { 0 };
    let mut at = std::collections::BTreeSet::new();
    while (at.len() as u64) < compactions {
        at.insert(rng.range(first, events - 1));
    }
    let mut at = at.into_iter().peekable();

    let no_sync = AppendOptions {
        no_sync: true,
        ..AppendOptions::default()
    };
    let mut id = None;
    let mut batch: Vec<Event> = Vec::with_capacity(BATCH);
    let mut summaries: Vec<(u64, u64)> = Vec::new();
    let (mut turn, mut step, mut call) = (0u64, 0u64, 0u64);
    let mut started = false;
    for seq in 0..events {
        let timestamp =
            Timestamp::from_micros(EPOCH_MICROS + seq as i64 * 1000).unwrap_or_else(Timestamp::now);
        let kind = if at.peek() == Some(&seq) {
            at.next();
            compaction(&mut rng, turn, &mut summaries)
        } else {
            let kind = conversation_event(&mut rng, step, &mut call);
            if step == 0 && started {
                turn += 1;
            }
            started = true;
            step = (step + 1) % 10;
            kind
        };
        batch.push(Event::new(timestamp, kind));
        if batch.len() == BATCH {
            append(store, &mut id, name, &mut batch, &no_sync)?;
        }
    }
    if !batch.is_empty() {
        append(store, &mut id, name, &mut batch, &no_sync)?;
    }
    store.flush()?;
    id.ok_or_else(|| anyhow::anyhow!("nothing generated"))
}

fn append(
    store: &Store,
    id: &mut Option<ConversationId>,
    name: &str,
    batch: &mut Vec<Event>,
    options: &AppendOptions,
) -> Result<()> {
    match id {
        Some(id) => {
            store.append(id, batch, options)?;
        }
        None => *id = Some(store.create_and_append(Some(name), batch, options)?.0),
    }
    batch.clear();
    Ok(())
}

/// Step `step` (0-9) of a turn.
fn conversation_event(rng: &mut Rng, step: u64, call: &mut u64) -> EventKind {
    const TOOLS: [&str; 4] = [
        "fs_read_file",
        "fs_grep_files",
        "cargo_test",
        "fs_modify_file",
    ];
    match step {
        0 => EventKind::TurnStart,
        1 => EventKind::User { text: text(rng) },
        2 | 9 => {
            if step == 9 {
                EventKind::Assistant { text: text(rng) }
            } else {
                EventKind::Reasoning { text: text(rng) }
            }
        }
        3 | 5 | 7 => {
            *call += 1;
            let tool = TOOLS[(rng.next() % 4) as usize];
            let path = format!("src/module_{}.rs", rng.next() % 500);
            EventKind::ToolCall {
                id: format!("call_{call}"),
                name: tool.to_owned(),
                arguments: Json::from_value(&serde_json::json!({ "path": path })),
            }
        }
        _ => EventKind::ToolResult {
            id: format!("call_{call}"),
            content: text(rng),
            is_error: rng.percent() < 5,
        },
    }
}

/// A compaction over the turns so far (`last` is the current turn).
fn compaction(rng: &mut Rng, last: u64, summaries: &mut Vec<(u64, u64)>) -> EventKind {
    let from = rng.range(0, last);
    let to = rng.range(from, last + 2);
    let kind = rng.percent();
    let mut c = Compaction {
        from_turn: from,
        to_turn: to,
        summary: None,
        reasoning: None,
        tool_calls: None,
        revert: None,
        info: None,
    };
    if kind < 10 {
        let (a, b) = widen_summary_range((from, to), summaries);
        summaries.push((a, b));
        c.from_turn = a;
        c.to_turn = b;
        c.summary = Some(format!("Summary of turns {a} to {b}: {}", text(rng)));
    } else if kind < 55 {
        c.reasoning = Some(ReasoningPolicy::Strip);
        c.tool_calls = Some(ToolCallPolicy::Strip);
    } else {
        c.tool_calls = Some(match rng.next() % 3 {
            0 => ToolCallPolicy::Omit,
            1 => ToolCallPolicy::StripResponses,
            _ => ToolCallPolicy::StripRequests,
        });
    }
    EventKind::Compaction(c)
}
