//! The command line as a client of `convstore serve`.
//!
//! With `--url URL` (or `$CONVSTORE_URL`) every command that reads or
//! writes conversations runs through the server at URL; without it, a
//! command whose `--db` directory is held by a running server (its
//! `convstore.server` file names it, and `/healthz` there answers the same
//! instance) goes through that server instead of failing with "in use".
//! Commands print what they print locally: the server streams the same
//! bytes (`log`, `project`, `view`) or answers the JSON the local command's
//! `--json` prints, formatted here by the same code. `$CONVSTORE_TOKEN` is
//! sent as the bearer token.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::ArgMatches;
use convstore_engine::store::{json as event_json, ConversationId};
use convstore_engine::AsOf;
use convstore_server::discovery;
use serde_json::{json, Value};

use crate::args::{Cli, Command, Format};
use crate::cmd;
use crate::output::{self, Notes};

/// A server's error answer: its code (`name_taken`, ...), its message as
/// the command line prints it, and the error object's other fields.
#[derive(Debug)]
struct ServerError {
    code: String,
    message: String,
    extra: Value,
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ServerError {}

/// `error` if it is a server's error answer with code `code`.
fn refused<'e>(error: &'e anyhow::Error, code: &str) -> Option<&'e ServerError> {
    error
        .downcast_ref::<ServerError>()
        .filter(|refused| refused.code == code)
}

/// Through a server, the server's own limit on an event's size applies
/// (`serve --max-event-bytes`): a `--max-event-bytes` of the command's is
/// refused rather than passed over, so that nothing it would refuse is
/// stored.
fn server_limits_events(limit: u64, base: &str) -> Result<()> {
    if limit != convstore_engine::store::DEFAULT_MAX_EVENT_BYTES {
        bail!(
            "--max-event-bytes {limit}: the server at {base} holds the database and applies its own limit (serve --max-event-bytes); run without it"
        );
    }
    Ok(())
}

/// A server to run commands through.
pub(crate) struct Client {
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
}

/// The server a command goes through, if any: `--url`, else the one that
/// holds `--db`.
pub(crate) fn target(cli: &Cli) -> Option<Client> {
    if matches!(
        cli.command,
        Command::Serve(_)
            | Command::Salvage(_)
            | Command::Copy(_)
            | Command::Keygen(_)
            | Command::Migrate
            | Command::Tools(_)
            | Command::Completions { .. }
    ) {
        return None;
    }
    if let Some(url) = &cli.url {
        // Checked and normalised by `--url`'s parser (`args::server_url`).
        return Some(Client::new(url));
    }
    // A copy of a served directory holds the file too: it names the
    // directory the server holds, not this one.
    let found = discovery::read(&cli.db).filter(|d| d.names(&cli.db))?;
    let client = Client::new(&found.url);
    // A file left by a server killed with -9, or another server on a
    // reused port, answers no or another instance.
    let answered = client
        .agent
        .get(&format!("{}/healthz", client.base))
        .timeout(Duration::from_secs(2))
        .call()
        .ok()
        .and_then(|r| r.into_json::<Value>().ok());
    answered
        .is_some_and(|v| v["instance"].as_str() == Some(found.instance.as_str()))
        .then_some(client)
}

/// A server's message in the command line's words: the API's query and
/// body fields it starts with (`turns 50..60: ...`, `at_turn 99: ...`)
/// are named as the flags that set them.
fn flags_for_fields(message: &str) -> String {
    const FIELDS: &[(&str, &str)] = &[
        ("turns ", "--turns "),
        ("as_of ", "--as-of "),
        ("as_of:", "--as-of:"),
        ("from ", "--from "),
        ("from:", "--from:"),
        ("to ", "--to "),
        ("at_turn ", "--at-turn "),
        ("at_seq ", "--at-seq "),
        ("from_turn ", "--from "),
        ("to_turn ", "--to "),
        ("keep_last ", "--keep-last "),
        ("profile ", "--profile "),
        ("expected_seq ", "--expect-head "),
    ];
    for (field, flag) in FIELDS {
        if let Some(rest) = message.strip_prefix(field) {
            // `from A to B: ...` names both bounds.
            let rest = match (*field, rest.split_once(" to ")) {
                ("from ", Some((a, b))) if !a.contains(':') => format!("{a} --to {b}"),
                _ => rest.to_owned(),
            };
            return format!("{flag}{rest}");
        }
    }
    // A query parameter, or a request, named inside the sentence.
    message
        .replace("(with_forks=true)", "(--with-forks)")
        .replace("drop it (DELETE the view)", "drop it (view --drop)")
}

