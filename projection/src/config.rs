//! Configuration: compaction profiles, per-tool hints and automatic
//! compaction, read from TOML ([`Config::parse`]).
//!
//! ```toml
//! [compaction]
//! default_profile = "default"
//! keep_last = 2
//!
//! [compaction.profiles.tidy]
//! reasoning = "strip"
//! tool_calls = "strip-responses"
//! recall_hints = true               # stripped results say `(recall SEQ)`
//!
//! [compaction.profiles.brief.summary]
//! summarizer = "command"            # extractive | command | openai
//! command = ["./summarize.sh"]
//! timeout_secs = 30
//!
//! [tools.fs_read_file.compaction]
//! request = "keep"
//! response = "strip"
//!
//! [compaction.auto]
//! enabled = true
//! context_window = 128000
//! ```
//!
//! Unknown keys and wrong values are errors that name the key. The built-in
//! profiles (`default`, `light`, `heavy`) exist unless the file defines a
//! profile of the same name.

use std::collections::BTreeMap;

use convstore_store::event::{
    Compaction, HintAction, ReasoningPolicy, ToolCallKind, ToolCallObject, ToolCallPolicy, ToolHint,
};
use convstore_store::Json;
use serde::Deserialize;

/// The whole configuration.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[compaction]`.
    #[serde(default)]
    pub compaction: CompactionConfig,
    /// `[tools.NAME.compaction]`: per-tool hints.
    #[serde(default)]
    pub tools: BTreeMap<String, ToolConfig>,
    /// `[retention]`: which payloads `gc` drops.
    #[serde(default)]
    pub retention: RetentionConfig,
    /// `[encryption]`: the master key of an encrypted database.
    #[serde(default)]
    pub encryption: Option<EncryptionConfig>,
}

impl EncryptionConfig {
    /// An `[encryption]` table names a key file: one without, or with an
    /// empty name, is a mistake, never taken for "no encryption".
    fn check(&self) -> Result<(), ConfigError> {
        match self.key_file.as_deref() {
            Some(file) if !file.is_empty() => Ok(()),
            _ => Err(ConfigError::value(
                "encryption.key_file",
                "missing or empty: name the key file (`convstore keygen FILE` makes one)",
            )),
        }
    }
}

/// `[encryption]`: where the master key is. A database created with a key
/// is encrypted; an encrypted database needs it to read its payloads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EncryptionConfig {
    /// The key file (64 hexadecimal digits, made by `convstore keygen`);
    /// a relative path is relative to the configuration file. Its keyring
    /// is `KEY_FILE.keyring` beside it.
    pub key_file: Option<String>,
}

/// `[retention]`: which raw payloads `convstore gc` drops, and when it
/// runs on its own.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionConfig {
    /// Only payloads of records older than this (a duration: `90d`,
    /// `12h`, `2w`); all ages if unset.
    pub older_than: Option<String>,
    /// Only payloads the conversation's view no longer shows (stripped,
    /// dropped or summarized by a compaction): the view is unchanged. On
    /// unless set to false, which needs `older_than`.
    #[serde(default = "yes")]
    pub only_compacted: bool,
    /// Run the policy on a conversation after each compaction stored in
    /// it (by `compact`, automatic compaction, or an appended compaction
    /// event). Off unless set.
    #[serde(default)]
    pub after_compaction: bool,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            older_than: None,
            only_compacted: true,
            after_compaction: false,
        }
    }
}

impl RetentionConfig {
    /// `older_than` in microseconds, if set.
    pub fn older_than_micros(&self) -> Result<Option<i64>, ConfigError> {
        let Some(text) = &self.older_than else {
            return Ok(None);
        };
        parse_age(text)
            .map(Some)
            .map_err(|problem| ConfigError::value("retention.older_than", problem))
    }
}

