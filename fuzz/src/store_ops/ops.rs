//! The input: the operations an arbitrary byte string decodes to.

use agentwal::{AgentDelta, Message};
use arbitrary::Arbitrary;

use super::VAR_KEYS;

#[derive(Debug, Arbitrary)]
pub(crate) struct Input {
    pub(crate) snapshot_every: u8,
    pub(crate) keep: Option<u8>,
    pub(crate) big_segments: bool,
    pub(crate) ops: Vec<Op>,
}

#[derive(Debug, Clone, Arbitrary)]
pub(crate) enum Op {
    Commit {
        task: u8,
        delta: DeltaSpec,
    },
    CommitIf {
        task: u8,
        expected: ExpectedSpec,
        delta: DeltaSpec,
    },
    /// Forks `task` at `seq % (latest + 2)` (so 0 and one past the latest happen too).
    Fork {
        task: u8,
        seq: u8,
        new_task: u8,
    },
    Delete {
        task: u8,
    },
    BeginCall {
        task: u8,
        call: u8,
        tool: u8,
        args: u8,
    },
    FinishCall {
        task: u8,
        call: u8,
        result: u8,
    },
    Reopen,
    Crash(TailDamage),
    /// A forced compaction pass. The run alternates its two shapes (so that inputs decode
    /// as before): the first, third, ... leave the active segment as a background pass
    /// does (`compact_sealed_segments`), the others are `Store::compact`, which seals it
    /// first and so drops every pruned call's records.
    Compact,
    ReadOnlyView,
}

#[derive(Debug, Clone, Copy, Arbitrary)]
pub(crate) enum ExpectedSpec {
    Latest,
    Above,
    Below,
    Exact(u8),
}

#[derive(Debug, Clone, Arbitrary)]
pub(crate) struct DeltaSpec {
    pub(crate) message: Option<(u8, u8)>,
    pub(crate) set: Option<(u8, i16)>,
    pub(crate) unset: Option<u8>,
    /// A big message: `(n % 16 + 1) * 512` bytes.
    pub(crate) big: Option<u8>,
}

#[derive(Debug, Clone, Arbitrary)]
pub(crate) enum TailDamage {
    /// Only the drop.
    Nothing,
    /// Garbage written `gap` bytes past the last record.
    Garbage { gap: u8, bytes: Vec<u8> },
    /// The file cut somewhere in the zeros past the last record.
    CutZeros { keep: u16 },
}

pub(crate) fn pick<T: Copy>(items: &[T], i: u8) -> T {
    items[usize::from(i) % items.len()]
}

impl DeltaSpec {
    pub(crate) fn delta(&self) -> AgentDelta {
        let mut d = AgentDelta::default();
        if let Some((role, len)) = self.message {
            let text = "m".repeat(usize::from(len % 24));
            d = d.message(match role % 4 {
                0 => Message::user(text),
                1 => Message::assistant(text),
                2 => Message::system(text),
                _ => Message::tool("k1", text),
            });
        }
        if let Some((key, value)) = self.set {
            d = d.set(pick(&VAR_KEYS, key), i64::from(value));
        }
        if let Some(key) = self.unset {
            d = d.unset(pick(&VAR_KEYS, key));
        }
        if let Some(n) = self.big {
            let text = char::from(b'a' + n % 26).to_string();
            d = d.message(Message::user(text.repeat((usize::from(n) % 16 + 1) * 512)));
        }
        d
    }
}
