//! `recover_dir`: recovery over an arbitrary directory of segment files.
//!
//! The input describes one to three files named like real segments. Each is raw bytes or
//! starts with a valid segment header, followed by chunks: raw bytes, zeros, or records
//! (single or batched) whose checksums this module computes, so the fuzzer gets past the
//! checksums and into the recovery rules. Then:
//!
//! - `Log::open_with` and `Store::open_with` in each `RecoveryMode`, `Log::open_read_only`
//!   and `Store::open_read_only` must never panic; errors are fine. (A read-only open is
//!   skipped where the writing open's scan failed with corruption: it would retry with
//!   sleeps, meant for a concurrent writer, and fail the same way.) Each writing open
//!   works on its own copy of the files.
//! - A read-only and a writing open in the same mode deliver the same records, and every
//!   delivered record reads back (`Log::read`) with the same payload.
//! - After a successful writing open, an append works, and a reopen in the same mode
//!   delivers the same records plus the appended one.
//! - After a successful writing `Store` open, a commit works and a reopen loads it.

use std::io::ErrorKind;
use std::path::Path;

use agentwal::log::record::{self, RecordHeader, Salt};
use agentwal::log::{Chain, SegmentHeader};
use agentwal::log::{
    FLAG_BATCH_END, FLAG_BATCH_START, FLAG_DURABLE_BEFORE, KIND_SEAL, SEGMENT_FLAG_COMPACTED,
    segment_file_name,
};
use agentwal::log::{Log, LogOptions, RecordPos, RecordRef, RecoveryMode, SyncMode};
use agentwal::{AgentDelta, AgentState, Message, Options, Store};
use arbitrary::{Arbitrary, Unstructured};

const FILES_MAX: usize = 3;
const FILE_BYTES_MAX: usize = 24 << 10;
const CHUNKS_MAX: usize = 24;
const SEGMENT_BYTES: u64 = 4096;
const MODES: [RecoveryMode; 3] = [
    RecoveryMode::TolerateTornTail,
    RecoveryMode::Strict,
    RecoveryMode::Salvage,
];
const PROBE_TASK: &str = "agentwal-fuzz-probe";
const PROBE_PAYLOAD: &[u8] = b"appended by the fuzz check";

#[derive(Debug, Arbitrary)]
struct Input {
    files: Vec<FileSpec>,
    /// A leftover temporary file of an interrupted segment creation.
    temp_file: Option<u8>,
}

#[derive(Debug, Arbitrary)]
struct FileSpec {
    /// The segment id is `1 + id % 6`: gaps and repeats (a later file replaces an
    /// earlier one of the same name) both happen.
    id: u8,
    header: HeaderSpec,
    chunks: Vec<Chunk>,
}

#[derive(Debug, Arbitrary)]
enum HeaderSpec {
    /// No header: the file is only its chunks.
    Raw,
    /// A valid header (with the file's id unless `other_id`).
    Valid {
        first_lsn: Lsn,
        compacted: bool,
        other_id: Option<u8>,
    },
}

#[derive(Debug, Clone, Copy, Arbitrary)]
enum Lsn {
    /// The next LSN the writer of this input would use.
    Next,
    /// Exactly this one.
    Exact(u8),
    /// The next one minus this much (reuse).
    Back(u8),
    /// The next one plus this much (a gap).
    Skip(u8),
}

#[derive(Debug, Arbitrary)]
enum Chunk {
    Raw(Vec<u8>),
    /// `16 * n` zero bytes.
    Zeros(u8),
    /// One record with exactly these header fields and a correct checksum.
    Record {
        kind: u8,
        flags: u8,
        lsn: Lsn,
        payload: Vec<u8>,
    },
    /// A well-formed batch: consecutive LSNs, start and end flags.
    Batch {
        durable_before: bool,
        records: Vec<(u8, Vec<u8>)>,
    },
    /// A seal naming segment `file id + 1 + next_delta`.
    Seal {
        lsn: Lsn,
        next_delta: u8,
    },
    /// A record with a correct checksum and then one byte changed.
    Flipped {
        payload: Vec<u8>,
        at: u16,
        xor: u8,
    },
}

