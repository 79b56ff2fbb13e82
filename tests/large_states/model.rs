//! The big state and its edits, the model, and the checks: contents, O(delta) commits,
//! segment files and the recycled pool.

use std::collections::BTreeMap;
use std::path::Path;

use agentwal::log::{
    SegmentHeader, parse_free_file_name, parse_segment_file_name, recycle_files_max,
};
use agentwal::{Options, State, Store};
use serde::{Deserialize, Serialize};

/// Segment size of the real-disk test.
pub(crate) const SEGMENT_BYTES: u64 = 64 << 10;

/// The big state: more than 10 segments.
pub(crate) const STATE_BYTES: usize = 10 * SEGMENT_BYTES as usize + 4096;

/// What a small commit may append at most: its record (a few dozen bytes) and, when it
/// rotates, a seal. A commit that wrote the state would append 660 KiB.
const SMALL_COMMIT_BYTES_MAX: u64 = 256;

/// A state with a large blob and a list of small notes.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Big {
    #[serde(with = "serde_bytes")]
    pub(crate) blob: Vec<u8>,
    pub(crate) notes: Vec<u64>,
}

impl std::fmt::Debug for Big {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hash = self.blob.iter().fold(0u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3)
        });
        write!(
            f,
            "Big {{ blob: {} bytes (hash {hash:#x}), notes: {:?} }}",
            self.blob.len(),
            self.notes
        )
    }
}

#[derive(Clone, Serialize, Deserialize)]
pub(crate) enum Edit {
    /// Appends bytes to the blob.
    Grow(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Appends a note: a delta of a few bytes.
    Note(u64),
}

impl State for Big {
    type Delta = Edit;
    fn apply(&mut self, edit: &Edit) {
        match edit {
            Edit::Grow(bytes) => self.blob.extend_from_slice(bytes),
            Edit::Note(n) => self.notes.push(*n),
        }
    }
}

/// What the store must hold: per task, its first state (a fork's) and its edits.
#[derive(Default)]
pub(crate) struct Model {
    pub(crate) tasks: BTreeMap<String, (Option<Big>, Vec<Edit>)>,
}

impl Model {
    pub(crate) fn commit(&mut self, task: &str, edit: &Edit) {
        self.tasks
            .entry(task.into())
            .or_default()
            .1
            .push(edit.clone());
    }
    pub(crate) fn fork(&mut self, task: &str, seq: u64, new_task: &str) {
        let base = self.state(task, seq);
        self.tasks.insert(new_task.into(), (Some(base), Vec::new()));
    }
    pub(crate) fn latest(&self, task: &str) -> u64 {
        let (base, edits) = &self.tasks[task];
        edits.len() as u64 + u64::from(base.is_some())
    }
    pub(crate) fn state(&self, task: &str, seq: u64) -> Big {
        let (base, edits) = &self.tasks[task];
        let mut state = base.clone().unwrap_or_default();
        let own = seq as usize - usize::from(base.is_some());
        edits[..own].iter().for_each(|e| state.apply(e));
        state
    }
}

pub(crate) fn options() -> Options {
    Options {
        segment_bytes: SEGMENT_BYTES,
        auto_compact: false,
        // Stored as encoded: these states are runs of one byte, which zstd would shrink
        // to almost nothing, and the checks measure the state's size in bytes written.
        compression: agentwal::Compression::None,
        ..Options::default()
    }
}

/// A scratch directory: tmpfs when there is one, else the default temporary directory.
pub(crate) fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::Builder::new()
            .prefix("agentwal-large")
            .tempdir_in(shm)
    {
        return dir;
    }
    tempfile::tempdir().expect("temporary directory")
}

/// Every retained checkpoint of every task loads equal to the model.
pub(crate) fn check_all(store: &Store<Big>, model: &Model, what: &str) {
    assert_eq!(
        store.tasks().unwrap(),
        model.tasks.keys().cloned().collect::<Vec<_>>(),
        "{what}: tasks"
    );
    for task in model.tasks.keys() {
        let latest = store.load_latest(task).unwrap().expect("a checkpoint");
        assert_eq!(
            latest.seq,
            model.latest(task),
            "{what}: latest seq of {task}"
        );
        assert!(
            *latest.state == model.state(task, latest.seq),
            "{what}: latest state of {task}"
        );
        for info in store.list_checkpoints(task).unwrap() {
            let cp = store
                .load(task, info.seq)
                .unwrap()
                .expect("listed, so loads");
            assert!(
                *cp.state == model.state(task, info.seq),
                "{what}: state of {task} at seq {}",
                info.seq
            );
        }
    }
}

/// `n` small commits to `task`: each must append at most `SMALL_COMMIT_BYTES_MAX` to the
/// log, and write a delta, not a snapshot. Returns the most one appended.
pub(crate) fn small_commits(
    store: &Store<Big>,
    model: &mut Model,
    task: &str,
    n: u64,
    what: &str,
) -> u64 {
    let mut most = 0;
    for i in 0..n {
        let edit = Edit::Note(i);
        let before = store.stats().bytes_written;
        let seq = store.commit(task, &edit).unwrap();
        let bytes = store.stats().bytes_written - before;
        model.commit(task, &edit);
        assert!(
            bytes <= SMALL_COMMIT_BYTES_MAX,
            "{what}: small commit {seq} of {task} appended {bytes} bytes: O(state), not \
             O(delta)"
        );
        let info = store.list_checkpoints(task).unwrap().pop().unwrap();
        assert_eq!(info.seq, seq);
        assert!(
            !info.snapshot,
            "{what}: small commit {seq} of {task} wrote a snapshot"
        );
        most = most.max(bytes);
    }
    most
}

/// Names and lengths of the store's files (segments and retired files).
pub(crate) fn files(dir: &Path) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, e.metadata().unwrap().len())
        })
        .collect();
    out.sort();
    out
}

/// The retired files waiting for reuse are files a rotation can take (no longer than a
/// segment), no more than a pass keeps after `rotations` (at least those since the
/// previous pass: `recycle_files_max`), so their disk is bounded by that many segments.
pub(crate) fn check_pool(dir: &Path, rotations: u64, what: &str) {
    let free: Vec<(String, u64)> = files(dir)
        .into_iter()
        .filter(|(name, _)| parse_free_file_name(name).is_some())
        .collect();
    let files_max = recycle_files_max(SEGMENT_BYTES, rotations);
    assert!(free.len() <= files_max, "{what}: {free:?}");
    for (name, len) in &free {
        assert!(
            *len <= SEGMENT_BYTES,
            "{what}: retired file {name} is {len} bytes, longer than a segment: no rotation \
             can take it ({free:?})"
        );
    }
}

/// Segment files whose header says they are recycled.
pub(crate) fn recycled_segments(dir: &Path) -> usize {
    files(dir)
        .into_iter()
        .filter(|(name, _)| parse_segment_file_name(name).is_some())
        .filter(|(name, _)| {
            let path = dir.join(name);
            let bytes = std::fs::read(&path).unwrap();
            SegmentHeader::decode(&bytes, &path).is_ok_and(|h| h.is_recycled())
        })
        .count()
}
