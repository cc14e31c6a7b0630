//! convstore inside another program: open a database, append a turn,
//! compact it, read the projected view and a materialized view.
//!
//! `cargo run --example embed`
use convstore_engine::compact::CompactRequest;
use convstore_engine::projection::Tokenizer;
use convstore_engine::store::AppendOptions;
use convstore_engine::{parse_ndjson, Engine, Location, OpenOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let location = Location::from_path(dir.path().join("db"));
    let engine = Engine::open(&location, &OpenOptions::create())?;
    let events = parse_ndjson(concat!(
        "{\"type\":\"user\",\"text\":\"What is in main.rs?\"}\n",
        "{\"type\":\"reasoning\",\"text\":\"I should read it.\"}\n",
        "{\"type\":\"tool_call\",\"id\":\"c1\",\"name\":\"read\",\"arguments\":{\"path\":\"main.rs\"}}\n",
        "{\"type\":\"tool_result\",\"id\":\"c1\",\"content\":\"fn main() {}\",\"is_error\":false}\n",
        "{\"type\":\"assistant\",\"text\":\"An empty main.\"}\n",
    ))?;
    let store = engine.store();
    let (id, appended) =
        store.create_and_append(Some("chat"), &events, &AppendOptions::default())?;
    println!("appended {} events, head {}", appended.count, appended.head);
    // The configured default profile (built in: strip reasoning, compact
    // tool results to one line, drop call arguments).
    let report = engine.compact(&id, &CompactRequest::default(), &Tokenizer::Chars4)?;
    println!(
        "compaction {:?}, tokens {} -> {}",
        report.status,
        report.before.total_tokens(),
        report.after.total_tokens()
    );
    engine.project(&id, None, |event| {
        println!("view: {:?}", event.event.kind);
        Ok(())
    })?;
    let state = engine.read_view(&id, "default", |_| Ok(()))?;
    println!(
        "materialized view \"{}\": {} events",
        state.name, state.events
    );
    Ok(())
}
