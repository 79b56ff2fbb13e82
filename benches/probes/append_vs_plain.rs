//! Durable appends per second: agentwal's group-committed `Log` against a plain loop of
//! `write` + `sync_data` appending records of the same size to one file.
//!
//! ```text
//! cargo bench --bench append_vs_plain [-- DIR]
//! ```
//!
//! Every case runs in a fresh temporary directory under DIR (default: the crate's `target`
//! directory, on the same disk as the sources; never point it at a tmpfs, where fsync
//! costs nothing). A round gives every case `RUN_SECS` seconds, cut into `SLICES` slices
//! that alternate between the cases (A B C … then … C B A), because the fsync latency of a
//! shared or virtual disk drifts within seconds and every case must see the same mix. The
//! table shows, per case, the median of the rounds' rates, and the ratio of the medians.
//! Environment: `ROUNDS` (default 5), `RUN_SECS` (default 2), `SLICES` (default 8),
//! `CASES` to run only some cases (comma-separated keys, see `Case::key`; for profiling).
//!
//! Cases (every record is a 20-byte header and a 256-byte payload):
//! - `agentwal1`, `agentwal64`: `Log::append` with `SyncMode::Always` (durable when it
//!   returns) from 1 or 64 threads.
//! - `plain1`: `write_all` of one encoded record at the end of a growing file, then
//!   `sync_data`.
//! - `plain64`: the same from 64 threads, under one `Mutex` (each thread writes and syncs
//!   under it).
//! - `fallocated`, `zerofilled` (references, 1 thread): `pwrite` + `sync_data` of the same
//!   records into a file preallocated with `fallocate`, or filled with zeros beforehand.
//!   The zero-filled file is the best one appender can do with one fdatasync per append:
//!   only the data block and a cache flush reach the disk (plus the inode when the file's
//!   coarse mtime has moved on, a few percent of appends); the plain loop also writes the
//!   inode for the new size every time.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use agentwal::log::RECORD_HEADER_BYTES;
use agentwal::log::record::{self, RecordHeader};
use agentwal::log::{Log, LogOptions, SyncMode};

const PAYLOAD_BYTES: usize = 256;
const RECORD_BYTES: usize = RECORD_HEADER_BYTES + PAYLOAD_BYTES;
const MANY_THREADS: usize = 64;
/// The reference files grow by this much at a time (fallocated or zero-filled).
const REFERENCE_CHUNK_BYTES: u64 = 16 << 20;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Case {
    Agentwal(usize),
    Plain(usize),
    Fallocated,
    ZeroFilled,
}

impl Case {
    fn key(self) -> String {
        match self {
            Case::Agentwal(t) => format!("agentwal{t}"),
            Case::Plain(t) => format!("plain{t}"),
            Case::Fallocated => "fallocated".to_string(),
            Case::ZeroFilled => "zerofilled".to_string(),
        }
    }

    fn label(self) -> String {
        match self {
            Case::Agentwal(1) => "agentwal `Log::append`, 1 thread".to_string(),
            Case::Agentwal(t) => format!("agentwal `Log::append`, {t} threads"),
            Case::Plain(1) => "plain `write`+`sync_data`, 1 thread".to_string(),
            Case::Plain(t) => format!("plain `write`+`sync_data` under a Mutex, {t} threads"),
            Case::Fallocated => "reference: `pwrite`+`sync_data`, fallocated file".to_string(),
            Case::ZeroFilled => "reference: `pwrite`+`sync_data`, zero-filled file".to_string(),
        }
    }

    /// Thread count of the plain loop this case is compared with.
    fn threads(self) -> usize {
        match self {
            Case::Agentwal(t) | Case::Plain(t) => t,
            Case::Fallocated | Case::ZeroFilled => 1,
        }
    }
}

/// What one run of one case measured.
struct Sample {
    appends: u64,
    elapsed: Duration,
    /// fdatasync calls (agentwal: from its counters; the others: one per append).
    fsyncs: u64,
}