/// A duration such as `90d`, `12h`, `30m`, `45s` or `2w`, in microseconds.
pub fn parse_age(text: &str) -> Result<i64, String> {
    match crate::bounds::Bound::parse(text) {
        Ok(crate::bounds::Bound::Ago(micros)) => Ok(micros),
        _ => Err(format!(
            "\"{text}\" is not a duration (expected a number and s, m, h, d or w: 90d, 12h)"
        )),
    }
}

fn yes() -> bool {
    true
}

/// `[compaction]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompactionConfig {
    /// The profile `compact` uses when none is given.
    #[serde(default = "default_profile")]
    pub default_profile: String,
    /// Turns `compact` leaves out by default (`--keep-last`).
    #[serde(default)]
    pub keep_last: u64,
    /// `[compaction.profiles.NAME]`.
    #[serde(default)]
    pub profiles: BTreeMap<String, ProfileConfig>,
    /// `[compaction.auto]`.
    #[serde(default)]
    pub auto: AutoConfig,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            default_profile: default_profile(),
            keep_last: 0,
            profiles: BTreeMap::new(),
            auto: AutoConfig::default(),
        }
    }
}

fn default_profile() -> String {
    "default".to_owned()
}

/// `[compaction.profiles.NAME]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileConfig {
    /// `"strip"` or `"keep"`.
    pub reasoning: Option<ReasoningSetting>,
    /// `"strip"`, `"strip-requests"`, `"strip-responses"`, `"omit"` or
    /// `"keep"`.
    pub tool_calls: Option<ToolCallsSetting>,
    /// A summary, and who writes it.
    pub summary: Option<SummaryConfig>,
    /// Compactions made with this profile carry recall hints: stripped
    /// results read `[compacted] NAME: success (recall SEQ)` and summaries
    /// name the records they replace. Off by default, so views stay
    /// exactly as SPEC §4 (and JP) make them.
    pub recall_hints: Option<bool>,
}

/// A reasoning policy as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReasoningSetting {
    /// Remove reasoning.
    Strip,
    /// Leave it.
    Keep,
}

/// A tool call policy as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ToolCallsSetting {
    /// Strip arguments and results.
    Strip,
    /// Strip arguments.
    StripRequests,
    /// Strip results.
    StripResponses,
    /// Remove calls and results.
    Omit,
    /// Leave them.
    Keep,
}

/// `[compaction.profiles.NAME.summary]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SummaryConfig {
    /// Who writes the summary.
    #[serde(default)]
    pub summarizer: SummarizerKind,
    /// The model (for `openai`; recorded for all).
    pub model: Option<String>,
    /// Replaces the summarizer's default instructions.
    pub instructions: Option<String>,
    /// Added to the instructions.
    pub extra_instructions: Option<String>,
    /// `command`: the program and its arguments.
    pub command: Option<Vec<String>>,
    /// `openai`: the endpoint's base URL (default `https://api.openai.com/v1`).
    pub base_url: Option<String>,
    /// `openai`: the environment variable holding the API key (default
    /// `OPENAI_API_KEY`).
    pub api_key_env: Option<String>,
    /// Seconds before `command` or `openai` is given up (default 120).
    pub timeout_secs: Option<u64>,
}

/// The summarizers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SummarizerKind {
    /// Built in, offline, deterministic.
    #[default]
    Extractive,
    /// An external program.
    Command,
    /// An OpenAI-compatible Chat Completions endpoint.
    Openai,
}

impl SummarizerKind {
    /// Its name as configured.
    pub fn as_str(self) -> &'static str {
        match self {
            SummarizerKind::Extractive => "extractive",
            SummarizerKind::Command => "command",
            SummarizerKind::Openai => "openai",
        }
    }
}

/// `[tools.NAME]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolConfig {
    /// `[tools.NAME.compaction]`.
    #[serde(default)]
    pub compaction: ToolHintConfig,
}

/// `[tools.NAME.compaction]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolHintConfig {
    /// `"keep"` or `"strip"` the arguments.
    pub request: Option<HintSetting>,
    /// `"keep"` or `"strip"` the result.
    pub response: Option<HintSetting>,
}

