//! The [`State`] trait and the ready-made [`AgentState`] for LLM agents.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::error::{Error, Result};
use crate::value::Value;

/// A task's state, rebuilt by folding deltas (and snapshots) stored in the log.
///
/// Two requirements, because the store keeps each task's latest state in memory and
/// snapshots it from there (see `Options::cache_bytes`): encoding a state or a delta and
/// decoding it again must give an equal value (no `#[serde(skip)]` fields that `apply`
/// reads, no lossy serde impls), or a state served from memory could differ from the fold
/// of the log; and a loaded state is shared (`Checkpoint::state` is an `Arc<S>`), so
/// interior mutability (a `Mutex`, atomics) in `S` would let a caller change the cached
/// copy that the next snapshot writes.
///
/// ```
/// use agentwal::State;
/// #[derive(Default, Clone, serde::Serialize, serde::Deserialize)]
/// struct Counter { total: i64 }
/// impl State for Counter {
///     type Delta = i64;
///     fn apply(&mut self, delta: &i64) { self.total += delta; }
/// }
/// ```
pub trait State: Default + Clone + Send + Sync + Serialize + DeserializeOwned + 'static {
    /// What one commit changes.
    type Delta: Clone + Send + Sync + Serialize + DeserializeOwned + 'static;

    /// Schema version, stored with every snapshot and delta. Bump it when the encoding of
    /// `Self` or `Self::Delta` changes, and implement the `migrate_*` hooks.
    const VERSION: u32 = 1;

    /// Folds one delta into the state.
    fn apply(&mut self, delta: &Self::Delta);

    /// Folds a delta the store no longer needs (one decoded from the log, or one given to
    /// [`Store::commit_owned`](crate::Store::commit_owned)). Must leave the state exactly
    /// as [`apply`](Self::apply) would; override it to move the delta's contents into the
    /// state instead of copying them. The default calls `apply`.
    fn apply_owned(&mut self, delta: Self::Delta) {
        self.apply(&delta);
    }

    /// Decodes a snapshot written under schema version `found` (≠ `VERSION`).
    /// The default refuses with [`Error::SchemaMismatch`].
    fn migrate_state(found: u32, bytes: &[u8]) -> Result<Self> {
        let _ = bytes;
        Err(Error::SchemaMismatch {
            found,
            expected: Self::VERSION,
        })
    }

    /// Decodes a delta written under schema version `found` (≠ `VERSION`).
    /// The default refuses with [`Error::SchemaMismatch`].
    fn migrate_delta(found: u32, bytes: &[u8]) -> Result<Self::Delta> {
        let _ = bytes;
        Err(Error::SchemaMismatch {
            found,
            expected: Self::VERSION,
        })
    }
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Role {
    /// System prompt.
    System,
    /// The user.
    #[default]
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

/// A tool call requested by the model.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ToolCall {
    /// Call id (matches the tool message's `tool_call_id`).
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments.
    pub args: Value,
}

/// One message of an agent's conversation: text, tool calls, tool results or data.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Message {
    /// Author.
    pub role: Role,
    /// Text content.
    pub content: String,
    /// Tool calls the assistant asked for.
    pub tool_calls: Vec<ToolCall>,
    /// For `Role::Tool`: the call this result answers.
    pub tool_call_id: Option<String>,
    /// Structured data attached to the message.
    pub data: Option<Value>,
}

impl Message {
    fn new(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: content.into(),
            ..Message::default()
        }
    }
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Message::new(Role::System, content)
    }
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Message::new(Role::User, content)
    }
    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Message::new(Role::Assistant, content)
    }
    /// A tool result answering `call_id`.
    pub fn tool(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Message {
            tool_call_id: Some(call_id.into()),
            ..Message::new(Role::Tool, content)
        }
    }
    /// Adds a tool call (builder style).
    pub fn with_tool_call(
        mut self,
        id: impl Into<String>,
        name: impl Into<String>,
        args: impl Into<Value>,
    ) -> Self {
        self.tool_calls.push(ToolCall {
            id: id.into(),
            name: name.into(),
            args: args.into(),
        });
        self
    }
}

/// The ready-made state of an LLM agent: its messages, variables and metadata.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AgentState {
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// The agent's variables (phase, step, scratch values, ...).
    #[serde(deserialize_with = "crate::sorted_map::deserialize")]
    pub vars: BTreeMap<String, Value>,
    /// Run metadata (timings, retries, model names, ...).
    #[serde(deserialize_with = "crate::sorted_map::deserialize")]
    pub metadata: BTreeMap<String, Value>,
}

/// What one step of an [`AgentState`] changes.
///
/// ```
/// use agentwal::{AgentDelta, AgentState, Message, State};
/// let delta = AgentDelta::default()
///     .message(Message::user("hi"))
///     .set("phase", "greeting");
/// let mut state = AgentState::default();
/// state.apply(&delta);
/// assert_eq!(state.messages.len(), 1);
/// ```
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AgentDelta {
    /// Messages appended.
    pub messages: Vec<Message>,
    /// Variables inserted or replaced.
    #[serde(deserialize_with = "crate::sorted_map::deserialize")]
    pub set: BTreeMap<String, Value>,
    /// Variables removed (after `set` is applied).
    pub unset: Vec<String>,
    /// Metadata entries merged in.
    #[serde(deserialize_with = "crate::sorted_map::deserialize")]
    pub metadata: BTreeMap<String, Value>,
}

impl AgentDelta {
    /// Appends a message (builder style).
    pub fn message(mut self, m: Message) -> Self {
        self.messages.push(m);
        self
    }
    /// Sets a variable (builder style).
    pub fn set(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.set.insert(key.into(), value.into());
        self
    }
    /// Removes a variable (builder style).
    pub fn unset(mut self, key: impl Into<String>) -> Self {
        self.unset.push(key.into());
        self
    }
    /// Merges a metadata entry (builder style).
    pub fn meta(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }
}

impl State for AgentState {
    type Delta = AgentDelta;

    fn apply(&mut self, delta: &AgentDelta) {
        self.messages.extend(delta.messages.iter().cloned());
        for (k, v) in &delta.set {
            self.vars.insert(k.clone(), v.clone());
        }
        for k in &delta.unset {
            self.vars.remove(k);
        }
        for (k, v) in &delta.metadata {
            self.metadata.insert(k.clone(), v.clone());
        }
    }

    fn apply_owned(&mut self, delta: AgentDelta) {
        self.messages.extend(delta.messages);
        self.vars.extend(delta.set);
        for k in &delta.unset {
            self.vars.remove(k);
        }
        self.metadata.extend(delta.metadata);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A delta that sets, unsets and overwrites: an owned fold must match a lent one.
    fn delta(step: u64) -> AgentDelta {
        AgentDelta::default()
            .message(Message::user(format!("step {step}")))
            .message(Message {
                data: Some(Value::from(step as i64)),
                ..Message::assistant("ok")
            })
            .set("phase", format!("p{}", step % 3))
            .set(format!("scratch-{}", step % 4), step as i64)
            .unset(format!("scratch-{}", (step + 1) % 4))
            .unset("never-set")
            .set("set-then-unset", step as i64)
            .unset("set-then-unset")
            .meta("model", format!("m{}", step % 2))
    }

    #[test]
    fn an_owned_delta_folds_to_what_a_lent_one_does() {
        let (mut lent, mut owned) = (AgentState::default(), AgentState::default());
        for step in 0..40 {
            let d = delta(step);
            lent.apply(&d);
            owned.apply_owned(d);
            assert_eq!(lent, owned, "after step {step}");
        }
        assert_eq!(lent.messages.len(), 80);
    }
}
