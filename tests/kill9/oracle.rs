//! The oracle: after each kill, everything acknowledged is there with the right state
//! and every call begun or finished is in the journal.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use agentwal::{Error, State, Store};

use crate::parent::Acks;
use crate::workload::{
    BIG_TASK, BULK_BYTES_MAX, Chain, FORK_EVERY, FORKS_KEPT, KEEP, SEGMENT_BYTES, SHARED_TASK,
    THREADS, TOOL, all_tasks, call_args, call_id, call_result, chain_hash, delta, fork_source,
    is_big, options,
};

/// What the parent knows must be in the store.
#[derive(Default)]
pub(crate) struct Oracle {
    /// Per task: the largest acked seq so far.
    pub(crate) acked_max: HashMap<String, u64>,
    /// Per task: the latest seq the last check found (acked or not).
    pub(crate) seen_latest: HashMap<String, u64>,
    /// Per task: seqs below this may have been dropped by retention.
    pub(crate) retention_floor: HashMap<String, u64>,
    /// Per task: hash of the state after seq i at index i (index 0: empty state).
    pub(crate) hashes: HashMap<String, Vec<u64>>,
    /// Every acked call: (task, seq) -> finished.
    pub(crate) calls: BTreeMap<(String, u64), bool>,
    /// Forks of `big` acked made, and acked deleted.
    pub(crate) forks_acked: BTreeSet<String>,
    pub(crate) forks_deleted: BTreeSet<String>,
}

/// The bytes a big task's state keeps after deltas 1..=seq: the latest `BULK_BYTES_MAX`
/// of their payloads.
pub(crate) fn bulk(task: &str, seq: u64) -> Vec<u8> {
    let mut payloads = Vec::new();
    let mut bytes = 0;
    for s in (1..=seq).rev() {
        let payload = delta(task, s).payload;
        bytes += payload.len();
        payloads.push(payload);
        if bytes >= BULK_BYTES_MAX {
            break;
        }
    }
    let mut out: Vec<u8> = payloads.into_iter().rev().flatten().collect();
    out.drain(..out.len().saturating_sub(BULK_BYTES_MAX));
    out
}

impl Oracle {
    pub(crate) fn expected(&mut self, task: &str, seq: u64) -> Chain {
        if let Some(at) = fork_source(task).filter(|_| seq > 0) {
            // Seq 1 is `big` at `at`; its own deltas follow.
            let mut state = self.expected(BIG_TASK, at);
            (2..=seq).for_each(|s| state.apply(&delta(task, s)));
            return state;
        }
        let hashes = self
            .hashes
            .entry(task.to_string())
            .or_insert_with(|| vec![0]);
        while hashes.len() as u64 <= seq {
            let i = hashes.len() as u64;
            let prev = *hashes.last().unwrap_or(&0);
            hashes.push(chain_hash(prev, &delta(task, i)));
        }
        let (last, bulk) = match (seq, is_big(task)) {
            (0, _) => (Vec::new(), Vec::new()),
            (_, true) => (Vec::new(), bulk(task, seq)),
            (_, false) => (delta(task, seq).payload, Vec::new()),
        };
        Chain {
            len: seq,
            hash: hashes[seq as usize],
            last,
            bulk,
        }
    }

