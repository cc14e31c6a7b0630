//! `convstore append`: NDJSON on stdin, or convenience flags.
//!
//! Every line of stdin is parsed before anything is stored. The events of
//! an input up to [`IN_MEMORY_BYTES`] are kept in memory and appended in
//! one batch. Past that, they are pushed, as they are parsed, to a bulk
//! append (`Store::begin_bulk`): it writes them to segment files nothing
//! refers to until its commit, which comes after the last line, so memory
//! does not grow with the input and a bad line still stores nothing.

use std::cell::Cell;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::ArgMatches;
use convstore_store::{
    Address, AppendOptions, BulkAppend, BulkTarget, Event, EventKind, Store, StoreError, Timestamp,
};

use std::path::Path;

use crate::args::AppendArgs;
use crate::output::{self, Notes};
use crate::{auto, settings};

pub(crate) fn run(
    store: &Store,
    args: &AppendArgs,
    matches: &ArgMatches,
    (config_path, db): (Option<&Path>, &Path),
    notes: &Notes,
) -> Result<ExitCode> {
    let now = Timestamp::now();
    let mut events = events_from_flags(matches, now);
    let mut bulk = None;
    if events.is_empty() {
        if output::stdin_is_terminal() {
            notes.say("reading NDJSON events from stdin (end with Ctrl-D)");
        }
        let begin = || -> Result<BulkAppend<'_>> {
            let options = append_options(args)?;
            Ok(store.begin_bulk(target(store, args, &options)?, &options)?)
        };
        match read_ndjson(std::io::stdin().lock(), now, store.max_event_bytes(), begin)? {
            Input::Events(read) => events = read,
            Input::Bulk(pushed) => bulk = Some(*pushed),
        }
    }
    if events.is_empty() && bulk.as_ref().is_none_or(BulkAppend::is_empty) {
        bail!("no events to append: pipe NDJSON on stdin or use --user, --assistant, --system or --turn");
    }
    let options = append_options(args)?;
    let target = target(store, args, &options)?;
    let (id, appended) = match (bulk, target) {
        (Some(bulk), _) => bulk.commit()?,
        (None, BulkTarget::Existing(id)) => (id, store.append(&id, &events, &options)?),
        (None, BulkTarget::New { name }) => store.create_and_append(name, &events, &options)?,
    };
    if matches!(target, BulkTarget::New { .. }) {
        notes.say(&format!(
            "created conversation {} ({id})",
            args.conversation
        ));
    }
    let mut head = appended.head;
    if args.auto {
        let config = settings::load(config_path, db)?;
        if !config.compaction.auto.enabled {
            notes.say(
                "--auto: automatic compaction is not enabled ([compaction.auto] enabled = true)",
            );
        }
        if let Some(report) = auto::run(store, &id, &config, args.no_sync)? {
            if let Some(error) = &report.summarizer_error {
                notes.say(&format!(
                    "auto-compaction: the summarizer failed ({error}); mechanical policies are used until a manual compaction succeeds"
                ));
            }
            notes.say(&format!(
                "auto-compaction{}: turns {}..={}, profile {}, tokens {} -> {}",
                if report.fold { " (fold)" } else { "" },
                report.from,
                report.to,
                report.profile,
                report.tokens_before,
                report.tokens_after
            ));
            head = store.info(&id)?.head;
        }
    }
    let mut out = output::stdout();
    writeln!(out, "{head}")?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The events the convenience flags describe, in command-line order.
fn events_from_flags(matches: &ArgMatches, now: Timestamp) -> Vec<Event> {
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
    Ok(AppendOptions {
        expect_head: match &args.expect_head {
            Some(hex) => Some(
                Address::from_hex(&hex.to_ascii_lowercase()).with_context(|| {
                    format!("--expect-head: \"{hex}\" is not a 64-digit hex address")
                })?,
            ),
            None => None,
        },
        no_sync: args.no_sync,
    })
}

/// Where the events go: the conversation the argument names, or a new one
/// named after it (unless `--expect-head` expects a non-empty one).
fn target<'a>(
    store: &Store,
    args: &'a AppendArgs,
    options: &AppendOptions,
) -> Result<BulkTarget<'a>> {
    if let Some(id) = store.find(&args.conversation)? {
        return Ok(BulkTarget::Existing(id));
    }
    if options.expect_head.is_some_and(|h| h != Address::ROOT) {
        return Err(StoreError::NoSuchConversation {
            query: args.conversation.clone(),
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
    begin: impl FnOnce() -> Result<BulkAppend<'s>>,
) -> Result<Input<'s>> {
    let read = Cell::new(0);
    let input = BufReader::new(Counted {
        inner: input,
        bytes: &read,
    });
    let mut events = Vec::new();
    let mut bulk: Option<BulkAppend<'s>> = None;
    let mut begin = Some(begin);
    output::for_each_event(input, limit, now, |_, event| {
        events.push(event);
        match &mut bulk {
            Some(bulk) if events.len() == BATCH => {
                bulk.push(&events)?;
                events.clear();
            }
            None if read.get() > IN_MEMORY_BYTES => {
                let begin = begin.take().context("a bulk append begins once")?;
                let mut started = begin()?;
                started.push(&events)?;
                events = Vec::new();
                bulk = Some(started);
            }
            Some(_) | None => {}
        }
        Ok(())
    })?;
    match bulk {
        Some(mut bulk) => {
            bulk.push(&events)?;
            Ok(Input::Bulk(Box::new(bulk)))
        }
        None => Ok(Input::Events(events)),
    }
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
