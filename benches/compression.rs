//! Which codec for format v2's record compression: ratio and speed of
//! zstd, lz4_flex and snap on the bodies a real store writes. The store under test writes
//! its bodies uncompressed (`Compression::None`), so that every candidate compresses the
//! same encoded bodies; the store's own compression (zstd level 1, docs/format.md §8) is
//! measured by the workload benchmark (`agentwal` against `agentwal-uncompressed`).
//!
//! ```text
//! cargo bench --bench compression                       # 64 tasks × 200 steps, 5 reps
//! AGENTWAL_BENCH_QUICK=1 cargo bench --bench compression  # CI smoke run: 8 × 40, 1 rep
//! AGENTWAL_COMP_TASKS=8 AGENTWAL_COMP_STEPS=50 AGENTWAL_COMP_REPS=1 cargo bench --bench compression
//! ```
//!
//! Results (written by hand from a full run's output): `bench-results/compression.md`.
//!
//! For each payload source, the agent steps are committed into a real `Store` (default
//! `Options` except `SyncMode::Never`: the sync mode changes no record, only the time it
//! takes; and `Compression::None`), the store is closed, and its log is replayed with `Log::open_with`. Every kind-1
//! record (a checkpoint) is decoded with a mirror of `CheckpointRec` (docs/format.md §8) to take
//! its body: postcard(`AgentState`) for a snapshot, postcard(`AgentDelta`) for a delta.
//! Each body is then compressed on its own (one record, one frame: what a per-record codec
//! id allows) with every candidate, timed single-threaded with reused contexts and buffers.
//!
//! Payload sources:
//! - `workload`: `benches/workload/generator.rs` (`make_delta`): the deltas the workload
//!   benchmark commits: word salad from 64 English words, UUID task ids, JSON-ish args.
//! - `common`: `benches/common::step`: the `store`/`micro` benches' step: xorshift
//!   lowercase letters, about log2(26) = 4.7 bits of entropy per byte, so a floor.
//! - `real-text` (ratio only): the repository's own `.md` and `.rs` files cut into chunks of
//!   2 KiB and 100 KiB, a check on how far the synthetic text is from prose and code.

#[allow(dead_code)]
mod common;
#[allow(dead_code)]
#[path = "workload/generator.rs"]
mod generator;

use std::io::{Read, Write};
use std::path::Path;
use std::time::Instant;

use agentwal::log::{Log, LogOptions};
use agentwal::{AgentDelta, AgentState, Compression, Options, Store, SyncMode, describe_record};
use serde::Deserialize;

/// Mirror of `src/store/codec.rs`'s `CheckpointRec` (crate-private; docs/format.md §8).
#[derive(Deserialize)]
#[allow(dead_code)]
struct CheckpointRec<'a> {
    task: &'a str,
    seq: u64,
    created_at_ms: u64,
    schema_version: u32,
    body_kind: Body,
    #[serde(borrow)]
    origin: Option<Origin<'a>>,
    #[serde(with = "serde_bytes")]
    body: &'a [u8],
}

#[derive(Deserialize, PartialEq, Eq)]
enum Body {
    Delta,
    Snapshot,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct Origin<'a> {
    task: &'a str,
    seq: u64,
}

struct Rec {
    snapshot: bool,
    payload_len: usize,
    body: Vec<u8>,
}

// ---------------------------------------------------------------------------------------
// Codecs

trait Codec {
    fn name(&self) -> String;
    /// Compresses `src` into `dst` (cleared first); the bytes a record would store,
    /// including whatever the codec needs to know the decompressed length.
    fn compress(&mut self, src: &[u8], dst: &mut Vec<u8>);
    /// Decompresses `src` (made by `compress` of `n` bytes) into `dst`.
    fn decompress(&mut self, src: &[u8], n: usize, dst: &mut Vec<u8>);
}

struct Zstd {
    label: String,
    c: zstd::bulk::Compressor<'static>,
    d: zstd::bulk::Decompressor<'static>,
}