/// Pinned ranges from a server's JSON (`[[A, B|null], ...]`).
fn pins_of(value: &Value) -> Vec<(u64, u64)> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| Some((r[0].as_u64()?, r[1].as_u64().unwrap_or(u64::MAX))))
        .collect()
}

/// A path segment, percent-encoded.
fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = std::fmt::Write::write_fmt(&mut out, format_args!("%{b:02X}"));
        }
    }
    out
}

fn as_of_text(as_of: Option<AsOf>) -> Option<String> {
    as_of.map(|a| match a {
        AsOf::Seq(seq) => seq.to_string(),
        AsOf::Time(time) => time.to_string(),
    })
}

impl Client {
    fn new(base: &str) -> Client {
        Client {
            base: base.trim_end_matches('/').to_owned(),
            token: std::env::var("CONVSTORE_TOKEN")
                .ok()
                .filter(|t| !t.is_empty()),
            agent: ureq::AgentBuilder::new()
                .timeout_connect(Duration::from_secs(5))
                .build(),
        }
    }

    fn request(&self, method: &str, path: &str, query: &[(&str, Option<String>)]) -> ureq::Request {
        let mut request = self.agent.request(method, &format!("{}{path}", self.base));
        for (key, value) in query {
            if let Some(value) = value {
                request = request.query(key, value);
            }
        }
        if let Some(token) = &self.token {
            request = request.set("Authorization", &format!("Bearer {token}"));
        }
        // A request that may write goes on at the server if the command is
        // interrupted: say so then.
        if method != "GET" {
            crate::interrupt::note_on_interrupt(Some(format!(
                "interrupted: the server at {} may carry out the request all the same (it was sent, or being sent); the command's reads tell whether it did",
                self.base
            )));
        }
        // Uncompressed: a server that fails part way through a compressed
        // answer cuts it without the line that says why.
        request.set("Accept-Encoding", "identity")
    }

    /// The answer of a request, or its error as one line.
    fn call(&self, result: Result<ureq::Response, ureq::Error>) -> Result<ureq::Response> {
        crate::interrupt::note_on_interrupt(None);
        match result {
            Ok(response) => Ok(response),
            Err(ureq::Error::Status(status, response)) => {
                let text = response.into_string().unwrap_or_default();
                let error = serde_json::from_str::<Value>(&text).ok();
                let error = error.as_ref().map(|v| &v["error"]);
                let message = error
                    .and_then(|e| e["message"].as_str().map(flags_for_fields))
                    .unwrap_or_else(|| format!("the server answered {status}: {}", text.trim()));
                if status == 401 {
                    return Err(Self::token_refused(&message));
                }
                let code = error
                    .and_then(|e| e["code"].as_str())
                    .unwrap_or_default()
                    .to_owned();
                let extra = error.cloned().unwrap_or(Value::Null);
                Err(ServerError {
                    code,
                    message,
                    extra,
                }
                .into())
            }
            Err(ureq::Error::Transport(e)) => Err(self.unreachable(&e)),
        }
    }

    /// What the command line says of a request the server refuses for its
    /// token (401): with how the command line sends one.
    fn token_refused(message: &str) -> anyhow::Error {
        anyhow!(
            "{message} (the command line sends $CONVSTORE_TOKEN: set it to a token of the server's --token-file)"
        )
    }

    fn unreachable(&self, e: &ureq::Transport) -> anyhow::Error {
        anyhow!("cannot reach the server at {}: {e}", self.base)
    }

    /// Fails as the server would, before sending, where a request that
    /// writes a body of `len` bytes is over the server's
    /// `--max-body-bytes` or is refused for its token: the server answers
    /// such a request and closes the connection while the body is still
    /// being sent (it discards only the first 4 MiB), so the client would
    /// see only a broken pipe. Bodies up to 1 MiB are sent without asking.
    fn fits(&self, len: usize) -> Result<()> {
        const ASK_FROM: usize = 1 << 20;
        if len <= ASK_FROM {
            return Ok(());
        }
        let health: Value = self.get("/healthz", &[])?.into_json().with_context(|| {
            format!(
                "{}/healthz did not answer a convstore server's JSON",
                self.base
            )
        })?;
        match health["token"].as_str() {
            Some("missing") => return Err(Self::token_refused(convstore_server::TOKEN_NEEDED)),
            Some("not valid") => {
                return Err(Self::token_refused(convstore_server::TOKEN_NOT_VALID))
            }
            Some("read-only") => {
                return Err(ServerError {
                    code: "forbidden".to_owned(),
                    message: convstore_server::TOKEN_READ_ONLY.to_owned(),
                    extra: Value::Null,
                }
                .into())
            }
            _ => {}
        }
        match health["max_body_bytes"].as_u64() {
            Some(limit) if len as u64 > limit => Err(ServerError {
                code: "body_too_large".to_owned(),
                message: convstore_server::body_too_large_message(limit),
                extra: Value::Null,
            }
            .into()),
            _ => Ok(()),
        }
    }

