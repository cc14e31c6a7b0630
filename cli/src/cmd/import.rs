//! `convstore import`: JP `events.json`, OpenAI messages or NDJSON into a new
//! conversation.
//!
//! Two passes over the input: the first parses and checks every event (and
//! counts them), so a malformed input stores nothing; the second pushes
//! them, in batches, to one bulk append (`Store::begin_bulk`), which makes
//! the conversation visible whole at its commit: an import that fails or is
//! killed part-way leaves no conversation. Neither pass holds the whole
//! input: NDJSON is read line by line and JP's array element by element.
//! Standard input is first copied to a temporary file so it can be read
//! twice.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, Write};
use std::path::Path;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use convstore_store::interop::{jp, openai};
use convstore_store::strict::StrictValue;
use convstore_store::{AppendOptions, BulkTarget, Event, EventType, Timestamp, TurnTracker};
use serde::de::{DeserializeSeed, Error as _, SeqAccess, Visitor};
use serde_json::{json, Value};

use crate::args::{Cli, ImportArgs, InteropFormat};
use crate::cmd;
use crate::output::{self, Notes};
use convstore_engine::calls::CallCheck;

/// Events pushed to the bulk append at a time in the second pass.
const BATCH: usize = 10_000;

pub(crate) fn run(cli: &Cli, args: &ImportArgs, notes: &Notes) -> Result<ExitCode> {
    let mut input = open_input(&args.file)?;
    let now = Timestamp::now();

    // Pass 1: check everything, count.
    let mut kinds = [0u64; 10];
    let mut turns = TurnTracker::new();
    let mut total = 0u64;
    let mut unmapped: BTreeMap<String, u64> = BTreeMap::new();
    let mut calls = CallCheck::default();
    let checking = output::Progress::counter(notes, "events checked");
    each_event(
        args.format,
        &mut input,
        now,
        args.max_event_bytes,
        &mut |event, kept| {
            calls.observe(total as usize, &event);
            checking.inc(1);
            kinds[event.kind.event_type().index()] += 1;
            turns.next(event.kind.event_type());
            total += 1;
            for note in kept {
                *unmapped.entry(note).or_default() += 1;
            }
            Ok(())
        },
    )
    .with_context(|| shown(&args.file))?;
    if total == 0 {
        bail!("{}: no events to import", shown(&args.file));
    }
    checking.finish();
    for warning in calls.warnings(None, "event") {
        notes.warn(&warning);
    }
    let name = match &args.name {
        Some(name) => Some(name.clone()),
        None => default_name(&args.file),
    };
    if let Some(name) = &name {
        if let Err(e) = convstore_store::validate_conversation_name(name) {
            if args.name.is_none() {
                bail!("{e} (the name comes from the file's; choose one with --name)");
            }
            return Err(e.into());
        }
    }
    // The whole input is sound: only now is the database opened (and
    // created, if need be).
    let engine = cmd::open(cli, true)?;
    let store = engine.store();
    store.set_max_event_bytes(args.max_event_bytes);
    if let Some(name) = &name {
        if store.find_name(name)?.is_some() {
            bail!("a conversation named \"{name}\" already exists (choose another with --name)");
        }
    }

    let importing = output::Progress::bar(notes, total, "importing");
    // Pass 2: one bulk append, visible and durable at its commit.
    input.rewind().context("cannot reread the input")?;
    let mut bulk = store.begin_bulk(
        BulkTarget::New {
            name: name.as_deref(),
        },
        &AppendOptions::default(),
    )?;
    let mut batch = Vec::with_capacity(BATCH);
    each_event(
        args.format,
        &mut input,
        now,
        args.max_event_bytes,
        &mut |event, _| {
            importing.inc(1);
            batch.push(event);
            if batch.len() == BATCH {
                bulk.push(&batch)?;
                batch.clear();
            }
            Ok(())
        },
    )?;
    bulk.push(&batch)?;
    let (id, _) = bulk.commit()?;
    cmd::written(&engine, &id, notes);
    let info = store.info(&id)?;

    let mut out = output::stdout();
    if args.json {
        let value = json!({
            "id": id.hex(),
            "name": info.name,
            "events": total,
            "turns": turns.turn_count(total),
            "head": info.head.hex(),
            "kinds": EventType::ALL.iter().filter(|k| kinds[k.index()] > 0)
                .map(|k| (k.as_str().to_owned(), json!(kinds[k.index()])))
                .collect::<serde_json::Map<_, _>>(),
            "kept_in_meta": unmapped,
        });
        writeln!(out, "{value}")?;
    } else {
        writeln!(
            out,
            "imported {} in {} into {} ({id})",
            output::plural(total, "event"),
            output::plural(turns.turn_count(total), "turn"),
            info.label()
        )?;
        for kind in EventType::ALL {
            if kinds[kind.index()] > 0 {
                writeln!(out, "  {:<12} {}", kind.as_str(), kinds[kind.index()])?;
            }
        }
        for (field, count) in &unmapped {
            notes.say(&format!(
                "kept in meta (no event field for it): {field} ×{count}"
            ));
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The input as a seekable file; standard input is copied to a temporary
/// file first.
fn open_input(path: &str) -> Result<File> {
    if path == "-" {
        let mut spool = tempfile::tempfile().context("cannot create a temporary file for stdin")?;
        std::io::copy(&mut std::io::stdin().lock(), &mut spool).context("cannot read stdin")?;
        spool.rewind()?;
        Ok(spool)
    } else {
        let file = File::open(path).with_context(|| format!("cannot open {path}"))?;
        if file.metadata().is_ok_and(|m| m.is_dir()) {
            bail!("cannot read {path}: it is a directory");
        }
        Ok(file)
    }
}

/// How errors name the input: its path, or `stdin`.
fn shown(path: &str) -> String {
    if path == "-" {
        "stdin".to_owned()
    } else {
        path.to_owned()
    }
}

/// `17648402467-title.events.json` → `17648402467-title`.
fn default_name(path: &str) -> Option<String> {
    use unicode_normalization::UnicodeNormalization as _;
    if path == "-" {
        return None;
    }
    let file = Path::new(path).file_name()?.to_string_lossy().into_owned();
    let stem = [".events.json", ".ndjson", ".jsonl", ".json"]
        .iter()
        .find_map(|ext| file.strip_suffix(ext))
        .unwrap_or(&file);
    Some(stem.nfc().collect())
}

type Sink<'a> = dyn FnMut(Event, Vec<String>) -> Result<()> + 'a;

/// Calls `sink` with each event of the input, in order, with the fields it
/// kept in `meta`. Errors name the position (line, event or message).
fn each_event(
    format: InteropFormat,
    input: &mut File,
    now: Timestamp,
    limit: u64,
    sink: &mut Sink<'_>,
) -> Result<()> {
    let reader = BufReader::with_capacity(1 << 20, input);
    // The store refuses an event over the limit when it is appended; here
    // it is refused where it is read, with its position.
    let fits = |event: &Event, at: &dyn Fn() -> String| -> Result<()> {
        let size = convstore_store::event_size(event);
        if size > limit {
            bail!(
                "{}: the event is {size} bytes, more than the limit of {limit} bytes (--max-event-bytes)",
                at()
            );
        }
        Ok(())
    };
    match format {
        InteropFormat::Ndjson => output::for_each_event(reader, limit, now, |line, event| {
            fits(&event, &|| format!("line {line}"))?;
            sink(event, Vec::new())
        }),
        InteropFormat::Jp => each_element(reader, &mut |index, value| {
            let mut kept = Vec::new();
            let event = jp::from_jp(value, &mut kept).map_err(|e| anyhow!("event {index}: {e}"))?;
            fits(&event, &|| format!("event {index}"))?;
            sink(event, kept).with_context(|| format!("event {index}"))
        }),
        InteropFormat::Openai => {
            let mut de = serde_json::Deserializer::from_reader(reader);
            let value: Value = StrictValue
                .deserialize(&mut de)
                .and_then(|v| de.end().map(|()| v))
                .context("invalid JSON")?;
            let mut ignored = Vec::new();
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
                    _ => bail!("expected a messages array or an object with a `messages` array"),
                },
                _ => bail!("expected a messages array or an object with a `messages` array"),
            };
            for (index, message) in messages.into_iter().enumerate() {
                let mut kept = std::mem::take(&mut ignored);
                let events = openai::from_message(message, now, &mut kept)
                    .with_context(|| format!("message {index}"))?;
                let mut kept = Some(kept);
                for event in events {
                    fits(&event, &|| format!("message {index}"))?;
                    sink(event, kept.take().unwrap_or_default())?;
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
    struct Each<'s, 'a>(&'s mut ElementSink<'a>, &'s mut Option<anyhow::Error>);

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
    read.map_err(|e| anyhow!("{e}"))?;
    de.end().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}
