//! Conversations from other tools: NDJSON events, JP's `events.json`, or
//! an OpenAI Chat Completions `messages` array (`convstore import`; the
//! server's `/import`).
//!
//! One pass over the input ([`import`]): every event is parsed, checked
//! and pushed, in batches, to one bulk append (`Store::begin_bulk`), which
//! makes the conversation visible whole at its commit, after the last
//! event was checked: an import that fails or is killed part-way leaves no
//! conversation. The input is never held whole: NDJSON is read a block of
//! a few MiB at a time, each block parsed on every core while the events
//! of the one before are appended, and JP's array element by element.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};

use convstore_store::interop::{jp, openai};
use convstore_store::strict::StrictValue;
use convstore_store::{
    json, AppendOptions, BulkAppend, BulkTarget, ConversationId, Event, EventType, Store,
    Timestamp, TurnTracker,
};
use serde::de::{DeserializeSeed, Error as _, SeqAccess, Visitor};
use serde_json::Value;

use crate::calls::CallCheck;
use crate::error::{Error, Result};

/// Events pushed to the bulk append at a time.
const BATCH: usize = 10_000;

/// What an input holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportFormat {
    /// One event per line (SPEC §2).
    Ndjson,
    /// JP's `events.json`: an array of JP events.
    Jp,
    /// An OpenAI Chat Completions `messages` array, or an object with one.
    Openai,
}

impl ImportFormat {
    /// The format named `name` (`ndjson`, `jp`, `openai`).
    pub fn named(name: &str) -> Option<ImportFormat> {
        match name {
            "ndjson" => Some(ImportFormat::Ndjson),
            "jp" => Some(ImportFormat::Jp),
            "openai" => Some(ImportFormat::Openai),
            _ => None,
        }
    }

    /// What a place in an input of this format counts (`line 3`, `event
    /// 12`, `message 4`), as errors and warnings name it: NDJSON lines from
    /// 1, JP events and OpenAI messages from 0.
    pub fn unit(self) -> &'static str {
        match self {
            ImportFormat::Ndjson => "line",
            ImportFormat::Jp => "event",
            ImportFormat::Openai => "message",
        }
    }
}

fn input_error(at: String, problem: impl std::fmt::Display) -> Error {
    Error::Input {
        at,
        problem: problem.to_string(),
    }
}

/// Calls `f` with each line of `input` and its number (from 1), without
/// the line ending. A line longer than `limit` bytes is an error naming
/// it, found without reading the rest of it into memory; so is one that
/// is not UTF-8.
pub fn for_each_line(
    mut input: impl BufRead,
    limit: u64,
    mut f: impl FnMut(usize, &str) -> Result<()>,
) -> Result<()> {
    let mut buf = Vec::new();
    for number in 1.. {
        buf.clear();
        let read = (&mut input)
            .take(limit.saturating_add(2))
            .read_until(b'\n', &mut buf)
            .map_err(|e| input_error(format!("line {number}"), format!("cannot read: {e}")))?;
        if read == 0 {
            break;
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
        }
        if buf.len() as u64 > limit {
            return Err(input_error(
                format!("line {number}"),
                format!("longer than the limit of {limit} bytes (--max-event-bytes)"),
            ));
        }
        let line = std::str::from_utf8(&buf)
            .map_err(|_| input_error(format!("line {number}"), "not UTF-8"))?;
        f(number, line)?;
    }
    Ok(())
}

/// Calls `f` with each event of the NDJSON `input` and its line number, in
/// order; blank lines, and a byte order mark before the first line, are
/// skipped. Lines are read a block (about 4 MiB) at a time and each block's
/// lines parsed side by side on rayon's threads while `f` takes the events
/// of the block before: reading and parsing overlap with what `f` does. An
/// event over `limit` bytes is refused where it is read. The error is the
/// first bad line's, whichever thread met it, and no event after it
/// reaches `f`.
pub fn for_each_ndjson_event(
    input: impl BufRead,
    limit: u64,
    now: Timestamp,
    mut f: impl FnMut(usize, Event) -> Result<()>,
) -> Result<()> {
    let mut block = LineBlock::default();
    // The block being parsed while `f` takes the one before it.
    let mut parsing: Option<Parsing> = None;
    let mut next = |block: &mut LineBlock, f: &mut dyn FnMut(usize, Event) -> Result<()>| {
        let started = block.parse(now, limit);
        match parsing.replace(started) {
            Some(before) => before.deliver(f),
            None => Ok(()),
        }
    };
    // Whether a line or `f` failed (rather than the reading).
    let mut failed = false;
    let read = for_each_line(input, limit, |number, line| {
        let line = if number == 1 {
            line.strip_prefix('\u{feff}').unwrap_or(line)
        } else {
            line
        };
        if !line.trim().is_empty() {
            block.push(number, line);
            if block.text.len() >= LineBlock::BYTES {
                next(&mut block, &mut f).inspect_err(|_| failed = true)?;
            }
        }
        Ok(())
    });
    if failed {
        return read;
    }
    // The lines read before a read error come first.
    next(&mut block, &mut f)?;
    if let Some(last) = parsing.take() {
        last.deliver(&mut f)?;
    }
    read
}

