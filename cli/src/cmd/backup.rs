//! `convstore backup` and `convstore salvage`: a verified copy of a
//! database, and what can still be read from a damaged one.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use convstore_engine::store::Store;
use convstore_engine::views as materialize;
use serde_json::{json, Value};

use crate::args::{BackupArgs, SalvageArgs};
use crate::output::{self, plural};

/// A directory `what` names (a backup's or salvage's destination, the
/// database salvage reads): as `--db`, a value that looks like a URL is
/// never taken for a path, and is shown without its password.
fn directory<'p>(path: &'p std::path::Path, what: &str) -> Result<&'p std::path::Path> {
    let location = convstore_engine::Location::parse(&path.to_string_lossy())?;
    if location.path().is_none() {
        anyhow::bail!("{location}: {what}");
    }
    Ok(path)
}

pub(crate) fn run(store: &Store, args: &BackupArgs) -> Result<ExitCode> {
    let copied = store.backup_checked(
        directory(
            &args.dest,
            "a backup is written to a directory; `convstore copy` copies into a database server",
        )?,
        materialize::check_all,
    )?;
    let value = json!({
        "ok": true,
        "dest": args.dest.display().to_string(),
        "conversations": copied.conversations,
        "records": copied.records,
        "blobs": copied.blobs,
        "views": copied.views,
        "deleted_meanwhile": copied.deleted,
    });
    report(&value, args.json)
}