impl Zstd {
    fn new(level: i32) -> Zstd {
        Zstd {
            label: format!("zstd {level}"),
            c: zstd::bulk::Compressor::new(level).unwrap(),
            d: zstd::bulk::Decompressor::new().unwrap(),
        }
    }
    fn with_dict(level: i32, dict: &[u8]) -> Zstd {
        Zstd {
            label: format!("zstd {level}+dict{}K", dict.len() / 1024),
            c: zstd::bulk::Compressor::with_dictionary(level, dict).unwrap(),
            d: zstd::bulk::Decompressor::with_dictionary(dict).unwrap(),
        }
    }
}

impl Codec for Zstd {
    fn name(&self) -> String {
        self.label.clone()
    }
    fn compress(&mut self, src: &[u8], dst: &mut Vec<u8>) {
        dst.clear();
        dst.reserve(zstd::zstd_safe::compress_bound(src.len()));
        // The frame header holds the content size (bulk API default); no checksum (the
        // record's CRC covers the stored bytes).
        self.c.compress_to_buffer(src, dst).unwrap();
    }
    fn decompress(&mut self, src: &[u8], n: usize, dst: &mut Vec<u8>) {
        dst.clear();
        dst.reserve(n);
        self.d.decompress_to_buffer(src, dst).unwrap();
    }
}

/// Bytes of a LEB128 varint of `n`: what a record would spend on the decompressed length
/// for a codec whose output does not carry it.
fn varint_len(n: usize) -> usize {
    let bits = usize::BITS - n.max(1).leading_zeros();
    bits.div_ceil(7) as usize
}

struct Lz4Block;

impl Codec for Lz4Block {
    fn name(&self) -> String {
        "lz4_flex block".into()
    }
    fn compress(&mut self, src: &[u8], dst: &mut Vec<u8>) {
        let k = varint_len(src.len());
        dst.clear();
        dst.resize(k + lz4_flex::block::get_maximum_output_size(src.len()), 0);
        let n = lz4_flex::block::compress_into(src, &mut dst[k..]).unwrap();
        dst.truncate(k + n);
    }
    fn decompress(&mut self, src: &[u8], n: usize, dst: &mut Vec<u8>) {
        let k = varint_len(n);
        dst.clear();
        dst.resize(n, 0);
        let got = lz4_flex::block::decompress_into(&src[k..], dst).unwrap();
        assert_eq!(got, n);
    }
}

struct Lz4Frame;

impl Codec for Lz4Frame {
    fn name(&self) -> String {
        "lz4_flex frame".into()
    }
    fn compress(&mut self, src: &[u8], dst: &mut Vec<u8>) {
        dst.clear();
        let mut enc = lz4_flex::frame::FrameEncoder::new(std::mem::take(dst));
        enc.write_all(src).unwrap();
        *dst = enc.finish().unwrap();
    }
    fn decompress(&mut self, src: &[u8], n: usize, dst: &mut Vec<u8>) {
        dst.clear();
        dst.reserve(n);
        lz4_flex::frame::FrameDecoder::new(src)
            .read_to_end(dst)
            .unwrap();
    }
}

struct Snap {
    e: snap::raw::Encoder,
    d: snap::raw::Decoder,
}

impl Codec for Snap {
    fn name(&self) -> String {
        "snap raw".into()
    }
    fn compress(&mut self, src: &[u8], dst: &mut Vec<u8>) {
        dst.clear();
        dst.resize(snap::raw::max_compress_len(src.len()), 0);
        let n = self.e.compress(src, dst).unwrap();
        dst.truncate(n);
    }
    fn decompress(&mut self, src: &[u8], n: usize, dst: &mut Vec<u8>) {
        dst.clear();
        dst.resize(n, 0);
        let got = self.d.decompress(src, dst).unwrap();
        assert_eq!(got, n);
    }
}

