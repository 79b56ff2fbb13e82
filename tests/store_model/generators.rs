//! Proptest strategies for ids, values, deltas and operations, the store options and
//! the proptest config.

use crate::common::env::env_u64;
use agentwal::{AgentDelta, Message, Options, Role, SyncMode, Value};
use proptest::prelude::*;
use proptest::sample::select;

use crate::ops::{BLOBS, CALLS, Cut, Expected, Keep, META_KEYS, Op, Seq, TASKS, TOOLS, VAR_KEYS};

// ---------------------------------------------------------------------------------------
// Strategies

pub(crate) fn task() -> impl Strategy<Value = &'static str> {
    prop_oneof![8 => select(&TASKS[..4]), 1 => select(&TASKS[4..])]
}

/// Targets of forks and deletions.
fn fork_target() -> impl Strategy<Value = &'static str> {
    prop_oneof![1 => select(&TASKS[..4]), 2 => select(&TASKS[4..])]
}

/// Mostly seqs that exist; sometimes 0 or past the latest.
pub(crate) fn seq() -> impl Strategy<Value = Seq> {
    prop_oneof![
        3 => any::<u8>().prop_map(Seq::Existing),
        1 => (0u64..8).prop_map(Seq::Exact),
    ]
}

/// A large value: metadata replaces rather than accumulates, so it fills segments
/// without growing states without bound. (A string: its `Debug` stays on one line.)
fn big_value() -> impl Strategy<Value = Value> {
    (100usize..500, select(vec!['m', 'n'])).prop_map(|(n, c)| Value::Str(c.to_string().repeat(n)))
}

fn leaf_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-3i64..4).prop_map(Value::Int),
        (-4i32..4).prop_map(|i| Value::Float(f64::from(i) / 2.0)),
        "[a-c]{0,3}".prop_map(Value::Str),
        prop::collection::vec(any::<u8>(), 0..3).prop_map(Value::Bytes),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => leaf_value(),
        1 => prop::collection::vec(leaf_value(), 0..3).prop_map(Value::List),
        1 => prop::collection::btree_map(select(&VAR_KEYS[..]), leaf_value(), 0..2)
            .prop_map(|m| Value::Map(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
    ]
}

pub(crate) fn message() -> impl Strategy<Value = Message> {
    let role = select(vec![Role::System, Role::User, Role::Assistant, Role::Tool]);
    let call = (select(&CALLS[..]), select(&TOOLS[..]), leaf_value());
    (
        role,
        "[a-z ]{0,6}",
        prop::option::weighted(0.3, call),
        prop::option::weighted(0.2, leaf_value()),
    )
        .prop_map(|(role, content, call, data)| {
            let mut m = Message {
                role,
                content,
                data,
                ..Message::default()
            };
            if let Some((id, name, args)) = call {
                if role == Role::Tool {
                    m.tool_call_id = Some(id.to_string());
                } else {
                    m = m.with_tool_call(id, name, args);
                }
            }
            m
        })
}

pub(crate) fn delta() -> impl Strategy<Value = AgentDelta> {
    (
        prop::collection::vec(message(), 0..3),
        prop::collection::btree_map(select(&VAR_KEYS[..]), value(), 0..3),
        prop::collection::vec(select(&VAR_KEYS[..]), 0..2),
        prop::collection::btree_map(
            select(&META_KEYS[..]),
            prop_oneof![leaf_value(), big_value()],
            0..2,
        ),
    )
        .prop_map(|(messages, set, unset, metadata)| AgentDelta {
            messages,
            set: set.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            unset: unset.into_iter().map(String::from).collect(),
            metadata: metadata
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        })
}

pub(crate) fn expected() -> impl Strategy<Value = Expected> {
    prop_oneof![
        3 => Just(Expected::Latest),
        1 => Just(Expected::Above),
        1 => Just(Expected::Below),
        1 => Just(Expected::Zero),
    ]
}

