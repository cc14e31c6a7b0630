//! CLI tests: each runs the built `convstore` binary in a temp directory.

#[path = "../support/mod.rs"]
mod support;

mod test_append;
mod test_compact;
mod test_delete;
mod test_durable;
mod test_encryption;
mod test_errors;
mod test_gc;
mod test_lineage;
mod test_mcp;
mod test_new_user;
mod test_no_panic;
mod test_project;
mod test_read;
mod test_recall;
mod test_recovery;
mod test_redact;
mod test_reliability;
mod test_salvage;
mod test_segments;
mod test_tour;