/// One side of a per-tool hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HintSetting {
    /// Leave it.
    Keep,
    /// Strip it.
    Strip,
}

/// `[compaction.auto]`: automatic compaction.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutoConfig {
    /// Off unless set.
    #[serde(default)]
    pub enabled: bool,
    /// The model's context window, in tokens.
    pub context_window: Option<u64>,
    /// Context windows per model name (the model of the latest `config`
    /// event's `model`, when it is listed).
    #[serde(default)]
    pub context_windows: BTreeMap<String, u64>,
    /// Compact when the view passes this share of the window.
    #[serde(default = "trigger_ratio")]
    pub trigger_ratio: f64,
    /// Never compact a view smaller than this many tokens.
    #[serde(default = "token_floor")]
    pub token_floor: u64,
    /// Never compact a conversation of fewer turns.
    #[serde(default)]
    pub min_turns: u64,
    /// Newest turns left out of each automatic compaction.
    #[serde(default)]
    pub keep_last: u64,
    /// The kept turns may not exceed this share of the window (keep_last
    /// degrades toward 0 until they fit).
    #[serde(default = "buffer_max_ratio")]
    pub buffer_max_ratio: f64,
    /// Tokens kept free for the model's answer.
    #[serde(default)]
    pub reserve_tokens: u64,
    /// The profile automatic compactions use.
    #[serde(default = "default_profile")]
    pub profile: String,
    /// When the summaries' own tokens pass this share of the window, one
    /// summary is written over the whole summarized range.
    #[serde(default = "fold_ratio")]
    pub fold_ratio: f64,
}

impl Default for AutoConfig {
    fn default() -> Self {
        AutoConfig {
            enabled: false,
            context_window: None,
            context_windows: BTreeMap::new(),
            trigger_ratio: trigger_ratio(),
            token_floor: token_floor(),
            min_turns: 0,
            keep_last: 0,
            buffer_max_ratio: buffer_max_ratio(),
            reserve_tokens: 0,
            profile: default_profile(),
            fold_ratio: fold_ratio(),
        }
    }
}

fn trigger_ratio() -> f64 {
    0.75
}
fn token_floor() -> u64 {
    4096
}
fn buffer_max_ratio() -> f64 {
    0.3
}
fn fold_ratio() -> f64 {
    0.25
}

/// A profile, resolved: its policies and, for a summary, its summarizer.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// Its name, stored in the compactions it makes.
    pub name: String,
    /// Reasoning policy.
    pub reasoning: Option<ReasoningPolicy>,
    /// Tool call policy (per-tool hints are added when a compaction is
    /// made: [`Config::tool_policy`]).
    pub tool_calls: Option<ToolCallPolicy>,
    /// The summary, if the profile writes one.
    pub summary: Option<SummaryConfig>,
    /// Whether its compactions carry recall hints (`"recall_hints": true`).
    pub recall_hints: bool,
}

impl Profile {
    /// A compaction of turns `from_turn..=to_turn` with this profile's
    /// policies, `config`'s per-tool hints, the summary `summary` (written by
    /// the profile's summarizer, when it has one), the profile's name in
    /// its bookkeeping and, if the profile asks for them, recall hints.
    pub fn compaction(
        &self,
        from_turn: u64,
        to_turn: u64,
        summary: Option<String>,
        config: &Config,
    ) -> Compaction {
        Compaction {
            from_turn,
            to_turn,
            summary,
            reasoning: self.reasoning,
            tool_calls: self.tool_calls.clone().map(|p| config.tool_policy(p)),
            revert: None,
            info: Some(Json::from_value(&if self.recall_hints {
                serde_json::json!({ "profile": self.name, "recall_hints": true })
            } else {
                serde_json::json!({ "profile": self.name })
            })),
        }
    }

