//! The record codec and the commit path.

use std::hint::black_box;
use std::time::{Duration, Instant};

use crate::common::text;
use agentwal::log::SyncMode;
use agentwal::log::record::{self, RecordHeader};
use agentwal::log::{FLAG_BATCH_END, FLAG_BATCH_START};
use agentwal::{AgentDelta, Message, Options, Store};
use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};

use crate::{
    COMMIT_PAYLOADS, COMMIT_STORE_BYTES, COMMITS_PER_TASK, Config, RECORD_PAYLOADS, SALT, config,
    encoded_len, nosync,
};

// ---------------------------------------------------------------------------------------

pub(crate) fn record_codec(c: &mut Criterion) {
    let cfg = config();
    let mut group = cfg.group(c, "record");
    for (len, name) in RECORD_PAYLOADS {
        let payload = text(len as u64, len).into_bytes();
        let header = RecordHeader {
            payload_len: len as u32,
            lsn: 1 << 20,
            kind: 1,
            flags: FLAG_BATCH_START | FLAG_BATCH_END,
        };
        group.throughput(Throughput::Bytes(len as u64));
        let mut out = Vec::with_capacity(header.record_bytes() as usize);
        group.bench_function(BenchmarkId::new("encode", name), |b| {
            b.iter(|| {
                out.clear();
                let payload = black_box(payload.as_slice());
                let crc = record::payload_crc(payload);
                record::encode_into(&mut out, SALT, black_box(&header), crc, payload);
                black_box(out.len())
            });
        });
        // Encoded here too: a filter may have skipped the encode benchmark.
        let mut encoded = Vec::new();
        record::encode_into(
            &mut encoded,
            SALT,
            &header,
            record::payload_crc(&payload),
            &payload,
        );
        let (decoded, _) = record::decode(&encoded, SALT).expect("decode the encoded record");
        assert_eq!(decoded, header);
        group.bench_function(BenchmarkId::new("decode", name), |b| {
            b.iter(|| {
                let (h, p) = record::decode(black_box(&encoded), SALT).expect("decode");
                black_box((h.lsn, p.len()))
            });
        });
    }
    group.finish();
}

// ---------------------------------------------------------------------------------------

/// `iters` commits of `delta`, tasks of `COMMITS_PER_TASK` checkpoints; a fresh store every
/// `COMMIT_STORE_BYTES` of deltas (created, closed and deleted outside the timing).
fn timed_commits(
    cfg: &Config,
    options: Options,
    delta: &AgentDelta,
    delta_bytes: u64,
    iters: u64,
) -> Duration {
    let per_store = (COMMIT_STORE_BYTES / delta_bytes).max(1);
    let names: Vec<String> = (0..per_store.min(iters).div_ceil(COMMITS_PER_TASK))
        .map(|t| format!("task-{t}"))
        .collect();
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let n = (iters - done).min(per_store);
        let dir = cfg.tempdir("bench-micro-commit-");
        let store: Store = Store::open_with(dir.path(), options).expect("open the store");
        let started = Instant::now();
        for i in 0..n {
            let task = &names[(i / COMMITS_PER_TASK) as usize];
            black_box(store.commit(task, black_box(delta)).expect("commit"));
        }
        total += started.elapsed();
        done += n;
        drop(store);
        drop(dir);
    }
    total
}

pub(crate) fn commit(c: &mut Criterion) {
    let cfg = config();
    let mut group = cfg.group(c, "commit");
    for (len, name) in COMMIT_PAYLOADS {
        let delta = AgentDelta::default().message(Message::tool("call-0001", text(7, len)));
        let bytes = encoded_len(&delta);
        group.throughput(Throughput::Bytes(bytes));
        group.bench_function(BenchmarkId::new("nosync", name), |b| {
            b.iter_custom(|iters| timed_commits(&cfg, nosync(), &delta, bytes, iters));
        });
    }
    let (len, name) = COMMIT_PAYLOADS[1];
    let delta = AgentDelta::default().message(Message::tool("call-0001", text(7, len)));
    let bytes = encoded_len(&delta);
    let durable = Options {
        sync: SyncMode::Always,
        auto_compact: false,
        ..Options::default()
    };
    group
        .throughput(Throughput::Bytes(bytes))
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10);
    group.bench_function(BenchmarkId::new("durable", name), |b| {
        b.iter_custom(|iters| timed_commits(&cfg, durable, &delta, bytes, iters));
    });
    group.finish();
}
