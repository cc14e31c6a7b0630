//! The extractive summarizer on every real JP conversation: it keeps every
//! user message (or the newest that fit its budget), every file path the
//! tool calls touched, and the tool of every error.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use convstore_projection::summarize::Extractive;
use convstore_projection::LogEvent;
use convstore_store::interop::jp::from_jp;
use convstore_store::EventKind;
use serde_json::Value;

fn load(path: &std::path::Path) -> Vec<LogEvent> {
    let values: Vec<Value> = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let mut notes = Vec::new();
    LogEvent::sequence(values.into_iter().map(|v| from_jp(v, &mut notes).unwrap()))
}

#[test]
fn extractive_summaries_of_the_real_conversations_keep_what_matters() {
    let Some(files) = support::jp_files() else {
        return;
    };
    let summarizer = Extractive::default();
    let mut omitted_somewhere = false;
    for path in &files {
        let events = load(path);
        let summary = summarizer.snapshot(&events);
        let name = path.file_name().unwrap().to_string_lossy();

        // User messages: the newest ones, as many as fit the budget (at
        // least one), each verbatim.
        let users: Vec<&str> = events
            .iter()
            .filter_map(|e| match &e.event.kind {
                EventKind::User { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        let kept = users
            .iter()
            .rev()
            .take_while(|t| summary.contains(**t))
            .count();
        assert!(
            kept >= users.len().min(1),
            "{name}: the newest user message is missing"
        );
        if kept < users.len() {
            omitted_somewhere = true;
            let with_next: usize = users[users.len() - kept - 1..]
                .iter()
                .map(|t| t.chars().count())
                .sum();
            assert!(
                with_next > summarizer.budget,
                "{name}: user message {} was left out though it fit",
                users.len() - kept - 1
            );
            assert!(summary.contains(&format!(
                "({} earlier message(s) omitted)",
                users.len() - kept
            )));
        }

        // Every path in a `path` or `paths` argument.
        let mut names = std::collections::HashMap::new();
        for e in &events {
            match &e.event.kind {
                EventKind::ToolCall {
                    id,
                    name,
                    arguments,
                } => {
                    names.insert(id.clone(), name.clone());
                    let args: Value = serde_json::from_str(arguments.as_str()).unwrap();
                    let mut paths = Vec::new();
                    if let Value::String(p) = &args["path"] {
                        paths.push(p.clone());
                    }
                    if let Value::Array(items) = &args["paths"] {
                        paths.extend(items.iter().filter_map(|p| p.as_str().map(str::to_owned)));
                    }
                    for p in paths.iter().filter(|p| !p.is_empty()) {
                        assert!(
                            summary.contains(&format!("- {p}\n")),
                            "{name}: path {p} is missing"
                        );
                    }
                }
                // Every error, with its tool's name.
                EventKind::ToolResult {
                    id, is_error: true, ..
                } => {
                    let tool = names.get(id).map_or("unknown", String::as_str);
                    let errors = &summary
                        [summary.find("<errors>").unwrap()..summary.find("</errors>").unwrap()];
                    assert!(
                        errors.contains(&format!("- {tool}: ")),
                        "{name}: error of {tool} is missing"
                    );
                }
                _ => {}
            }
        }
    }
    // The budget is exercised by the real data.
    println!("some conversation had more user text than the budget: {omitted_somewhere}");
}