impl Sample {
    fn rate(&self) -> f64 {
        self.appends as f64 / self.elapsed.as_secs_f64()
    }

    fn per_fsync(&self) -> f64 {
        self.appends as f64 / self.fsyncs.max(1) as f64
    }
}

fn main() {
    // `cargo bench` appends `--bench` to the arguments.
    let base = std::env::args_os()
        .skip(1)
        .find(|a| !a.to_string_lossy().starts_with('-'))
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let rounds: usize = env_or("ROUNDS", 5).max(1);
    let run = Duration::from_secs_f64(env_or("RUN_SECS", 2.0));
    let slices: u32 = env_or("SLICES", 8).max(1);
    std::fs::create_dir_all(&base).expect("create the base directory");
    let base = base
        .canonicalize()
        .expect("canonicalize the base directory");
    println!(
        "directory: {} ({}); payload {PAYLOAD_BYTES} B, record {RECORD_BYTES} B; \
         {rounds} rounds of {:.1} s per case, in {slices} alternating slices",
        base.display(),
        fs_kind(&base),
        run.as_secs_f64()
    );

    let only = std::env::var("CASES").ok();
    let cases: Vec<Case> = [
        Case::Agentwal(1),
        Case::Plain(1),
        Case::Agentwal(MANY_THREADS),
        Case::Plain(MANY_THREADS),
        Case::Fallocated,
        Case::ZeroFilled,
    ]
    .into_iter()
    .filter(|c| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|k| k.trim() == c.key()))
    })
    .collect();

    let mut samples: Vec<Vec<Sample>> = cases.iter().map(|_| Vec::new()).collect();
    // Deleting a directory right away would have the file system discard its blocks (this
    // disk may be mounted with `discard`) while the next case runs; delete all at the end.
    let mut used_dirs = Vec::new();
    for round in 0..rounds {
        let dirs: Vec<_> = cases
            .iter()
            .map(|_| {
                tempfile::Builder::new()
                    .prefix("append_vs_plain-")
                    .tempdir_in(&base)
                    .expect("create a temporary directory")
            })
            .collect();
        let runners: Vec<Runner> = cases
            .iter()
            .zip(&dirs)
            .map(|(&case, dir)| Runner::new(case, dir.path()))
            .collect();
        let mut done = vec![(0u64, Duration::ZERO); cases.len()];
        for slice in 0..slices {
            for k in 0..cases.len() {
                // Serpentine order, shifted each round: no case always runs first or last.
                let k = if slice % 2 == 0 {
                    k
                } else {
                    cases.len() - 1 - k
                };
                let i = (k + round) % cases.len();
                let (n, t) = runners[i].run(run / slices);
                done[i].0 += n;
                done[i].1 += t;
            }
        }
        for (i, runner) in runners.iter().enumerate() {
            let (appends, elapsed) = done[i];
            let s = Sample {
                appends,
                elapsed,
                fsyncs: runner.fsyncs(appends),
            };
            eprintln!(
                "round {}: {:<55} {:>8.0} appends/s ({} appends, {:.2} appends/fdatasync)",
                round + 1,
                cases[i].label(),
                s.rate(),
                s.appends,
                s.per_fsync()
            );
            samples[i].push(s);
        }
        drop(runners);
        used_dirs.extend(dirs);
    }
    drop(used_dirs);

    let median_rate = |i: usize| median(samples[i].iter().map(Sample::rate).collect());
    // NaN when the case was left out with CASES.
    let rate_of = |c: Case| {
        cases
            .iter()
            .position(|&x| x == c)
            .map_or(f64::NAN, median_rate)
    };

    println!();
    println!(
        "| case | durable appends/s, median of {rounds} | min – max | appends per fdatasync | vs plain loop, same threads |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (i, &case) in cases.iter().enumerate() {
        let rates: Vec<f64> = samples[i].iter().map(Sample::rate).collect();
        let lo = rates.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = rates.iter().copied().fold(0.0, f64::max);
        let m = median_rate(i);
        let per_fsync = median(samples[i].iter().map(Sample::per_fsync).collect());
        let ratio = m / rate_of(Case::Plain(case.threads()));
        println!(
            "| {} | {m:.0} | {lo:.0} – {hi:.0} | {per_fsync:.1} | {ratio:.2}× |",
            case.label()
        );
    }
    println!();
    println!(
        "Ratios of the medians, agentwal / plain loop: 1 thread {:.2}× (target ≥ 1.5×), \
         {MANY_THREADS} threads {:.2}× (target ≥ 10×).",
        rate_of(Case::Agentwal(1)) / rate_of(Case::Plain(1)),
        rate_of(Case::Agentwal(MANY_THREADS)) / rate_of(Case::Plain(MANY_THREADS)),
    );
    // The same comparison round by round (within a round the cases ran interleaved).
    let per_round = |threads: usize| -> String {
        let (Some(a), Some(p)) = (
            cases.iter().position(|&c| c == Case::Agentwal(threads)),
            cases.iter().position(|&c| c == Case::Plain(threads)),
        ) else {
            return "n/a".into();
        };
        let ratios: Vec<String> = samples[a]
            .iter()
            .zip(&samples[p])
            .map(|(a, p)| format!("{:.2}", a.rate() / p.rate()))
            .collect();
        ratios.join(", ")
    };
    println!(
        "Per-round ratios: 1 thread [{}]; {MANY_THREADS} threads [{}].",
        per_round(1),
        per_round(MANY_THREADS)
    );
}

