//! The operations a case runs, their vocabulary (tasks, calls, blobs) and the outcomes
//! the model expects of them.

use agentwal::{AgentDelta, Error};

/// Task ids: the first four take most operations, so operations collide; "f" and "g" are
/// mostly fork targets and deleted often, so that many forks find their target free.
pub(crate) static TASKS: [&str; 6] = ["a", "b", "c", "d", "f", "g"];

pub(crate) static CALLS: [&str; 3] = ["k1", "k2", "k3"];

pub(crate) static TOOLS: [&str; 2] = ["search", "write"];

/// Arguments and results: few, so repeats with equal and with different bytes both happen;
/// half are large so that tool calls fill segments (and seal them, for compaction)
/// without growing states.
pub(crate) static BLOBS: [Blob; 4] = [
    Blob(b""),
    Blob(b"x"),
    Blob(&[b'y'; 1200]),
    Blob(&[b'z'; 1200]),
];

/// Tool-call arguments or a result; `Debug` stays short for the large ones.
#[derive(Clone, Copy, PartialEq)]
pub(crate) struct Blob(pub(crate) &'static [u8]);

impl std::fmt::Debug for Blob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            [b, rest @ ..] if rest.len() > 8 => write!(f, "[b'{}'; {}]", *b as char, self.0.len()),
            bytes => write!(f, "b{:?}", String::from_utf8_lossy(bytes)),
        }
    }
}

pub(crate) static VAR_KEYS: [&str; 4] = ["phase", "step", "n", "scratch"];

pub(crate) static META_KEYS: [&str; 2] = ["model", "retries"];

// ---------------------------------------------------------------------------------------
// Operations

/// What `commit_if` is told the latest seq is.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Expected {
    /// The true latest seq.
    Latest,
    /// One more than the latest.
    Above,
    /// One less than the latest (1 if the task has none).
    Below,
    /// 0: "the task must not exist".
    Zero,
}

/// A seq for `load` or `fork`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Seq {
    /// This seq.
    Exact(u64),
    /// One of the task's seqs when the operation runs, `1 + n % latest` (`n` if the task
    /// has none), so that most picks exist however long the task's history is.
    Existing(u8),
}

impl Seq {
    pub(crate) fn resolve(self, latest: u64) -> u64 {
        match self {
            Seq::Exact(seq) => seq,
            Seq::Existing(n) if latest == 0 => u64::from(n),
            Seq::Existing(n) => 1 + u64::from(n) % latest,
        }
    }
}

/// Where `Reopen` cuts the last record: `at` picks the offset inside it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cut {
    pub(crate) at: u16,
    /// Zero the bytes from the cut on (a preallocated file) instead of truncating the file.
    pub(crate) zero_fill: bool,
}

#[derive(Debug, Clone)]
pub(crate) enum Op {
    Commit {
        task: &'static str,
        delta: AgentDelta,
    },
    CommitIf {
        task: &'static str,
        expected: Expected,
        delta: AgentDelta,
    },
    Load {
        task: &'static str,
        seq: Seq,
    },
    LoadLatest {
        task: &'static str,
    },
    /// `load_latest_matching` accepting states with `(messages + vars) % 3 == rem`.
    LoadLatestMatching {
        task: &'static str,
        rem: usize,
    },
    Fork {
        task: &'static str,
        seq: Seq,
        new_task: &'static str,
    },
    Delete {
        task: &'static str,
    },
    BeginCall {
        task: &'static str,
        call: &'static str,
        tool: &'static str,
        args: Blob,
    },
    FinishCall {
        task: &'static str,
        call: &'static str,
        result: Blob,
    },
    CallResult {
        task: &'static str,
        call: &'static str,
    },
    PendingCalls {
        task: &'static str,
    },
    ListCheckpoints {
        task: &'static str,
    },
    Tasks,
    Stats,
    /// Reopens the writer, with `keep_checkpoints` changed if `keep` says so.
    Reopen {
        cut: Option<Cut>,
        keep: Option<Keep>,
    },
    /// A forced compaction pass: no answer may change, but for the calls retention prunes.
    Compact,
    /// Opens a read-only handle next to the writer (with the writer's retention, or with
    /// `keep`), sweeps it, and checks it refuses writes.
    ReadOnlyView {
        keep: Option<Keep>,
    },
}

/// A `keep_checkpoints` setting.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Keep(pub(crate) Option<u32>);

// ---------------------------------------------------------------------------------------
// Errors, compared by variant and fields

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fail {
    Conflict {
        task: String,
        expected: u64,
        actual: u64,
    },
    UnknownSeq {
        task: String,
        seq: u64,
        latest: u64,
    },
    UnknownTask(String),
    TaskExists(String),
    /// The message is for humans; only the variant is compared.
    InvalidArgument,
    ReadOnly,
}

pub(crate) type Outcome<T> = Result<T, Fail>;

pub(crate) fn classify(e: Error) -> Fail {
    match e {
        Error::Conflict {
            task,
            expected,
            actual,
        } => Fail::Conflict {
            task,
            expected,
            actual,
        },
        Error::UnknownSeq { task, seq, latest } => Fail::UnknownSeq { task, seq, latest },
        Error::UnknownTask { task } => Fail::UnknownTask(task),
        Error::TaskExists { task } => Fail::TaskExists(task),
        Error::InvalidArgument(_) => Fail::InvalidArgument,
        Error::ReadOnly => Fail::ReadOnly,
        other => panic!("error the model never expects: {other}"),
    }
}