/// Decodes the input and runs every check; panics on a violated property.
pub fn check(data: &[u8]) {
    let u = Unstructured::new(data);
    let Ok(input) = Input::arbitrary_take_rest(u) else {
        return;
    };
    let dir = super::scratch_dir();
    let original = dir.path().join("original");
    std::fs::create_dir(&original).expect("creating a directory");
    write_files(&original, &input);
    // A writing open makes a store of an empty directory; a read-only one refuses.
    let is_store = !input.files.is_empty();
    let mut tolerant_read_only = false;
    for (i, mode) in MODES.into_iter().enumerate() {
        let copy = dir.path().join(format!("log-{i}"));
        super::copy_dir(&original, &copy);
        let writer = check_log_writer(&copy, mode);
        // A read-only open scans exactly as a writing one, but retries (with sleeps) on
        // corruption or a vanished file, which a concurrent writer can cause: skip it
        // where the writing open already failed so (it is slow and would fail the same).
        let scan_failed = match &writer {
            Err(agentwal::Error::Corruption { .. }) => true,
            Err(agentwal::Error::Io { source, .. }) => source.kind() == ErrorKind::NotFound,
            _ => false,
        };
        if is_store && !scan_failed {
            let ok = check_log_read_only(&original, mode, writer.as_ref().ok());
            tolerant_read_only |= ok && mode == RecoveryMode::TolerateTornTail;
        }
    }
    for (i, mode) in MODES.into_iter().enumerate() {
        let copy = dir.path().join(format!("store-{i}"));
        super::copy_dir(&original, &copy);
        check_store_writer(&copy, mode);
    }
    // The store's read-only open uses the default (tolerant) recovery mode.
    if tolerant_read_only && let Ok(store) = Store::<AgentState>::open_read_only(&original) {
        browse(&store);
    }
}

/// The salt of file `id`'s records: every third file is written in format v1 (no salt),
/// so both versions' recovery gets fuzzed, and mixed logs too.
fn salt_of(id: u64) -> Salt {
    match id % 3 {
        0 => Salt::Unsalted,
        _ => Salt::Salted(0x0bad_5eed),
    }
}

/// Every third segment is format v3 (the others v1 and v2), of one store, linked to a
/// salted predecessor.
fn chain_of(id: u64) -> Option<Chain> {
    (id % 3 == 2).then_some(Chain {
        store_id: 0x5709e,
        prev_link: 0x0bad_5eed,
        next_link: 0x0bad_5eed,
    })
}

fn write_files(dir: &Path, input: &Input) {
    let mut next_lsn = 1u64;
    for spec in input.files.iter().take(FILES_MAX) {
        let id = 1 + u64::from(spec.id % 6);
        let mut bytes = Vec::new();
        if let HeaderSpec::Valid {
            first_lsn,
            compacted,
            other_id,
        } = &spec.header
        {
            let first_lsn = lsn(*first_lsn, next_lsn);
            next_lsn = first_lsn;
            let header = SegmentHeader {
                id: other_id.map_or(id, u64::from),
                first_lsn,
                flags: if *compacted {
                    SEGMENT_FLAG_COMPACTED
                } else {
                    0
                },
                salt: salt_of(id),
                chain: chain_of(id),
            };
            bytes.extend_from_slice(&header.encode());
        }
        for chunk in spec.chunks.iter().take(CHUNKS_MAX) {
            if bytes.len() >= FILE_BYTES_MAX {
                break;
            }
            push_chunk(&mut bytes, chunk, id, &mut next_lsn);
        }
        bytes.truncate(FILE_BYTES_MAX);
        std::fs::write(dir.join(segment_file_name(id)), &bytes).expect("writing a segment");
    }
    if let Some(id) = input.temp_file {
        let name = format!("{}.tmp", segment_file_name(1 + u64::from(id % 6)));
        std::fs::write(dir.join(name), b"half-made").expect("writing a file");
    }
}

fn lsn(spec: Lsn, next: u64) -> u64 {
    match spec {
        Lsn::Next => next,
        Lsn::Exact(n) => u64::from(n),
        Lsn::Back(n) => next.saturating_sub(u64::from(n)),
        Lsn::Skip(n) => next + u64::from(n),
    }
}

