//! A full disk must not leave the store stuck (docs/log.md §1.5, §4.4, docs/store.md §7).
//!
//! The tmpfs tests fill a small tmpfs that the test mounts itself until a commit fails
//! with `ENOSPC`, then recover on the same, still full, disk: a writer's open, a
//! compaction that reclaims the dead segments, and new commits. They need root and
//! `mount(8)`; without them they fail loudly, unless `AGENTWAL_SKIP_MOUNT_TESTS=1` says
//! to skip them. The last test crashes the simulated storage at every point of the
//! delete-before-write compaction order and checks that nothing acknowledged is lost.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, MutexGuard};

use agentwal::storage::sim::{SimOp, SimStorage};
use agentwal::{AgentDelta, AgentState, Compression, Error, Options, Store};

/// A tmpfs mounted on a temporary directory for the life of the guard; unmounted when it
/// drops, also when the test fails.
struct Tmpfs {
    dir: tempfile::TempDir,
    /// `common::serial()`: the tmpfs tests run one at a time, because a child process
    /// (mount, df, the CLI) forked by one test while another drops its store inherits the
    /// store's lock file descriptor until it execs, and the other test's reopen then finds
    /// the store locked.
    _serial: MutexGuard<'static, ()>,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=` takes it), or `None` when mounting
    /// is impossible and the caller explicitly asked to skip (`AGENTWAL_SKIP_MOUNT_TESTS`).
    fn mount(size: &str) -> Option<Tmpfs> {
        let serial = common::serial();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output();
        let why = match out {
            Ok(o) if o.status.success() => {
                return Some(Tmpfs {
                    dir,
                    _serial: serial,
                });
            }
            Ok(o) => format!(
                "mount exited with {}: {}",
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => format!("cannot run mount: {e}"),
        };
        if std::env::var("AGENTWAL_SKIP_MOUNT_TESTS").is_ok_and(|v| v == "1") {
            // Straight to stderr: the test harness would swallow `eprintln!` of a test
            // that passes.
            let _ = writeln!(
                std::io::stderr(),
                "\n!!!!!!!! SKIPPED: a full-disk test could not mount a {size} tmpfs ({why}), \
                 and AGENTWAL_SKIP_MOUNT_TESTS=1 is set. Nothing was tested. !!!!!!!!\n"
            );
            return None;
        }
        panic!(
            "\n!!!!!!!! this full-disk test must mount a {size} tmpfs and could not ({why}). \
             Run it as root with mount(8), or set AGENTWAL_SKIP_MOUNT_TESTS=1 to skip it \
             explicitly. !!!!!!!!\n"
        );
    }

    fn store_dir(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    /// Bytes free on the tmpfs.
    fn free_bytes(&self) -> u64 {
        let out = Command::new("df")
            .args(["--output=avail", "-B1"])
            .arg(self.dir.path())
            .output()
            .expect("run df");
        let text = String::from_utf8_lossy(&out.stdout);
        let last = text.lines().last().unwrap_or_default().trim();
        last.parse().unwrap_or_else(|_| panic!("df said {text:?}"))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Before the TempDir (a field) drops and removes the mount point.
        let unmounted = Command::new("umount")
            .arg(self.dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
    }
}

/// Constant-size state: every commit replaces `blob` and `step`.
fn delta(task: &str, i: u64) -> AgentDelta {
    AgentDelta::default()
        .set("blob", format!("{task} {i} {}", "x".repeat(600)))
        .set("step", i as i64)
}

fn options() -> Options {
    Options {
        segment_bytes: 64 << 10,
        snapshot_every: 4,
        keep_checkpoints: Some(2),
        // The background compactor would reclaim the dead segments before the disk fills.
        auto_compact: false,
        ..Options::default()
    }
}

/// A task's last acknowledged seq, its state, and the state before it (with
/// `keep_checkpoints: Some(2)` both are retained).
#[derive(Debug, Clone, Default)]
struct Acked {
    seq: u64,
    state: AgentState,
    prev: AgentState,
}

impl Acked {
    fn commit(&mut self, seq: u64, d: &AgentDelta) {
        assert_eq!(seq, self.seq + 1, "seqs follow");
        self.seq = seq;
        self.prev = self.state.clone();
        agentwal::State::apply(&mut self.state, d);
    }
}

/// What was acknowledged, per task.
type Model = BTreeMap<String, Acked>;

/// What a fill left: the model of what was acknowledged, the failure, and the commit
/// that failed (its outcome is unknown: it may or may not have reached the disk).
struct Filled {
    model: Model,
    failure: Error,
    failed: Option<(String, AgentDelta)>,
}

impl Filled {
    /// The model as `store` (reopened) must show it: with the failed commit if the store
    /// has it. Never with more.
    fn settle(&mut self, store: &Store) {
        self.model = self.settled(store);
        self.failed = None;
    }

    fn settled(&self, store: &Store) -> Model {
        let mut model = self.model.clone();
        if let Some((task, d)) = &self.failed {
            let latest = store.load_latest(task).unwrap().map_or(0, |c| c.seq);
            let acked = model.entry(task.clone()).or_default();
            if latest == acked.seq + 1 {
                acked.commit(latest, d);
            }
        }
        model
    }
}

/// Commits round-robin to `tasks` until a commit fails. `delete_every`: delete a task
/// and start it afresh after this many commits (deleted tasks are dead without
/// retention).
fn fill(store: &Store, tasks: &[&str], delete_every: Option<u64>) -> Filled {
    let mut model = Model::new();
    let filled = |model, failure, failed| Filled {
        model,
        failure,
        failed,
    };
    for i in 1..200_000u64 {
        let task = tasks[i as usize % tasks.len()];
        if let Some(every) = delete_every
            && model.get(task).is_some_and(|a| a.seq >= every)
        {
            match store.delete_task(task) {
                Ok(()) => model.remove(task),
                // A deletion that failed may have happened: not a state to judge by.
                Err(e) => panic!("the disk filled up at a deletion: {e}"),
            };
        }
        let d = delta(task, i);
        match store.commit(task, &d) {
            Ok(seq) => {
                model.entry(task.to_string()).or_default().commit(seq, &d);
            }
            Err(e) => return filled(model, e, Some((task.to_string(), d))),
        }
    }
    panic!("the disk never filled up");
}

/// Every task's latest checkpoint equals the model, and nothing else exists.
fn assert_latest(store: &Store, model: &Model, what: &str) {
    let tasks = store.tasks().unwrap();
    let want: Vec<&String> = model.keys().collect();
    assert_eq!(tasks.iter().collect::<Vec<_>>(), want, "{what}: tasks");
    for (task, acked) in model {
        let cp = store
            .load_latest(task)
            .unwrap()
            .expect("a latest checkpoint");
        assert_eq!(cp.seq, acked.seq, "{what}: {task}'s latest seq");
        assert_eq!(*cp.state, acked.state, "{what}: {task}'s latest state");
        // The one before it, where retention keeps it.
        if acked.seq > 1
            && let Some(cp) = store.load(task, acked.seq - 1).unwrap()
        {
            assert_eq!(
                *cp.state,
                acked.prev,
                "{what}: {task} seq {}",
                acked.seq - 1
            );
        }
    }
}

/// Every retained checkpoint of every task loads.
fn assert_retained_load(store: &Store, what: &str) {
    for task in store.tasks().unwrap() {
        for c in store.list_checkpoints(&task).unwrap() {
            assert!(
                store.load(&task, c.seq).unwrap().is_some(),
                "{what}: {task} seq {} is listed but does not load",
                c.seq
            );
        }
    }
}

/// The handle is poisoned after the failure; a read-only handle serves the last
/// acknowledged commits. Returns the model after the failed write, which the crash may or
/// may not have kept: `commit` had not returned.
fn after_the_failure(store: Store, dir: &Path, filled: &Filled) {
    let failure = &filled.failure;
    assert!(failure.is_disk_full(), "the fill ended with {failure:?}");
    let next = store.commit("t0", &delta("t0", 0));
    assert!(
        matches!(next, Err(Error::Poisoned { .. })),
        "the handle must be poisoned, got {next:?}"
    );
    let reader: Store = Store::open_read_only_with(dir, options()).unwrap();
    assert_latest(
        &reader,
        &filled.settled(&reader),
        "read-only handle on the full disk",
    );
    drop(reader);
    drop(store);
}

#[test]
fn a_full_disk_is_reopened_compacted_and_written_again() {
    let Some(fs) = Tmpfs::mount("3m") else {
        return;
    };
    let dir = fs.store_dir();
    let store: Store = Store::open_with(&dir, options()).unwrap();
    let mut filled = fill(&store, &["t0", "t1"], None);
    after_the_failure(store, &dir, &filled);
    let free_when_full = fs.free_bytes();

    // The final segment was sealed when creating the next one failed: the open must not
    // need the space for it.
    let store: Store = Store::open_with(&dir, options())
        .unwrap_or_else(|e| panic!("reopening the full disk for writing: {e}"));
    filled.settle(&store);
    let mut model = filled.model;
    assert_latest(&store, &model, "writer reopened on the full disk");
    let report = store.compact().expect("compacting the full disk");
    let free = fs.free_bytes();
    assert!(
        report.segments_deleted >= 30 && free > free_when_full + (2 << 20),
        "compaction reclaimed too little: {report:?}, {free_when_full} -> {free} bytes free"
    );
    assert_latest(&store, &model, "after compaction");
    assert_retained_load(&store, "after compaction");

    // Commits work again, and everything survives a reopen.
    for i in 0..200 {
        let task = ["t0", "t1"][i % 2];
        let d = delta(task, 1_000_000 + i as u64);
        let seq = store.commit(task, &d).expect("committing after compaction");
        model.get_mut(task).unwrap().commit(seq, &d);
    }
    assert_latest(&store, &model, "after new commits");
    drop(store);
    let store: Store = Store::open_with(&dir, options()).unwrap();
    assert_latest(&store, &model, "reopened after new commits");
    assert_retained_load(&store, "reopened after new commits");
}

#[test]
fn agentwal_compact_recovers_a_full_disk() {
    let Some(fs) = Tmpfs::mount("3m") else {
        return;
    };
    let dir = fs.store_dir();
    let bin = env!("CARGO_BIN_EXE_agentwal");
    let run = |args: &[&str]| {
        let out = Command::new(bin).args(args).arg(&dir).output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "agentwal {args:?}: {text}");
        text
    };

    // Without retention, dead records are those of deleted tasks.
    let no_retention = Options {
        keep_checkpoints: None,
        ..options()
    };
    let store: Store = Store::open_with(&dir, no_retention).unwrap();
    let mut filled = fill(&store, &["a", "b", "c"], Some(20));
    assert!(
        filled.failure.is_disk_full(),
        "the fill ended with {:?}",
        filled.failure
    );
    drop(store);
    let free_when_full = fs.free_bytes();
    run(&["compact"]);
    assert!(
        fs.free_bytes() > free_when_full + (2 << 20),
        "agentwal compact reclaimed too little"
    );
    let store: Store = Store::open_with(&dir, no_retention).unwrap();
    filled.settle(&store);
    assert_latest(&store, &filled.model, "after agentwal compact");
    store
        .commit("a", &delta("a", 0))
        .expect("a commit after agentwal compact");
    drop(store);

    // With retention: agentwal compact --keep-checkpoints applies it.
    std::fs::remove_dir_all(&dir).unwrap();
    let store: Store = Store::open_with(&dir, options()).unwrap();
    let mut filled = fill(&store, &["t"], None);
    assert!(
        filled.failure.is_disk_full(),
        "the fill ended with {:?}",
        filled.failure
    );
    drop(store);
    let free_when_full = fs.free_bytes();
    run(&["compact", "--keep-checkpoints", "2"]);
    assert!(
        fs.free_bytes() > free_when_full + (2 << 20),
        "agentwal compact --keep-checkpoints reclaimed too little"
    );
    let store: Store = Store::open_with(&dir, options()).unwrap();
    filled.settle(&store);
    let mut model = filled.model;
    for (task, m) in &mut model {
        let d = delta(task, 0);
        let seq = store
            .commit(task, &d)
            .expect("a commit after agentwal compact");
        m.commit(seq, &d);
    }
    assert_latest(&store, &model, "after agentwal compact --keep-checkpoints");
}

#[test]
fn a_disk_full_in_the_middle_of_a_segment_reopens_for_writing() {
    // 8 MiB segments on 6 MiB: the first 4 MiB preallocation fits, growing the segment
    // does not, so the final segment is not sealed. The open zeroes ahead of the data
    // only within the space the segment already holds.
    let Some(fs) = Tmpfs::mount("6m") else {
        return;
    };
    let dir = fs.store_dir();
    let big = Options {
        segment_bytes: 8 << 20,
        ..options()
    };
    let store: Store = Store::open_with(&dir, big).unwrap();
    let mut filled = fill(&store, &["t"], None);
    after_the_failure(store, &dir, &filled);
    let store: Store = Store::open_with(&dir, big)
        .unwrap_or_else(|e| panic!("reopening the full disk for writing: {e}"));
    filled.settle(&store);
    assert_latest(&store, &filled.model, "writer reopened on the full disk");
}

// ---- Crash points of delete-before-write compaction, on the simulated storage ----

const SIM_DIR: &str = "/store";

fn sim_options() -> Options {
    Options {
        segment_bytes: 4096,
        snapshot_every: 2,
        keep_checkpoints: Some(2),
        auto_compact: false,
        // The segment counts these tests plan on are in bytes as encoded.
        compression: Compression::None,
        ..Options::default()
    }
}

fn sim_open(sim: &SimStorage) -> agentwal::Result<Store> {
    Store::open_on(Arc::new(sim.clone()), SIM_DIR, sim_options())
}

/// Every retained checkpoint of every task, loaded, and the pending calls.
type Contents = BTreeMap<String, (Vec<(u64, AgentState)>, Vec<String>)>;

fn contents(store: &Store) -> Result<Contents, String> {
    let mut out = Contents::new();
    for task in store.tasks().map_err(|e| e.to_string())? {
        let mut cps = Vec::new();
        for c in store.list_checkpoints(&task).map_err(|e| e.to_string())? {
            let cp = store
                .load(&task, c.seq)
                .map_err(|e| format!("{task} {}: {e}", c.seq))?;
            let cp = cp.ok_or_else(|| format!("{task} seq {} is listed, not loaded", c.seq))?;
            cps.push((c.seq, (*cp.state).clone()));
        }
        let calls = store.pending_calls(&task).map_err(|e| e.to_string())?;
        out.insert(task, (cps, calls.into_iter().map(|c| c.call_id).collect()));
    }
    Ok(out)
}

#[test]
fn a_crash_at_every_point_of_delete_before_write_compaction_loses_nothing() {
    let sim = SimStorage::new();
    let store = sim_open(&sim).unwrap();
    // A long dead history first (only the last 2 of "a" are retained), then records that
    // stay live in sealed segments ("b", and a call kept forever), then more of "a".
    for i in 0..150 {
        store.commit("a", &delta("a", i)).unwrap();
    }
    for i in 0..5 {
        store.commit("b", &delta("b", i)).unwrap();
    }
    store.begin_call("b", "c1", "tool", b"args").unwrap();
    store.commit("gone", &delta("gone", 0)).unwrap();
    store.delete_task("gone").unwrap();
    for i in 150..200 {
        store.commit("a", &delta("a", i)).unwrap();
    }
    let expected = contents(&store).unwrap();
    let before = sim.fork();
    sim.record();
    let report = store.compact().unwrap();
    let ops = sim.take_recording();
    assert_eq!(
        contents(&store).unwrap(),
        expected,
        "compaction changed the contents"
    );
    drop(store);

    // The order: dead segments go before the compacted segment is written.
    let first_remove = ops
        .iter()
        .position(|op| matches!(op, SimOp::Remove(p) if p.extension().is_some_and(|e| e == "wal")));
    let compacted_created = ops.iter().position(
        |op| matches!(op, SimOp::Create(p, _) if p.to_string_lossy().ends_with(".compact.tmp")),
    );
    let (Some(first_remove), Some(compacted_created)) = (first_remove, compacted_created) else {
        panic!("compaction removed no segment or wrote no compacted one: {report:?}");
    };
    assert!(
        first_remove < compacted_created,
        "dead segments must be deleted before the compacted segment is written \
         (op {first_remove} removes, op {compacted_created} creates)"
    );
    assert!(report.segments_deleted >= 10, "{report:?}");

    // A crash before every operation that changes the disk, every image it may leave.
    let replay = before.fork();
    let (mut points, mut images) = (0, 0);
    for n in 0..=ops.len() {
        let next = ops.get(n);
        if next.is_none_or(SimOp::mutates) {
            points += 1;
            let kill = replay.fork();
            let crashes = replay
                .crash_images(n as u64, 4)
                .map(|i| SimStorage::from_image(&i));
            for (i, disk) in std::iter::once(kill).chain(crashes).enumerate() {
                images += 1;
                let store = sim_open(&disk)
                    .unwrap_or_else(|e| panic!("crash before op {n} ({next:?}), image {i}: {e}"));
                let got = contents(&store)
                    .unwrap_or_else(|e| panic!("crash before op {n}, image {i}: {e}"));
                assert_eq!(got, expected, "crash before op {n} ({next:?}), image {i}");
                if i == 0 {
                    // Writing after recovery works and is durable.
                    let seq = store.commit("b", &delta("b", 99)).unwrap();
                    let durable = SimStorage::from_image(&disk.durable_image());
                    drop(store);
                    let again = sim_open(&durable).unwrap();
                    assert_eq!(again.load_latest("b").unwrap().map(|c| c.seq), Some(seq));
                }
            }
        }
        if let Some(op) = next {
            replay.apply(op);
        }
    }
    println!("{points} crash points, {images} disk images recovered");
    assert!(
        points > 20 && images > points,
        "{points} points, {images} images"
    );
}

/// A disk whose final segment is sealed and has no successor, as a full disk leaves it
/// (the rotation failed creating the next segment), and the contents it holds.
fn sealed_final_segment() -> (SimStorage, Contents) {
    let sim = SimStorage::new();
    sim.record();
    let store = sim_open(&sim).unwrap();
    for i in 0..40 {
        store.commit("a", &delta("a", i)).unwrap();
    }
    drop(store);
    let ops = sim.take_recording();
    let last_rotation = ops
        .iter()
        .rposition(
            |op| matches!(op, SimOp::Create(p, _) if p.to_string_lossy().ends_with(".wal.tmp")),
        )
        .expect("a rotation");
    // A process kill right before that segment was created: the seal is durable.
    let disk = SimStorage::new();
    ops[..last_rotation].iter().for_each(|op| disk.apply(op));
    let store = sim_open(&disk.fork()).unwrap();
    let contents = contents(&store).unwrap();
    assert!(
        contents["a"].0.last().unwrap().0 > 20,
        "most commits are there"
    );
    (disk, contents)
}

#[test]
fn reopening_a_sealed_final_segment_writes_nothing() {
    let (disk, expected) = sealed_final_segment();
    let before: Vec<PathBuf> = disk.volatile_image().files.into_keys().collect();
    disk.record();
    let store = sim_open(&disk).unwrap();
    let ops = disk.take_recording();
    let writes: Vec<String> = ops
        .iter()
        .filter_map(|op| match op {
            SimOp::Create(path, _) => Some(format!("create {}", path.display())),
            SimOp::Write(ino, at, data) => {
                Some(format!("write {} bytes at {at} of inode {ino}", data.len()))
            }
            SimOp::Allocate(ino, len) => Some(format!("allocate inode {ino} to {len} bytes")),
            _ => None,
        })
        .collect();
    assert!(
        writes.is_empty(),
        "the open must need no space (a full disk), but it did: {writes:?}"
    );
    assert_eq!(contents(&store).unwrap(), expected);
    let after: Vec<PathBuf> = disk.volatile_image().files.into_keys().collect();
    assert_eq!(before, after, "the open created or removed files");
    // The first append creates the next segment, and it holds.
    let seq = store.commit("a", &delta("a", 1000)).unwrap();
    drop(store);
    let store = sim_open(&SimStorage::from_image(&disk.durable_image())).unwrap();
    assert_eq!(store.load_latest("a").unwrap().map(|c| c.seq), Some(seq));
}

#[test]
fn a_crash_while_the_first_append_creates_the_next_segment_loses_nothing() {
    let (disk, before) = sealed_final_segment();
    let store = sim_open(&disk).unwrap();
    let start = disk.fork();
    disk.record();
    let d = delta("a", 1000);
    let seq = store.commit("a", &d).unwrap();
    let ops = disk.take_recording();
    drop(store);
    let mut with_new = before.clone();
    let cps = &mut with_new.get_mut("a").unwrap().0;
    let mut state = cps.last().unwrap().1.clone();
    agentwal::State::apply(&mut state, &d);
    cps.push((seq, state));
    cps.remove(0); // keep_checkpoints: Some(2)

    let replay = start.fork();
    let mut images = 0;
    for n in 0..=ops.len() {
        let next = ops.get(n);
        if next.is_none_or(SimOp::mutates) {
            let kill = replay.fork();
            let crashes = replay
                .crash_images(n as u64, 4)
                .map(|i| SimStorage::from_image(&i));
            for (i, disk) in std::iter::once(kill).chain(crashes).enumerate() {
                images += 1;
                let what = format!("crash before op {n} ({next:?}), image {i}");
                let store = sim_open(&disk).unwrap_or_else(|e| panic!("{what}: {e}"));
                let got = contents(&store).unwrap_or_else(|e| panic!("{what}: {e}"));
                // The commit had not returned: either outcome, but whole.
                assert!(got == before || got == with_new, "{what}: {got:?}");
                let seq = store.commit("a", &delta("a", 2000)).unwrap();
                drop(store);
                let again = sim_open(&SimStorage::from_image(&disk.durable_image())).unwrap();
                assert_eq!(
                    again.load_latest("a").unwrap().map(|c| c.seq),
                    Some(seq),
                    "{what}"
                );
            }
        }
        if let Some(op) = next {
            replay.apply(op);
        }
    }
    // Acknowledged: the disk after every operation holds it, even on a power loss.
    let store = sim_open(&SimStorage::from_image(&replay.durable_image())).unwrap();
    assert_eq!(contents(&store).unwrap(), with_new);
    assert!(images > 10, "{images} images");
}
