//! `convstore append`: NDJSON on stdin, or convenience flags.
//!
//! Everything is checked before anything is stored: the flags, the
//! configuration (`--auto`), and every line of stdin. The events of an
//! input up to [`IN_MEMORY_BYTES`] (and up to `BULK_MEMORY_COMPACTIONS`
//! compactions) are kept in memory and appended in one batch, the database
//! opened only once they are read. Past that, they
//! are pushed, as they are parsed, to a bulk append (`Store::begin_bulk`):
//! it writes them to segment files nothing refers to until its commit,
//! which comes after the last line, so memory does not grow with the input
//! and a bad line still stores nothing.

use std::cell::{Cell, OnceCell};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::ArgMatches;
use convstore_engine::store::{
    Address, AppendOptions, BulkAppend, BulkTarget, Event, EventKind, Store, StoreError, Timestamp,
    BULK_MEMORY_COMPACTIONS,
};
use convstore_engine::Engine;

use crate::args::{AppendArgs, Cli};
use crate::cmd;
use crate::output::{self, Notes};
use convstore_engine::calls::CallCheck;
use convstore_engine::import::Pusher;

pub(crate) fn run(
    cli: &Cli,
    args: &AppendArgs,
    matches: &ArgMatches,
    notes: &Notes,
) -> Result<ExitCode> {
    let creating = cmd::Creating::look(cli);
    let engine: OnceCell<Engine> = OnceCell::new();
    let done = append(cli, args, matches, notes, &engine);
    if let (Err(_), Some(creating), Some(engine)) = (&done, creating, engine.into_inner()) {
        creating.undo(engine);
    }
    done
}

fn append(
    cli: &Cli,
    args: &AppendArgs,
    matches: &ArgMatches,
    notes: &Notes,
    engine: &OnceCell<Engine>,
) -> Result<ExitCode> {
    // Everything is checked before the first write: an agent that retries
    // a failed append must not store it twice.
    let now = Timestamp::now();
    let options = append_options(args)?;
    let config = if args.auto {
        let config = cmd::config(cli)?;
        if !config.compaction.auto.enabled {
            notes.say(
                "--auto: automatic compaction is off; set `[compaction.auto] enabled = true` in the configuration to turn it on",
            );
        }
        Some(config)
    } else {
        None
    };
    // The database, opened when first needed: once a small input is read,
    // or when a large one starts its bulk append.
    let open = || -> Result<&Engine> {
        if engine.get().is_none() {
            let mut opened = cmd::open(cli, true)?;
            if let Some(config) = &config {
                opened = opened.with_config(config.clone());
            }
            opened.store().set_max_event_bytes(args.max_event_bytes);
            let _ = engine.set(opened);
        }
        engine.get().context("the database is open")
    };
    let mut events = events_from_flags(matches, now);
    let mut calls = CallCheck::default();
    let mut bulk = None;
    if events.is_empty() {
        if output::stdin_is_terminal() {
            notes.say("reading NDJSON events from stdin (end with Ctrl-D)");
        }
        let reading = if output::stdin_is_terminal() {
            output::Progress::counter(&Notes { quiet: true }, "")
        } else {
            output::Progress::counter(notes, "events read")
        };
        let begin = || -> Result<BulkAppend<'_>> {
            let store = open()?.store();
            Ok(store.begin_bulk(target(store, args, &options)?, &options)?)
        };
        let input = read_ndjson(
            std::io::stdin().lock(),
            now,
            args.max_event_bytes,
            &mut |line, event| {
                calls.observe(line, event);
                reading.inc(1);
            },
            begin,
        )?;
        reading.finish();
        match input {
            Input::Events(read) => events = read,
            Input::Bulk(pushed) => bulk = Some(*pushed),
        }
    } else if output::stdin_has_input() {
        return Err(output::usage(
            "events on stdin and --user/--assistant/--system/--turn flags: give one or the other",
        ));
    }
    if events.is_empty() && bulk.as_ref().is_none_or(BulkAppend::is_empty) {
        bail!("no events to append: pipe NDJSON on stdin or use --user, --assistant, --system or --turn");
    }
    let engine = open()?;
    let store = engine.store();
    let target = target(store, args, &options)?;
    let log = match target {
        BulkTarget::Existing(id) => Some((id, store.info(&id)?.len)),
        BulkTarget::New { .. } => None,
    };
    for warning in calls.against(store, log.as_ref().map(|(id, len)| (id, *len)), "line")? {
        notes.warn(&warning);
    }
    let compactions_before = match &log {
        Some((id, _)) => compactions(store, id)?,
        None => 0,
    };
    let (id, appended) = match (bulk, target) {
        (Some(bulk), _) => bulk.commit()?,
        (None, BulkTarget::Existing(id)) => (id, store.append(&id, &events, &options)?),
        (None, BulkTarget::New { name }) => {
            match store.create_and_append(name, &events, &options) {
                // Another process created it meanwhile: append to it, as if
                // it had existed (the same options, an expected head too).
                Err(StoreError::NameTaken { name }) => {
                    let id = store
                        .find_exact(&name)?
                        .ok_or(StoreError::NameTaken { name })?;
                    (id, store.append(&id, &events, &options)?)
                }
                other => other?,
            }
        }
    };
    if matches!(target, BulkTarget::New { .. }) {
        notes.say(&format!(
            "created conversation {} ({id})",
            args.conversation
        ));
    }
    let mut head = appended.head;
    cmd::written(engine, &id, notes);
    if compactions(store, &id)? > compactions_before {
        // Read now (an append without compactions never needs it): a
        // configuration that cannot be read is a warning, the events are
        // stored.
        match config.clone().map_or_else(|| cmd::config(cli), Ok) {
            Ok(config) => {
                engine.retain_after_compaction(&id, &config.retention);
                cmd::retention_warning(engine, notes);
            }
            Err(error) => notes.warn(&format!(
                "the events were stored, but [retention] did not run: {error:#}"
            )),
        }
    }
    if args.auto {
        // The events are stored: from here on a failure is a warning, not
        // an error an agent would retry.
        match engine.auto_compact(&id, args.no_sync) {
            Ok(Some(report)) => {
                if let Some(error) = &report.summarizer_error {
                    notes.say(&format!(
                        "auto-compaction: the summarizer failed ({error}); mechanical policies are used until a manual compaction succeeds"
                    ));
                }
                if let Some(reason) = &report.skipped {
                    notes.warn(&format!(
                        "auto-compaction: the view ({} tokens) is over its trigger, but nothing was stored: {reason}",
                        report.tokens_before
                    ));
                } else {
                    notes.say(&format!(
                        "auto-compaction{}: turns {}, profile {}, tokens {} -> {}",
                        if report.fold { " (fold)" } else { "" },
                        output::range(report.from, report.to),
                        report.profile,
                        report.tokens_before,
                        report.tokens_after
                    ));
                    head = store.info(&id)?.head;
                    cmd::index_warning(engine, notes);
                    cmd::retention_warning(engine, notes);
                }
            }
            Ok(None) => {}
            Err(error) => notes.warn(&format!(
                "the events were stored, but automatic compaction failed: {error:#}"
            )),
        }
    }
    let mut out = output::stdout();
    writeln!(out, "{head}")?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// How many compactions `id`'s own records hold.