fn push_chunk(out: &mut Vec<u8>, chunk: &Chunk, file_id: u64, next_lsn: &mut u64) {
    let record = |out: &mut Vec<u8>, kind: u8, flags: u8, lsn: u64, payload: &[u8]| {
        let payload = &payload[..payload.len().min(FILE_BYTES_MAX)];
        let h = RecordHeader {
            payload_len: payload.len() as u32,
            lsn,
            kind,
            flags,
        };
        record::encode_into(
            out,
            salt_of(file_id),
            &h,
            record::payload_crc(payload),
            payload,
        );
    };
    match chunk {
        Chunk::Raw(bytes) => out.extend_from_slice(bytes),
        Chunk::Zeros(n) => out.resize(out.len() + 16 * usize::from(*n), 0),
        Chunk::Record {
            kind,
            flags,
            lsn: l,
            payload,
        } => {
            let at = lsn(*l, *next_lsn);
            // Kind 0 cannot be encoded (it means unwritten); zeros come from `Zeros`.
            record(out, (*kind).max(1), *flags, at, payload);
            *next_lsn = at + 1;
        }
        Chunk::Batch {
            durable_before,
            records,
        } => {
            let n = records.len().min(8);
            for (i, (kind, payload)) in records.iter().take(n).enumerate() {
                let mut flags = 0;
                if i == 0 {
                    flags |= FLAG_BATCH_START;
                    if *durable_before {
                        flags |= FLAG_DURABLE_BEFORE;
                    }
                }
                if i + 1 == n {
                    flags |= FLAG_BATCH_END;
                }
                let kind = 1 + kind % 4; // the store's kinds
                record(out, kind, flags, *next_lsn, payload);
                *next_lsn += 1;
            }
        }
        Chunk::Seal { lsn: l, next_delta } => {
            let next = file_id + 1 + u64::from(*next_delta % 3);
            let at = lsn(*l, *next_lsn);
            let flags = FLAG_BATCH_START | FLAG_BATCH_END;
            record(out, KIND_SEAL, flags, at, &next.to_le_bytes());
            *next_lsn = at;
        }
        Chunk::Flipped { payload, at, xor } => {
            let start = out.len();
            let flags = FLAG_BATCH_START | FLAG_BATCH_END;
            record(out, 1, flags, *next_lsn, payload);
            *next_lsn += 1;
            let len = out.len() - start;
            out[start + usize::from(*at) % len] ^= xor | 1;
        }
    }
}

fn log_options(mode: RecoveryMode) -> LogOptions {
    LogOptions {
        sync: SyncMode::Always,
        segment_bytes: SEGMENT_BYTES,
        recovery: mode,
    }
}

type Records = Vec<(RecordPos, u64, u8, Vec<u8>)>;

