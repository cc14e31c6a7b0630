//! Getting compacted history back: [`recall`] gives the raw records behind
//! any part of a view (a stripped tool result, the turns a summary
//! replaced, a tool call by id, a range of seqs), and [`answer_tool_call`]
//! answers a model's call of the `recall` tool ([`tool_schema`]) within a
//! token budget, saying what it cut.
//!
//! Nothing here changes the log: compaction hides content from the model,
//! never from the store, so every record is still there to read.

use convstore_store::{Seq, Turn};
use std::fmt::Write as _;

use convstore_projection::{resolve, Summary};
use convstore_store::{ConversationId, EventKind, EventType, LogRecord, Store, Timestamp};
use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::pipeline::{self, Scope};

/// What to recall.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The record at this seq (a stripped result's `(recall SEQ)`).
    Seq(u64),
    /// The records `from..=to` (a summary's `(recall FROM..TO)`).
    Range {
        /// First seq (inclusive).
        from: u64,
        /// Last seq (inclusive).
        to: u64,
    },
    /// Every `tool_call` and `tool_result` with this call id.
    Call(String),
    /// The conversation events the summary standing for this seq replaced
    /// (in the view of the records in scope).
    SummaryOf(u64),
}

impl Target {
    /// A handle as written in a view: `1234` or `12..345` (`12..=345` too).
    pub fn parse_handle(text: &str) -> Option<Target> {
        let text = text.trim();
        match text.split_once("..") {
            Some((from, to)) => {
                let from = from.trim().parse().ok()?;
                let to = to.trim().trim_start_matches('=').trim().parse().ok()?;
                Some(Target::Range { from, to })
            }
            None => text.parse().ok().map(Target::Seq),
        }
    }

    /// The handle that names it again (`None` for a call or a summary).
    pub fn handle(&self) -> Option<String> {
        match self {
            Target::Seq(seq) => Some(seq.to_string()),
            Target::Range { from, to } => Some(format!("{from}..{to}")),
            Target::Call(_) | Target::SummaryOf(_) => None,
        }
    }
}

/// The summary a [`Target::SummaryOf`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SummaryRun {
    /// The seq of the compaction whose summary it is.
    pub compaction: u64,
    /// The raw turns it stands for (both inclusive).
    pub turns: (u64, u64),
}

/// What [`recall`] found.
#[derive(Debug, Clone)]
pub struct Recalled {
    /// The raw records, in log order, with their seqs, turns and addresses.
    pub records: Vec<LogRecord>,
    /// For [`Target::SummaryOf`]: the summary.
    pub summary: Option<SummaryRun>,
}

