//! `decode_state`: decoding one postcard-encoded `AgentState` shaped like the LangGraph
//! saver's (a few thousand variables, each a list of strings and a byte string, some of
//! them maps), side by side with the same bytes decoded by a copy of the types whose maps
//! decode entry by entry (serde's derived code, what agentwal did before
//! `src/sorted_map.rs`). Throughput in encoded bytes.

use std::collections::BTreeMap;

use agentwal::{AgentState, Value};
use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput};
use serde::Deserialize;

use crate::config;

/// Variables of the decoded state, and bytes of each one's byte string.
const VARS: usize = 2200;
const BLOB_BYTES: usize = 400;

/// `agentwal::Value` with derived map decoding.
#[derive(Deserialize)]
#[allow(dead_code)] // decoded only
enum DerivedValue {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Bytes(#[serde(with = "serde_bytes")] Vec<u8>),
    List(Vec<DerivedValue>),
    Map(BTreeMap<String, DerivedValue>),
}

/// `agentwal::AgentState` with derived map decoding (messages as `Value`s would differ:
/// the state decoded here has none).
#[derive(Deserialize)]
#[allow(dead_code)] // decoded only
struct DerivedState {
    messages: Vec<()>,
    vars: BTreeMap<String, DerivedValue>,
    metadata: BTreeMap<String, DerivedValue>,
}

/// The saver's kind of state: blob and write entries keyed as it keys them.
fn state() -> AgentState {
    let mut state = AgentState::default();
    for i in 0..VARS {
        let bytes: Vec<u8> = (0..BLOB_BYTES).map(|b| (b * 31 + i) as u8).collect();
        let mut value = vec![
            Value::Str(format!("task-{:08x}", i * 7919)),
            Value::Str("messages".into()),
            Value::Str("msgpack".into()),
            Value::Bytes(bytes),
        ];
        if i % 10 == 0 {
            let meta = (0..8).map(|k| (format!("key{k}"), Value::Int(k)));
            value.push(Value::Map(meta.collect()));
        }
        let key = format!("b\u{0}{:032x}\u{0}messages\u{0}{:08}", i * 104_729, i);
        state.vars.insert(key, Value::List(value));
    }
    state
}

pub(crate) fn decode_state(c: &mut Criterion) {
    let cfg = config();
    let encoded = postcard::to_allocvec(&state()).expect("encode the state");
    let check: AgentState = postcard::from_bytes(&encoded).expect("decode the state");
    assert_eq!(check, state());
    let mut group = cfg.group(c, "decode_state");
    group.throughput(Throughput::Bytes(encoded.len() as u64));
    let size = format!("{}KiB", encoded.len() >> 10);
    group.bench_function(BenchmarkId::new("derived", &size), |b| {
        b.iter(|| postcard::from_bytes::<DerivedState>(black_box(&encoded)).expect("decode"))
    });
    group.bench_function(BenchmarkId::new("agentwal", &size), |b| {
        b.iter(|| postcard::from_bytes::<AgentState>(black_box(&encoded)).expect("decode"))
    });
    group.finish();
}