/// Lines of NDJSON waiting to be parsed: their text end to end, and each
/// one's number and range in it.
#[derive(Default)]
struct LineBlock {
    text: String,
    lines: Vec<(usize, std::ops::Range<usize>)>,
}

/// A block's events (or why each line is none), parsed on rayon's threads.
struct Parsing {
    done: std::sync::mpsc::Receiver<Vec<(usize, Result<Event>)>>,
}

impl LineBlock {
    const BYTES: usize = 4 << 20;

    fn push(&mut self, number: usize, line: &str) {
        let start = self.text.len();
        self.text.push_str(line);
        self.lines.push((number, start..self.text.len()));
    }

    /// Starts parsing the block's lines (and checking each event against
    /// `limit`) in parallel, and empties it.
    fn parse(&mut self, now: Timestamp, limit: u64) -> Parsing {
        let text = std::mem::take(&mut self.text);
        let lines = std::mem::take(&mut self.lines);
        let (tx, done) = std::sync::mpsc::sync_channel(1);
        rayon::spawn(move || {
            use rayon::prelude::*;
            let parsed = lines
                .into_par_iter()
                .map(|(number, range)| {
                    let event = json::parse_event(&text[range], now)
                        .map_err(|e| input_error(format!("line {number}"), e))
                        .and_then(|event| match too_large(&event, limit) {
                            Some(problem) => Err(input_error(format!("line {number}"), problem)),
                            None => Ok(event),
                        });
                    (number, event)
                })
                .collect();
            let _ = tx.send(parsed);
        });
        Parsing { done }
    }
}

impl Parsing {
    /// Hands the block's events to `f` in order, up to the first error.
    fn deliver(self, f: &mut dyn FnMut(usize, Event) -> Result<()>) -> Result<()> {
        let parsed = self
            .done
            .recv()
            .map_err(|_| Error::Invalid("a thread parsing the input failed".to_owned()))?;
        for (number, event) in parsed {
            f(number, event?)?;
        }
        Ok(())
    }
}

/// Why `event` may not be stored under a limit of `limit` bytes, if it may
/// not.
fn too_large(event: &Event, limit: u64) -> Option<String> {
    let size = convstore_store::event_size(event);
    (size > limit).then(|| {
        format!(
            "the event is {size} bytes, more than the limit of {limit} bytes (--max-event-bytes)"
        )
    })
}

/// What [`for_each_event`] hands each event to: its place in the input
/// (counted as [`ImportFormat::unit`] says), the event and the
/// fields kept in `meta`.
pub type EventSink<'a> = dyn FnMut(usize, Event, Vec<String>) -> Result<()> + 'a;

/// Calls `sink` with each event of the input, in order, and the fields the
/// format had that no event field holds (kept in `meta`). An error names
/// the event's place in the input (`line 3`, `event 12`, `message 4`).
/// An event over `limit` bytes is refused where it is read.
pub fn for_each_event(
    format: ImportFormat,
    input: impl Read,
    now: Timestamp,
    limit: u64,
    sink: &mut EventSink<'_>,
) -> Result<()> {
    let mut reader = BufReader::with_capacity(1 << 20, input);
    if format != ImportFormat::Ndjson {
        json_start(&mut reader)?;
    }
    // The store refuses an event over the limit when it is appended; here
    // it is refused where it is read, with its position (NDJSON lines as
    // they are parsed).
    let fits = |event: &Event, at: &String| -> Result<()> {
        match too_large(event, limit) {
            Some(problem) => Err(input_error(at.clone(), problem)),
            None => Ok(()),
        }
    };
    match format {
        ImportFormat::Ndjson => for_each_ndjson_event(reader, limit, now, |line, event| {
            sink(line, event, Vec::new())
        }),
        ImportFormat::Jp => each_element(reader, &mut |index, value| {
            let at = format!("event {index}");
            let mut kept = Vec::new();
            let event = jp::from_jp(value, &mut kept).map_err(|e| input_error(at.clone(), e))?;
            fits(&event, &at)?;
            sink(index, event, kept)
        }),
        ImportFormat::Openai => {
            let mut de = serde_json::Deserializer::from_reader(reader);
            let value: Value = StrictValue
                .deserialize(&mut de)
                .and_then(|v| de.end().map(|()| v))
                .map_err(|e| json_error(&e))?;
            let mut ignored = Vec::new();
            let shape = || {
                Error::Invalid(
                    "expected a messages array or an object with a `messages` array".to_owned(),
                )
            };
            let messages = match value {
                Value::Array(messages) => messages,
                Value::Object(mut object) => match object.shift_remove("messages") {
                    Some(Value::Array(messages)) => {
                        ignored.extend(
                            object
                                .keys()
                                .map(|k| format!("top-level {k} (not imported)")),
                        );
                        messages
                    }
                    _ => return Err(shape()),
                },
                _ => return Err(shape()),
            };
            for (index, message) in messages.into_iter().enumerate() {
                let at = format!("message {index}");
                let mut kept = std::mem::take(&mut ignored);
                let events = openai::from_message(message, now, &mut kept)
                    .map_err(|e| input_error(at.clone(), e))?;
                let mut kept = Some(kept);
                for event in events {
                    fits(&event, &at)?;
                    sink(index, event, kept.take().unwrap_or_default())?;
                }
            }
            Ok(())
        }
    }
}

