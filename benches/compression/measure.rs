//! Measuring: ratio and latency per size class and codec, and the report of each source.

use std::time::Instant;

use crate::codecs::{Codec, codecs};
use crate::common;
use crate::records::Rec;

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

pub(crate) struct ClassResult {
    pub(crate) codec: String,
    pub(crate) bytes_in: u64,
    pub(crate) bytes_out: u64,
    pub(crate) buckets: [(u64, u64); 3],
    pub(crate) comp_mbs: f64,
    pub(crate) decomp_mbs: f64,
    /// Seconds to compress the whole class once (median).
    pub(crate) comp_s: f64,
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

pub(crate) fn ratio(out: u64, inp: u64) -> String {
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

pub(crate) fn run_source(
    name: &str,
    recs: &[Rec],
    log_bytes: u64,
    dict: Option<&[u8]>,
    reps: usize,
) {
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
pub(crate) fn real_text(chunk: usize) -> Vec<Vec<u8>> {
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
