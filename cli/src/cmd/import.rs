//! `convstore import`: JP `events.json`, OpenAI messages or NDJSON into a new
//! conversation, in one pass (`convstore_engine::import`): every event is
//! checked before the conversation becomes visible, whole, at one commit.
//! Standard input is first copied to a temporary file, so the database is
//! not held open while a slow writer fills the pipe. An import that fails
//! into a database it created removes the database again.

use std::fs::File;
use std::io::{Seek, Write};
use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use convstore_engine::import::{self, ImportFormat};
use convstore_store::{ConversationId, EventType, Timestamp};
use serde_json::{json, Value};

use crate::args::{Cli, ImportArgs, InteropFormat};
use crate::cmd;
use crate::output::{self, Notes};

pub(crate) fn run(cli: &Cli, args: &ImportArgs, notes: &Notes) -> Result<ExitCode> {
    let mut input = open_input(&args.file)?;
    let now = Timestamp::now();
    let format = match args.format {
        InteropFormat::Ndjson => ImportFormat::Ndjson,
        InteropFormat::Jp => ImportFormat::Jp,
        InteropFormat::Openai => ImportFormat::Openai,
    };
    let name = name(args)?;
    let creating = cmd::Creating::look(cli);
    let engine = cmd::open(cli, true)?;
    let stored = (|| -> Result<Value> {
        let store = engine.store();
        store.set_max_event_bytes(args.max_event_bytes);
        if let Some(name) = &name {
            if store.find_name(name)?.is_some() {
                bail!(
                    "a conversation named \"{name}\" already exists (choose another with --name)"
                );
            }
        }
        let importing = output::Progress::counter(notes, "events imported");
        let (id, checked) =
            import::import(store, format, &mut input, now, name.as_deref(), &mut || {
                importing.inc(1);
            })
            .map_err(|e| match e {
                // The database's own errors are not the input's.
                e @ convstore_engine::Error::Store(_) => anyhow::Error::from(e),
                e => anyhow::Error::from(e).context(shown(&args.file)),
            })?;
        importing.finish();
        for warning in &checked.warnings {
            notes.warn(warning);
        }
        cmd::written(&engine, &id, notes);
        let info = store.info(&id)?;
        Ok(json!({
            "id": id.hex(),
            "name": info.name,
            "events": checked.events,
            "turns": checked.turns,
            "head": info.head.hex(),
            "kinds": import::kinds_json(&checked.kinds),
            "kept_in_meta": checked.kept_in_meta,
        }))
    })();
    match stored {
        Ok(value) => report(&value, args.json, notes),
        Err(e) => {
            if let Some(creating) = creating {
                creating.undo(engine);
            }
            Err(e)
        }
    }
}

/// Prints what an import stored (here, or through a server): `value` is
/// `import --json`'s object.
pub(crate) fn report(value: &Value, json: bool, notes: &Notes) -> Result<ExitCode> {
    let mut out = output::stdout();
    if json {
        let mut value = value.clone();
        if let Some(object) = value.as_object_mut() {
            object.remove("warnings");
        }
        writeln!(out, "{value}")?;
    } else {
        let number = |v: &Value| v.as_u64().unwrap_or(0);
        let id = value["id"].as_str().unwrap_or_default();
        let label = value["name"].as_str().map_or_else(
            || ConversationId::from_hex(id).map_or_else(|| id.to_owned(), |i| i.query()),
            str::to_owned,
        );
        writeln!(
            out,
            "imported {} in {} into {label} ({id})",
            output::plural(number(&value["events"]), "event"),
            output::plural(number(&value["turns"]), "turn"),
        )?;
        for kind in EventType::ALL {
            let count = number(&value["kinds"][kind.as_str()]);
            if count > 0 {
                writeln!(out, "  {:<12} {count}", kind.as_str())?;
            }
        }
        for (field, count) in value["kept_in_meta"].as_object().into_iter().flatten() {
            notes.say(&format!(
                "kept in meta (no event field for it): {field} ×{}",
                number(count)
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
        open_file(path)
    }
}

/// The input file at `path`, said the same way locally and through a
/// server where it cannot be opened or is a directory.
pub(crate) fn open_file(path: &str) -> Result<File> {
    let file = File::open(path).with_context(|| format!("cannot open {path}"))?;
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        bail!("cannot read {path}: it is a directory");
    }
    Ok(file)
}

/// How errors name the input: its path, or `stdin`.
pub(crate) fn shown(path: &str) -> String {
    if path == "-" {
        "stdin".to_owned()
    } else {
        path.to_owned()
    }
}

/// `17648402467-title.events.json` → `17648402467-title`.
/// The new conversation's name: `--name`, else the file's
/// ([`default_name`]); an error if it cannot be a name.
pub(crate) fn name(args: &ImportArgs) -> Result<Option<String>> {
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
    Ok(name)
}

pub(crate) fn default_name(path: &str) -> Option<String> {
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