fn compactions(
    store: &convstore_engine::store::Store,
    id: &convstore_engine::store::ConversationId,
) -> Result<u64> {
    Ok(store.info(id)?.kinds[convstore_engine::store::EventType::Compaction.index()].count)
}

/// Whether a conversation argument names an id rather than a name
/// (`id:PREFIX` or 32 hex digits): `append` never creates one from it.
fn names_an_id(query: &str) -> bool {
    query.starts_with(convstore_engine::store::ID_MARKER)
        || (query.len() == 32 && query.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The events the convenience flags describe, in command-line order.
pub(crate) fn events_from_flags(matches: &ArgMatches, now: Timestamp) -> Vec<Event> {
    let mut placed: Vec<(usize, EventKind)> = Vec::new();
    for (flag, make) in [
        (
            "user",
            (|text| EventKind::User { text }) as fn(String) -> EventKind,
        ),
        ("assistant", |text| EventKind::Assistant { text }),
        ("system", |text| EventKind::System { text }),
    ] {
        if let (Some(indices), Some(values)) =
            (matches.indices_of(flag), matches.get_many::<String>(flag))
        {
            placed.extend(indices.zip(values).map(|(i, v)| (i, make(v.clone()))));
        }
    }
    if let Some(indices) = matches.indices_of("turn") {
        placed.extend(indices.map(|i| (i, EventKind::TurnStart)));
    }
    placed.sort_by_key(|(i, _)| *i);
    placed
        .into_iter()
        .map(|(_, kind)| Event::new(now, kind))
        .collect()
}

/// The append options the arguments give.
fn append_options(args: &AppendArgs) -> Result<AppendOptions> {
    let expect_head = match &args.expect_head {
        Some(hex) => Some(
            Address::from_hex(&hex.to_ascii_lowercase()).with_context(|| {
                format!("--expect-head: \"{hex}\" is not a 64-digit hex address")
            })?,
        ),
        None => None,
    };
    Ok(AppendOptions::new()
        .expecting(expect_head)
        .unsynced(args.no_sync))
}

/// Where the events go: the conversation the argument names exactly (a
/// name, a full id, `id:PREFIX`; never a bare prefix), or a new one named
/// after it (unless it names an id, or `--expect-head` expects a
/// non-empty conversation).
fn target<'a>(
    store: &Store,
    args: &'a AppendArgs,
    options: &AppendOptions,
) -> Result<BulkTarget<'a>> {
    if let Some(id) = store.find_exact(&args.conversation)? {
        return Ok(BulkTarget::Existing(id));
    }
    if names_an_id(&args.conversation) || options.expect_head.is_some_and(|h| h != Address::ROOT) {
        return Err(StoreError::NoSuchConversation {
            query: args.conversation.clone(),
            hint: None,
        }
        .into());
    }
    Ok(BulkTarget::New {
        name: Some(&args.conversation),
    })
}