fn collect(records: &mut Records) -> impl FnMut(RecordRef<'_>) -> agentwal::Result<()> + '_ {
    |r| {
        records.push((r.pos(), r.lsn, r.kind, r.payload.to_vec()));
        Ok(())
    }
}

/// Every delivered record reads back with its payload.
fn check_reads(log: &Log, records: &Records, what: &str) {
    for (pos, lsn, kind, payload) in records {
        let read = log
            .read_with(*pos, |r| Ok((r.lsn, r.kind, r.payload.to_vec())))
            .unwrap_or_else(|e| panic!("{what}: delivered record at {pos:?} does not read: {e}"));
        assert_eq!(
            read,
            (*lsn, *kind, payload.clone()),
            "{what}: record at {pos:?} reads differently"
        );
    }
}

/// Writing open in `mode`; on success, append and reopen. Returns the recovered records.
fn check_log_writer(dir: &Path, mode: RecoveryMode) -> agentwal::Result<Records> {
    let what = format!("Log::open_with({mode:?})");
    let mut records = Records::new();
    let log = Log::open_with(dir, log_options(mode), collect(&mut records))?;
    check_lsns(&records, mode, &what);
    check_reads(&log, &records, &what);
    let appended = log
        .append(1, PROBE_PAYLOAD)
        .unwrap_or_else(|e| panic!("{what}: append after a successful open failed: {e}"));
    assert_eq!(
        log.read(appended.pos).expect("reading the appended record"),
        PROBE_PAYLOAD
    );
    if let Some(max) = records.iter().map(|r| r.1).max() {
        assert!(
            appended.lsn > max,
            "{what}: append got LSN {}, not above the log's {max}",
            appended.lsn
        );
    }
    drop(log);
    let mut again = Records::new();
    let log = Log::open_with(dir, log_options(mode), collect(&mut again))
        .unwrap_or_else(|e| panic!("{what}: reopen after an append failed: {e}"));
    let mut expected = records.clone();
    expected.push((appended.pos, appended.lsn, 1, PROBE_PAYLOAD.to_vec()));
    assert!(
        again == expected,
        "{what}: reopen after an append delivered {} records, expected {} \
         (the first ones plus the appended one)",
        again.len(),
        expected.len()
    );
    check_reads(&log, &again, &what);
    Ok(records)
}

/// LSNs only increase (gaps are allowed after compaction or salvage). Salvage, which
/// does not check the chain of segments, delivers in file order whatever they hold.
fn check_lsns(records: &Records, mode: RecoveryMode, what: &str) {
    if mode == RecoveryMode::Salvage {
        return;
    }
    for w in records.windows(2) {
        assert!(
            w[1].1 > w[0].1,
            "{what} ({mode:?}): LSN {} delivered after {}",
            w[1].1,
            w[0].1
        );
    }
}

/// Read-only open of the untouched files; must agree with the writing open if that
/// succeeded. Returns whether it opened.
fn check_log_read_only(dir: &Path, mode: RecoveryMode, writer: Option<&Records>) -> bool {
    let what = format!("Log::open_read_only({mode:?})");
    let mut records = Records::new();
    let opened = Log::open_read_only(dir, log_options(mode), collect(&mut records));
    let Some(writer) = writer else {
        return opened.is_ok();
    };
    let log = opened.unwrap_or_else(|e| {
        panic!("{what} failed where the writing open succeeded on the same files: {e}")
    });
    assert!(
        records == *writer,
        "{what}: delivered {} records, the writing open {}",
        records.len(),
        writer.len()
    );
    check_reads(&log, &records, &what);
    true
}

fn store_options(mode: RecoveryMode) -> Options {
    Options {
        segment_bytes: SEGMENT_BYTES,
        snapshot_every: 2,
        recovery: mode,
        auto_compact: false,
        ..Options::default()
    }
}

/// Writing store open; on success, browse it, commit, reopen and load the commit.
fn check_store_writer(dir: &Path, mode: RecoveryMode) {
    let what = format!("Store::open_with({mode:?})");
    let Ok(store) = Store::<AgentState>::open_with(dir, store_options(mode)) else {
        return;
    };
    browse(&store);
    let delta = AgentDelta::default().message(Message::user("probe"));
    let seq = store
        .commit(PROBE_TASK, &delta)
        .unwrap_or_else(|e| panic!("{what}: commit after a successful open failed: {e}"));
    drop(store);
    let store = Store::<AgentState>::open_with(dir, store_options(mode))
        .unwrap_or_else(|e| panic!("{what}: reopen after a commit failed: {e}"));
    let latest = store
        .load_latest(PROBE_TASK)
        .unwrap_or_else(|e| panic!("{what}: loading the commit after a reopen failed: {e}"))
        .unwrap_or_else(|| panic!("{what}: the commit is gone after a reopen"));
    assert_eq!(latest.seq, seq, "{what}: wrong seq after a reopen");
    if seq == 1 {
        assert_eq!(latest.state.messages, delta.messages, "{what}: wrong state");
    }
}

/// Reads everything a recovered store offers: must not panic (errors are fine, the bytes
/// are arbitrary).
fn browse(store: &Store<AgentState>) {
    let _ = store.stats();
    let _ = store.recovery_report();
    for task in store.tasks().unwrap_or_default().iter().take(8) {
        let _ = store.load_latest(task);
        let _ = store.pending_calls(task);
        if let Ok(list) = store.list_checkpoints(task) {
            for info in list.iter().take(8) {
                let _ = store.load(task, info.seq);
            }
        }
    }
}
