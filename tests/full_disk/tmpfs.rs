//! A small tmpfs filled until `ENOSPC`, the acknowledged model, and the checks after
//! the failure.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::MutexGuard;

use agentwal::{AgentDelta, AgentState, Error, Options, Store};

use crate::common;

/// A tmpfs mounted on a temporary directory for the life of the guard; unmounted when it
/// drops, also when the test fails.
pub(crate) struct Tmpfs {
    pub(crate) dir: tempfile::TempDir,
    /// `common::serial()`: the tmpfs tests run one at a time, because a child process
    /// (mount, df, the CLI) forked by one test while another drops its store inherits the
    /// store's lock file descriptor until it execs, and the other test's reopen then finds
    /// the store locked.
    pub(crate) _serial: MutexGuard<'static, ()>,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=` takes it), or `None` when mounting
    /// is impossible and the caller explicitly asked to skip (`AGENTWAL_SKIP_MOUNT_TESTS`).
    pub(crate) fn mount(size: &str) -> Option<Tmpfs> {
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

    pub(crate) fn store_dir(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    /// Bytes free on the tmpfs.
    pub(crate) fn free_bytes(&self) -> u64 {
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
pub(crate) fn delta(task: &str, i: u64) -> AgentDelta {
    AgentDelta::default()
        .set("blob", format!("{task} {i} {}", "x".repeat(600)))
        .set("step", i as i64)
}

pub(crate) fn options() -> Options {
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
pub(crate) struct Acked {
    pub(crate) seq: u64,
    pub(crate) state: AgentState,
    pub(crate) prev: AgentState,
}

impl Acked {
    pub(crate) fn commit(&mut self, seq: u64, d: &AgentDelta) {
        assert_eq!(seq, self.seq + 1, "seqs follow");
        self.seq = seq;
        self.prev = self.state.clone();
        agentwal::State::apply(&mut self.state, d);
    }
}

/// What was acknowledged, per task.
pub(crate) type Model = BTreeMap<String, Acked>;

/// What a fill left: the model of what was acknowledged, the failure, and the commit
/// that failed (its outcome is unknown: it may or may not have reached the disk).
pub(crate) struct Filled {
    pub(crate) model: Model,
    pub(crate) failure: Error,
    pub(crate) failed: Option<(String, AgentDelta)>,
}

impl Filled {
    /// The model as `store` (reopened) must show it: with the failed commit if the store
    /// has it. Never with more.
    pub(crate) fn settle(&mut self, store: &Store) {
        self.model = self.settled(store);
        self.failed = None;
    }

    pub(crate) fn settled(&self, store: &Store) -> Model {
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
pub(crate) fn fill(store: &Store, tasks: &[&str], delete_every: Option<u64>) -> Filled {
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
pub(crate) fn assert_latest(store: &Store, model: &Model, what: &str) {
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
pub(crate) fn assert_retained_load(store: &Store, what: &str) {
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
pub(crate) fn after_the_failure(store: Store, dir: &Path, filled: &Filled) {
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