    /// Checks every fork `store` holds (each retained seq loads as expected, and seq 1
    /// says where it came from), that every acked fork not acked deleted is there (unless
    /// the fork that deletes it may have begun), and that no acked deletion came back.
    pub(crate) fn check_forks(&mut self, store: &Store<Chain>, ctx: &str) {
        let tasks = store
            .tasks()
            .unwrap_or_else(|e| panic!("{ctx}: tasks: {e}"));
        let present: Vec<&String> = tasks.iter().filter(|t| fork_source(t).is_some()).collect();
        let big_latest = self.seen_latest.get(BIG_TASK).copied().unwrap_or(0);
        for task in &present {
            let at = fork_source(task).expect("a fork");
            assert!(
                !self.forks_deleted.contains(*task),
                "{ctx}: fork {task} is back after its acked deletion"
            );
            assert!(
                at <= big_latest && at.is_multiple_of(FORK_EVERY),
                "{ctx}: fork {task} of a seq {BIG_TASK} never had (latest {big_latest})"
            );
            let infos = store
                .list_checkpoints(task)
                .unwrap_or_else(|e| panic!("{ctx}: list_checkpoints {task}: {e}"));
            assert!(
                infos.last().is_some_and(|i| i.seq <= 2),
                "{ctx}: fork {task} has checkpoints {infos:?}"
            );
            let acked = self.acked_max.get(*task).copied().unwrap_or(0);
            assert!(
                infos.last().is_some_and(|i| i.seq >= acked),
                "{ctx}: LOST COMMIT: fork {task} seq {acked} acked, checkpoints {infos:?}"
            );
            for info in &infos {
                if info.seq == 1 {
                    assert_eq!(
                        info.forked_from,
                        Some((BIG_TASK.to_string(), at)),
                        "{ctx}: origin of fork {task}"
                    );
                }
                let cp = store
                    .load(task, info.seq)
                    .unwrap_or_else(|e| panic!("{ctx}: load {task} {}: {e}", info.seq))
                    .unwrap_or_else(|| panic!("{ctx}: {task} {} listed, not loadable", info.seq));
                let want = self.expected(task, info.seq);
                assert!(
                    *cp.state == want,
                    "{ctx}: WRONG STATE of fork {task} at seq {}",
                    info.seq
                );
            }
        }
        for task in self.forks_acked.difference(&self.forks_deleted) {
            let at = fork_source(task).expect("a fork");
            // The fork made FORKS_KEPT forks later deletes it: it may be gone once that
            // one may have begun, acked or not.
            let deleter_began = big_latest >= at + FORKS_KEPT * FORK_EVERY;
            assert!(
                present.contains(&task) || deleter_began,
                "{ctx}: LOST FORK: {task} acked, not deleted, not there"
            );
        }
    }

    pub(crate) fn check_round(&mut self, dir: &Path, keep: Option<u32>, acks: &Acks, ctx: &str) {
        self.forks_acked
            .extend(acks.forks.iter().map(|f| f.0.clone()));
        self.forks_deleted.extend(acks.deletions.iter().cloned());
        for (task, seq) in &acks.commits {
            let m = self.acked_max.entry(task.clone()).or_default();
            *m = (*m).max(*seq);
        }
        for (task, seq) in &acks.begins {
            self.calls.entry((task.clone(), *seq)).or_insert(false);
        }
        for (task, seq) in &acks.finishes {
            self.calls.insert((task.clone(), *seq), true);
        }
        if !dir.exists() {
            assert!(acks.commits.is_empty(), "{ctx}: acked commits but no store");
            return;
        }
        match Store::<Chain>::open_read_only(dir) {
            Ok(read_only) => {
                // `keep` here only says what the child's compaction may have dropped.
                self.check_store(&read_only, keep, acks, &format!("{ctx}, read-only"));
            }
            // Killed while creating the store, before its first segment was in place: a
            // reader finds no store there, and nothing can have been acknowledged.
            Err(Error::NotAStore { .. }) if self.acked_max.is_empty() && self.calls.is_empty() => {}
            Err(e) => panic!("{ctx}: read-only open failed: {e}"),
        }
        let store = Store::<Chain>::open_with(dir, options(keep))
            .unwrap_or_else(|e| panic!("{ctx}: open failed: {e}"));
        self.check_store(&store, keep, acks, ctx);
        if keep.is_some() {
            // The child may have compacted away anything retention no longer served.
            for task in all_tasks() {
                let latest = self.seen_latest.get(&task).copied().unwrap_or(0);
                let floor = self.retention_floor.entry(task).or_default();
                *floor = (*floor).max(latest.saturating_sub(u64::from(KEEP) - 1));
            }
        }
    }

