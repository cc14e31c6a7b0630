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
//! reasoning and tool calls, 45% another tool-call policy
//! ([`Overlays::Mixed`]); or every one stripping reasoning and tool calls
//! ([`Overlays::Strip`]: a view that keeps most events). The same seed
//! gives the same events and so the same head.
//!
//! Shape `jp`: turns shaped like the 21 real JP conversations the project
//! is tested with, from statistics measured on them (the data itself is not
//! shipped; `benches/jp_shape.py` measures it again):
//! `turn_start`, `user`, then a number of steps drawn from the real
//! distribution (median 9, heavy tail to 122), each a tool call with its
//! result (58%), an assistant message (32%) or reasoning (10%), the last
//! one an assistant message; sizes of each kind drawn from its real
//! twenty-quantiles (tool results: median 1 KB, 10% over 12 KB); tool
//! names by their real frequency.

use convstore_projection::bounds::widen_summary_range;
use convstore_store::event::{Compaction, ReasoningPolicy, ToolCallPolicy};
use convstore_store::{
    AppendOptions, BulkTarget, ConversationId, Event, EventKind, Json, Store, StoreError, Timestamp,
};

use crate::error::{Error, Result};

/// Events appended per batch, unless told otherwise.
pub const BATCH: usize = 10_000;
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
    };
    filler(rng, len)
}

/// Shapes of generated conversations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Ten events a turn, texts of 50 B to 4 KB.
    Small,
    /// Turns, kinds and sizes like the real JP conversations.
    Jp,
}

/// What the compactions of a generated conversation do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlays {
    /// 10% summaries, 45% strip reasoning and tool calls, 45% another
    /// tool-call policy: the view keeps a few percent of the events.
    Mixed,
    /// Every compaction strips reasoning and tool calls over its range:
    /// no summary, nothing omitted, so the view keeps most events.
    Strip,
}

/// What to generate: how many events, how many of them compactions, from
/// which seed, in which shape, appended how many at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    /// How many events, compactions included.
    pub events: u64,
    /// How many of them are compactions.
    pub compactions: u64,
    /// The same seed gives the same events, and so the same head.
    pub seed: u64,
    /// The shape of the turns.
    pub shape: Shape,
    /// Events per append ([`BATCH`] by default).
    pub batch: usize,
    /// What the compactions do.
    pub overlays: Overlays,
}

impl Spec {
    /// `events` events, `compactions` of them compactions, from `seed`: the
    /// small shape, mixed compactions, appended in [`BATCH`]es.
    pub fn new(events: u64, compactions: u64, seed: u64) -> Self {
        Self {
            events,
            compactions,
            seed,
            shape: Shape::Small,
            batch: BATCH,
            overlays: Overlays::Mixed,
        }
    }
}

/// Writes a conversation named `name` of `events` events, `compactions` of
/// them compactions, generated from `seed` in the `small` shape; returns
/// its id.
pub fn generate(
    store: &Store,
    name: &str,
    events: u64,
    compactions: u64,
    seed: u64,
) -> Result<ConversationId> {
    generate_spec(store, name, &Spec::new(events, compactions, seed))
}

/// Checks the generator's arguments.
fn check(events: u64, compactions: u64, batch_size: usize) -> Result<()> {
    if batch_size == 0 {
        return Err(Error::Invalid(
            "the batch size must be at least 1".to_owned(),
        ));
    }
    if events == 0 {
        return Err(Error::Invalid("at least 1 event is needed".to_owned()));
    }
    if compactions > events {
        return Err(Error::Invalid(format!(
            "{compactions} compactions exceed {events} events"
        )));
    }
    Ok(())
}

