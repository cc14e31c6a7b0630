//! `convstore mcp` driven by a real MCP client: the official Python SDK
//! (`mcp` on PyPI) runs tests/mcp/client.py against the built binary.
//!
//! The client's Python is `$CONVSTORE_MCP_PYTHON`, else `python3`. Without
//! the `mcp` package the test is skipped, and says so loudly; with
//! `CONVSTORE_REQUIRE_MCP_CLIENT=1` (CI installs the package and sets it)
//! a missing client fails the test instead.

use std::path::Path;
use std::process::Command;

use crate::support::TestEnv;

fn python() -> Option<String> {
    let python = std::env::var("CONVSTORE_MCP_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let found = Command::new(&python)
        .args(["-c", "import mcp, mcp_types"])
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some(python);
    }
    assert!(
        std::env::var_os("CONVSTORE_REQUIRE_MCP_CLIENT").is_none_or(|v| v != "1"),
        "{python} cannot import the MCP Python SDK, and CONVSTORE_REQUIRE_MCP_CLIENT=1 requires it"
    );
    eprintln!(
        "\n*** SKIPPED: {python} cannot import `mcp` (pip install mcp); the MCP client test did not run ***\n"
    );
    None
}

#[test]
fn the_python_sdk_uses_every_tool_and_resource_and_hears_of_writes() {
    let Some(python) = python() else {
        return;
    };
    let env = TestEnv::new();
    // The server serves an existing database: one with a conversation
    // `seed`, beside which the client writes `chat`.
    env.run(&["append", "seed", "--turn", "--user", "hello"])
        .ok();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py");
    let output = Command::new(python)
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_convstore"))
        .arg(env.db())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.trim_end().ends_with("ok"),
        "the MCP client failed:\n{stdout}\n{stderr}"
    );
}

/// The same client against `convstore serve`'s `/mcp` endpoint, over
/// streamable HTTP: writes through the server (another process's
/// `convstore append`, which finds the server) reach the subscribers.
#[test]
fn the_python_sdk_over_streamable_http_from_serve() {
    let Some(python) = python() else {
        return;
    };
    let env = TestEnv::new();
    env.run(&["append", "seed", "--turn", "--user", "hello"])
        .ok();
    let server = crate::support::server::Server::start(env.db(), &["--mcp-allow-write"]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py");
    let output = Command::new(python)
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_convstore"))
        .arg(env.db())
        .arg(format!("{}/mcp", server.url))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.trim_end().ends_with("ok"),
        "the MCP client failed over HTTP:\n{stdout}\n{stderr}"
    );
    // Each session the client ends (DELETE /mcp) is ended as it expects.
    assert!(!stderr.contains("Session termination failed"), "{stderr}");
}

#[test]
fn mcp_on_a_missing_database_is_one_error_line() {
    let env = TestEnv::new();
    env.run(&["mcp"]).fails();
}

/// Requests whose params do not read as their method's (raw JSON-RPC on
/// stdio, as no SDK sends them): invalid params (-32602) naming the
/// method, not "method not found"; an unknown method is still -32601.
#[test]
fn malformed_params_are_invalid_params() {
    use std::io::{BufRead, BufReader, Write};
    let env = TestEnv::new();
    env.run(&["append", "c", "--user", "hi"]).ok();
    let mut child = env
        .command(&["mcp"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut ask = |message: serde_json::Value| -> serde_json::Value {
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
        if message.get("id").is_none() {
            return serde_json::Value::Null;
        }
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap()
    };
    let init = ask(serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "0"}}
    }));
    assert!(init["result"]["serverInfo"].is_object(), "{init}");
    ask(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    for (id, method, params, code) in [
        (
            2,
            "tools/call",
            serde_json::json!({"name": "project", "arguments": [1]}),
            -32602,
        ),
        (3, "tools/call", serde_json::json!({"name": 7}), -32602),
        (
            4,
            "resources/read",
            serde_json::json!({"uri": false}),
            -32602,
        ),
        (5, "no/such", serde_json::json!({}), -32601),
    ] {
        let answer = ask(serde_json::json!({
            "jsonrpc": "2.0", "id": id, "method": method, "params": params
        }));
        assert_eq!(answer["id"], id, "{answer}");
        assert_eq!(answer["error"]["code"], code, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(method), "{answer}");
    }
    // A well-formed call still works on the same session.
    let answer = ask(serde_json::json!({
        "jsonrpc": "2.0", "id": 6, "method": "tools/call",
        "params": {"name": "get_view", "arguments": {"conversation": "c"}}
    }));
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    drop(stdin);
    assert!(child.wait().unwrap().success());
}