pub(crate) fn op() -> impl Strategy<Value = Op> {
    let call = select(&CALLS[..]);
    let blob = select(&BLOBS[..]);
    prop_oneof![
        8 => (task(), delta()).prop_map(|(task, delta)| Op::Commit { task, delta }),
        4 => (task(), expected(), delta())
            .prop_map(|(task, expected, delta)| Op::CommitIf { task, expected, delta }),
        3 => (task(), seq()).prop_map(|(task, seq)| Op::Load { task, seq }),
        2 => task().prop_map(|task| Op::LoadLatest { task }),
        1 => (task(), 0usize..3).prop_map(|(task, rem)| Op::LoadLatestMatching { task, rem }),
        4 => (task(), seq(), fork_target())
            .prop_map(|(task, seq, new_task)| Op::Fork { task, seq, new_task }),
        2 => fork_target().prop_map(|task| Op::Delete { task }),
        4 => (task(), call.clone(), select(&TOOLS[..]), blob.clone())
            .prop_map(|(task, call, tool, args)| Op::BeginCall { task, call, tool, args }),
        4 => (task(), call.clone(), blob)
            .prop_map(|(task, call, result)| Op::FinishCall { task, call, result }),
        1 => (task(), call).prop_map(|(task, call)| Op::CallResult { task, call }),
        1 => task().prop_map(|task| Op::PendingCalls { task }),
        1 => task().prop_map(|task| Op::ListCheckpoints { task }),
        1 => Just(Op::Tasks),
        1 => Just(Op::Stats),
        3 => (
            prop::option::weighted(0.5, (any::<u16>(), any::<bool>())
                .prop_map(|(at, zero_fill)| Cut { at, zero_fill })),
            prop::option::weighted(0.2, keep().prop_map(Keep)),
        )
            .prop_map(|(cut, keep)| Op::Reopen { cut, keep }),
        1 => prop::option::weighted(0.3, keep().prop_map(Keep))
            .prop_map(|keep| Op::ReadOnlyView { keep }),
        1 => Just(Op::Compact),
    ]
}

/// Operations for long histories of two tasks under retention: mostly commits, with
/// compactions, reopens that change `keep_checkpoints`, and read-only views with another
/// one. A compaction leaves a task's history "headless" when the active segment holds
/// deltas older than its fold base (they stay, the older records go); a reopen indexes
/// them again and a larger `keep` must then stop at the first snapshot.
pub(crate) fn retention_op() -> impl Strategy<Value = Op> {
    let task = || select(&TASKS[..2]);
    prop_oneof![
        12 => (task(), delta()).prop_map(|(task, delta)| Op::Commit { task, delta }),
        2 => (task(), seq()).prop_map(|(task, seq)| Op::Load { task, seq }),
        1 => (task(), 0usize..3).prop_map(|(task, rem)| Op::LoadLatestMatching { task, rem }),
        2 => (task(), seq(), fork_target())
            .prop_map(|(task, seq, new_task)| Op::Fork { task, seq, new_task }),
        1 => fork_target().prop_map(|task| Op::Delete { task }),
        1 => (task(), select(&CALLS[..]), select(&BLOBS[..]))
            .prop_map(|(task, call, args)| Op::BeginCall { task, call, tool: "search", args }),
        // Finished calls for retention to prune, often split across segments by the large
        // blobs.
        1 => (task(), select(&CALLS[..]), select(&BLOBS[..]))
            .prop_map(|(task, call, result)| Op::FinishCall { task, call, result }),
        1 => Just(Op::Stats),
        3 => Just(Op::Compact),
        3 => (
            prop::option::weighted(0.2, (any::<u16>(), any::<bool>())
                .prop_map(|(at, zero_fill)| Cut { at, zero_fill })),
            prop::option::weighted(0.5, keep().prop_map(Keep)),
        )
            .prop_map(|(cut, keep)| Op::Reopen { cut, keep }),
        2 => prop::option::weighted(0.8, keep().prop_map(Keep))
            .prop_map(|keep| Op::ReadOnlyView { keep }),
    ]
}

/// `keep_checkpoints`: mostly a small limit, so retention drops checkpoints constantly.
pub(crate) fn keep() -> impl Strategy<Value = Option<u32>> {
    prop_oneof![1 => Just(None), 3 => (1u32..=4).prop_map(Some)]
}

pub(crate) fn options(
    sync: SyncMode,
    snapshot_every: u32,
    keep_checkpoints: Option<u32>,
    cache_bytes: u64,
) -> Options {
    Options {
        sync,
        segment_bytes: 4096,
        snapshot_every,
        keep_checkpoints,
        cache_bytes,
        // Compaction runs only where `Op::Compact` says: a background pass would change
        // the record counts at times the model cannot know.
        auto_compact: false,
        ..Options::default()
    }
}

/// `cases` unless `PROPTEST_CASES` says otherwise (an explicit `cases` in a config
/// would otherwise shadow the variable).
pub(crate) fn config(cases: u32) -> ProptestConfig {
    let cases = env_u64("PROPTEST_CASES").map_or(cases, |c| {
        u32::try_from(c).expect("PROPTEST_CASES fits in a u32")
    });
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}