/// The raw records `target` names among the records in `scope` of `id`.
///
/// - `Seq`, `Range`: those records, whatever they are (compactions
///   included: they are records of the log too). A seq past the scope is
///   an error.
/// - `Call`: every `tool_call` and `tool_result` with that id, in log
///   order; an error if there is none.
/// - `SummaryOf`: the conversation events of the turns of the summary run
///   that the record at that seq falls in, exactly what the view replaced
///   with the summary (the `config` and `system` events of those turns
///   pass through the view, and compactions never appear in it, so they
///   are not among them); an error if no summary replaces that record's
///   turn.
pub fn recall(
    store: &Store,
    id: &ConversationId,
    scope: Scope,
    target: &Target,
) -> Result<Recalled> {
    let end = scope.end;
    let in_scope = |seq: u64| -> Result<()> {
        if seq >= end {
            return Err(convstore_store::StoreError::NoSuchRecord { seq, len: end }.into());
        }
        Ok(())
    };
    match target {
        Target::Seq(seq) => {
            in_scope(*seq)?;
            Ok(Recalled {
                records: vec![store.record(id, *seq)?],
                summary: None,
            })
        }
        Target::Range { from, to } => {
            if from > to {
                return Err(Error::Invalid(format!(
                    "{from}..{to}: the range is inverted (FROM after TO)"
                )));
            }
            in_scope(*to)?;
            let records = store
                .scan(id, *from..*to + 1)?
                .collect::<std::result::Result<Vec<_>, _>>()?;
            Ok(Recalled {
                records,
                summary: None,
            })
        }
        Target::Call(call) => {
            let mut records = Vec::new();
            for chunk in store.chunks(id, 0, end)? {
                let chunk = chunk?;
                let tool = |_: u64, _: u64, kind: EventType| {
                    !matches!(kind, EventType::ToolCall | EventType::ToolResult)
                };
                for (seq, _, event) in chunk.events(store, 0, end, tool)? {
                    let matches = match &event.kind {
                        EventKind::ToolCall { id, .. } | EventKind::ToolResult { id, .. } => {
                            id == call
                        }
                        _ => false,
                    };
                    if matches {
                        // The address comes with the record.
                        records.push(store.record(id, seq)?);
                    }
                }
            }
            if records.is_empty() {
                return Err(Error::NoSuchCall(call.clone()));
            }
            Ok(Recalled {
                records,
                summary: None,
            })
        }
        Target::SummaryOf(seq) => {
            in_scope(*seq)?;
            let turn = store.turn_of(id, Seq(*seq))?.0;
            let last_turn = store.turn_of(id, Seq(end - 1))?.0;
            let overlays = pipeline::overlays_under(store, id, end, None)?;
            let resolution = resolve(overlays, Some(last_turn));
            let run = resolution
                .runs
                .iter()
                .find(|run| run.first <= turn && turn <= run.last)
                .copied()
                .filter(|run| {
                    matches!(
                        resolution.overlays[run.overlay].summary,
                        Some(Summary::Text(_))
                    )
                })
                .ok_or(Error::NotSummarized { seq: *seq, turn })?;
            let seqs = store.turn_records(id, Turn(run.first)..=Turn(run.last), Seq(end))?;
            let records = store
                .scan(id, seqs)?
                .filter(|r| {
                    r.as_ref()
                        .map_or(true, |r| r.event.kind.event_type().is_conversation())
                })
                .collect::<std::result::Result<Vec<_>, _>>()?;
            Ok(Recalled {
                records,
                summary: Some(SummaryRun {
                    compaction: resolution.overlays[run.overlay].seq,
                    turns: (run.first, run.last),
                }),
            })
        }
    }
}

