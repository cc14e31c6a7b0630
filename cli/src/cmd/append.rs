//! `convstore append`: NDJSON on stdin, or convenience flags.

use std::io::{BufRead, Write};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::ArgMatches;
use convstore_store::{Address, AppendOptions, Event, EventKind, Store, StoreError, Timestamp};

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
    if events.is_empty() {
        if output::stdin_is_terminal() {
            notes.say("reading NDJSON events from stdin (end with Ctrl-D)");
        }
        events = read_ndjson(std::io::stdin().lock(), now, store.max_event_bytes())?;
    }
    if events.is_empty() {
        bail!("no events to append: pipe NDJSON on stdin or use --user, --assistant, --system or --turn");
    }
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
    let (id, appended) = if let Some(id) = store.find(&args.conversation)? {
        (id, store.append(&id, &events, &options)?)
    } else {
        if options.expect_head.is_some_and(|h| h != Address::ROOT) {
            return Err(StoreError::NoSuchConversation {
                query: args.conversation.clone(),
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

/// Reads every line first: a bad line rejects the whole input before
/// anything is stored. Blank lines are skipped.
fn read_ndjson(input: impl BufRead, now: Timestamp, limit: u64) -> Result<Vec<Event>> {
    let mut events = Vec::new();
    output::for_each_event(input, limit, now, |_, event| {
        events.push(event);
        Ok(())
    })?;
    Ok(events)
}