/// Inputs up to about this size are appended from memory, in one batch;
/// larger ones go to a bulk append as they are read.
const IN_MEMORY_BYTES: u64 = 4 * 1024 * 1024;

/// Events pushed to a bulk append at a time.
const BATCH: usize = 10_000;

/// NDJSON read from stdin, every line of it parsed.
enum Input<'s> {
    /// A small input's events.
    Events(Vec<Event>),
    /// A large input's, pushed to a bulk append (`begin` gave it), not
    /// committed.
    Bulk(Box<BulkAppend<'s>>),
}

/// Reads and parses every line: a bad line rejects the whole input before
/// anything is stored (a bulk append is dropped uncommitted). Blank lines
/// are skipped.
fn read_ndjson<'s>(
    input: impl BufRead,
    now: Timestamp,
    limit: u64,
    observe: &mut dyn FnMut(usize, &Event),
    begin: impl FnOnce() -> Result<BulkAppend<'s>>,
) -> Result<Input<'s>> {
    let read = Cell::new(0);
    let input = BufReader::new(Counted {
        inner: input,
        bytes: &read,
    });
    let mut events = Vec::new();
    let mut compactions = 0;
    let mut begin = Some(begin);
    // Opening the database for the bulk append fails in the command's own
    // terms: kept aside while the reading stops.
    let mut opening: Option<anyhow::Error> = None;
    std::thread::scope(|scope| {
        // Once begun, the bulk append is pushed to from a thread of its own
        // while the reading goes on.
        let mut pusher: Option<Pusher<'_, 's>> = None;
        let read_all =
            convstore_engine::import::for_each_ndjson_event(input, limit, now, |line, event| {
                observe(line, &event);
                compactions += usize::from(matches!(event.kind, EventKind::Compaction(_)));
                events.push(event);
                match &pusher {
                    Some(pusher) if events.len() == BATCH => {
                        pusher.push(std::mem::replace(&mut events, Vec::with_capacity(BATCH)))?;
                    }
                    // Many compactions, however small, cost a key each.
                    None if read.get() > IN_MEMORY_BYTES
                        || compactions > BULK_MEMORY_COMPACTIONS =>
                    {
                        let started = begin
                            .take()
                            .ok_or_else(|| anyhow::anyhow!("a bulk append begins once"))
                            .and_then(|begin| begin());
                        let started = match started {
                            Ok(started) => started,
                            Err(e) => {
                                opening = Some(e);
                                return Err(convstore_engine::Error::Invalid(String::new()));
                            }
                        };
                        let started = Pusher::start(scope, started);
                        started.push(std::mem::take(&mut events))?;
                        pusher = Some(started);
                    }
                    Some(_) | None => {}
                }
                Ok(())
            });
        if let Some(e) = opening.take() {
            return Err(e);
        }
        let Some(pusher) = pusher else {
            read_all?;
            return Ok(Input::Events(std::mem::take(&mut events)));
        };
        let last = match read_all {
            Ok(()) => pusher.push(std::mem::take(&mut events)),
            Err(_) => Ok(()),
        };
        // The pushing thread's error first: the reading then failed only
        // because nobody took its batches.
        let bulk = pusher.finish()?;
        read_all?;
        last?;
        Ok(Input::Bulk(Box::new(bulk)))
    })
}

/// A reader that counts the bytes read through it.
struct Counted<'a, R> {
    inner: R,
    bytes: &'a Cell<u64>,
}

impl<R: Read> Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes.set(self.bytes.get() + n as u64);
        Ok(n)
    }
}