type ElementSink<'a> = dyn FnMut(usize, Value) -> Result<()> + 'a;

/// Reads a JSON array element by element. An error of `sink` is returned
/// as it is (not as a JSON error at a line and column).
fn each_element(reader: impl Read, sink: &mut ElementSink<'_>) -> Result<()> {
    struct Each<'s, 'a>(&'s mut ElementSink<'a>, &'s mut Option<Error>);

    impl<'de> DeserializeSeed<'de> for Each<'_, '_> {
        type Value = ();
        fn deserialize<D: serde::Deserializer<'de>>(
            self,
            d: D,
        ) -> std::result::Result<(), D::Error> {
            d.deserialize_seq(self)
        }
    }

    impl<'de> Visitor<'de> for Each<'_, '_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON array of events")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
            let mut index = 0;
            while let Some(value) = seq.next_element_seed(StrictValue)? {
                if let Err(e) = (self.0)(index, value) {
                    *self.1 = Some(e);
                    return Err(A::Error::custom("stopped"));
                }
                index += 1;
            }
            Ok(())
        }
    }

    let mut de = serde_json::Deserializer::from_reader(reader);
    let mut failed = None;
    let read = Each(sink, &mut failed).deserialize(&mut de);
    if let Some(e) = failed {
        return Err(e);
    }
    read.map_err(|e| json_error(&e))?;
    de.end().map_err(|e| json_error(&e))?;
    Ok(())
}

/// Skips a UTF-8 byte order mark at the start of a JSON document (as the
/// NDJSON reader skips one); refuses a UTF-16 or UTF-32 one, which
/// serde_json would report as a value missing at line 1 column 1.
fn json_start(reader: &mut impl BufRead) -> Result<()> {
    let head = reader
        .fill_buf()
        .map_err(|e| Error::Invalid(format!("cannot read: {e}")))?;
    let utf = if head.starts_with(b"\xEF\xBB\xBF") {
        reader.consume(3);
        return Ok(());
    } else if head.starts_with(b"\xFF\xFE\x00\x00") || head.starts_with(b"\x00\x00\xFE\xFF") {
        "UTF-32"
    } else if head.starts_with(b"\xFF\xFE") || head.starts_with(b"\xFE\xFF") {
        "UTF-16"
    } else {
        return Ok(());
    };
    Err(Error::Invalid(format!(
        "not UTF-8: the input starts with a {utf} byte order mark (convert it to UTF-8)"
    )))
}

/// A JSON document's syntax error, said as the NDJSON reader says it:
/// bytes that are not UTF-8 (serde_json calls them an "invalid unicode
/// code point") as such.
fn json_error(e: &serde_json::Error) -> Error {
    let message = e.to_string();
    match message.strip_prefix("invalid unicode code point") {
        Some(at) if e.is_syntax() => Error::Invalid(format!("not UTF-8{at}")),
        _ => Error::Invalid(format!("invalid JSON: {message}")),
    }
}

/// What [`import`] found in a sound input.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Checked {
    /// Events in it.
    pub events: u64,
    /// Turns they span.
    pub turns: u64,
    /// Events per kind, indexed by [`EventType::index`].
    pub kinds: [u64; 10],
    /// Fields the format had that no event field holds (kept in `meta`),
    /// and how many events had each.
    pub kept_in_meta: BTreeMap<String, u64>,
    /// Results whose call id no call has, calls that reuse an id.
    pub warnings: Vec<String>,
}