    pub(crate) fn check_store(
        &mut self,
        store: &Store<Chain>,
        keep: Option<u32>,
        acks: &Acks,
        ctx: &str,
    ) {
        for task in all_tasks() {
            let acked = self.acked_max.get(&task).copied().unwrap_or(0);
            let before = self.seen_latest.get(&task).copied().unwrap_or(0);
            let latest = store
                .load_latest(&task)
                .unwrap_or_else(|e| panic!("{ctx}: load_latest {task}: {e}"));
            let latest_seq = latest.as_ref().map_or(0, |c| c.seq);
            assert!(
                latest_seq >= acked,
                "{ctx}: LOST COMMITS: task {task} latest seq {latest_seq} < acked {acked}"
            );
            assert!(
                latest_seq >= before,
                "{ctx}: task {task} went back from seq {before} to {latest_seq}"
            );
            // Each writer has at most one commit in flight per task when killed.
            let in_flight = if task == SHARED_TASK { THREADS } else { 1 } as u64;
            assert!(
                latest_seq <= acked.max(before) + in_flight,
                "{ctx}: task {task} has seq {latest_seq}, beyond acked {acked} / seen {before} \
                 plus {in_flight} in flight"
            );
            if let Some(cp) = latest {
                let want = self.expected(&task, cp.seq);
                assert!(
                    *cp.state == want,
                    "{ctx}: WRONG STATE of {task} at latest seq {}",
                    cp.seq
                );
            }
            self.seen_latest.insert(task, latest_seq);
        }
        let mut checked = HashMap::new();
        // A state of `big` takes milliseconds to load and to recompute: of its acked
        // seqs, the newest is loaded and checked, the others must be listed.
        let big_listed: BTreeSet<u64> = store
            .list_checkpoints(BIG_TASK)
            .unwrap_or_else(|e| panic!("{ctx}: list_checkpoints {BIG_TASK}: {e}"))
            .iter()
            .map(|i| i.seq)
            .collect();
        let big_newest = acks
            .commits
            .iter()
            .filter(|c| c.0 == BIG_TASK)
            .map(|c| c.1)
            .max();
        // (Forks' commits: `check_forks`.)
        for (task, seq) in acks.commits.iter().filter(|c| fork_source(&c.0).is_none()) {
            match task == BIG_TASK && Some(*seq) != big_newest {
                true => self.check_listed(keep, task, *seq, &big_listed, ctx),
                false => self.check_seq(store, keep, task, *seq, ctx),
            }
            *checked.entry(task.clone()).or_insert(0u64) += 1;
        }
        // Also the newest retained checkpoints, acked in this round or before.
        for task in all_tasks() {
            let infos = store
                .list_checkpoints(&task)
                .unwrap_or_else(|e| panic!("{ctx}: list_checkpoints {task}: {e}"));
            let newest = if task == BIG_TASK { 4 } else { 32 };
            for info in infos.iter().rev().take(newest) {
                self.check_seq(store, keep, &task, info.seq, ctx);
            }
        }
        self.check_calls(store, keep, acks, ctx);
        self.check_forks(store, ctx);
    }

    pub(crate) fn check_seq(
        &mut self,
        store: &Store<Chain>,
        keep: Option<u32>,
        task: &str,
        seq: u64,
        ctx: &str,
    ) {
        let latest = self.seen_latest.get(task).copied().unwrap_or(0);
        let floor = self.floor(task, keep);
        match store.load(task, seq) {
            Ok(Some(cp)) => {
                let want = self.expected(task, seq);
                assert!(
                    cp.seq == seq && *cp.state == want,
                    "{ctx}: WRONG STATE of {task} at seq {seq}"
                );
            }
            Ok(None) if seq < floor => {} // dropped by retention
            Ok(None) => panic!(
                "{ctx}: LOST COMMIT: {task} seq {seq} acked but not loadable (latest {latest}, \
                 retention floor {floor})"
            ),
            Err(e) => panic!("{ctx}: load {task} {seq}: {e}"),
        }
    }

    /// Like [`check_seq`](Self::check_seq), for an acked `seq` of `task`, whose `listed`
    /// checkpoints are given: it is there, unless retention dropped it.
    pub(crate) fn check_listed(
        &self,
        keep: Option<u32>,
        task: &str,
        seq: u64,
        listed: &BTreeSet<u64>,
        ctx: &str,
    ) {
        let latest = self.seen_latest.get(task).copied().unwrap_or(0);
        let mut floor = self.retention_floor.get(task).copied().unwrap_or(0);
        if let Some(k) = keep {
            floor = floor.max(latest.saturating_sub(u64::from(k) - 1));
        }
        assert!(
            listed.contains(&seq) || seq < floor,
            "{ctx}: LOST COMMIT: {task} seq {seq} acked but not listed (latest {latest}, \
             retention floor {floor})"
        );
    }

    /// Seqs of `task` below this may have been dropped by retention: the child's, or
    /// `keep` (the handle being checked).
    pub(crate) fn floor(&self, task: &str, keep: Option<u32>) -> u64 {
        let latest = self.seen_latest.get(task).copied().unwrap_or(0);
        let floor = self.retention_floor.get(task).copied().unwrap_or(0);
        keep.map_or(floor, |k| {
            floor.max(latest.saturating_sub(u64::from(k) - 1))
        })
    }

