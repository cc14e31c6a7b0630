//! Recall on the 21 real JP conversations: compacted with recall hints,
//! every stripped result's handle gives back its original content byte for
//! byte, and every summary's gives back exactly the events it replaced.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use convstore_engine::compact::CompactRequest;
use convstore_engine::projection::bounds::Bound;
use convstore_engine::projection::{LogEvent, Tokenizer, ViewEvent, SUMMARY_HEADER};
use convstore_engine::recall::{self, Target};
use convstore_engine::store::event::{ReasoningPolicy, ToolCallPolicy};
use convstore_engine::store::interop::jp::from_jp;
use convstore_engine::store::{ConversationId, EventKind};
use convstore_engine::{Engine, Location, OpenOptions, Scope};
use serde_json::Value;

fn load(path: &std::path::Path) -> Vec<LogEvent> {
    let values: Vec<Value> = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let mut notes = Vec::new();
    LogEvent::sequence(values.into_iter().map(|v| from_jp(v, &mut notes).unwrap()))
}

fn engine(dir: &std::path::Path) -> Engine {
    let location = Location::parse(dir.join("db").to_str().unwrap()).unwrap();
    Engine::open(&location, &OpenOptions::create()).unwrap()
}

fn view(engine: &Engine, id: &ConversationId) -> Vec<ViewEvent> {
    let mut out = Vec::new();
    engine
        .project(id, None, |v| {
            out.push(v.clone());
            Ok(())
        })
        .unwrap();
    out
}

/// `(recall N)` or `(recall A..B)` at the end of a text.
fn handle(text: &str) -> Option<Target> {
    let rest = text.strip_suffix(')')?;
    let at = rest.rfind(" (recall ")?;
    Target::parse_handle(&rest[at + " (recall ".len()..])
}

