//! Compaction profiles: named sets of policies (SPEC §4, "Profiles").
//!
//! The built-in profiles that need no summarizer are `default` (strip
//! reasoning, strip tool calls) and `light` (strip reasoning). `heavy` (a
//! summary) needs a summarizer to write its text, so [`builtin`] names it
//! but refuses to build it here.

use convstore_store::event::{Compaction, ReasoningPolicy, ToolCallPolicy};
use convstore_store::Json;

/// A profile's policies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// Its name, stored in the compactions it makes.
    pub name: String,
    /// Reasoning policy.
    pub reasoning: Option<ReasoningPolicy>,
    /// Tool call policy.
    pub tool_calls: Option<ToolCallPolicy>,
}

/// The names of the built-in profiles.
pub const BUILTIN: [&str; 3] = ["default", "light", "heavy"];

/// The built-in profile `name`, or an error that says why there is none.
pub fn builtin(name: &str) -> Result<Profile, String> {
    let (reasoning, tool_calls) = match name {
        "default" => (Some(ReasoningPolicy::Strip), Some(ToolCallPolicy::Strip)),
        "light" => (Some(ReasoningPolicy::Strip), None),
        "heavy" => {
            return Err(
                "profile \"heavy\" writes a summary, which needs a summarizer; \
                 use --summary TEXT with compact, or the profiles default or light"
                    .to_owned(),
            )
        }
        other => {
            return Err(format!(
                "no profile named \"{other}\" (built in: {})",
                BUILTIN.join(", ")
            ))
        }
    };
    Ok(Profile {
        name: name.to_owned(),
        reasoning,
        tool_calls,
    })
}

impl Profile {
    /// A compaction applying this profile to turns `from..=to`, with the
    /// profile's name in its bookkeeping.
    pub fn compaction(&self, from_turn: u64, to_turn: u64) -> Compaction {
        Compaction {
            from_turn,
            to_turn,
            summary: None,
            reasoning: self.reasoning,
            tool_calls: self.tool_calls.clone(),
            revert: None,
            info: Some(Json::from_value(
                &serde_json::json!({ "profile": self.name }),
            )),
        }
    }
}
