//! proptest strategies for events.

use convstore_store::event::{
    Compaction, HintAction, ReasoningPolicy, ToolCallKind, ToolCallObject, ToolCallPolicy, ToolHint,
};
use convstore_store::{Event, EventKind, Json, Timestamp};
use proptest::prelude::*;
use serde_json::Value;

/// Short or long text: long ones (> 1 KiB) are stored as blobs.
pub fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => "\\PC{0,40}",
        1 => "[a-z \n\"\\\\]{0,8}",
        1 => (1000usize..3000, "[a-z]{1,3}").prop_map(|(n, s)| s.repeat(n / s.len().max(1) + 1)),
    ]
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e9f64..1e9).prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::String),
    ]
}

pub fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(("[a-z_]{1,6}", inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

pub fn json_object() -> impl Strategy<Value = Json> {
    prop::collection::vec(("[a-z_]{1,6}", json_value()), 0..4)
        .prop_map(|kv| Json::from_value(&Value::Object(kv.into_iter().collect())))
}

pub fn timestamp() -> impl Strategy<Value = Timestamp> {
    // 1990 to 2100, to the microsecond.
    (631_152_000_000_000i64..4_102_444_800_000_000).prop_map(|m| Timestamp::from_micros(m).unwrap())
}

fn hint_action() -> impl Strategy<Value = Option<HintAction>> {
    prop_oneof![
        Just(None),
        Just(Some(HintAction::Keep)),
        Just(Some(HintAction::Strip))
    ]
}

pub fn tool_call_policy() -> impl Strategy<Value = ToolCallPolicy> {
    let object = (
        prop_oneof![
            Just(ToolCallKind::Strip),
            Just(ToolCallKind::Omit),
            Just(ToolCallKind::Keep)
        ],
        prop::option::of(any::<bool>()),
        prop::option::of(any::<bool>()),
        prop::option::of(prop::collection::vec(
            ("[a-c]{1,2}", hint_action(), hint_action())
                .prop_map(|(n, request, response)| (n, ToolHint { request, response })),
            0..3,
        )),
    )
        .prop_map(|(policy, request, response, tools)| {
            let strip = policy == ToolCallKind::Strip;
            // JSON objects cannot repeat a key: keep the last hint per tool.
            let tools = tools.map(|mut t| {
                let mut seen = std::collections::HashSet::new();
                t.reverse();
                t.retain(|(name, _)| seen.insert(name.clone()));
                t.reverse();
                t
            });
            ToolCallPolicy::Object(ToolCallObject {
                policy,
                request: request.filter(|_| strip),
                response: response.filter(|_| strip),
                tools: tools.filter(|_| strip),
            })
        });
    prop_oneof![
        Just(ToolCallPolicy::Keep),
        Just(ToolCallPolicy::Omit),
        Just(ToolCallPolicy::Strip),
        Just(ToolCallPolicy::StripRequests),
        Just(ToolCallPolicy::StripResponses),
        object,
    ]
}

pub fn compaction() -> impl Strategy<Value = Compaction> {
    let info = prop::option::of((
        prop::option::of("[a-z]{1,8}"),
        prop::option::of(any::<u32>()),
        prop::option::of(any::<bool>()),
    ))
    .prop_map(|info| {
        info.and_then(|(profile, tokens, recall_hints)| {
            let mut map = serde_json::Map::new();
            if let Some(p) = profile {
                map.insert("profile".into(), Value::String(p));
            }
            if let Some(t) = tokens {
                map.insert("tokens_before".into(), Value::from(t));
            }
            if let Some(hints) = recall_hints {
                map.insert("recall_hints".into(), Value::Bool(hints));
            }
            (!map.is_empty()).then(|| Json::from_value(&Value::Object(map)))
        })
    });
    (
        0u64..20,
        0u64..20,
        prop::option::of(text()),
        prop::option::of(prop_oneof![
            Just(ReasoningPolicy::Strip),
            Just(ReasoningPolicy::Keep)
        ]),
        prop::option::of(tool_call_policy()),
        prop::option::of(any::<bool>()),
        info,
    )
        .prop_map(|(a, b, summary, reasoning, tool_calls, revert, info)| {
            let mut c = Compaction {
                from_turn: a.min(b),
                to_turn: a.max(b),
                summary,
                reasoning,
                tool_calls,
                revert,
                info,
            };
            if c.revert == Some(true) {
                c.summary = None;
                c.reasoning = None;
                c.tool_calls = None;
            }
            c
        })
}

pub fn kind() -> impl Strategy<Value = EventKind> {
    let id = "[a-z0-9]{1,4}";
    prop_oneof![
        3 => Just(EventKind::TurnStart),
        3 => text().prop_map(|text| EventKind::User { text }),
        3 => text().prop_map(|text| EventKind::Assistant { text }),
        2 => text().prop_map(|text| EventKind::Reasoning { text }),
        2 => (id, "[a-c]{1,2}", json_object())
            .prop_map(|(id, name, arguments)| EventKind::ToolCall { id, name, arguments }),
        2 => (id, text(), any::<bool>())
            .prop_map(|(id, content, is_error)| EventKind::ToolResult { id, content, is_error }),
        1 => text().prop_map(|text| EventKind::System { text }),
        1 => json_object().prop_map(|delta| EventKind::Config { delta }),
        1 => ("[a-z_]{1,10}", json_value())
            .prop_map(|(name, v)| EventKind::Extension { name, payload: Json::from_value(&v) }),
        1 => compaction().prop_map(EventKind::Compaction),
    ]
}

pub fn event() -> impl Strategy<Value = Event> {
    (timestamp(), prop::option::of(json_object()), kind()).prop_map(|(timestamp, meta, kind)| {
        Event {
            timestamp,
            meta,
            kind,
        }
    })
}

pub fn events(max: usize) -> impl Strategy<Value = Vec<Event>> {
    prop::collection::vec(event(), 1..max)
}

/// Events for projection tests: few tool ids (so results find calls, or
/// not), few tool names (so hints apply), few timestamps (so ties happen),
/// and compactions whose ranges reach past the last turn.
pub fn projection_event() -> impl Strategy<Value = Event> {
    let small_text = "[a-z ]{0,6}";
    let id = "[0-3]";
    let kind = prop_oneof![
        4 => Just(EventKind::TurnStart),
        3 => small_text.prop_map(|text| EventKind::User { text }),
        3 => small_text.prop_map(|text| EventKind::Assistant { text }),
        3 => small_text.prop_map(|text| EventKind::Reasoning { text }),
        3 => (id, "[a-c]", json_object())
            .prop_map(|(id, name, arguments)| EventKind::ToolCall { id, name, arguments }),
        3 => (id, small_text, any::<bool>())
            .prop_map(|(id, content, is_error)| EventKind::ToolResult { id, content, is_error }),
        1 => small_text.prop_map(|text| EventKind::System { text }),
        1 => json_object().prop_map(|delta| EventKind::Config { delta }),
        1 => ("[a-z]{1,4}", json_value())
            .prop_map(|(name, v)| EventKind::Extension { name, payload: Json::from_value(&v) }),
        4 => compaction().prop_map(|mut c| {
            c.summary = c.summary.map(|s| s.chars().take(8).collect());
            EventKind::Compaction(c)
        }),
    ];
    (0i64..4, kind).prop_map(|(t, kind)| Event {
        timestamp: Timestamp::from_micros(1_700_000_000_000_000 + t).unwrap(),
        meta: None,
        kind,
    })
}

/// A stream of projection events with their seqs and turns.
pub fn projection_log(max: usize) -> impl Strategy<Value = Vec<convstore_projection::LogEvent>> {
    prop::collection::vec(projection_event(), 0..max)
        .prop_map(convstore_projection::LogEvent::sequence)
}
