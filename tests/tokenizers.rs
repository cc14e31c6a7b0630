//! Exact token counts equal tiktoken's: on every text of the real JP
//! conversations, and on random text made of what pre-tokenizers split
//! on (contractions, digits, newlines, whitespace runs, marks, scripts).
//! Counted twice, a text gives the same count (the second from memory).
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use convstore_projection::Tokenizer;
use convstore_store::{Event, EventKind, Timestamp};
use proptest::prelude::*;

/// tiktoken's encoder named so, built once.
fn tiktoken(name: &str) -> &'static tiktoken_rs::CoreBPE {
    static CL100K: std::sync::LazyLock<tiktoken_rs::CoreBPE> =
        std::sync::LazyLock::new(|| tiktoken_rs::cl100k_base().unwrap());
    static O200K: std::sync::LazyLock<tiktoken_rs::CoreBPE> =
        std::sync::LazyLock::new(|| tiktoken_rs::o200k_base().unwrap());
    match name {
        "cl100k" => &CL100K,
        _ => &O200K,
    }
}

/// Ours, built once (so that remembered counts are used across cases).
fn ours(name: &str) -> &'static Tokenizer {
    static CL100K: std::sync::LazyLock<Tokenizer> =
        std::sync::LazyLock::new(|| Tokenizer::named("cl100k").unwrap());
    static O200K: std::sync::LazyLock<Tokenizer> =
        std::sync::LazyLock::new(|| Tokenizer::named("o200k").unwrap());
    match name {
        "cl100k" => &CL100K,
        _ => &O200K,
    }
}

fn event(text: &str) -> Event {
    Event::new(
        Timestamp::EARLIEST,
        EventKind::User {
            text: text.to_owned(),
        },
    )
}

/// Every string in a JSON value.
fn strings(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::String(s) => out.push(s.clone()),
        serde_json::Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        serde_json::Value::Object(fields) => fields.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

#[test]
fn counts_equal_tiktoken_on_the_real_jp_conversations() {
    let Some(files) = support::jp_files() else {
        return;
    };
    let mut texts = Vec::new();
    for file in files {
        let value: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        strings(&value, &mut texts);
    }
    assert!(texts.len() > 10_000, "{} texts", texts.len());
    for name in ["cl100k", "o200k"] {
        let (ours, theirs) = (Tokenizer::named(name).unwrap(), tiktoken(name));
        let expected: Vec<u64> = texts
            .iter()
            .map(|t| theirs.encode_ordinary(t).len() as u64)
            .collect();
        for pass in 0..2 {
            for (text, expected) in texts.iter().zip(&expected) {
                assert_eq!(
                    ours.count(&event(text)),
                    *expected,
                    "{name}, pass {pass}: {:?}",
                    text.chars().take(200).collect::<String>()
                );
            }
        }
    }
}

/// Text from pieces pre-tokenizers treat apart.
fn tricky_text() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "a",
        "A",
        "z",
        "Zq",
        "'s",
        "'LL",
        "'ve",
        "'d",
        "0",
        "1234",
        " ",
        "  ",
        "\t",
        "\n",
        "\r\n",
        "\n\n",
        ".",
        ",",
        "!?",
        "/",
        "\\",
        "\"",
        "{",
        "}",
        "<|endoftext|>",
        "<|fim_prefix|>",
        "日本語",
        "é",
        "e\u{301}",
        "🙂",
        "\u{a0}",
        "\u{2028}",
        "ß",
        "İ",
        "ı",
        "Σσς",
        "ﬁ",
        "-->",
        "::",
        "_x",
    ]);
    prop::collection::vec(pieces, 0..60).prop_map(|p| p.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn counts_equal_tiktoken_on_random_text(text in tricky_text(), long in any::<bool>()) {
        // Long texts go through the remembered counts too.
        let text = if long { text.repeat(8) } else { text };
        for name in ["cl100k", "o200k"] {
            let ours = ours(name);
            let expected = tiktoken(name).encode_ordinary(&text).len() as u64;
            prop_assert_eq!(ours.count(&event(&text)), expected, "{}", name);
            prop_assert_eq!(ours.count(&event(&text)), expected, "{} (remembered)", name);
        }
    }
}