/// A case, set up and ready to run for a while (again and again).
enum Runner {
    Agentwal {
        log: Log,
        threads: usize,
        payload: Vec<u8>,
    },
    Plain {
        file: Mutex<File>,
        threads: usize,
        record: Vec<u8>,
    },
    Reference {
        file: Mutex<ReferenceFile>,
        record: Vec<u8>,
    },
}

/// The file of a reference case and how far it is written and prepared.
struct ReferenceFile {
    file: File,
    zero_fill: bool,
    at: u64,
    ready: u64,
}

impl ReferenceFile {
    /// Prepares the next `REFERENCE_CHUNK_BYTES` (fallocated or written with zeros).
    fn grow(&mut self) {
        if self.zero_fill {
            let zeros = vec![0u8; 1 << 20];
            for mib in 0..REFERENCE_CHUNK_BYTES >> 20 {
                self.file
                    .write_all_at(&zeros, self.ready + (mib << 20))
                    .expect("zero fill");
            }
        } else {
            fallocate(&self.file, self.ready, REFERENCE_CHUNK_BYTES);
        }
        self.file.sync_data().expect("sync the new space");
        self.ready += REFERENCE_CHUNK_BYTES;
    }
}

impl Runner {
    fn new(case: Case, dir: &Path) -> Runner {
        match case {
            Case::Agentwal(threads) => Runner::Agentwal {
                log: Log::open(
                    dir,
                    LogOptions {
                        sync: SyncMode::Always,
                        ..LogOptions::default()
                    },
                )
                .expect("open the log"),
                threads,
                payload: vec![0xA5u8; PAYLOAD_BYTES],
            },
            Case::Plain(threads) => Runner::Plain {
                file: Mutex::new(
                    OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(dir.join("plain.log"))
                        .expect("open the plain file"),
                ),
                threads,
                record: encoded_record(),
            },
            Case::Fallocated | Case::ZeroFilled => {
                let mut file = ReferenceFile {
                    file: File::create(dir.join("plain.log")).expect("create the file"),
                    zero_fill: case == Case::ZeroFilled,
                    at: 0,
                    ready: 0,
                };
                file.grow();
                Runner::Reference {
                    file: Mutex::new(file),
                    record: encoded_record(),
                }
            }
        }
    }

