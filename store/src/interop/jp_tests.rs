use super::*;

#[test]
fn timestamps_keep_jp_spelling() {
    for text in [
        "2026-03-18 13:19:07.360486",
        "2026-03-18 13:19:07.36048",
        "2026-03-18 13:19:07.3",
        "2025-01-05 04:00:00.0",
    ] {
        let t = parse_timestamp(text).unwrap();
        assert_eq!(format_timestamp(t), text);
    }
    let t = parse_timestamp("2026-03-18 13:19:07").unwrap();
    assert_eq!(format_timestamp(t), "2026-03-18 13:19:07.0");
}

#[test]
fn base64_leaves_decode_and_encode_back() {
    let mut notes = Vec::new();
    let original = serde_json::json!({
        "timestamp": "2026-04-10 17:04:24.859153",
        "type": "tool_call_request",
        "id": "t1",
        "name": "fs_read_file",
        "arguments": {"path": "Y3JhdGVzL2pwX2NsaS9idWlsZC5ycw==", "n": 3, "not64": "src/main.rs!", "list": ["YQ=="]},
    });
    let event = from_jp(original.clone(), &mut notes).unwrap();
    let EventKind::ToolCall { arguments, .. } = &event.kind else {
        panic!("{event:?}")
    };
    let arguments = arguments.to_value();
    assert_eq!(arguments["path"], "crates/jp_cli/build.rs");
    assert_eq!(arguments["not64"], "src/main.rs!");
    assert_eq!(arguments["list"][0], "a");
    assert_eq!(to_jp(&event), original);
}

#[test]
fn jp_compactions_become_overlays() {
    let mut notes = Vec::new();
    for original in [
        serde_json::json!({"type":"compaction","timestamp":"2025-01-05 04:00:00.0","from_turn":0,"to_turn":0,
            "reasoning":"strip","tool_calls":{"policy":"strip","request":true,"response":false}}),
        serde_json::json!({"type":"compaction","timestamp":"2025-01-05 04:00:00.0","from_turn":1,"to_turn":4,
            "tool_calls":{"policy":"omit"}}),
        serde_json::json!({"type":"compaction","timestamp":"2025-01-05 04:00:00.0","from_turn":1,"to_turn":4,
            "summary":{"summary":"we did things"}}),
    ] {
        let event = from_jp(original.clone(), &mut notes).unwrap();
        assert!(matches!(event.kind, EventKind::Compaction(_)), "{event:?}");
        assert_eq!(to_jp(&event), original);
    }
    let event = from_jp(
        serde_json::json!({"type":"compaction","timestamp":"2025-01-05 04:00:00.0","from_turn":1,"to_turn":4,
            "summary":{"summary":"s"}}),
        &mut notes,
    )
    .unwrap();
    let EventKind::Compaction(c) = event.kind else {
        panic!()
    };
    assert_eq!(c.summary.as_deref(), Some("s"));
}

/// Every event of the 21 real conversations converts and converts back,
/// field for field.
#[test]
fn real_conversations_round_trip() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/jp");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!("skipping: {} is absent", dir.display());
        return;
    };
    let mut files = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        if !path.to_string_lossy().ends_with(".events.json") {
            continue;
        }
        files += 1;
        let events: Vec<Value> =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for (i, original) in events.into_iter().enumerate() {
            let mut notes = Vec::new();
            let event = from_jp(original.clone(), &mut notes)
                .unwrap_or_else(|e| panic!("{}: event {i}: {e}", path.display()));
            assert_eq!(to_jp(&event), original, "{}: event {i}", path.display());
        }
    }
    assert_eq!(files, 21);
}