/// Parses and checks every event of `input` and pushes them, in batches,
/// to one bulk append into a new conversation named `name`, committed
/// only after the last event was read and checked: an input that fails
/// anywhere (or a process killed part-way) leaves no conversation. An
/// input with no events makes an empty conversation. `tick` is told of
/// each event.
pub fn import(
    store: &Store,
    format: ImportFormat,
    input: impl Read,
    now: Timestamp,
    name: Option<&str>,
    tick: &mut dyn FnMut(),
) -> Result<(ConversationId, Checked)> {
    let limit = store.max_event_bytes();
    let bulk = store.begin_bulk(BulkTarget::New { name }, &AppendOptions::default())?;
    let (bulk, checked) = push_behind(bulk, |push| {
        let mut batch = Vec::with_capacity(BATCH);
        let mut checked = Checked::default();
        let mut turns = TurnTracker::new();
        let mut calls = CallCheck::default();
        for_each_event(format, input, now, limit, &mut |at, event, kept| {
            calls.observe(at, &event);
            tick();
            checked.kinds[event.kind.event_type().index()] += 1;
            turns.next(event.kind.event_type());
            checked.events += 1;
            for note in kept {
                *checked.kept_in_meta.entry(note).or_default() += 1;
            }
            batch.push(event);
            if batch.len() == BATCH {
                push(std::mem::replace(&mut batch, Vec::with_capacity(BATCH)))?;
            }
            Ok(())
        })?;
        if checked.events == 0 {
            return Ok(checked);
        }
        checked.turns = turns.turn_count(checked.events);
        checked.warnings = calls.warnings(None, format.unit());
        push(batch)?;
        Ok(checked)
    })?;
    if checked.events == 0 {
        // A conversation with no events (as `export` writes one: an empty
        // array, or no lines) comes back as one.
        drop(bulk);
        return Ok((store.create_conversation(name)?, checked));
    }
    let (id, _) = bulk.commit()?;
    Ok((id, checked))
}

/// Runs `read` with a way to hand batches of events to `bulk`, which a
/// thread of its own pushes (a [`Pusher`]) while `read` goes on reading
/// and checking the next ones; gives the bulk append back, every batch
/// pushed, for its commit.
pub fn push_behind<R>(
    bulk: BulkAppend<'_>,
    read: impl FnOnce(&mut dyn FnMut(Vec<Event>) -> Result<()>) -> Result<R>,
) -> Result<(BulkAppend<'_>, R)> {
    std::thread::scope(|scope| {
        let pusher = Pusher::start(scope, bulk);
        let read = read(&mut |batch| pusher.push(batch));
        let bulk = pusher.finish()?;
        Ok((bulk, read?))
    })
}

/// A bulk append pushed to (encoded and written) by a thread of its own,
/// so that whoever reads and checks the input goes on meanwhile. At most
/// two batches wait: one being pushed, one handed over.
pub struct Pusher<'scope, 's> {
    batches: std::sync::mpsc::SyncSender<Vec<Event>>,
    thread: std::thread::ScopedJoinHandle<'scope, Result<BulkAppend<'s>>>,
}

impl<'scope, 's: 'scope> Pusher<'scope, 's> {
    /// Starts pushing to `bulk` from a thread of `scope`.
    pub fn start<'env>(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        mut bulk: BulkAppend<'s>,
    ) -> Self
    where
        's: 'env,
    {
        let (batches, taken) = std::sync::mpsc::sync_channel::<Vec<Event>>(1);
        let thread = scope.spawn(move || {
            for batch in taken {
                bulk.push(&batch)?;
            }
            Ok(bulk)
        });
        Pusher { batches, thread }
    }

    /// Hands `batch` over, waiting while another batch waits. Fails once
    /// the bulk append failed ([`Pusher::finish`] says why).
    pub fn push(&self, batch: Vec<Event>) -> Result<()> {
        self.batches
            .send(batch)
            .map_err(|_| Error::Invalid("the bulk append stopped".to_owned()))
    }

    /// Waits for every batch to be pushed: the bulk append, for its commit,
    /// or why pushing failed. That error comes before the reader's, which
    /// then failed only because nobody took its batches.
    pub fn finish(self) -> Result<BulkAppend<'s>> {
        drop(self.batches);
        self.thread
            .join()
            .unwrap_or_else(|_| Err(Error::Invalid("the bulk append's thread failed".to_owned())))
    }
}

/// The counts per kind of a [`Checked`] input, as JSON (`kinds`).
pub fn kinds_json(kinds: &[u64; 10]) -> serde_json::Map<String, Value> {
    EventType::ALL
        .iter()
        .filter(|k| kinds[k.index()] > 0)
        .map(|k| (k.as_str().to_owned(), Value::from(kinds[k.index()])))
        .collect()
}
