//! The web inspector in a real browser: Debian's Chromium, headless,
//! driven over the WebDriver protocol by chromedriver, against
//! `convstore serve` on loopback holding real JP conversations. Without
//! chromium and chromedriver the test says loudly that it was skipped;
//! with `CONVSTORE_REQUIRE_BROWSER=1` (CI) a skip fails.
#![allow(clippy::unwrap_used)]

mod support;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::server::{cli, Server};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A chromedriver process and one browser session of it.
struct Browser {
    driver: Child,
    base: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn start() -> Option<Browser> {
        if !Path::new(CHROMIUM).exists() || !Path::new(CHROMEDRIVER).exists() {
            let required = std::env::var_os("CONVSTORE_REQUIRE_BROWSER").is_some();
            assert!(
                !required,
                "CONVSTORE_REQUIRE_BROWSER is set but {CHROMIUM} or {CHROMEDRIVER} is missing"
            );
            eprintln!(
                "*** SKIPPED: the web inspector's browser test needs Debian's chromium and \
                 chromium-driver ({CHROMIUM}, {CHROMEDRIVER}) ***"
            );
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let url = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        while ureq::get(&format!("{url}/status")).call().is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "chromedriver did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let profile = tempfile::tempdir().unwrap();
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1400,1000",
            &format!("--user-data-dir={}", profile.path().display()),
        ];
        let session = ureq::post(&format!("{url}/session"))
            .send_json(json!({
                "capabilities": {"alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
                }}
            }))
            .expect("a browser session")
            .into_json::<Value>()
            .unwrap();
        let id = session["value"]["sessionId"].as_str().expect("session id");
        Some(Browser {
            driver,
            base: format!("{url}/session/{id}"),
            _profile: profile,
        })
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let request = ureq::request(method, &format!("{}{path}", self.base));
        let response = match body {
            Some(body) => request.send_json(body),
            None => request.call(),
        };
        match response {
            Ok(r) => r.into_json::<Value>().unwrap()["value"].clone(),
            Err(ureq::Error::Status(status, r)) => {
                panic!(
                    "WebDriver {method} {path}: {status} {}",
                    r.into_string().unwrap()
                )
            }
            Err(e) => panic!("WebDriver {method} {path}: {e}"),
        }
    }

    fn go(&self, url: &str) {
        self.call("POST", "/url", Some(json!({ "url": url })));
    }

    /// Runs `script` (a function body) in the page and returns its value.
    fn js(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({ "script": script, "args": [] })),
        )
    }

    /// Waits until `condition` (a JavaScript expression) is true.
    fn wait(&self, condition: &str) {
        let started = Instant::now();
        loop {
            if self.js(&format!("return !!({condition});")) == json!(true) {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "waited 20 s for {condition}; the page says: {}",
                self.js("return document.body.innerText.slice(0, 2000);")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn text(&self, selector: &str) -> String {
        self.js(&format!(
            "const e = document.querySelector({}); return e ? e.textContent : null;",
            json!(selector)
        ))
        .as_str()
        .unwrap_or_default()
        .to_owned()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = ureq::delete(&self.base).call();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn jp_dir() -> Option<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/jp");
    if dir.is_dir() {
        return Some(dir);
    }
    assert!(
        std::env::var_os("CONVSTORE_REQUIRE_JP_DATA").is_none(),
        "CONVSTORE_REQUIRE_JP_DATA is set but ../shared/data/jp is missing"
    );
    eprintln!("*** SKIPPED: the inspector's browser test reads ../shared/data/jp ***");
    None
}

/// The conversation list, one conversation with a summary, stripped tool
/// results and a pin, as-of replay and a fork, as a user sees them.
#[test]
fn the_inspector_shows_a_real_conversation_in_a_browser() {
    let Some(jp) = jp_dir() else { return };
    let Some(browser) = Browser::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let run = |args: &[&str]| {
        let (code, out, err) = cli(&db, args, None);
        assert_eq!(code, 0, "{args:?}: {err}");
        out
    };
    let bear = jp.join("17728322628-bear-mcp-server-design-review.events.json");
    let other = jp.join("17673969718-iana-reference-site.events.json");
    run(&[
        "import",
        "--format",
        "jp",
        bear.to_str().unwrap(),
        "--name",
        "bear",
        "-q",
    ]);
    run(&[
        "import",
        "--format",
        "jp",
        other.to_str().unwrap(),
        "--name",
        "iana",
        "-q",
    ]);
    let before = run(&["log", "bear"]).lines().count();
    run(&["compact", "bear", "--profile", "default", "-q"]);
    run(&[
        "compact",
        "bear",
        "--summary",
        "Reviewed the crate plan.",
        "--from",
        "0",
        "--to",
        "2",
        "--recall-hints",
        "-q",
    ]);
    run(&["pin", "bear", "--turns", "3..4"]);
    run(&[
        "fork",
        "bear",
        "--at-turn",
        "5",
        "--name",
        "bear-retry",
        "-q",
    ]);
    let server = Server::start(&db, &[]);
    let url = &server.url;

    // The list: every conversation, with tokens filled in, and a filter.
    let started = Instant::now();
    browser.go(&format!("{url}/"));
    browser.wait("document.body.dataset.ready === 'true'");
    let first_paint = browser.js(
        "const p = performance.getEntriesByName('first-contentful-paint')[0]; return p ? p.startTime : null;",
    );
    eprintln!(
        "list page: first contentful paint at {first_paint} ms; ready {:?} after navigation began",
        started.elapsed()
    );
    assert!(
        first_paint.as_f64().is_some_and(|ms| ms < 1000.0),
        "{first_paint}"
    );
    let table = browser.text("#conversations tbody");
    for name in ["bear", "iana", "bear-retry"] {
        assert!(table.contains(name), "{table}");
    }
    assert!(table.contains("fork of"), "{table}");
    browser.wait("[...document.querySelectorAll('#conversations tbody td')].every(td => td.innerText !== '…')");
    browser.js("const f = document.getElementById('filter'); f.value = 'ia'; f.dispatchEvent(new Event('input')); return null;");
    browser.wait("document.querySelectorAll('#conversations tbody tr').length === 1");
    assert!(browser.text("#conversations tbody").contains("iana"));
    // Search across conversations links to the record.
    browser.js("document.getElementById('search').value = 'jp_bear_mcp'; document.getElementById('search-form').requestSubmit(); return null;");
    browser.wait("document.querySelectorAll('#hits li a').length > 0");
    let hit = browser.js("return document.querySelector('#hits li a').getAttribute('href');");
    assert!(hit.as_str().unwrap().starts_with("/c/"), "{hit}");

    // One conversation: facts, timeline, tokens, the side-by-side.
    browser.go(&format!("{url}/c/bear"));
    browser.wait("document.body.dataset.ready === 'true'");
    let facts = browser.text("#facts");
    assert!(facts.contains(&format!("{}", before + 2)), "{facts}");
    assert!(browser
        .text("#compactions-title")
        .starts_with("2 compactions"));
    let compactions = browser.text("#compactions tbody");
    assert!(
        compactions.contains("Reviewed the crate plan"),
        "{compactions}"
    );
    assert!(compactions.contains("reasoning=strip"), "{compactions}");
    let drawn = browser.js(
        "const c = document.getElementById('timeline'); const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i]) n++; return n;",
    );
    assert!(
        drawn.as_u64().unwrap() > 1000,
        "the timeline is drawn: {drawn}"
    );
    assert!(browser.text("#tokens-note").starts_with("raw "));
    // The summary replaces turns 0..2: its events carry the link, the
    // raw records it replaced are marked, and a stripped result names its
    // record.
    let rows = browser.text("#rows tbody");
    assert!(rows.contains("summary of turns 0..2"), "{rows}");
    assert!(rows.contains("Reviewed the crate plan."), "{rows}");
    assert!(rows.contains("replaced by the summary"), "{rows}");
    // Every conversation event of turns 0..2 is replaced by the summary
    // (config and system events pass through).
    let fates = browser.js(
        "return [...document.querySelectorAll('#rows tbody tr')].filter(r => Number(r.children[1].innerText) <= 2).map(r => r.className.split(' ')[0] + ':' + r.children[2].querySelector('.kind').innerText);",
    );
    for fate in fates.as_array().unwrap() {
        let fate = fate.as_str().unwrap();
        assert!(
            fate.starts_with("summarized:") || fate == "kept:config" || fate == "kept:system",
            "{fates}"
        );
    }
    // The totals are those of `stats`, and the profile is shown.
    let stats: Value = serde_json::from_str(&run(&["stats", "bear", "--json"])).unwrap();
    let note = browser.text("#tokens-note");
    let expected = format!(
        "raw {} tokens, projected {}",
        thousands(stats["tokens"].as_u64().unwrap()),
        thousands(stats["view_tokens"].as_u64().unwrap())
    );
    assert!(note.starts_with(&expected), "{note} / {expected}");
    assert!(compactions.contains("default"), "{compactions}");
    // Later turns: stripped tool results.
    browser.js("document.getElementById('goto-turn').value = '6'; document.getElementById('goto').click(); return null;");
    browser.wait("document.getElementById('page-note').innerText.includes('turns 6..')");
    let rows = browser.text("#rows tbody");
    assert!(rows.contains("[compacted]"), "{rows}");
    assert!(rows.contains("stripped (raw on the left)"), "{rows}");
    // Clicking a summary shows the turns it replaced.
    browser.js("document.getElementById('goto-turn').value = '0'; document.getElementById('goto').click(); return null;");
    browser.wait("document.querySelector('.summary-link') !== null");
    browser.js("document.querySelector('.summary-link').click(); return null;");
    browser.wait("document.getElementById('page-note').innerText.includes('turns 0..')");

    // As of a record before both compactions: nothing is compacted.
    let as_of = before - 1;
    browser.js(&format!(
        "const s = document.getElementById('asof-seq'); s.value = '{as_of}'; s.dispatchEvent(new Event('change')); return null;"
    ));
    browser.wait(&format!(
        "document.getElementById('asof-note').innerText.includes('after record {as_of}') && document.getElementById('compactions-title').innerText.startsWith('0 compactions')"
    ));
    browser.wait("document.querySelectorAll('#rows tbody tr.summarized, #rows tbody tr.dropped, #rows tbody tr.changed').length === 0");
    let address = browser.js("return location.search;");
    assert_eq!(address, json!(format!("?as_of={as_of}&from=0")));

    // A fork names its parent and fork point.
    browser.go(&format!("{url}/c/bear-retry"));
    browser.wait("document.body.dataset.ready === 'true'");
    let lineage = browser.text("#lineage");
    assert!(lineage.starts_with("A fork of bear"), "{lineage}");

    // A conversation that does not exist says so.
    browser.go(&format!("{url}/c/no-such-conversation"));
    browser.wait("document.getElementById('title').innerText.startsWith('error:')");
    drop(server);
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// With tokens, the pages load and ask for one; the data needs it.
#[test]
fn the_inspector_asks_for_a_token_when_the_server_needs_one() {
    let Some(browser) = Browser::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "read-only reader-token-0123456789\n").unwrap();
    let server = Server::start(
        dir.path().join("db"),
        &["--token-file", tokens.to_str().unwrap()],
    );
    browser.go(&format!("{}/", server.url));
    browser.wait("!document.getElementById('token-box').hidden");
    // A wrong one is said to be refused, and forgotten.
    browser.js("document.getElementById('token').value = 'wrong-token-0123456789'; document.getElementById('token-save').click(); return null;");
    browser.wait("!document.getElementById('token-box').hidden && document.getElementById('token-note').innerText.includes('refused')");
    browser.js("document.getElementById('token').value = 'reader-token-0123456789'; document.getElementById('token-save').click(); return null;");
    browser.wait("document.body.dataset.ready === 'true' && document.getElementById('status').innerText.includes('No conversations')");
}
