//! `convstore serve`: the database over HTTP (`convstore_server`).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, Result};
use convstore_engine::store::StoreError;
use convstore_server::auth::Tokens;
use convstore_server::{discovery, Limits, ServeOptions};

use crate::args::{Cli, ServeArgs};
use crate::cmd;
use crate::output::Notes;

pub(crate) fn run(cli: &Cli, args: &ServeArgs, notes: &Notes) -> Result<ExitCode> {
    let tokens = args
        .token_file
        .as_deref()
        .map(Tokens::load)
        .transpose()
        .map_err(|e| anyhow!("--token-file: {e}"))?;
    let options = ServeOptions {
        listen: args.listen,
        tokens,
        limits: Limits {
            max_body_bytes: args.max_body_bytes,
            max_event_bytes: args.max_event_bytes,
            max_connections: args.max_connections,
            max_in_flight: args.max_in_flight,
            request_timeout: Duration::from_secs_f64(args.request_timeout),
            follow_behind: args.follow_behind,
            ..Limits::default()
        },
        // The discovery file goes into a database directory; a database
        // server has none (clients name the server with --url).
        database: cmd::location(cli)?.path().map(std::path::Path::to_path_buf),
        mcp_allow_write: args.mcp_allow_write,
    };
    // The options and the address first: a serve that cannot listen
    // creates no database.
    let config = cmd::config(cli)?;
    let bound = match convstore_server::bind(&options) {
        Ok(bound) => bound,
        Err(error) => {
            if let Some(found) = discovery::read(&cli.db) {
                return Err(anyhow!(
                    "{error}: convstore serve (pid {}) at {} holds {} already; commands given --db {} go through it",
                    found.pid,
                    found.url,
                    cli.db.display(),
                    cli.db.display()
                ));
            }
            return Err(error.into());
        }
    };
    let engine = match cmd::open(cli, true) {
        Ok(engine) => engine,
        Err(error) => {
            // Held by another server: say which.
            let locked = error
                .downcast_ref::<convstore_engine::Error>()
                .is_some_and(|e| {
                    matches!(e, convstore_engine::Error::Store(StoreError::Locked { .. }))
                });
            if locked {
                if let Some(found) = discovery::read(&cli.db) {
                    return Err(anyhow!(
                        "{error:#}: convstore serve (pid {}) at {} holds it; commands given --db {} go through it",
                        found.pid,
                        found.url,
                        cli.db.display()
                    ));
                }
            }
            return Err(error);
        }
    };
    let engine = engine.with_config(config);
    engine.store().set_max_event_bytes(args.max_event_bytes);
    // As messages show a location: a URL without its password.
    let db = cmd::location(cli)?.to_string();
    let served = convstore_server::serve_bound(engine, bound, &options, |addr| {
        // The URL on stdout (for scripts: `--listen 127.0.0.1:0` picks a
        // port), the rest on stderr.
        let mut out = std::io::stdout();
        let _ = writeln!(out, "http://{addr}");
        let _ = out.flush();
        notes.say(&format!(
            "convstore serve: listening on http://{addr} (database {db}); SIGINT or SIGTERM stops it"
        ));
    });
    // A summarizer a request left running (its client gone) ends with the
    // server.
    convstore_engine::summarizers::end_running();
    served?;
    notes.say("convstore serve: stopped; every acknowledged append is durable");
    Ok(ExitCode::SUCCESS)
}