/// [`generate`] as `spec` says, appending `spec.batch` events at a time
/// ([`BATCH`] by default; 1: as an agent that stores each event as it
/// happens). The events, and so the head, do not depend on the batch size;
/// how they are laid out in the store does.
///
/// With [`BATCH`], the conversation is written as one bulk append: it
/// exists whole or not at all (an interrupted run leaves nothing). With
/// any other size it is written as that many appends, as an agent would,
/// and an interrupted run leaves the appends made so far.
pub fn generate_spec(store: &Store, name: &str, spec: &Spec) -> Result<ConversationId> {
    let &Spec {
        events,
        compactions,
        seed,
        shape,
        batch: batch_size,
        overlays,
    } = spec;
    check(events, compactions, batch_size)?;
    if store.find_name(name)?.is_some() {
        return Err(StoreError::NameTaken {
            name: name.to_owned(),
        }
        .into());
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

    let no_sync = AppendOptions::new().unsynced(true);
    let mut id = None;
    let mut bulk = if batch_size == BATCH {
        Some(store.begin_bulk(
            BulkTarget::New { name: Some(name) },
            &AppendOptions::default(),
        )?)
    } else {
        None
    };
    let mut batch: Vec<Event> = Vec::with_capacity(batch_size.min(BATCH));
    let mut summaries: Vec<(u64, u64)> = Vec::new();
    let (mut turn, mut call, mut step) = (0u64, 0u64, 0u64);
    let mut started = false;
    let mut pending: std::collections::VecDeque<EventKind> = std::collections::VecDeque::new();
    for seq in 0..events {
        let timestamp =
            Timestamp::from_micros(EPOCH_MICROS + seq as i64 * 1000).unwrap_or_else(Timestamp::now);
        let kind = if at.peek() == Some(&seq) {
            at.next();
            compaction(&mut rng, turn, &mut summaries, overlays)
        } else {
            if pending.is_empty() {
                // The small shape draws each event when it is due (so its
                // sequence, and heads, stay what they were); jp a turn at
                // a time.
                match shape {
                    Shape::Small => {
                        pending.push_back(small_event(&mut rng, step, &mut call));
                        step = (step + 1) % 10;
                    }
                    Shape::Jp => jp_turn(&mut rng, &mut call, &mut pending),
                }
                if matches!(pending.front(), Some(EventKind::TurnStart)) {
                    if started {
                        turn += 1;
                    }
                    started = true;
                }
            }
            pending.pop_front().unwrap_or(EventKind::TurnStart)
        };
        batch.push(Event::new(timestamp, kind));
        if batch.len() == batch_size {
            match &mut bulk {
                Some(bulk) => {
                    bulk.push(&batch)?;
                    store.advance(batch.len() as u64);
                    batch.clear();
                }
                None => append(store, &mut id, name, &mut batch, &no_sync)?,
            }
        }
    }
    if let Some(mut bulk) = bulk {
        bulk.push(&batch)?;
        store.advance(batch.len() as u64);
        return Ok(bulk.commit()?.0);
    }
    if !batch.is_empty() {
        append(store, &mut id, name, &mut batch, &no_sync)?;
    }
    store.flush()?;
    id.ok_or_else(|| Error::Invalid("nothing was generated".to_owned()))
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
    store.advance(batch.len() as u64);
    batch.clear();
    Ok(())
}

/// Step `step` (0-9) of a turn of the small shape.
fn small_event(rng: &mut Rng, step: u64, call: &mut u64) -> EventKind {
    const TOOLS: [&str; 4] = [
        "fs_read_file",
        "fs_grep_files",
        "cargo_test",
        "fs_modify_file",
    ];
    match step {
        0 => EventKind::TurnStart,
        1 => EventKind::User { text: text(rng) },
        2 => EventKind::Reasoning { text: text(rng) },
        9 => EventKind::Assistant { text: text(rng) },
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

/// Twenty-quantiles (and the maximum) measured on the real JP
/// conversations: steps after the user message per turn, and the sizes in
/// bytes of each kind of text as JP stores them.
#[allow(clippy::unreadable_literal)] // as measured
pub mod jp_shape {
    /// Steps (tool call with result, assistant message, reasoning) a turn.
    pub const STEPS: [u64; 21] = [
        1, 1, 1, 1, 2, 2, 2, 2, 4, 6, 9, 9, 11, 15, 16, 24, 27, 30, 41, 54, 122,
    ];
    /// User messages.
    pub const USER: [u64; 21] = [
        3, 22, 35, 44, 72, 106, 137, 158, 195, 244, 300, 376, 402, 604, 814, 1032, 1439, 2593,
        4724, 25341, 78334,
    ];
    /// Reasoning.
    pub const REASONING: [u64; 21] = [
        57, 97, 130, 158, 237, 324, 554, 755, 908, 1032, 1214, 1451, 1712, 2011, 2312, 2868, 3980,
        5099, 8640, 10552, 51782,
    ];
    /// Assistant messages.
    pub const ASSISTANT: [u64; 21] = [
        4, 39, 49, 55, 64, 72, 80, 86, 97, 105, 116, 132, 157, 191, 247, 377, 650, 1056, 1728,
        3929, 9345,
    ];
    /// Tool call arguments (their JSON).
    pub const ARGUMENTS: [u64; 21] = [
        2, 15, 27, 31, 44, 51, 53, 58, 60, 69, 78, 86, 93, 100, 112, 158, 308, 687, 1384, 3877,
        48159,
    ];
    /// Tool results.
    pub const RESULT: [u64; 21] = [
        16, 48, 60, 68, 68, 92, 160, 396, 576, 768, 1000, 1296, 1704, 2316, 3160, 4324, 6388, 9720,
        11932, 19328, 180620,
    ];
    /// Steps of each kind: tool calls, assistant messages, reasoning.
    pub const STEP_KINDS: [u64; 3] = [859, 468, 141];
    /// Tool names and their calls.
    pub const TOOLS: [(&str, u64); 12] = [
        ("fs_read_file", 272),
        ("fs_modify_file", 157),
        ("fs_grep_files", 146),
        ("cargo_check", 78),
        ("cargo_test", 58),
        ("github_read_file", 58),
        ("fs_create_file", 36),
        ("github_code_search", 19),
        ("cargo_format", 13),
        ("agentic_shepherd_run", 4),
        ("github_pulls", 3),
        ("git_diff", 3),
    ];
}

/// A value drawn from twenty-quantiles: a bucket at random, then uniform
/// within it.
fn from_quantiles(rng: &mut Rng, q: &[u64; 21]) -> u64 {
    let i = rng.range(0, 19) as usize;
    rng.range(q[i], q[i + 1].max(q[i]))
}

fn filler(rng: &mut Rng, len: u64) -> String {
    let len = len as usize;
    let offset = (rng.next() % FILLER.len() as u64) as usize;
    let mut out = String::with_capacity(len);
    while out.len() < len {
        let piece = &FILLER[if out.is_empty() { offset } else { 0 }..];
        out.push_str(&piece[..piece.len().min(len - out.len())]);
    }
    out
}

/// A turn of the jp shape.
fn jp_turn(rng: &mut Rng, call: &mut u64, out: &mut std::collections::VecDeque<EventKind>) {
    use jp_shape::{ARGUMENTS, ASSISTANT, REASONING, RESULT, STEPS, STEP_KINDS, TOOLS, USER};
    out.push_back(EventKind::TurnStart);
    let user = from_quantiles(rng, &USER);
    out.push_back(EventKind::User {
        text: filler(rng, user),
    });
    let steps = from_quantiles(rng, &STEPS).max(1);
    let total: u64 = STEP_KINDS.iter().sum();
    let tool_total: u64 = TOOLS.iter().map(|t| t.1).sum();
    for step in 0..steps {
        let pick = rng.next() % total;
        if step + 1 == steps || (pick >= STEP_KINDS[0] && pick < STEP_KINDS[0] + STEP_KINDS[1]) {
            let len = from_quantiles(rng, &ASSISTANT);
            out.push_back(EventKind::Assistant {
                text: filler(rng, len),
            });
        } else if pick >= STEP_KINDS[0] {
            let len = from_quantiles(rng, &REASONING);
            out.push_back(EventKind::Reasoning {
                text: filler(rng, len),
            });
        } else {
            *call += 1;
            let mut t = rng.next() % tool_total;
            let tool = TOOLS
                .iter()
                .find(|(_, n)| {
                    let hit = t < *n;
                    t = t.saturating_sub(*n);
                    hit
                })
                .map_or("fs_read_file", |(name, _)| name);
            let path = format!("src/module_{}.rs", rng.next() % 500);
            let len = from_quantiles(rng, &ARGUMENTS);
            let pad = filler(rng, len.saturating_sub(path.len() as u64 + 20));
            out.push_back(EventKind::ToolCall {
                id: format!("call_{call}"),
                name: tool.to_owned(),
                arguments: Json::from_value(&serde_json::json!({ "path": path, "pattern": pad })),
            });
            let len = from_quantiles(rng, &RESULT);
            out.push_back(EventKind::ToolResult {
                id: format!("call_{call}"),
                content: filler(rng, len),
                is_error: rng.percent() < 5,
            });
        }
    }
}

/// A compaction over the turns so far (`last` is the current turn).
fn compaction(
    rng: &mut Rng,
    last: u64,
    summaries: &mut Vec<(u64, u64)>,
    overlays: Overlays,
) -> EventKind {
    let from = rng.range(0, last);
    let to = rng.range(from, last + 2);
    let kind = match overlays {
        Overlays::Mixed => rng.percent(),
        Overlays::Strip => 10,
    };
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