    /// Whether it sets no policy but a summary's.
    pub fn is_mechanical(&self) -> bool {
        self.summary.is_none()
    }
}

/// Why a configuration cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Not TOML of the expected shape (a syntax error, an unknown key, a
    /// value of the wrong type): toml's message, on one line, with the
    /// position.
    #[error("{0}")]
    Syntax(String),
    /// A value out of range, or settings that do not go together.
    #[error("{key}: {problem}")]
    Value {
        /// The key, as `compaction.auto.trigger_ratio`.
        key: String,
        /// What is wrong with it.
        problem: String,
    },
    /// No profile has this name.
    #[error("no profile named \"{name}\" (known: {})", known.join(", "))]
    NoProfile {
        /// The name asked for.
        name: String,
        /// The profiles there are.
        known: Vec<String>,
    },
}

impl ConfigError {
    fn value(key: impl Into<String>, problem: impl Into<String>) -> Self {
        ConfigError::Value {
            key: key.into(),
            problem: problem.into(),
        }
    }
}

impl Config {
    /// Only the `[encryption]` table of a configuration file's text (the
    /// rest is not checked): what every command that opens a database
    /// reads, where a mistake elsewhere fails only the commands that use
    /// it.
    pub fn parse_encryption(text: &str) -> Result<Option<EncryptionConfig>, ConfigError> {
        let syntax = |e: toml::de::Error| ConfigError::Syntax(one_line(&e.to_string()));
        let table: toml::Table = text.parse().map_err(syntax)?;
        let encryption: EncryptionConfig = match table.get("encryption") {
            Some(encryption) => encryption
                .clone()
                .try_into()
                .map_err(|e: toml::de::Error| {
                    ConfigError::Syntax(format!("[encryption]: {}", one_line(e.message())))
                })?,
            None => return Ok(None),
        };
        encryption.check()?;
        Ok(Some(encryption))
    }