    /// Appends durably for `run`; returns the appends done and the time taken.
    fn run(&self, run: Duration) -> (u64, Duration) {
        match self {
            Runner::Agentwal {
                log,
                threads,
                payload,
            } => hammer(*threads, run, &|| {
                log.append(1, payload).expect("append");
            }),
            Runner::Plain {
                file,
                threads,
                record,
            } => hammer(*threads, run, &|| {
                let mut f = file.lock().expect("plain file lock");
                f.write_all(record).expect("write");
                f.sync_data().expect("sync_data");
            }),
            Runner::Reference { file, record } => hammer(1, run, &|| {
                let mut f = file.lock().expect("reference file lock");
                if f.at + RECORD_BYTES as u64 > f.ready {
                    f.grow(); // once per 16 MiB
                }
                f.file.write_all_at(record, f.at).expect("pwrite");
                f.file.sync_data().expect("sync_data");
                f.at += RECORD_BYTES as u64;
            }),
        }
    }

    /// fdatasync calls so far (agentwal: from its counters; the others: one per append).
    fn fsyncs(&self, appends: u64) -> u64 {
        match self {
            Runner::Agentwal { log, .. } => {
                let stats = log.stats();
                assert_eq!(stats.appends, appends, "every append counted");
                stats.fsyncs
            }
            Runner::Plain { .. } | Runner::Reference { .. } => appends,
        }
    }
}

/// Reserves `len` bytes at `offset` with `fallocate(2)` (mode 0, as agentwal does).
fn fallocate(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (off, len) = (
        libc::off_t::try_from(offset).expect("offset fits off_t"),
        libc::off_t::try_from(len).expect("length fits off_t"),
    );
    // SAFETY: fallocate only reads its integer arguments; `file` owns the descriptor.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, off, len) };
    assert_eq!(rc, 0, "fallocate: {}", std::io::Error::last_os_error());
}

/// One record exactly as agentwal lays it out (header + 256-byte payload).
fn encoded_record() -> Vec<u8> {
    let payload = vec![0xA5u8; PAYLOAD_BYTES];
    let header = RecordHeader {
        payload_len: PAYLOAD_BYTES as u32,
        lsn: 1,
        kind: 1,
        flags: 0,
    };
    let mut out = Vec::with_capacity(RECORD_BYTES);
    record::encode_into(
        &mut out,
        record::Salt::Salted(1),
        &header,
        record::payload_crc(&payload),
        &payload,
    );
    assert_eq!(out.len(), RECORD_BYTES);
    out
}

/// Runs `op` in a loop on `threads` threads until `run` has passed; returns how many
/// operations completed and the time from the common start until the last thread ended.
fn hammer(threads: usize, run: Duration, op: &(dyn Fn() + Sync)) -> (u64, Duration) {
    let start_line = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let start_line = &start_line;
                s.spawn(move || {
                    start_line.wait();
                    let deadline = Instant::now() + run;
                    let mut n = 0u64;
                    while Instant::now() < deadline {
                        op();
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        start_line.wait();
        let started = Instant::now();
        let total = handles
            .into_iter()
            .map(|h| h.join().expect("worker panicked"))
            .sum();
        (total, started.elapsed())
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The file system type of `path`, to catch a tmpfs (where fsync costs nothing).
fn fs_kind(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return "unknown file system".into();
    };
    // SAFETY: `st` is a plain C struct that statfs fills in; `c` is a valid C string.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return "unknown file system".into();
    }
    #[allow(clippy::unnecessary_cast)] // f_type's integer type differs between targets
    match st.f_type as i64 {
        0xEF53 => "ext2/3/4".into(),
        0x0102_1994 => "tmpfs: fsync is free here, the figures mean nothing".into(),
        0x5846_5342 => "xfs".into(),
        0x9123_683E => "btrfs".into(),
        t => format!("file system type {t:#x}"),
    }
}