/// Prints what a backup copied (here, or through a server): `value` is
/// `backup --json`'s object.
pub(crate) fn report(value: &Value, json: bool) -> Result<ExitCode> {
    let mut out = output::stdout();
    if json {
        writeln!(out, "{value}")?;
    } else {
        let number = |v: &Value| v.as_u64().unwrap_or(0);
        writeln!(
            out,
            "backed up {}, {}, {}, {} to {}; the copy verifies",
            plural(number(&value["conversations"]), "conversation"),
            plural(number(&value["records"]), "record"),
            plural(number(&value["blobs"]), "blob"),
            plural(number(&value["views"]), "view"),
            value["dest"].as_str().unwrap_or_default()
        )?;
        let deleted = number(&value["deleted_meanwhile"]);
        if deleted > 0 {
            writeln!(out, "{}", left_out(deleted, "backup"))?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The line saying that `deleted` conversations, deleted by other clients
/// of a server while the `what` (backup, copy) read them, are not in it.
fn left_out(deleted: u64, what: &str) -> String {
    format!(
        "{} deleted while the {what} ran {} left out",
        plural(deleted, "conversation"),
        if deleted == 1 { "is" } else { "are" }
    )
}

/// `convstore salvage DAMAGED DEST`: what can still be read, into a new
/// database; a line per conversation saying what was recovered, and where
/// and why it stopped.
pub(crate) fn salvage(args: &SalvageArgs) -> Result<ExitCode> {
    let report = convstore_engine::store::salvage(
        directory(
            &args.damaged,
            "salvage reads a database directory (sled's files); a database server is copied with `convstore copy`",
        )?,
        directory(&args.dest, "salvage writes to a directory")?,
    )?;
    let mut out = output::stdout();
    let whole = report.conversations.iter().filter(|c| c.is_whole()).count();
    let unknown = report
        .conversations
        .iter()
        .filter(|c| !c.is_whole() && c.expected.is_none())
        .count();
    let cut = report.conversations.len() - whole - unknown;
    let lost: u64 = report
        .conversations
        .iter()
        .map(|c| {
            c.expected
                .or(c.at_least)
                .unwrap_or(0)
                .saturating_sub(c.recovered)
        })
        .sum();
    if args.json {
        for c in &report.conversations {
            let value = json!({
                "id": c.id.hex(),
                "name": c.name,
                "fork": c.fork.map(|(parent, at)| json!({"parent": parent.hex(), "at": at})),
                "recovered": c.recovered,
                "expected": c.expected,
                "at_least": c.at_least,
                "whole": c.is_whole(),
                "stopped_at": c.stopped.as_ref().map(|s| s.0),
                "reason": c.stopped.as_ref().map(|s| s.1.clone()),
                "notes": c.notes,
            });
            writeln!(out, "{value}")?;
        }
        let value = json!({
            "ok": true,
            "dest": args.dest.display().to_string(),
            "conversations": report.conversations.len(),
            "whole": whole,
            "cut_short": cut,
            "length_unknown": unknown,
            "records": report.records,
            "records_lost": lost,
            "blobs": report.blobs,
            "sources": report.sources,
        });
        writeln!(out, "{value}")?;
    } else {
        writeln!(
            out,
            "salvaged {} into {} (the copy verifies):",
            args.damaged.display(),
            args.dest.display()
        )?;
        for c in &report.conversations {
            writeln!(out, "  {}", describe(c))?;
        }
        writeln!(
            out,
            "recovered {} and {} in {}: {whole} whole, \
             {cut} cut short, {unknown} of unknown length (no readable metadata); \
             {} known lost",
            plural(report.records, "record"),
            plural(report.blobs, "blob"),
            plural(report.conversations.len() as u64, "conversation"),
            plural(lost, "record"),
        )?;
        writeln!(out, "sources: {}", report.sources.join("; "))?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// One conversation's line of the salvage report.
fn describe(c: &convstore_store::SalvagedConversation) -> String {
    let fork = c.fork.map_or(String::new(), |(parent, at)| {
        format!(" (fork of {} at {at})", parent.short())
    });
    let recovered = c.recovered;
    let counts = match (c.expected, c.at_least) {
        (Some(e), _) if recovered > e => {
            format!("{recovered} records (its metadata found says {e})")
        }
        (Some(e), _) => format!("{recovered} of {e} records"),
        (None, Some(n)) => format!("{recovered} records (at least {n} per the catalog)"),
        (None, None) => format!("{recovered} records"),
    };
    let mut parts = vec![format!(
        "{} {}{fork}: {counts}",
        c.name.as_deref().unwrap_or("(no name)"),
        c.id.short()
    )];
    match &c.stopped {
        None => parts.push("whole".to_owned()),
        Some((seq, why)) => parts.push(format!("stopped at record {seq}: {why}")),
    }
    parts.extend(c.notes.iter().cloned());
    parts.join("; ")
}

/// The key the configuration beside a database directory names, else
/// `$CONVSTORE_KEY_FILE`'s (none for a database server).
fn keyring_beside(
    location: &convstore_engine::Location,
) -> Result<Option<std::sync::Arc<convstore_engine::store::Keyring>>> {
    Ok(match location.path() {
        Some(path) => convstore_engine::config_file::keyring_for(None, path)?,
        None => None,
    })
}

/// `convstore copy FROM TO`: conversations into another database, on any
/// backend, every head compared.
pub(crate) fn copy(args: &crate::args::CopyArgs, notes: &crate::output::Notes) -> Result<ExitCode> {
    use convstore_engine::{Engine, Location, OpenOptions};
    let from = Location::parse(&args.from.to_string_lossy())?;
    let to = Location::parse(&args.to.to_string_lossy())?;
    // However the paths are spelled (`a.db`, `./a.db/`, a symlink).
    let same_dir = match (from.path(), to.path()) {
        (Some(a), Some(b)) => a
            .canonicalize()
            .ok()
            .zip(b.canonicalize().ok())
            .is_some_and(|(a, b)| a == b),
        _ => false,
    };
    if from == to || same_dir {
        anyhow::bail!("FROM and TO are the same database ({from})");
    }
    // The source's key: the configuration beside it, or
    // `$CONVSTORE_KEY_FILE`.
    let source = Engine::open(
        &from,
        &OpenOptions::existing().encryption(keyring_beside(&from)?),
    )?;
    let store = source.store();
    let only = if args.conversations.is_empty() {
        None
    } else {
        let mut ids = Vec::new();
        for query in &args.conversations {
            ids.push(store.resolve(query)?);
        }
        Some(ids)
    };
    if store.is_locked_by_key() {
        // Refused before the destination is made.
        anyhow::bail!(
            "{from} is encrypted and no key is configured for it: set [encryption] key_file in \
             the convstore.toml beside it, or ${}",
            convstore_engine::store::crypto::KEY_FILE_VARIABLE
        );
    }
    // The destination's key: the configuration beside it, or
    // `$CONVSTORE_KEY_FILE`; a copy of an encrypted database is encrypted
    // (with the source's key if the destination has none). A copy has data
    // keys of its own: deleting a conversation in one leaves the other.
    let target_keyring = keyring_beside(&to)?.or_else(|| store.keyring());
    if target_keyring.is_some() && !store.is_encrypted() {
        anyhow::bail!(
            "a key is configured for {to}, and {from} is not encrypted: its records, copied \
             byte for byte, may keep long texts apart, which cannot be encrypted (export and \
             import the conversations instead)"
        );
    }
    // Into a new directory: whole or not at all (written beside it, then
    // moved there). Into an existing database: conversation by
    // conversation, each whole or absent, and a copy run again completes
    // one that was cut short. The copy's search index catches up at its
    // first search.
    let new_dir = to.path().filter(|path| {
        !path.exists() || std::fs::read_dir(path).is_ok_and(|mut d| d.next().is_none())
    });
    let report = if let Some(path) = new_dir {
        store.copy_into_new(path, target_keyring, only.as_deref())?
    } else {
        let target = Engine::open(&to, &OpenOptions::create().encryption(target_keyring))?;
        store.copy_into(target.store(), only.as_deref())?
    };
    let mut out = output::stdout();
    if args.json {
        let value = json!({
            "ok": true,
            "from": from.to_string(),
            "to": to.to_string(),
            "conversations": report.conversations,
            "records": report.records,
            "views": report.views,
            "skipped": report.skipped,
            "deleted_meanwhile": report.deleted,
        });
        writeln!(out, "{value}")?;
    } else {
        writeln!(
            out,
            "copied {}, {}, {} from {from} to {to}; every head is identical on both sides",
            plural(report.conversations, "conversation"),
            plural(report.records, "record"),
            plural(report.views, "view"),
        )?;
        if report.skipped > 0 {
            notes.say(&format!(
                "{} {} there already, identical: skipped",
                plural(report.skipped, "conversation"),
                if report.skipped == 1 { "was" } else { "were" }
            ));
        }
        if report.deleted > 0 {
            notes.say(&left_out(report.deleted, "copy"));
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// `convstore migrate`: a PostgreSQL database's schema created or brought
/// up to date.
pub(crate) fn migrate(cli: &crate::args::Cli) -> Result<ExitCode> {
    use convstore_engine::store::backend::postgres::{self, SCHEMA_VERSION};
    use convstore_engine::Location;
    let location = crate::cmd::location(cli)?;
    let mut out = output::stdout();
    match location {
        Location::Postgres(url) => {
            let done = postgres::migrate(&url)?;
            if done.from == done.to {
                writeln!(
                    out,
                    "{}: schema version {SCHEMA_VERSION}, up to date",
                    location_text(&url)
                )?;
            } else if done.from == 0 {
                writeln!(
                    out,
                    "{}: created the convstore schema, version {SCHEMA_VERSION}",
                    location_text(&url)
                )?;
            } else {
                writeln!(
                    out,
                    "{}: migrated the schema from version {} to {SCHEMA_VERSION}",
                    location_text(&url),
                    done.from
                )?;
            }
        }
        other => {
            // A directory: there must be a convstore database there to
            // say it needs nothing (not a typo'd or forgotten --db).
            drop(crate::cmd::open(cli, false)?);
            writeln!(
                out,
                "{other}: a database directory has no schema to migrate (store formats 1 to 4 open as they are)"
            )?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn location_text(url: &str) -> String {
    convstore_engine::store::backend::postgres::redact(url)
}
