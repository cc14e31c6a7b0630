//! `convstore append`: NDJSON on stdin, or convenience flags.

use std::io::{BufRead, Write};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::ArgMatches;
use convstore_store::{Address, AppendOptions, Event, EventKind, StoreError, Timestamp};

use crate::args::{AppendArgs, Cli};
use crate::calls::CallCheck;
use crate::cmd;
use crate::output::{self, Notes};

pub(crate) fn run(
    cli: &Cli,
    args: &AppendArgs,
    matches: &ArgMatches,
    notes: &Notes,
) -> Result<ExitCode> {
    // Everything is checked before the first write: an agent that retries
    // a failed append must not store it twice.
    let now = Timestamp::now();
    let options =
        AppendOptions {
            expect_head: match &args.expect_head {
                Some(hex) => Some(Address::from_hex(&hex.to_ascii_lowercase()).with_context(
                    || format!("--expect-head: \"{hex}\" is not a 64-digit hex address"),
                )?),
                None => None,
            },
            no_sync: args.no_sync,
        };
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
    let mut events = events_from_flags(matches, now);
    let mut calls = CallCheck::default();
    if events.is_empty() {
        if output::stdin_is_terminal() {
            notes.say("reading NDJSON events from stdin (end with Ctrl-D)");
        }
        let reading = output::Progress::counter(notes, "reading");
        events = read_ndjson(
            std::io::stdin().lock(),
            now,
            args.max_event_bytes,
            &mut |line, event| {
                calls.observe(line, event);
                reading.inc(1);
            },
        )?;
        reading.finish();
    } else if output::stdin_has_input() {
        bail!(
            "events on stdin and --user/--assistant/--system/--turn flags: give one or the other"
        );
    }
    if events.is_empty() {
        bail!("no events to append: pipe NDJSON on stdin or use --user, --assistant, --system or --turn");
    }
    let mut engine = cmd::open(cli, true)?;
    if let Some(config) = config {
        engine = engine.with_config(config);
    }
    let store = engine.store();
    store.set_max_event_bytes(args.max_event_bytes);
    let existing = store.find_exact(&args.conversation)?;
    if calls.needs_log() {
        let log = match existing {
            Some(id) => Some(store.tool_names(&id, store.info(&id)?.len)?),
            None => None,
        };
        calls.report(log.as_ref(), "line", notes);
    }
    let (id, appended) = if let Some(id) = existing {
        (id, store.append(&id, &events, &options)?)
    } else {
        if names_an_id(&args.conversation)
            || options.expect_head.is_some_and(|h| h != Address::ROOT)
        {
            return Err(StoreError::NoSuchConversation {
                query: args.conversation.clone(),
                hint: None,
            }
            .into());
        }
        let (id, appended) =
            store.create_and_append(Some(&args.conversation), &events, &options)?;
        notes.say(&format!(
            "created conversation {} ({id})",
            args.conversation
        ));
        (id, appended)
    };
    let mut head = appended.head;
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
                notes.say(&format!(
                    "auto-compaction{}: turns {}, profile {}, tokens {} -> {}",
                    if report.fold { " (fold)" } else { "" },
                    output::range(report.from, report.to),
                    report.profile,
                    report.tokens_before,
                    report.tokens_after
                ));
                head = store.info(&id)?.head;
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

/// Whether a conversation argument names an id rather than a name
/// (`id:PREFIX` or 32 hex digits): `append` never creates one from it.
fn names_an_id(query: &str) -> bool {
    query.starts_with(convstore_store::ID_MARKER)
        || (query.len() == 32 && query.bytes().all(|b| b.is_ascii_hexdigit()))
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

/// Reads every line first: a bad line rejects the whole input before
/// anything is stored. Blank lines are skipped.
fn read_ndjson(
    input: impl BufRead,
    now: Timestamp,
    limit: u64,
    observe: &mut dyn FnMut(usize, &Event),
) -> Result<Vec<Event>> {
    let mut events = Vec::new();
    output::for_each_event(input, limit, now, |line, event| {
        observe(line, &event);
        events.push(event);
        Ok(())
    })?;
    Ok(events)
}
