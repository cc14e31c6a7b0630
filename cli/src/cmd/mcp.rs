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
    drop(open(cli, false)?);
    let wait = if cli.wait > 0.0 {
        Duration::try_from_secs_f64(cli.wait).unwrap_or(DEFAULT_WAIT)
    } else {
        DEFAULT_WAIT
    };
    let engines = Engines::PerCall {
        location: location(cli)?,
        config: Arc::new(config(cli)?),
        wait,
    };
    convstore_mcp::run_stdio(engines, args.allow_write).map_err(anyhow::Error::msg)?;
    Ok(ExitCode::SUCCESS)
}