fn rfc3339(time: Timestamp) -> String {
    let mut out = Vec::with_capacity(32);
    time.write_rfc3339(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// A record as text: a header line (seq, turn, time, kind and what else
/// names it), then its text as stored, whole, on the lines after it.
pub fn record_text(record: &LogRecord) -> String {
    let event = &record.event;
    let (what, body) = match &event.kind {
        EventKind::TurnStart => ("turn_start".to_owned(), String::new()),
        EventKind::User { text } => ("user".to_owned(), text.clone()),
        EventKind::Assistant { text } => ("assistant".to_owned(), text.clone()),
        EventKind::Reasoning { text } => ("reasoning".to_owned(), text.clone()),
        EventKind::System { text } => ("system".to_owned(), text.clone()),
        EventKind::ToolCall {
            id,
            name,
            arguments,
        } => (
            format!("tool_call {name} (id {id})"),
            arguments.as_str().to_owned(),
        ),
        EventKind::ToolResult {
            id,
            content,
            is_error,
        } => (
            format!(
                "tool_result (id {id}){}",
                if *is_error { ", error" } else { "" }
            ),
            content.clone(),
        ),
        EventKind::Config { delta } => ("config".to_owned(), delta.as_str().to_owned()),
        EventKind::Extension { name, payload } => {
            (format!("extension {name}"), payload.as_str().to_owned())
        }
        EventKind::Compaction(c) => (
            format!("compaction of turns {}..{}", c.from_turn, c.to_turn),
            c.summary.clone().unwrap_or_default(),
        ),
    };
    // A text removed for good says when and why, so a reader knows it was
    // there and is not coming back.
    let dropped = record.redaction.as_ref().map_or(String::new(), |r| {
        format!(
            " · redacted {} ({})",
            rfc3339(r.time),
            convstore_store::one_line(&r.reason)
        )
    });
    let mut out = format!(
        "── seq {} · turn {} · {} · {what}{dropped} ──\n",
        record.seq,
        record.turn,
        rfc3339(event.timestamp)
    );
    if !body.is_empty() {
        out.push_str(&body);
        if !body.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

/// Characters a budget of `tokens` holds (four characters a token, the
/// estimate convstore counts views with).
fn budget_chars(tokens: u64) -> usize {
    usize::try_from(tokens.saturating_mul(4)).unwrap_or(usize::MAX)
}

/// Room kept in a budget for the note saying what was cut.
const NOTE_ROOM: usize = 240;

/// The least budget an answer is given, in tokens: room for the note
/// saying what was cut and as much text beside it. A smaller budget is
/// raised to it (and the note names it).
pub const MIN_TOKENS: u64 = (NOTE_ROOM * 2 / 4) as u64;

/// The records as text within `max_tokens` (four characters a token),
/// starting `offset` characters into the first record's text. What does
/// not fit is cut, and a last line says what was cut and how to ask for
/// the rest (the handle, and an offset when a record was cut part-way).
pub fn bounded_text(records: &[LogRecord], offset: usize, max_tokens: u64) -> (String, bool) {
    let max_tokens = max_tokens.max(MIN_TOKENS);
    let budget = budget_chars(max_tokens);
    let room = budget - NOTE_ROOM;
    let mut out = String::new();
    let mut used = 0usize;
    for (i, record) in records.iter().enumerate() {
        let mut text = record_text(record);
        if i == 0 && offset > 0 {
            // Keep the header; skip `offset` characters of the body.
            let header_end = text.find('\n').map_or(text.len(), |n| n + 1);
            let body: String = text[header_end..].chars().skip(offset).collect();
            text = format!("{}(from character {offset})\n{body}", &text[..header_end]);
        }
        let chars = text.chars().count();
        if used + chars <= room {
            out.push_str(&text);
            used += chars;
            continue;
        }
        let last = records.last().map_or(record.seq, |r| r.seq);
        let note = if i == 0 {
            // Not even the first record fits: show its start.
            let header_end = text.find('\n').map_or(text.len(), |n| n + 1);
            let header = &text[..header_end];
            let fits = room.saturating_sub(header.chars().count());
            let body: String = text[header_end..].chars().take(fits).collect();
            let shown = body.chars().count();
            let body_total = record_text(record)
                .split_once('\n')
                .map_or(0, |(_, b)| b.trim_end_matches('\n').chars().count());
            out.push_str(header);
            out.push_str(&body);
            out.push('\n');
            let next = offset + shown;
            let mut note = format!(
                "[recall: cut at the budget of {max_tokens} tokens: seq {} shown from character {offset} to {next} of {body_total}; for more, recall handle \"{}\" with offset {next}",
                record.seq, record.seq
            );
            if records.len() > 1 {
                let _ = write!(
                    note,
                    ", then handle \"{}..{last}\"",
                    records.get(1).map_or(record.seq, |r| r.seq)
                );
            }
            note.push(']');
            note
        } else {
            let shown_last = records[i - 1].seq;
            format!(
                "[recall: cut at the budget of {max_tokens} tokens: {} of {} records shown (seq {}..{shown_last}); for the rest, recall handle \"{}..{last}\"]",
                i,
                records.len(),
                records[0].seq,
                record.seq
            )
        };
        out.push_str(&note);
        out.push('\n');
        return (out, true);
    }
    (out, false)
}

/// The `recall` tool's description, as a model reads it.
pub const TOOL_DESCRIPTION: &str = "Get back the original content that compaction removed from this conversation. \
A stripped tool result reads `[compacted] NAME: success (recall 1234)` and a summary's header \
`[Summary of previous conversation] (recall 12..345)`: pass the handle after `recall` \
(`1234` or `12..345`) to read the raw events again. Or pass a tool call's `call_id` to read the call \
and its result. Long answers are cut to a budget; the answer then says how to ask for the rest.";

/// The JSON Schema of the `recall` tool's arguments.
pub fn tool_parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "handle": {
                "type": "string",
                "description": "What follows `recall` in a compacted result or a summary: one record's seq (`1234`) or a range of seqs, both ends included (`12..345`)."
            },
            "call_id": {
                "type": "string",
                "description": "Instead of a handle: the id of a tool call, to read the call and its result."
            },
            "offset": {
                "type": "integer",
                "minimum": 0,
                "description": "Characters of the first record's text to skip, to read on where an earlier answer was cut."
            }
        },
        "additionalProperties": false
    })
}