fn codecs(dict: Option<&[u8]>) -> Vec<Box<dyn Codec>> {
    let mut v: Vec<Box<dyn Codec>> = vec![
        Box::new(Zstd::new(-1)),
        Box::new(Zstd::new(1)),
        Box::new(Zstd::new(3)),
        Box::new(Zstd::new(6)),
    ];
    if let Some(d) = dict {
        v.push(Box::new(Zstd::with_dict(1, d)));
        v.push(Box::new(Zstd::with_dict(3, d)));
    }
    v.push(Box::new(Lz4Block));
    v.push(Box::new(Lz4Frame));
    v.push(Box::new(Snap {
        e: snap::raw::Encoder::new(),
        d: snap::raw::Decoder::new(),
    }));
    v
}

// ---------------------------------------------------------------------------------------
// Payloads

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Commits `tasks × steps` steps (round-robin over tasks, like concurrent tasks), then
/// replays the log: the checkpoint records, and the log's bytes (headers + payloads).
fn store_records(
    dir: &Path,
    tasks: usize,
    steps: usize,
    task_id: impl Fn(usize) -> String,
    step: impl Fn(usize, usize) -> AgentDelta,
) -> (Vec<Rec>, u64, f64) {
    let options = Options {
        sync: SyncMode::Never,
        // The candidates compress the encoded bodies (the mirror reads tags 0 and 1 only).
        compression: Compression::None,
        ..Options::default()
    };
    let ids: Vec<String> = (0..tasks).map(&task_id).collect();
    let t0 = Instant::now();
    {
        let store: Store<AgentState> = Store::open_with(dir, options).expect("open store");
        for s in 0..steps {
            for (t, id) in ids.iter().enumerate() {
                store.commit(id, &step(t, s)).expect("commit");
            }
        }
    }
    let commit_s = t0.elapsed().as_secs_f64();
    let mut recs = Vec::new();
    let mut log_bytes = 0u64;
    let log = Log::open_with(dir, LogOptions::default(), |rec| {
        log_bytes += 20 + rec.payload.len() as u64;
        if rec.kind == 1 {
            let c: CheckpointRec = postcard::from_bytes(rec.payload).expect("checkpoint");
            let snapshot = c.body_kind == Body::Snapshot;
            let kind = describe_record(&rec).kind;
            assert_eq!(kind, if snapshot { "snapshot" } else { "delta" });
            recs.push(Rec {
                snapshot,
                payload_len: rec.payload.len(),
                body: c.body.to_vec(),
            });
        }
        Ok(())
    })
    .expect("replay");
    drop(log);
    (recs, log_bytes, commit_s)
}

// ---------------------------------------------------------------------------------------
// Measuring

const BUCKETS: [(&str, usize, usize); 3] = [
    ("< 1 KiB", 0, 1024),
    ("1–16 KiB", 1024, 16 * 1024),
    ("> 16 KiB", 16 * 1024, usize::MAX),
];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

struct ClassResult {
    codec: String,
    bytes_in: u64,
    bytes_out: u64,
    buckets: [(u64, u64); 3],
    comp_mbs: f64,
    decomp_mbs: f64,
    /// Seconds to compress the whole class once (median).
    comp_s: f64,
}

fn measure_class(codec: &mut dyn Codec, bodies: &[&[u8]], reps: usize) -> ClassResult {
    let mut out = Vec::new();
    let mut compressed: Vec<Vec<u8>> = Vec::with_capacity(bodies.len());
    let mut buckets = [(0u64, 0u64); 3];
    let (mut bytes_in, mut bytes_out) = (0u64, 0u64);
    for b in bodies {
        codec.compress(b, &mut out);
        let mut back = Vec::new();
        codec.decompress(&out, b.len(), &mut back);
        assert_eq!(&back[..], *b, "{} round trip", codec.name());
        bytes_in += b.len() as u64;
        bytes_out += out.len() as u64;
        let k = BUCKETS
            .iter()
            .position(|&(_, lo, hi)| b.len() >= lo && b.len() < hi)
            .unwrap();
        buckets[k].0 += b.len() as u64;
        buckets[k].1 += out.len() as u64;
        compressed.push(out.clone());
    }
    let mut ct = Vec::new();
    let mut dt = Vec::new();
    let mut back = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        for b in bodies {
            codec.compress(b, &mut out);
            std::hint::black_box(&out);
        }
        ct.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        for (c, b) in compressed.iter().zip(bodies) {
            codec.decompress(c, b.len(), &mut back);
            std::hint::black_box(&back);
        }
        dt.push(t.elapsed().as_secs_f64());
    }
    let (cs, ds) = (median(ct), median(dt));
    ClassResult {
        codec: codec.name(),
        bytes_in,
        bytes_out,
        buckets,
        comp_mbs: bytes_in as f64 / cs / 1e6,
        decomp_mbs: bytes_in as f64 / ds / 1e6,
        comp_s: cs,
    }
}