    fn get(&self, path: &str, query: &[(&str, Option<String>)]) -> Result<ureq::Response> {
        self.call(self.request("GET", path, query).call())
    }

    fn get_json(&self, path: &str, query: &[(&str, Option<String>)]) -> Result<Value> {
        Ok(self.get(path, query)?.into_json()?)
    }

    fn post_json(&self, path: &str, body: &Value) -> Result<Value> {
        Ok(self
            .call(self.request("POST", path, &[]).send_json(body))?
            .into_json()?)
    }

    /// The path of conversation `query` (a name, an id or `id:PREFIX`).
    /// A URL path reads a segment `.` or `..` as a step, percent-encoded
    /// or not, so a conversation of that name (refused since, but older
    /// databases may hold one) is named by its id instead.
    #[allow(clippy::unused_self)] // a path on this client's server
    fn conversation(&self, query: &str) -> Result<String> {
        if query == "." || query == ".." {
            bail!(
                "conversation \"{query}\": a URL cannot name it (a path reads it as a step); \
                 through a server, name it by its id (id:PREFIX, from `convstore list`)"
            );
        }
        Ok(format!("/v1/conversations/{}", segment(query)))
    }
}

/// Copies an answer's body to `--output FILE` or stdout.
/// The file `--output` names (created before the request, so that a path
/// that cannot be written fails before the server stores anything, a view
/// say), or `None` for stdout.
fn output_file(output: Option<&str>) -> Result<Option<output::OutputFile>> {
    match output {
        None | Some("-") => Ok(None),
        Some(path) => Ok(Some(output::OutputFile::create(std::path::Path::new(
            path,
        ))?)),
    }
}

/// Copies an answer to stdout or `file`; then says what an `openai`
/// answer left out, as the command says it without a server.
fn copy_out(
    response: ureq::Response,
    file: Option<output::OutputFile>,
    notes: &Notes,
) -> Result<()> {
    let left_out = response
        .header(convstore_server::OPENAI_LEFT_OUT)
        .and_then(convstore_server::parse_openai_left_out);
    let mut reader = response.into_reader();
    let mut copy = |out: &mut dyn Write| copy_answer(&mut reader, out);
    match file {
        None => {
            let mut out = output::stdout();
            copy(&mut out)?;
            out.flush()?;
        }
        Some(file) => file.write_with(&mut copy)?,
    }
    if let Some(dropped) = left_out {
        cmd::project::note_dropped(dropped, notes);
    }
    Ok(())
}

/// What a streamed answer's last line starts with when the server failed
/// part way (see `ChannelWriter::fail` in the server).
const ERROR_LINE: &[u8] = b"{\"error\":";

/// Copies a streamed answer to `out`. A server that fails part way ends
/// the answer with a line holding the error object and cuts the
/// connection: that line is held back from `out` and its message is the
/// error. Only a line that could be it is held (memory stays bounded),
/// with the newline before it: the server's own where the answer stopped
/// mid-line (the error object says so), which is then left out.
fn copy_answer(reader: &mut dyn Read, out: &mut dyn Write) -> Result<()> {
    let mut held: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                if let Some(message) = error_line(&held, out)? {
                    bail!("{message}");
                }
                return Err(anyhow!(e).context("reading the server's answer"));
            }
        };
        held.extend_from_slice(&buf[..n]);
        // Everything before the newline that starts the last line (a line
        // ending the bytes held counts as the last) is written; so is the
        // rest once the last line cannot be the error line.
        let body = held.len().saturating_sub(1);
        let keep = held[..body].iter().rposition(|&b| b == b'\n');
        let tail = &held[keep.map_or(0, |i| i + 1)..];
        let keep = if ERROR_LINE.starts_with(&tail[..tail.len().min(ERROR_LINE.len())]) {
            keep.unwrap_or(0)
        } else {
            held.len()
        };
        out.write_all(&held[..keep])?;
        held.drain(..keep);
    }
    // The cut may also read as a plain end (where it falls between two
    // chunks of the answer): the error line is the error all the same.
    if let Some(message) = error_line(&held, out)? {
        bail!("{message}");
    }
    out.write_all(&held)?;
    Ok(())
}