    /// Every call acked in this round (all of them are checked at the end), on a store
    /// whose child ran with retention `keep`.
    pub(crate) fn check_calls(
        &self,
        store: &Store<Chain>,
        keep: Option<u32>,
        acks: &Acks,
        ctx: &str,
    ) {
        let mut pending: HashMap<String, HashMap<String, Vec<u8>>> = HashMap::new();
        let touched = acks.begins.iter().chain(&acks.finishes);
        for (task, seq) in touched {
            let finished = self.calls[&(task.clone(), *seq)];
            let floor = self.floor(task, keep);
            check_call(store, &mut pending, task, *seq, finished, floor, ctx);
        }
    }

    pub(crate) fn check_everything(&mut self, dir: &Path, ctx: &str) {
        if !dir.exists() {
            return;
        }
        let store = Store::<Chain>::open_with(dir, options(None))
            .unwrap_or_else(|e| panic!("{ctx}: open failed: {e}"));
        for task in all_tasks() {
            for info in store.list_checkpoints(&task).unwrap() {
                self.check_seq(&store, None, &task, info.seq, ctx);
            }
        }
        let mut pending = HashMap::new();
        for ((task, seq), finished) in &self.calls {
            let floor = self.floor(task, None);
            check_call(&store, &mut pending, task, *seq, *finished, floor, ctx);
        }
        self.check_forks(&store, ctx);
    }
}

/// What the store directory shows after a round: segment files recycled (their header's
/// RECYCLED flag) and segments larger than `segment_bytes` (a record too large for one).
pub(crate) fn segment_kinds(dir: &Path) -> (u64, u64) {
    let (mut recycled, mut oversized) = (0, 0);
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if agentwal::log::parse_segment_file_name(&name).is_none() {
            continue;
        }
        let Ok(bytes) = std::fs::read(entry.path()) else {
            continue;
        };
        let header = agentwal::log::SegmentHeader::decode(&bytes, &entry.path());
        recycled += u64::from(header.is_ok_and(|h| h.is_recycled()));
        oversized += u64::from(bytes.len() as u64 > SEGMENT_BYTES);
    }
    (recycled, oversized)
}

/// Checks the call of `seq`, begun (and `finished`, if so) with an ack. The call of seq
/// `s` finishes before checkpoint `s`, so once the child's retention dropped the
/// checkpoints below `floor`, the oldest retained is at least `floor` and compaction may
/// have pruned every finished call of a seq up to it (docs/store.md §4): such a call may
/// be gone whole, neither finished nor pending.
#[allow(clippy::too_many_arguments)]
fn check_call(
    store: &Store<Chain>,
    pending: &mut HashMap<String, HashMap<String, Vec<u8>>>,
    task: &str,
    seq: u64,
    finished: bool,
    floor: u64,
    ctx: &str,
) {
    let id = call_id(seq);
    let result = store
        .call_result(task, &id)
        .unwrap_or_else(|e| panic!("{ctx}: call_result {task} {id}: {e}"));
    if let Some(result) = result {
        assert!(
            result == call_result(task, seq),
            "{ctx}: WRONG RESULT of call {id} of {task}"
        );
        return;
    }
    let pending = pending.entry(task.to_string()).or_insert_with(|| {
        store
            .pending_calls(task)
            .unwrap_or_else(|e| panic!("{ctx}: pending_calls {task}: {e}"))
            .into_iter()
            .map(|p| {
                assert_eq!(p.tool, TOOL, "{ctx}: wrong tool of pending {}", p.call_id);
                (p.call_id, p.args)
            })
            .collect()
    });
    match pending.get(&id) {
        Some(args) => assert!(
            !finished && *args == call_args(task, seq),
            "{ctx}: LOST CALL RESULT or WRONG ARGS of pending call {id} of {task}"
        ),
        // Pruned whole (an unacked finish may have landed too).
        None if seq <= floor => {}
        None if finished => {
            panic!("{ctx}: LOST CALL RESULT: {task} {id} finished but has no result")
        }
        None => {
            panic!("{ctx}: LOST CALL: {task} {id} begun (acked) but neither pending nor finished")
        }
    }
}