/// Median per-call µs of compressing and decompressing one body.
fn latency(codec: &mut dyn Codec, body: &[u8], iters: usize, reps: usize) -> (f64, f64) {
    let mut out = Vec::new();
    let mut back = Vec::new();
    codec.compress(body, &mut out);
    let (mut c, mut d) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let t = Instant::now();
        for _ in 0..iters {
            codec.compress(body, &mut out);
            std::hint::black_box(&out);
        }
        c.push(t.elapsed().as_secs_f64() * 1e6 / iters as f64);
        let t = Instant::now();
        for _ in 0..iters {
            codec.decompress(&out, body.len(), &mut back);
            std::hint::black_box(&back);
        }
        d.push(t.elapsed().as_secs_f64() * 1e6 / iters as f64);
    }
    (median(c), median(d))
}

fn ratio(out: u64, inp: u64) -> String {
    if inp == 0 {
        "–".into()
    } else {
        format!("{:.3}", out as f64 / inp as f64)
    }
}

fn closest(recs: &[Rec], snapshot: bool, target: usize) -> &[u8] {
    &recs
        .iter()
        .filter(|r| r.snapshot == snapshot)
        .min_by_key(|r| r.body.len().abs_diff(target))
        .unwrap()
        .body
}

fn run_source(name: &str, recs: &[Rec], log_bytes: u64, dict: Option<&[u8]>, reps: usize) {
    let snaps: Vec<&[u8]> = recs
        .iter()
        .filter(|r| r.snapshot)
        .map(|r| &r.body[..])
        .collect();
    let deltas: Vec<&[u8]> = recs
        .iter()
        .filter(|r| !r.snapshot)
        .map(|r| &r.body[..])
        .collect();
    let sb: u64 = snaps.iter().map(|b| b.len() as u64).sum();
    let db: u64 = deltas.iter().map(|b| b.len() as u64).sum();
    let payload: u64 = recs.iter().map(|r| r.payload_len as u64).sum();
    println!("\n## source `{name}`\n");
    println!(
        "{} checkpoint records: {} snapshots ({} body bytes, {:.1} % of log bytes), {} deltas ({} body bytes); \
         log bytes (headers + payloads) {}, {:.3}× the delta bodies; checkpoint payloads {} (bodies + {} bytes of record fields).\n",
        recs.len(),
        snaps.len(),
        sb,
        100.0 * sb as f64 / log_bytes as f64,
        deltas.len(),
        db,
        log_bytes,
        log_bytes as f64 / db as f64,
        payload,
        payload - sb - db
    );
    let mut snap_res = Vec::new();
    let mut delta_res = Vec::new();
    println!(
        "| codec | class | ratio (out/in) | < 1 KiB | 1–16 KiB | > 16 KiB | compress MB/s | decompress MB/s |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for (class, bodies, res) in [
        ("snapshots", &snaps, &mut snap_res),
        ("deltas", &deltas, &mut delta_res),
    ] {
        for mut c in codecs(if class == "deltas" { dict } else { None }) {
            let r = measure_class(&mut *c, bodies, reps);
            println!(
                "| {} | {class} | {} | {} | {} | {} | {:.0} | {:.0} |",
                r.codec,
                ratio(r.bytes_out, r.bytes_in),
                ratio(r.buckets[0].1, r.buckets[0].0),
                ratio(r.buckets[1].1, r.buckets[1].0),
                ratio(r.buckets[2].1, r.buckets[2].0),
                r.comp_mbs,
                r.decomp_mbs
            );
            res.push(r);
        }
    }
    // Per-record latency.
    let d = closest(recs, false, 1900);
    let s = closest(recs, true, 100_000);
    println!(
        "\nPer-record latency (median of {reps}+ batches; µs per call): a {}-byte delta, a {}-byte snapshot.\n",
        d.len(),
        s.len()
    );
    println!(
        "| codec | delta compress | delta decompress | delta out bytes | snapshot compress | snapshot decompress | snapshot out bytes |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for mut c in codecs(dict) {
        let (dc, dd) = latency(&mut *c, d, 400, reps.max(5));
        let (sc, sd) = latency(&mut *c, s, 10, reps.max(5));
        let mut o = Vec::new();
        c.compress(d, &mut o);
        let dl = o.len();
        c.compress(s, &mut o);
        println!(
            "| {} | {dc:.2} | {dd:.2} | {dl} | {sc:.1} | {sd:.1} | {} |",
            c.name(),
            o.len()
        );
    }
    // Commit path and store size, for the same record sequence (the snapshot policy's
    // decisions held fixed; one codec byte added per compressed record).
    let commits = recs.len() as f64;
    println!(
        "\nEffect on the commit path and the log (same records; +1 codec byte per compressed record; \
         CPU: the class's whole compress time, median, over the number of commits):\n"
    );
    println!(
        "| codec | policy | CPU added per commit (mean µs) | log bytes after | after / before | log / delta bodies |"
    );
    println!("|---|---|---:|---:|---:|---:|");
    for sr in &snap_res {
        let saved_s = sr.bytes_in as i64 - sr.bytes_out as i64 - snaps.len() as i64;
        let after = log_bytes as i64 - saved_s;
        println!(
            "| {} | snapshots only | {:.2} | {} | {:.3} | {:.3} |",
            sr.codec,
            sr.comp_s * 1e6 / commits,
            after,
            after as f64 / log_bytes as f64,
            after as f64 / db as f64
        );
    }
    for dr in &delta_res {
        // Snapshots with the same codec without the dictionary.
        let base = dr.codec.split('+').next().unwrap();
        let sr = snap_res.iter().find(|s| s.codec == base).unwrap();
        let saved_s = sr.bytes_in as i64 - sr.bytes_out as i64 - snaps.len() as i64;
        let saved_d = dr.bytes_in as i64 - dr.bytes_out as i64 - deltas.len() as i64;
        let after = log_bytes as i64 - saved_s - saved_d;
        println!(
            "| {} | snapshots ({base}) + all deltas | {:.2} | {} | {:.3} | {:.3} |",
            dr.codec,
            (sr.comp_s + dr.comp_s) * 1e6 / commits,
            after,
            after as f64 / log_bytes as f64,
            after as f64 / db as f64
        );
    }
    // Small bodies: prefixes of the deltas (same content, shorter), for the threshold.
    println!(
        "\nSmall bodies (the first N bytes of every delta body; ratio includes the 1 codec byte; \
         compress µs per call, median):\n"
    );
    print!("| codec |");
    let sizes = [32usize, 64, 128, 256, 512, 1024, 1536];
    for n in sizes {
        print!(" {n} B ratio | {n} B µs |");
    }
    println!();
    print!("|---|");
    for _ in sizes {
        print!("---:|---:|");
    }
    println!();
    for mut c in codecs(dict) {
        print!("| {} |", c.name());
        for n in sizes {
            let set: Vec<&[u8]> = deltas
                .iter()
                .filter(|b| b.len() >= n)
                .take(2000)
                .map(|b| &b[..n])
                .collect();
            let mut out = Vec::new();
            let (mut i, mut o) = (0u64, 0u64);
            for b in &set {
                c.compress(b, &mut out);
                i += b.len() as u64;
                o += out.len() as u64 + 1;
            }
            let mut ts = Vec::new();
            for _ in 0..reps.max(3) {
                let t = Instant::now();
                for b in &set {
                    c.compress(b, &mut out);
                    std::hint::black_box(&out);
                }
                ts.push(t.elapsed().as_secs_f64() * 1e6 / set.len() as f64);
            }
            let us = median(ts);
            print!(" {} | {us:.2} |", ratio(o, i));
        }
        println!();
    }
}