/// The message of a held error line, if `held` is one (after the newline
/// before it, which is written unless the server added it).
fn error_line(held: &[u8], out: &mut dyn Write) -> Result<Option<String>> {
    let (newline, line) = match held.split_first() {
        Some((b'\n', line)) => (true, line),
        _ => (false, held),
    };
    let Ok(value) = serde_json::from_slice::<Value>(line) else {
        return Ok(None);
    };
    let Some(message) = value["error"]["message"].as_str() else {
        return Ok(None);
    };
    if newline && value["newline_added"] != true {
        out.write_all(b"\n")?;
    }
    Ok(Some(flags_for_fields(message)))
}

fn format_name(format: Format) -> String {
    match format {
        Format::Ndjson => "ndjson",
        Format::Json => "json",
        Format::Openai => "openai",
        Format::Text => "text",
    }
    .to_owned()
}

/// Runs the command through `client`.
pub(crate) fn dispatch(
    cli: &Cli,
    matches: &ArgMatches,
    client: &Client,
    notes: &Notes,
) -> Result<ExitCode> {
    let mut out = output::stdout();
    match &cli.command {
        Command::Append(args) => {
            server_limits_events(args.max_event_bytes, &client.base)?;
            let sub = matches
                .subcommand_matches("append")
                .context("append: arguments missing")?;
            let now = convstore_engine::store::Timestamp::now();
            let events = cmd::append::events_from_flags(sub, now);
            let body = if events.is_empty() {
                if output::stdin_is_terminal() {
                    notes.say("reading NDJSON events from stdin (end with Ctrl-D)");
                }
                let mut bytes = Vec::new();
                std::io::stdin()
                    .read_to_end(&mut bytes)
                    .context("cannot read stdin")?;
                String::from_utf8(bytes).map_err(|e| {
                    // Said as the command says it without a server.
                    let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
                    let line = memchr::memchr_iter(b'\n', valid).count() + 1;
                    anyhow!("line {line}: not UTF-8")
                })?
            } else {
                if output::stdin_has_input() {
                    return Err(crate::output::usage("events on stdin and --user/--assistant/--system/--turn flags: give one or the other"));
                }
                events
                    .iter()
                    .map(|e| event_json::event_to_string(e) + "\n")
                    .collect()
            };
            if body.trim_start_matches('\u{feff}').trim().is_empty() {
                bail!("no events to append: pipe NDJSON on stdin or use --user, --assistant, --system or --turn");
            }
            client.fits(body.len())?;
            // A retry after a lost connection carries the same key: the
            // server stores the append once.
            let key = format!(
                "cli-{}-{}",
                std::process::id(),
                convstore_server::discovery::new_instance()
            );
            let path = format!("{}/events", client.conversation(&args.conversation)?);
            let auto = args.auto.then(|| "true".to_owned());
            let mut attempt = 0;
            let mut maybe_sent = false;
            let response = loop {
                let mut request = client
                    .request("POST", &path, &[("auto", auto.clone())])
                    .set("Content-Type", "application/x-ndjson")
                    .set("Idempotency-Key", &key);
                if let Some(head) = &args.expect_head {
                    request =
                        request.set("If-Match", &format!("\"{}\"", head.to_ascii_lowercase()));
                }
                let lost = match request.send_string(&body) {
                    Err(ureq::Error::Transport(lost)) => lost,
                    other => break client.call(other)?,
                };
                maybe_sent |= !matches!(
                    lost.kind(),
                    ureq::ErrorKind::ConnectionFailed | ureq::ErrorKind::Dns
                );
                if attempt < 3 {
                    attempt += 1;
                    std::thread::sleep(Duration::from_millis(200 * attempt));
                    continue;
                }
                let e = client.unreachable(&lost);
                if maybe_sent {
                    // An attempt that reached the server may have been
                    // stored before its connection was lost: the outcome
                    // is unknown, not a failure.
                    bail!(
                        "{e}; the append may have been stored before the connection was lost: `convstore head {}` tells",
                        args.conversation
                    );
                }
                return Err(e);
            };
            let value: Value = response.into_json()?;
            // In the order the command prints them without a server: the
            // call id warnings come before the events are stored.
            for warning in value["warnings"].as_array().into_iter().flatten() {
                notes.warn(warning.as_str().unwrap_or_default());
            }
            if value["created"].as_bool() == Some(true) {
                notes.say(&format!(
                    "created conversation {} ({})",
                    args.conversation,
                    value["id"].as_str().unwrap_or("")
                ));
            }
            if let Some(auto) = value.get("auto").filter(|a| a.is_object()) {
                if let Some(error) = auto["summarizer_error"].as_str() {
                    notes.say(&format!("auto-compaction: the summarizer failed ({error}); mechanical policies are used until a manual compaction succeeds"));
                }
                let number = |v: &Value| v.as_u64().unwrap_or(0);
                notes.say(&format!(
                    "auto-compaction{}: turns {}, profile {}, tokens {} -> {}",
                    if auto["fold"].as_bool() == Some(true) {
                        " (fold)"
                    } else {
                        ""
                    },
                    output::range(number(&auto["from_turn"]), number(&auto["to_turn"])),
                    auto["profile"].as_str().unwrap_or(""),
                    number(&auto["tokens_before"]),
                    number(&auto["tokens_after"]),
                ));
            }
            if let Some(warning) = value["warning"].as_str() {
                notes.warn(warning.trim_start_matches("warning: "));
            }
            writeln!(out, "{}", value["head"].as_str().unwrap_or(""))?;
        }
        Command::Head(args) => {
            let info = client.get_json(&client.conversation(&args.conversation)?, &[])?;
            if args.json {
                let value = json!({
                    "id": info["id"],
                    "name": info["name"],
                    "head": info["head"],
                    "events": info["events"],
                    "turns": info["turns"],
                });
                writeln!(out, "{value}")?;
            } else {
                writeln!(out, "{}", info["head"].as_str().unwrap_or(""))?;
            }
        }
        Command::Log(args) => {
            let path = client.conversation(&args.conversation)?;
            if args.lineage {
                let info = client.get_json(&path, &[])?;
                for entry in info["lineage"].as_array().into_iter().flatten() {
                    writeln!(out, "{entry}")?;
                }
            } else {
                let response = client.get(
                    &format!("{path}/events"),
                    &[("as_of", as_of_text(args.as_of))],
                )?;
                drop(out);
                return copy_out(response, None, notes).map(|()| ExitCode::SUCCESS);
            }
        }
        Command::Project(args) => {
            let file = output_file(args.output.as_deref())?;
            let response = client.get(
                &format!("{}/view", client.conversation(&args.conversation)?),
                &[
                    ("format", Some(format_name(args.format))),
                    ("as_of", as_of_text(args.as_of)),
                    ("turns", args.turns.clone()),
                ],
            )?;
            drop(out);
            return copy_out(response, file, notes).map(|()| ExitCode::SUCCESS);
        }
        Command::View(args) => {
            let path = client.conversation(&args.conversation)?;
            if args.list {
                let views = client.get_json(&format!("{path}/views"), &[])?;
                if args.json {
                    writeln!(out, "{views}")?;
                } else {
                    let mut rows = vec![["VIEW", "PROFILE", "EVENTS", "RECORDS", "HEAD"]
                        .map(str::to_owned)
                        .to_vec()];
                    for v in views.as_array().into_iter().flatten() {
                        rows.push(vec![
                            v["name"].as_str().unwrap_or("").to_owned(),
                            v["profile"].as_str().unwrap_or("-").to_owned(),
                            v["events"].to_string(),
                            v["records"].to_string(),
                            v["head"].as_str().unwrap_or("").chars().take(12).collect(),
                        ]);
                    }
                    output::table(&mut out, &rows)?;
                }
            } else if args.drop {
                client.call(
                    client
                        .request(
                            "DELETE",
                            &format!("{path}/views/{}", segment(&args.name)),
                            &[],
                        )
                        .call(),
                )?;
                notes.say(&format!("dropped view \"{}\"", args.name));
            } else {
                let file = output_file(args.output.as_deref())?;
                let response = client.get(
                    &format!("{path}/views/{}", segment(&args.name)),
                    &[
                        ("format", Some(format_name(args.format))),
                        ("profile", args.profile.clone()),
                    ],
                )?;
                match response.header("convstore-view-refresh").unwrap_or("") {
                    "current" => notes.say(&format!("view \"{}\" is current", args.name)),
                    "built" => notes.say(&format!(
                        "view \"{}\" built: {} from {}",
                        args.name,
                        output::plural(
                            response
                                .header("convstore-view-events")
                                .and_then(|v| v.parse().ok())
                                .unwrap_or(0),
                            "event"
                        ),
                        output::plural(
                            response
                                .header("convstore-view-records")
                                .and_then(|v| v.parse().ok())
                                .unwrap_or(0),
                            "record"
                        )
                    )),
                    other => {
                        if let Some(ranges) = other.strip_prefix("updated ") {
                            notes.say(&format!(
                                "view \"{}\" updated to record {}: recomputed turns {}",
                                args.name,
                                response
                                    .header("convstore-view-records")
                                    .and_then(|v| v.parse::<u64>().ok())
                                    .unwrap_or(0)
                                    .saturating_sub(1),
                                ranges
                                    .split(',')
                                    .map(|r| {
                                        let (a, b) = r.split_once("..").unwrap_or((r, r));
                                        output::range(
                                            a.parse().unwrap_or(0),
                                            b.parse().unwrap_or(0),
                                        )
                                    })
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ));
                        }
                    }
                }
                drop(out);
                return copy_out(response, file, notes).map(|()| ExitCode::SUCCESS);
            }
        }
        Command::List(args) => {
            let mut all = Vec::new();
            let mut after: Option<String> = None;
            loop {
                let page = client.get_json(
                    "/v1/conversations",
                    &[
                        ("limit", Some("10000".to_owned())),
                        ("after", after.clone()),
                    ],
                )?;
                all.extend(
                    page["conversations"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default(),
                );
                match page["next"].as_str() {
                    Some(next) => after = Some(next.to_owned()),
                    None => break,
                }
            }
            if args.json {
                writeln!(out, "{}", Value::Array(all))?;
            } else {
                let mut rows = vec![["ID", "NAME", "EVENTS", "TURNS", "HEAD", "CREATED"]
                    .map(str::to_owned)
                    .to_vec()];
                for c in &all {
                    let id = c["id"].as_str().unwrap_or("");
                    rows.push(vec![
                        ConversationId::from_hex(id).map_or_else(|| id.to_owned(), |i| i.short()),
                        c["name"].as_str().unwrap_or("-").to_owned(),
                        c["events"].to_string(),
                        c["turns"].to_string(),
                        c["head"].as_str().unwrap_or("").chars().take(12).collect(),
                        c["created"].as_str().unwrap_or("").to_owned(),
                    ]);
                }
                output::table(&mut out, &rows)?;
            }
        }
        Command::Fork(args) => {
            let path = client.conversation(&args.conversation)?;
            let parent = client.get_json(&path, &[])?;
            let label = |v: &Value| {
                v["name"].as_str().map_or_else(
                    || {
                        let id = v["id"].as_str().unwrap_or("");
                        ConversationId::from_hex(id).map_or_else(|| id.to_owned(), |i| i.query())
                    },
                    str::to_owned,
                )
            };
            let mut forked = client.post_json(
                &format!("{path}/fork"),
                &json!({
                    "at_turn": args.at_turn,
                    "at_seq": args.at_seq,
                    "name": args.name,
                    "compact": args.compact,
                }),
            )?;
            let compacted = forked["compacted"].as_bool() == Some(true);
            if let Some(object) = forked.as_object_mut() {
                object.remove("compacted");
            }
            if args.json {
                writeln!(out, "{forked}")?;
            } else {
                let at = forked["at"].as_u64().unwrap_or(0);
                notes.say(&cmd::fork::forked_note(
                    &label(&parent),
                    at,
                    compacted.then_some(args.compact.as_deref().unwrap_or("")),
                ));
                writeln!(
                    out,
                    "{} {}",
                    label(&forked),
                    forked["head"].as_str().unwrap_or("")
                )?;
            }
        }
        Command::Compact(args) => {
            cmd::compact::check_order(args)?;
            let body = json!({
                "profile": args.profile,
                "reasoning": args.reasoning.map(|r| match r {
                    crate::args::ReasoningArg::Strip => "strip",
                    crate::args::ReasoningArg::Keep => "keep",
                }),
                "tool_calls": args.tool_calls.map(|t| match t {
                    crate::args::ToolCallsArg::Strip => "strip",
                    crate::args::ToolCallsArg::StripRequests => "strip-requests",
                    crate::args::ToolCallsArg::StripResponses => "strip-responses",
                    crate::args::ToolCallsArg::Omit => "omit",
                    crate::args::ToolCallsArg::Keep => "keep",
                }),
                "summary": args.summary,
                "summarize": args.summarize,
                "revert": args.revert,
                "instructions": args.instructions,
                "force": args.force,
                "tokenizer": args.tokenizer,
                "from": args.from,
                "to": args.to,
                "keep_last": args.keep_last,
                "dry_run": args.dry_run,
                "recall_hints": args.recall_hints.then_some(true),
            });
            let report = match client.post_json(
                &format!("{}/compact", client.conversation(&args.conversation)?),
                &body,
            ) {
                Ok(report) => report,
                // An inflated compaction's report, printed as the command
                // prints it without a server before it fails.
                Err(e) => match refused(&e, "inflated") {
                    Some(inflated) if inflated.extra["report"].is_object() => {
                        inflated.extra["report"].clone()
                    }
                    _ => return Err(e),
                },
            };
            let counted = match args.tokenizer.as_str() {
                "chars4" => "4 characters a token".to_owned(),
                exact => format!(
                    "counted with {}",
                    convstore_engine::projection::Tokenizer::named(exact)
                        .map_or_else(|_| exact.to_owned(), |t| t.name().to_owned())
                ),
            };
            drop(out);
            return cmd::compact::print_report(&report, args, &counted, notes);
        }
        Command::Explain(args) => {
            let value = client.get_json(
                &format!("{}/explain", client.conversation(&args.conversation)?),
                &[
                    ("turn", Some(args.turn.to_string())),
                    ("as_of", as_of_text(args.as_of)),
                ],
            )?;
            drop(out);
            return cmd::explain::print(&value, args.json);
        }
        Command::Verify(args) => {
            let value =
                client.get_json("/v1/verify", &[("conversation", args.conversation.clone())])?;
            drop(out);
            return cmd::verify::finish(value, notes, args.json);
        }
        Command::Redact(args) => {
            let path = format!("{}/redact", client.conversation(&args.conversation)?);
            let body = json!({
                "seq": args.seq,
                "field": args.field,
                "reason": args.reason,
            });
            let value = client.post_json(&path, &body)?;
            drop(out);
            return cmd::redact::print(&value, args.json);
        }
        Command::Stats(args) => {
            drop(out);
            let value = client.get_json(
                &format!("{}/stats", client.conversation(&args.conversation)?),
                &[("tokenizer", Some(args.tokenizer.clone()))],
            )?;
            cmd::stats::render(&value, args.json)?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Pin(args) => {
            let path = format!("{}/pins", client.conversation(&args.conversation)?);
            let value = match &args.turns {
                Some(turns) => client.post_json(&path, &json!({ "turns": turns }))?,
                None => client.get_json(&path, &[])?,
            };
            drop(out);
            return cmd::pin::print(&pins_of(&value), args.json);
        }
        Command::Unpin(args) => {
            let path = format!("{}/pins", client.conversation(&args.conversation)?);
            let value: Value = client
                .call(
                    client
                        .request("DELETE", &path, &[("turns", args.turns.clone())])
                        .call(),
                )?
                .into_json()?;
            drop(out);
            return cmd::pin::print(&pins_of(&value), false);
        }
        Command::Recall(args) => {
            let path = format!("{}/recall", client.conversation(&args.conversation)?);
            if let Some(call) = &args.tool_call {
                let text = if call == "-" {
                    let mut text = String::new();
                    std::io::stdin()
                        .read_to_string(&mut text)
                        .context("--tool-call -: reading stdin")?;
                    text
                } else {
                    call.clone()
                };
                // Read here first: a call that does not parse is refused as
                // the command refuses it without a server.
                convstore_engine::recall::parse_tool_call(&text).context("--tool-call")?;
                let answer: Value = client
                    .call(
                        client
                            .request(
                                "POST",
                                &path,
                                &[("max_tokens", Some(args.max_tokens.to_string()))],
                            )
                            .set("Content-Type", "application/json")
                            .send_string(&text),
                    )?
                    .into_json()?;
                writeln!(out, "{answer}")?;
            } else {
                let format = match args.format {
                    crate::args::RecallFormat::Ndjson => "ndjson",
                    crate::args::RecallFormat::Text => "text",
                };
                let response = client.get(
                    &path,
                    &[
                        ("handle", args.target.clone()),
                        ("call", args.call.clone()),
                        ("summary_of", args.summary_of.map(|s| s.to_string())),
                        ("as_of", as_of_text(args.as_of)),
                        ("format", Some(format.to_owned())),
                    ],
                )?;
                drop(out);
                return copy_out(response, None, notes).map(|()| ExitCode::SUCCESS);
            }
        }
        Command::Search(args) => {
            let value = client
                .get_json(
                    "/v1/search",
                    &[
                        ("q", Some(args.query.clone())),
                        ("conv", args.conv.clone()),
                        ("kind", (!args.kind.is_empty()).then(|| args.kind.join(","))),
                        ("since", args.since.map(|t| t.to_string())),
                        ("limit", Some(args.limit.to_string())),
                    ],
                )
                .map_err(|e| {
                    // The conversation --conv names, said as without a server.
                    if refused(&e, "not_found").is_some() {
                        e.context("--conv")
                    } else {
                        e
                    }
                })?;
            let hits = value
                .as_array()
                .and_then(|hits| {
                    hits.iter()
                        .map(convstore_engine::search::Hit::from_json)
                        .collect::<Option<Vec<_>>>()
                })
                .context("the server's hits are not in the form of `search --json`")?;
            drop(out);
            return cmd::search::render(&hits, args.json);
        }
        Command::Diff(args) => {
            let sub = matches
                .subcommand_matches("diff")
                .context("diff: arguments missing")?;
            let [a_profile, b_profile] = cmd::diff::sides(args, sub)?;
            let value = client
                .get_json(
                    "/v1/diff",
                    &[
                        ("a", Some(args.sides[0].clone())),
                        ("b", Some(args.sides[1].clone())),
                        ("a_profile", a_profile),
                        ("b_profile", b_profile),
                    ],
                )
                .map_err(|e| match refused(&e, "bad_request") {
                    // A side that cannot be read is a usage error, as without
                    // a server.
                    Some(bad) if bad.message.starts_with("side ") => {
                        crate::output::usage(bad.message.clone())
                    }
                    _ => e,
                })?;
            let diff: convstore_engine::diff::Diff =
                serde_json::from_value(value).context("the server's diff")?;
            drop(out);
            return cmd::diff::render(&diff, &args.sides, args.json);
        }
        Command::Export(args) => {
            let file = output_file(args.output.as_deref())?;
            let format = match args.format {
                crate::args::InteropFormat::Ndjson => "ndjson",
                crate::args::InteropFormat::Jp => "jp",
                crate::args::InteropFormat::Openai => "openai",
            };
            let response = client.get(
                &format!("{}/export", client.conversation(&args.conversation)?),
                &[
                    ("format", Some(format.to_owned())),
                    ("projected", args.projected.then(|| "true".to_owned())),
                    ("as_of", as_of_text(args.as_of)),
                ],
            )?;
            drop(out);
            return copy_out(response, file, notes).map(|()| ExitCode::SUCCESS);
        }
        Command::Import(args) => {
            server_limits_events(args.max_event_bytes, &client.base)?;
            let format = match args.format {
                crate::args::InteropFormat::Ndjson => "ndjson",
                crate::args::InteropFormat::Jp => "jp",
                crate::args::InteropFormat::Openai => "openai",
            };
            let mut body = Vec::new();
            if args.file == "-" {
                std::io::stdin()
                    .read_to_end(&mut body)
                    .context("cannot read stdin")?;
            } else {
                cmd::import::open_file(&args.file)?
                    .read_to_end(&mut body)
                    .with_context(|| format!("cannot read {}", args.file))?;
            }
            let name = cmd::import::name(args)?;
            let value: Value = client
                .fits(body.len())
                .and_then(|()| {
                    client.call(
                        client
                            .request(
                                "POST",
                                "/v1/import",
                                &[("format", Some(format.to_owned())), ("name", name)],
                            )
                            .send_bytes(&body),
                    )
                })
                .map_err(|e| {
                    // The name is the command's, not the input's: said as
                    // the command says it without a server.
                    if refused(&e, "name_taken").is_some() {
                        anyhow!("{e} (choose another with --name)")
                    } else {
                        e.context(cmd::import::shown(&args.file))
                    }
                })?
                .into_json()?;
            for warning in value["warnings"].as_array().into_iter().flatten() {
                notes.warn(warning.as_str().unwrap_or_default());
            }
            drop(out);
            return cmd::import::report(&value, args.json, notes);
        }
        Command::Reindex(args) => {
            let started = std::time::Instant::now();
            let value = client.post_json("/v1/reindex", &json!({}))?;
            drop(out);
            return cmd::search::reindexed(
                value["conversations"].as_u64().unwrap_or(0),
                value["records"].as_u64().unwrap_or(0),
                started.elapsed(),
                args.json,
            );
        }
        Command::Gc(args) => {
            let body = json!({
                "conversation": args.conversation,
                "older_than": args.older_than,
                "all_payloads": args.all_payloads,
                "dry_run": args.dry_run,
            });
            let value = client.post_json("/v1/gc", &body)?;
            drop(out);
            cmd::gc::print(&value, args.json)?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Backup(args) => {
            // The server writes the copy on its machine: an absolute path.
            let dest = std::path::absolute(&args.dest).context("the destination")?;
            let value = client.post_json("/v1/backup", &json!({ "dest": dest }))?;
            drop(out);
            return cmd::backup::report(&value, args.json);
        }
        Command::Delete(args) => {
            let path = client.conversation(&args.conversation)?;
            let query = [("with_forks", args.with_forks.then(|| "true".to_owned()))];
            let response = client.call(client.request("DELETE", &path, &query).call())?;
            let value: Value = response.into_json()?;
            drop(out);
            cmd::delete::print(&value, args.json, notes)?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Mcp(_) => {
            bail!(
                "the server at {} holds the database: MCP clients connect to its /mcp endpoint ({}/mcp, streamable HTTP; docs/mcp.md)",
                client.base,
                client.base
            );
        }
        other => {
            let name = format!("{other:?}")
                .split(['(', ' ', '{'])
                .next()
                .unwrap_or("")
                .to_ascii_lowercase();
            bail!(
                "convstore {name} does not run through a server (the server at {} holds the database): it writes its own database directly",
                client.base
            );
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