/// Tool definition formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// OpenAI Chat Completions `tools` (`{"type":"function","function":{...}}`).
    Openai,
    /// Anthropic Messages `tools` (`{"name","description","input_schema"}`).
    Anthropic,
}

/// The `tools` array a harness hands its model, holding the `recall` tool.
pub fn tool_schema(format: ToolFormat) -> Value {
    match format {
        ToolFormat::Openai => json!([{
            "type": "function",
            "function": {
                "name": "recall",
                "description": TOOL_DESCRIPTION,
                "parameters": tool_parameters(),
            }
        }]),
        ToolFormat::Anthropic => json!([{
            "name": "recall",
            "description": TOOL_DESCRIPTION,
            "input_schema": tool_parameters(),
        }]),
    }
}

/// The shape a tool call came in, which its answer takes too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallShape {
    /// OpenAI Chat Completions: `{"id","type":"function","function":{"name","arguments"}}`.
    OpenaiChat {
        /// The call's id.
        id: String,
    },
    /// OpenAI Responses: `{"type":"function_call","call_id","name","arguments"}`.
    OpenaiResponses {
        /// The call's id.
        call_id: String,
    },
    /// Anthropic Messages: `{"type":"tool_use","id","name","input"}`.
    Anthropic {
        /// The call's id.
        id: String,
    },
    /// The arguments object alone.
    Bare,
}

/// A model's call of the `recall` tool, read from one of the shapes models
/// write them in.
#[derive(Debug, Clone)]
pub struct ToolCall {
    /// The shape, for the answer.
    pub shape: CallShape,
    /// The arguments.
    pub arguments: Value,
}

/// Reads a tool call (any [`CallShape`]). An error when it is not JSON, not
/// a call of `recall`, or its arguments are not an object.
pub fn parse_tool_call(text: &str) -> Result<ToolCall> {
    let bad = |problem: String| Error::Input {
        at: "the tool call".to_owned(),
        problem,
    };
    let value: Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let Value::Object(object) = &value else {
        return Err(bad("not a JSON object".to_owned()));
    };
    let text_field = |v: &Value, field: &str| -> Result<String> {
        v.get(field)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| bad(format!("field `{field}`: missing or not a string")))
    };
    let name_is_recall = |name: String| -> Result<()> {
        if name == "recall" {
            Ok(())
        } else {
            Err(bad(format!("a call of `{name}`, not of `recall`")))
        }
    };
    // Arguments written as a JSON string (OpenAI) or an object.
    let arguments = |v: Option<&Value>| -> Result<Value> {
        match v {
            Some(Value::String(s)) => serde_json::from_str(s)
                .map_err(|e| bad(format!("field `arguments`: not JSON: {e}"))),
            Some(v @ Value::Object(_)) => Ok(v.clone()),
            Some(_) => Err(bad("field `arguments`: not an object".to_owned())),
            None => Ok(json!({})),
        }
    };
    let call = if let Some(function) = object.get("function") {
        name_is_recall(text_field(function, "name")?)?;
        ToolCall {
            shape: CallShape::OpenaiChat {
                id: text_field(&value, "id")?,
            },
            arguments: arguments(function.get("arguments"))?,
        }
    } else if object.get("type").and_then(Value::as_str) == Some("function_call") {
        name_is_recall(text_field(&value, "name")?)?;
        ToolCall {
            shape: CallShape::OpenaiResponses {
                call_id: text_field(&value, "call_id")?,
            },
            arguments: arguments(object.get("arguments"))?,
        }
    } else if object.get("type").and_then(Value::as_str) == Some("tool_use") {
        name_is_recall(text_field(&value, "name")?)?;
        ToolCall {
            shape: CallShape::Anthropic {
                id: text_field(&value, "id")?,
            },
            arguments: arguments(object.get("input"))?,
        }
    } else {
        ToolCall {
            shape: CallShape::Bare,
            arguments: value.clone(),
        }
    };
    if !call.arguments.is_object() {
        return Err(bad("the arguments are not a JSON object".to_owned()));
    }
    Ok(call)
}