    /// Parses a configuration file's text. Errors name the key and the line.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let config: Config =
            toml::from_str(text).map_err(|e| ConfigError::Syntax(one_line(&e.to_string())))?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), ConfigError> {
        if let Some(encryption) = &self.encryption {
            encryption.check()?;
        }
        let retention = &self.retention;
        if retention.older_than_micros()?.is_none() && !retention.only_compacted {
            return Err(ConfigError::value(
                "retention.only_compacted",
                "false needs older_than (it would drop every payload)",
            ));
        }
        let auto = &self.compaction.auto;
        for (key, value) in [
            ("trigger_ratio", auto.trigger_ratio),
            ("buffer_max_ratio", auto.buffer_max_ratio),
            ("fold_ratio", auto.fold_ratio),
        ] {
            if !(value > 0.0 && value <= 1.0) {
                return Err(ConfigError::value(
                    format!("compaction.auto.{key}"),
                    format!("{value} is not a ratio in (0, 1]"),
                ));
            }
        }
        if auto.context_window == Some(0) {
            return Err(ConfigError::value(
                "compaction.auto.context_window",
                "must be positive",
            ));
        }
        for (name, profile) in &self.compaction.profiles {
            if let Some(summary) = &profile.summary {
                let key = format!("compaction.profiles.{name}.summary");
                if summary.summarizer == SummarizerKind::Command
                    && summary.command.as_ref().is_none_or(Vec::is_empty)
                {
                    return Err(ConfigError::value(
                        format!("{key}.command"),
                        "the command summarizer needs a program to run",
                    ));
                }
                if summary.timeout_secs == Some(0) {
                    return Err(ConfigError::value(
                        format!("{key}.timeout_secs"),
                        "must be positive",
                    ));
                }
            }
        }
        for (key, name) in [
            (
                "compaction.default_profile",
                &self.compaction.default_profile,
            ),
            ("compaction.auto.profile", &auto.profile),
        ] {
            self.profile(name)
                .map_err(|e| ConfigError::value(key, e.to_string()))?;
        }
        Ok(())
    }

    /// The profile `name`: from the file, else built in.
    pub fn profile(&self, name: &str) -> Result<Profile, ConfigError> {
        if let Some(p) = self.compaction.profiles.get(name) {
            return Ok(Profile {
                name: name.to_owned(),
                reasoning: p.reasoning.map(|r| match r {
                    ReasoningSetting::Strip => ReasoningPolicy::Strip,
                    ReasoningSetting::Keep => ReasoningPolicy::Keep,
                }),
                tool_calls: p.tool_calls.map(|t| match t {
                    ToolCallsSetting::Strip => ToolCallPolicy::Strip,
                    ToolCallsSetting::StripRequests => ToolCallPolicy::StripRequests,
                    ToolCallsSetting::StripResponses => ToolCallPolicy::StripResponses,
                    ToolCallsSetting::Omit => ToolCallPolicy::Omit,
                    ToolCallsSetting::Keep => ToolCallPolicy::Keep,
                }),
                summary: p.summary.clone(),
                recall_hints: p.recall_hints.unwrap_or(false),
            });
        }
        let (reasoning, tool_calls, summary) = match name {
            "default" => (
                Some(ReasoningPolicy::Strip),
                Some(ToolCallPolicy::Strip),
                None,
            ),
            "light" => (Some(ReasoningPolicy::Strip), None, None),
            "heavy" => (
                None,
                None,
                Some(SummaryConfig {
                    summarizer: SummarizerKind::Extractive,
                    model: None,
                    instructions: None,
                    extra_instructions: None,
                    command: None,
                    base_url: None,
                    api_key_env: None,
                    timeout_secs: None,
                }),
            ),
            other => {
                let mut known: Vec<&str> = vec!["default", "light", "heavy"];
                known.extend(self.compaction.profiles.keys().map(String::as_str));
                known.sort_unstable();
                known.dedup();
                return Err(ConfigError::NoProfile {
                    name: other.to_owned(),
                    known: known.into_iter().map(str::to_owned).collect(),
                });
            }
        };
        Ok(Profile {
            name: name.to_owned(),
            reasoning,
            tool_calls,
            summary,
            recall_hints: false,
        })
    }

    /// `policy` with the configured per-tool hints added, as SPEC §4 says
    /// they are stored: in the compaction, resolved when it is created. A
    /// policy that does not strip (keep, omit) has no use for hints.
    pub fn tool_policy(&self, policy: ToolCallPolicy) -> ToolCallPolicy {
        let hints: Vec<(String, ToolHint)> = self
            .tools
            .iter()
            .filter(|(_, t)| t.compaction.request.is_some() || t.compaction.response.is_some())
            .map(|(name, t)| {
                let side = |s: Option<HintSetting>| {
                    s.map(|s| match s {
                        HintSetting::Keep => HintAction::Keep,
                        HintSetting::Strip => HintAction::Strip,
                    })
                };
                (
                    name.clone(),
                    ToolHint {
                        request: side(t.compaction.request),
                        response: side(t.compaction.response),
                    },
                )
            })
            .collect();
        let (request, response) = match policy {
            ToolCallPolicy::Strip => (true, true),
            ToolCallPolicy::StripRequests => (true, false),
            ToolCallPolicy::StripResponses => (false, true),
            other => return other,
        };
        if hints.is_empty() {
            return policy;
        }
        ToolCallPolicy::Object(ToolCallObject {
            policy: ToolCallKind::Strip,
            request: Some(request),
            response: Some(response),
            tools: Some(hints),
        })
    }
}

/// toml's errors span several lines (a source excerpt); keep the message
/// and the position on one.
fn one_line(message: &str) -> String {
    let mut lines = message.lines().map(str::trim).filter(|l| !l.is_empty());
    let head = lines.next().unwrap_or("invalid TOML").to_owned();
    match lines.next_back() {
        Some(last) if last != head => format!("{head}: {last}"),
        _ => head,
    }
}