#[test]
fn recall_gives_back_what_compaction_took_from_the_real_conversations() {
    let Some(files) = support::jp_files() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let (mut stripped, mut summaries, mut summarized) = (0, 0, 0);
    for (i, path) in files.iter().enumerate() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let original = load(path);
        let events: Vec<_> = original.iter().map(|e| e.event.clone()).collect();
        let (id, _) = engine
            .store()
            .create_and_append(
                Some(&format!("c{i}")),
                &events,
                &convstore_engine::store::AppendOptions::default(),
            )
            .unwrap();
        let turns = engine.store().info(&id).unwrap().turns;

        // Off: the view is JP's, no handle anywhere.
        let mut plain = CompactRequest::default();
        plain.reasoning = Some(ReasoningPolicy::Strip);
        plain.force = true;
        engine.compact(&id, &plain, &Tokenizer::Chars4).unwrap();
        let text = format!("{:?}", view(&engine, &id));
        assert!(
            !text.contains("(recall "),
            "{name}: a handle without recall hints"
        );

        // Tool calls stripped over the first two thirds, a summary over the
        // middle third, both with recall hints.
        let mut strip = CompactRequest::default();
        strip.tool_calls = Some(ToolCallPolicy::Strip);
        strip.to = Some(Bound::Turn(turns * 2 / 3));
        strip.recall_hints = Some(true);
        strip.force = true;
        engine.compact(&id, &strip, &Tokenizer::Chars4).unwrap();
        if turns >= 3 {
            let mut summary = CompactRequest::default();
            summary.summary = Some(format!("What happened in {name}'s middle turns."));
            summary.from = Some(Bound::Turn(turns / 3));
            summary.to = Some(Bound::Turn(turns * 2 / 3 - 1));
            summary.recall_hints = Some(true);
            summary.force = true;
            engine.compact(&id, &summary, &Tokenizer::Chars4).unwrap();
            summarized += 1;
        }

        let len = engine.store().info(&id).unwrap().len;
        let scope = Scope { end: len };
        let projected = view(&engine, &id);
        for v in &projected {
            match &v.event.kind {
                EventKind::ToolResult {
                    id: call,
                    content,
                    is_error,
                } if content.starts_with("[compacted] ") => {
                    let Some(Target::Seq(seq)) = handle(content) else {
                        panic!("{name}: a stripped result without a handle: {content}");
                    };
                    assert_eq!(seq, v.seq, "{name}");
                    let found =
                        recall::recall(engine.store(), &id, scope, &Target::Seq(seq)).unwrap();
                    let [record] = found.records.as_slice() else {
                        panic!("{name}: one record")
                    };
                    // Byte for byte what was imported.
                    assert_eq!(
                        record.event, original[seq as usize].event,
                        "{name}: seq {seq}"
                    );
                    let EventKind::ToolResult {
                        id: back,
                        content: whole,
                        is_error: error,
                    } = &record.event.kind
                    else {
                        panic!("{name}: seq {seq} is not a tool result");
                    };
                    assert_eq!((back, error), (call, is_error));
                    let EventKind::ToolResult {
                        content: imported, ..
                    } = &original[seq as usize].event.kind
                    else {
                        unreachable!()
                    };
                    assert_eq!(whole.as_bytes(), imported.as_bytes());
                    // The tool answers with it, whole, within a large budget.
                    let call = recall::parse_tool_call(&format!(
                        r#"{{"type":"tool_use","id":"t","name":"recall","input":{{"handle":"{seq}"}}}}"#
                    ))
                    .unwrap();
                    let answer =
                        recall::answer_tool_call(engine.store(), &id, &call, 10_000_000).unwrap();
                    assert!(!answer.is_error && !answer.cut);
                    assert!(answer.text.contains(whole.as_str()), "{name}: seq {seq}");
                    stripped += 1;
                }
                EventKind::User { text } if v.summary_of.is_some() => {
                    assert!(text.starts_with(SUMMARY_HEADER));
                    let Some(Target::Range { from, to }) = handle(text) else {
                        panic!("{name}: a summary without a handle: {text}");
                    };
                    let (first, last) = v.summary_of.unwrap();
                    assert_eq!(from, v.seq);
                    // The events it replaced: every conversation event of
                    // its turns, none of which the view shows.
                    let replaced: Vec<&LogEvent> = original
                        .iter()
                        .filter(|e| {
                            (first..=last).contains(&e.turn)
                                && e.event.kind.event_type().is_conversation()
                        })
                        .collect();
                    let found =
                        recall::recall(engine.store(), &id, scope, &Target::SummaryOf(from))
                            .unwrap();
                    assert_eq!(found.records.len(), replaced.len(), "{name}");
                    for (r, e) in found.records.iter().zip(&replaced) {
                        assert_eq!(
                            (r.seq, r.turn, &r.event),
                            (e.seq, e.turn, &e.event),
                            "{name}"
                        );
                        assert!(
                            projected
                                .iter()
                                .all(|p| p.seq != r.seq || p.summary_of.is_some()),
                            "{name}: seq {} is replaced but in the view",
                            r.seq
                        );
                    }
                    assert_eq!(found.summary.unwrap().turns, (first, last));
                    // The range is the turns' records from the first replaced.
                    let range =
                        recall::recall(engine.store(), &id, scope, &Target::Range { from, to })
                            .unwrap();
                    let expected: Vec<&LogEvent> = original
                        .iter()
                        .filter(|e| (from..=to).contains(&e.seq))
                        .collect();
                    assert_eq!(range.records.len(), expected.len());
                    for (r, e) in range.records.iter().zip(&expected) {
                        assert_eq!(&r.event, &e.event);
                    }
                    assert!(
                        replaced.iter().all(|e| (from..=to).contains(&e.seq)),
                        "{name}"
                    );
                    summaries += 1;
                }
                _ => {}
            }
        }
    }
    assert!(stripped > 100, "only {stripped} stripped results checked");
    // Every summary made is in its view and checked (the conversations of
    // three turns or more: 9 of the 21).
    assert_eq!(summaries, summarized);
    assert!(summaries >= 9, "only {summaries} summaries checked");
    eprintln!("checked {stripped} stripped results and {summaries} summaries");
}