/// The repository's `.md` and `.rs` files, concatenated, cut into `chunk`-byte pieces.
fn real_text(chunk: usize) -> Vec<Vec<u8>> {
    common::repo_text(&[
        "DESIGN.md",
        "docs/format.md",
        "docs/log.md",
        "docs/store.md",
        "docs/postgres.md",
        "README.md",
        "CHANGELOG.md",
    ])
    .chunks(chunk)
    .filter(|c| c.len() == chunk)
    .map(|c| c.to_vec())
    .collect()
}

fn main() {
    if std::env::args().any(|a| a == "--test" || a == "--list") {
        return;
    }
    // Quick mode (CI: it only must run): 8 tasks × 40 steps, one rep.
    let quick = std::env::var_os("AGENTWAL_BENCH_QUICK").is_some();
    let tasks = env_usize("AGENTWAL_COMP_TASKS", if quick { 8 } else { 64 });
    let steps = env_usize("AGENTWAL_COMP_STEPS", if quick { 40 } else { 200 });
    let reps = env_usize("AGENTWAL_COMP_REPS", if quick { 1 } else { 5 });
    println!(
        "# compression probe: {tasks} tasks × {steps} steps, {reps} reps, zstd 0.14 (C library {}), lz4_flex 0.14, snap 1.1",
        zstd::zstd_safe::version_string()
    );
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tmp");
    std::fs::create_dir_all(&base).unwrap();

    // A zstd dictionary for deltas, trained on steps of other tasks than the measured ones.
    let train = |f: &dyn Fn(usize, usize) -> AgentDelta| -> Vec<u8> {
        let samples: Vec<Vec<u8>> = (0..8)
            .flat_map(|t| (0..100).map(move |s| (t, s)))
            .map(|(t, s)| postcard::to_allocvec(&f(10_000 + t, s)).unwrap())
            .collect();
        let t = Instant::now();
        let d = zstd::dict::from_samples(&samples, 16 * 1024).unwrap();
        eprintln!(
            "trained a {}-byte dictionary on {} deltas in {:.2} s",
            d.len(),
            samples.len(),
            t.elapsed().as_secs_f64()
        );
        d
    };

    type Src = (
        &'static str,
        fn(usize) -> String,
        fn(usize, usize) -> AgentDelta,
    );
    let sources: [Src; 2] = [
        ("workload", generator::task_id, generator::make_delta),
        (
            "common",
            |t| format!("task-{t}"),
            |t, s| common::step(t as u64, s as u64),
        ),
    ];
    for (name, id, step) in sources {
        let dir = tempfile::tempdir_in(&base).unwrap();
        let (recs, log_bytes, commit_s) = store_records(dir.path(), tasks, steps, id, step);
        eprintln!(
            "{name}: committed {} steps in {commit_s:.2} s; {} checkpoint records",
            tasks * steps,
            recs.len()
        );
        let dict = train(&step);
        run_source(name, &recs, log_bytes, Some(&dict), reps);
    }

    // Real text: ratio only.
    println!("\n## reference: real text (the repository's .md and .rs files), ratio only\n");
    println!("| codec | 2 KiB chunks | 100 KiB chunks |");
    println!("|---|---:|---:|");
    let small = real_text(2048);
    let large = real_text(100 * 1024);
    for mut c in codecs(None) {
        let mut r = Vec::new();
        for set in [&small, &large] {
            let (mut i, mut o) = (0u64, 0u64);
            let mut out = Vec::new();
            for b in set.iter() {
                c.compress(b, &mut out);
                i += b.len() as u64;
                o += out.len() as u64;
            }
            r.push(ratio(o, i));
        }
        println!("| {} | {} | {} |", c.name(), r[0], r[1]);
    }
}