/// What the model asked for, from its arguments: a target and an offset,
/// or what is wrong with them (said to the model, not an error of the
/// harness).
pub fn read_arguments(arguments: &Value) -> std::result::Result<(Target, usize), String> {
    let Value::Object(fields) = arguments else {
        return Err("the arguments are not an object".to_owned());
    };
    if let Some(key) = fields
        .keys()
        .find(|k| !matches!(k.as_str(), "handle" | "call_id" | "offset"))
    {
        return Err(format!(
            "unknown argument `{key}` (give `handle` or `call_id`, and `offset`)"
        ));
    }
    let offset = match fields.get("offset") {
        None | Some(Value::Null) => 0,
        Some(v) => v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or("`offset` must be a non-negative integer")?,
    };
    let handle = fields.get("handle").filter(|v| !v.is_null());
    let call = fields.get("call_id").filter(|v| !v.is_null());
    let target = match (handle, call) {
        (Some(_), Some(_)) => return Err("give `handle` or `call_id`, not both".to_owned()),
        (None, None) => {
            return Err("give a `handle` (like \"1234\" or \"12..345\") or a `call_id`".to_owned())
        }
        (Some(handle), None) => {
            let text = match handle {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => {
                    return Err("`handle` must be a string like \"1234\" or \"12..345\"".to_owned())
                }
            };
            Target::parse_handle(&text).ok_or_else(|| {
                format!("`{text}` is not a handle: give one record's seq (\"1234\") or a range (\"12..345\")")
            })?
        }
        (None, Some(call)) => Target::Call(
            call.as_str()
                .ok_or("`call_id` must be a string")?
                .to_owned(),
        ),
    };
    Ok((target, offset))
}

/// An answer to a tool call: the text for the model, whether it is an
/// error, and whether the budget cut it.
#[derive(Debug, Clone)]
pub struct ToolAnswer {
    /// The shape of the call it answers.
    pub shape: CallShape,
    /// What the model reads.
    pub text: String,
    /// The call could not be answered (a bad handle, a record that does
    /// not exist): `text` says why.
    pub is_error: bool,
    /// The budget cut the answer (`text` ends saying how to get the rest).
    pub cut: bool,
}

impl ToolAnswer {
    /// The tool result message in the call's shape.
    pub fn message(&self) -> Value {
        match &self.shape {
            CallShape::OpenaiChat { id } => {
                json!({ "role": "tool", "tool_call_id": id, "content": self.text })
            }
            CallShape::OpenaiResponses { call_id } => {
                json!({ "type": "function_call_output", "call_id": call_id, "output": self.text })
            }
            CallShape::Anthropic { id } => {
                let mut message =
                    json!({ "type": "tool_result", "tool_use_id": id, "content": self.text });
                if self.is_error {
                    message["is_error"] = json!(true);
                }
                message
            }
            CallShape::Bare => json!({ "content": self.text, "is_error": self.is_error }),
        }
    }
}

/// Answers a call of the `recall` tool on conversation `id` within
/// `max_tokens`. A problem with the model's arguments, or a record that
/// does not exist, is an answer with `is_error` (the model can correct
/// The token budget of a `recall` tool call's answer when none is given.
pub const DEFAULT_MAX_TOKENS: u64 = 4000;

/// itself); a failing store is an error.
pub fn answer_tool_call(
    store: &Store,
    id: &ConversationId,
    call: &ToolCall,
    max_tokens: u64,
) -> Result<ToolAnswer> {
    let answer = |text: String, is_error: bool, cut: bool| ToolAnswer {
        shape: call.shape.clone(),
        text,
        is_error,
        cut,
    };
    let (target, offset) = match read_arguments(&call.arguments) {
        Ok(read) => read,
        Err(problem) => return Ok(answer(problem, true, false)),
    };
    let scope = Scope::as_of(store, id, None)?;
    match recall(store, id, scope, &target) {
        Ok(found) => {
            let (text, cut) = bounded_text(&found.records, offset, max_tokens);
            Ok(answer(text, false, cut))
        }
        Err(e) if e.is_model_mistake() => Ok(answer(e.to_string(), true, false)),
        Err(e) => Err(e),
    }
}
