//! `convstore log`: the raw records, for audits.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use convstore_store::json::{write_event_fields, ObjectWriter};
use convstore_store::Store;

use crate::args::LogArgs;
use crate::output;

pub(crate) fn run(store: &Store, args: &LogArgs) -> Result<ExitCode> {
    let id = store.resolve(&args.conversation)?;
    let mut out = output::stdout();
    let mut line = Vec::with_capacity(1024);
    for record in store.scan(&id, 0..u64::MAX)? {
        let record = record?;
        line.clear();
        let mut object = ObjectWriter::begin(&mut line);
        object.u64("seq", record.seq);
        object.u64("turn", record.turn);
        object.string("address", &record.address.hex());
        write_event_fields(&record.event, &mut object);
        object.end();
        line.push(b'\n');
        out.write_all(&line)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
