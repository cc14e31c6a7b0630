//! `convstore mcp`: the MCP server (`convstore_mcp`) on stdin and stdout.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use convstore_mcp::Engines;

use crate::args::{Cli, McpArgs};
use crate::cmd::{config, location, open};

/// How long a request waits for another process that has the database
/// open, unless `--wait` says otherwise.
const DEFAULT_WAIT: Duration = Duration::from_secs(10);

pub(crate) fn run(cli: &Cli, args: &McpArgs) -> Result<ExitCode> {
    // The database must exist and open, and the configuration parse,
    // before the client is told anything.
    let engine = open(cli, false)?;
    let location = location(cli)?;
    // A database server admits every process: one engine for the
    // session, told of other processes' writes by the backend. A
    // directory admits one process: opened for each request.
    if location.path().is_none() {
        let engines = Engines::Shared(Arc::new(engine.with_config(config(cli)?)));
        convstore_mcp::run_stdio(engines, args.allow_write).map_err(anyhow::Error::msg)?;
        return Ok(ExitCode::SUCCESS);
    }
    drop(engine);
    let wait = if cli.wait > 0.0 {
        Duration::try_from_secs_f64(cli.wait).unwrap_or(DEFAULT_WAIT)
    } else {
        DEFAULT_WAIT
    };
    let engines = Engines::PerCall {
        location,
        config: Arc::new(config(cli)?),
        wait,
    };
    convstore_mcp::run_stdio(engines, args.allow_write).map_err(anyhow::Error::msg)?;
    Ok(ExitCode::SUCCESS)
}
