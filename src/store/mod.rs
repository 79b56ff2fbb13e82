//! The typed store: agent state as checkpoints on the log.

mod cache;
mod calls;
mod codec;
mod compaction;
mod index;
mod inspect;
mod replay;
mod salvage;
mod types;

use std::marker::PhantomData;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

pub use crate::log::COMPACTION_DEAD_BYTES_MIN;
pub use inspect::{
    BodyCheck, CallInfo, RecordSummary, TaskInfo, UndecodedBodies, VerifyReport, describe_record,
};
pub use types::*;

use self::codec::{Body, CheckpointRec, DeleteRec, Origin};
use self::index::{CpEntry, Index, TaskData, TaskSlot};
use crate::background::Periodic;
use crate::error::{CorruptionReason, Error, Result};
use crate::log::{Log, RecordPos, RecordRef, RecoveryMode};
use crate::state::{AgentState, State};
use crate::storage::{RealStorage, Storage};

/// A store of agent tasks and their checkpoints. Cheap to clone; share it across threads.
///
/// ```
/// use agentwal::{AgentDelta, Message, Store};
/// # let dir = tempfile::tempdir().unwrap();
/// let store: Store = Store::open(dir.path())?;
/// let seq = store.commit("task-1", &AgentDelta::default().message(Message::user("hi")))?;
/// assert_eq!(seq, 1);
/// let latest = store.load_latest("task-1")?.expect("committed");
/// assert_eq!(latest.state.messages[0].content, "hi");
/// # Ok::<(), agentwal::Error>(())
/// ```
pub struct Store<S: State = AgentState> {
    // Declared first so it drops first: the last handle stops and joins the background
    // compactor before the log (and its directory lock) goes.
    _compactor: Arc<Option<Periodic>>,
    inner: Arc<Inner>,
    cache: Arc<cache::StateCache<S>>,
    _state: PhantomData<fn() -> S>,
}

impl<S: State> Clone for Store<S> {
    fn clone(&self) -> Self {
        Store {
            _compactor: self._compactor.clone(),
            inner: self.inner.clone(),
            cache: self.cache.clone(),
            _state: PhantomData,
        }
    }
}

/// A checkpoint record's decoded body.
enum DecodedBody<S: State> {
    Snapshot(S),
    Delta(S::Delta),
}

struct Inner {
    log: Log,
    index: Index,
    options: Options,
    report: RecoveryReport,
    commits: AtomicU64,
    compactions: AtomicU64,
    /// Held shared while resolving and reading record positions; compaction holds it
    /// exclusively while it moves records and repoints the index.
    relocation: parking_lot::RwLock<()>,
    /// Serializes compaction passes.
    compactor: parking_lot::Mutex<()>,
}

impl<S: State> Store<S> {
    /// Opens the store in `dir` with default options, creating it if needed, and recovers
    /// every durable commit.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(dir, Options::default())
    }

    /// Opens (or creates) the store in `dir` with `options`.
    pub fn open_with(dir: impl AsRef<Path>, options: Options) -> Result<Self> {
        Self::open_on(Arc::new(RealStorage), dir, options)
    }

    /// Like [`open_with`](Self::open_with), on the given storage (tests run the engine on
    /// a simulated one to inject crashes and I/O errors).
    pub fn open_on(
        storage: Arc<dyn Storage>,
        dir: impl AsRef<Path>,
        options: Options,
    ) -> Result<Self> {
        let dir = dir.as_ref();
        Self::recover(options, |visit| {
            Log::open_on(storage, dir, options.log_options(), visit)
        })
    }

    /// Opens the store read-only: it takes no lock and writes nothing, so it works while
    /// a writer (another process, say) runs; it sees what was durable when it opened.
    /// Writes return [`Error::ReadOnly`].
    pub fn open_read_only(dir: impl AsRef<Path>) -> Result<Self> {
        Self::open_read_only_with(dir, Options::default())
    }

    /// Like [`open_read_only`](Self::open_read_only), honouring `options.recovery` (e.g.
    /// `Salvage` to read a damaged store) and retention; durability and compaction
    /// options are irrelevant to a reader.
    pub fn open_read_only_with(dir: impl AsRef<Path>, options: Options) -> Result<Self> {
        Self::open_read_only_on(Arc::new(RealStorage), dir, options)
    }

    /// Like [`open_read_only_with`](Self::open_read_only_with), on the given storage.
    pub fn open_read_only_on(
        storage: Arc<dyn Storage>,
        dir: impl AsRef<Path>,
        options: Options,
    ) -> Result<Self> {
        let dir = dir.as_ref();
        Self::recover(options, |visit| {
            Log::open_read_only_on(storage, dir, options.log_options(), visit)
        })
    }

    fn recover(
        options: Options,
        open: impl FnOnce(&mut dyn FnMut(RecordRef<'_>) -> Result<()>) -> Result<Log>,
    ) -> Result<Self> {
        validate_options(&options)?;
        let started = Instant::now();
        let index = Index::new(S::VERSION);
        let salvage = options.recovery == RecoveryMode::Salvage;
        let mut replayer = replay::Replayer::new(&index, salvage);
        let log = open(&mut |rec| replayer.visit(rec))?;
        let mut lost = replayer.finish()?;
        if salvage {
            salvage::name_skipped_checkpoints(&log, &index, &mut lost);
        }
        let r = log.recovery();
        let report = RecoveryReport {
            records: r.records,
            bytes: r.bytes,
            segments: r.segments,
            torn_bytes: r.torn_bytes,
            skipped: r.skipped.clone(),
            lost,
            tasks: index.task_count() as u64,
            elapsed_ms: started.elapsed().as_millis() as u64,
        };
        tracing::info!(
            tasks = report.tasks,
            records = report.records,
            torn_bytes = report.torn_bytes,
            elapsed_ms = report.elapsed_ms,
            "store opened"
        );
        let inner = Arc::new(Inner {
            log,
            index,
            options,
            report,
            commits: AtomicU64::new(0),
            compactions: AtomicU64::new(0),
            relocation: parking_lot::RwLock::new(()),
            compactor: parking_lot::Mutex::new(()),
        });
        let compactor = (options.auto_compact && !inner.log.is_read_only())
            .then(|| compaction::spawn_background(Arc::downgrade(&inner)))
            .flatten();
        Ok(Store {
            _compactor: Arc::new(compactor),
            inner,
            cache: Arc::new(cache::StateCache::new(options.cache_bytes)),
            _state: PhantomData,
        })
    }

    /// Commits `delta` as the task's next checkpoint and returns its seq (1, 2, 3, ...).
    /// With `SyncMode::Always` the checkpoint is durable when this returns. Commits to one
    /// task are serialized; commits to different tasks share fsyncs.
    pub fn commit(&self, task: &str, delta: &S::Delta) -> Result<u64> {
        self.commit_inner(task, None, delta)
    }

    /// Like [`commit`](Self::commit), but only if the task's latest seq is `expected_seq`
    /// (0: the task must not exist); otherwise [`Error::Conflict`].
    pub fn commit_if(&self, task: &str, expected_seq: u64, delta: &S::Delta) -> Result<u64> {
        self.commit_inner(task, Some(expected_seq), delta)
    }

    fn commit_inner(&self, task: &str, expected: Option<u64>, delta: &S::Delta) -> Result<u64> {
        self.writable()?;
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        codec::with_encoded(delta, |delta_bytes| {
            self.with_task_lock(task, |slot| {
                self.commit_locked(task, slot, expected, delta, delta_bytes)
            })
        })
    }

    fn commit_locked(
        &self,
        task: &str,
        slot: &Arc<TaskSlot>,
        expected: Option<u64>,
        delta: &S::Delta,
        delta_bytes: &[u8],
    ) -> Result<u64> {
        let (latest, snapshot_due, previous_ms, state_bytes) = {
            let data = slot.data.read();
            // A history written under another schema version: rebuilding the state
            // (through the migration hooks) before writing refuses the commit if it
            // cannot be read, and the snapshot then written leaves it readable as is.
            let due = self.snapshot_due(&data, delta_bytes.len()) || data.foreign_schema;
            // What the state's encoding takes, give or take: the last snapshot and the
            // deltas since (an upper bound when deltas overwrite).
            let state_bytes = data.snapshot_bytes + data.delta_bytes_since_snapshot;
            (
                data.latest_seq(),
                due,
                data.latest_created_at_ms(),
                state_bytes,
            )
        };
        if let Some(expected) = expected
            && expected != latest
        {
            return Err(Error::Conflict {
                task: task.to_string(),
                expected,
                actual: latest,
            });
        }
        let seq = latest + 1;
        let next = self.state_after(task, slot, latest, delta, snapshot_due)?;
        let snapshot = match (&next, snapshot_due) {
            (Some(state), true) => {
                self.encode_snapshot(task, state, state_bytes + delta_bytes.len() as u64)?
            }
            _ => None,
        };
        let (body_kind, body) = match &snapshot {
            Some(bytes) => (Body::Snapshot, bytes.as_slice()),
            None => (Body::Delta, delta_bytes),
        };
        let rec = CheckpointRec {
            task,
            seq,
            // Never earlier than the previous checkpoint, so max_age retention can bisect.
            created_at_ms: now_ms().max(previous_ms),
            schema_version: S::VERSION,
            body_kind,
            origin: None,
            body,
        };
        self.append_live(codec::KIND_CHECKPOINT, codec::Decoded::Checkpoint(rec))?;
        self.inner.commits.fetch_add(1, Ordering::Relaxed);
        if let Some(state) = next {
            self.cache_put(task, slot, seq, state);
        }
        Ok(seq)
    }

    /// The task's state after `delta`, from the cache (or, for a new task, the default
    /// state); folded from disk only when a snapshot is due and the cache missed. `None`
    /// when neither is at hand, or the history cannot be folded (headless).
    fn state_after(
        &self,
        task: &str,
        slot: &Arc<TaskSlot>,
        latest: u64,
        delta: &S::Delta,
        snapshot_due: bool,
    ) -> Result<Option<Arc<S>>> {
        let mut state = if latest == 0 {
            Some(Arc::new(S::default()))
        } else {
            self.cache.take(task, slot, latest)
        };
        if state.is_none() && snapshot_due {
            let _reading = self.inner.relocation.read();
            let plan = slot.data.read().fold_plan(latest);
            if let Some(plan) = plan {
                state = Some(Arc::new(self.fold(task, latest, &plan)?));
            }
        }
        if let Some(state) = state.as_mut() {
            // Cloned only if a reader still holds this state.
            Arc::make_mut(state).apply(delta);
        }
        Ok(state)
    }

    /// Caches the task's state at `seq`, sized by the records a load would read.
    fn cache_put(&self, task: &str, slot: &Arc<TaskSlot>, seq: u64, state: Arc<S>) {
        let bytes = {
            let data = slot.data.read();
            data.snapshot_bytes + data.delta_bytes_since_snapshot
        };
        self.cache.put(task, slot, seq, state, bytes);
    }

    /// Encodes `state` as a snapshot, unless it cannot fit in a record. `estimate_bytes`
    /// sizes the buffer up front.
    fn encode_snapshot(
        &self,
        task: &str,
        state: &S,
        estimate_bytes: u64,
    ) -> Result<Option<Vec<u8>>> {
        let limit = self.inner.log.payload_bytes_max();
        // Never more than a record can hold (a state too big to snapshot keeps
        // accumulating deltas, and with them the estimate).
        let bytes = codec::encode_with_capacity(state, estimate_bytes.min(limit) as usize)?;
        // A snapshot too big for a segment is skipped: the delta alone still commits.
        let overhead = codec::SNAPSHOT_MARGIN_BYTES
            + task.len() as u64
            + codec::CHECKPOINT_FIXED_BYTES_MAX as u64;
        Ok((bytes.len() as u64 + overhead <= limit).then_some(bytes))
    }

    /// The snapshot policy: a snapshot once the deltas since the last one outweigh it
    /// `SNAPSHOT_DELTA_RATIO` times over (bytes written stay within about 1.7 times the
    /// deltas, a cold load reads at most about 3 times the state), and after at most
    /// `snapshot_every` deltas whatever their size (bounds the records a cold load folds).
    fn snapshot_due(&self, data: &TaskData, next_delta_bytes: usize) -> bool {
        let count_due = data.deltas_since_snapshot + 1 >= self.inner.options.snapshot_every;
        let delta_bytes = data.delta_bytes_since_snapshot + next_delta_bytes as u64;
        let outweighed =
            (data.snapshot_bytes * SNAPSHOT_DELTA_RATIO).max(SNAPSHOT_DELTA_BYTES_FLOOR);
        count_due || delta_bytes > outweighed
    }

    /// Appends a record and applies it to the index, as replay would.
    fn append_live(&self, kind: u8, rec: codec::Decoded<'_>) -> Result<()> {
        let payload = match &rec {
            codec::Decoded::CallBegin(b) => codec::encode(b)?,
            codec::Decoded::CallFinish(f) => codec::encode(f)?,
            codec::Decoded::Checkpoint(c) => codec::encode_checkpoint(c)?,
            codec::Decoded::Delete(d) => codec::encode(d)?,
        };
        // Held from append to index update: compaction's barrier (an exclusive hold)
        // then knows every durable record below the active segment is indexed.
        let _indexing = self.inner.relocation.read();
        let appended = self.inner.log.append(kind, &payload)?;
        self.apply_live(&rec, appended.pos, appended.bytes)
    }

    /// Applies a record this handle just made durable to the index.
    fn apply_live(&self, rec: &codec::Decoded<'_>, pos: RecordPos, bytes: u32) -> Result<()> {
        replay::apply(&self.inner.index, rec, pos, bytes).map_err(|why| Error::Corruption {
            segment: self.inner.log.path_of(pos),
            offset: pos.offset,
            reason: CorruptionReason::Inconsistent(why),
        })
    }

    /// The task's newest checkpoint, or `None` if the task has none.
    pub fn load_latest(&self, task: &str) -> Result<Option<Checkpoint<S>>> {
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        let Some(slot) = self.inner.index.get(task) else {
            return Ok(None);
        };
        let latest = slot.data.read().latest_seq();
        if latest == 0 {
            return Ok(None);
        }
        self.load_from(task, &slot, latest)
    }

    /// The task's state exactly as of checkpoint `seq`. `None` if the task does not exist
    /// or retention dropped that checkpoint; seq 0 or beyond the latest is an error.
    pub fn load(&self, task: &str, seq: u64) -> Result<Option<Checkpoint<S>>> {
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        let Some(slot) = self.inner.index.get(task) else {
            return Ok(None);
        };
        let (latest, retained_from) = {
            let data = slot.data.read();
            (data.latest_seq(), self.retained_from(&data))
        };
        if seq == 0 || seq > latest {
            return Err(Error::UnknownSeq {
                task: task.to_string(),
                seq,
                latest,
            });
        }
        if seq < retained_from {
            return Ok(None);
        }
        self.load_from(task, &slot, seq)
    }

    /// The newest retained checkpoint whose state passes `accept` (falls back past
    /// unhealthy ones); `None` if none does.
    pub fn load_latest_matching(
        &self,
        task: &str,
        accept: impl Fn(&S) -> bool,
    ) -> Result<Option<Checkpoint<S>>> {
        for info in self.list_checkpoints(task)?.iter().rev() {
            if let Some(cp) = self.load(task, info.seq)?
                && accept(&cp.state)
            {
                return Ok(Some(cp));
            }
        }
        Ok(None)
    }

    /// Oldest seq retention serves for this task.
    fn retained_from(&self, data: &TaskData) -> u64 {
        let o = &self.inner.options;
        let max_age_ms = o.max_age.map(|d| d.as_millis() as u64);
        data.retained_from(o.keep_checkpoints, max_age_ms, now_ms())
    }

    fn load_from(
        &self,
        task: &str,
        slot: &Arc<TaskSlot>,
        seq: u64,
    ) -> Result<Option<Checkpoint<S>>> {
        let _reading = self.inner.relocation.read();
        let (created_at_ms, latest) = {
            let data = slot.data.read();
            // Deleted since the caller found the slot: a compaction may already have
            // dropped or moved its records, so its positions point at nothing of its own.
            if data.deleted {
                return Ok(None);
            }
            let Some(entry) = data.checkpoint(seq) else {
                return Ok(None);
            };
            (entry.created_at_ms, data.latest_seq())
        };
        let checkpoint = |state| {
            Some(Checkpoint {
                task: task.to_string(),
                seq,
                created_at_ms,
                state,
            })
        };
        if seq == latest
            && let Some(state) = self.cache.get(task, slot, seq)
        {
            return Ok(checkpoint(state));
        }
        // The plan only after a cache miss: it lists every record back to the last
        // snapshot, which a hit must not pay for.
        let plan = {
            let data = slot.data.read();
            if data.deleted {
                return Ok(None);
            }
            data.fold_plan(seq)
        };
        let Some(plan) = plan else { return Ok(None) };
        let state = Arc::new(self.fold(task, seq, &plan)?);
        if seq == latest {
            self.cache_put(task, slot, seq, state.clone());
        }
        Ok(checkpoint(state))
    }

    /// Rebuilds the state at `seq` from its fold plan (a snapshot or the first delta,
    /// then deltas up to `seq`: consecutive seqs).
    fn fold(&self, task: &str, seq: u64, plan: &[CpEntry]) -> Result<S> {
        let mut state = S::default();
        let first = (seq + 1).checked_sub(plan.len() as u64);
        assert!(
            first.is_some_and(|f| f >= 1),
            "fold plan longer than the task"
        );
        for (entry_seq, entry) in (first.unwrap_or(1)..).zip(plan) {
            match self.read_body(task, entry_seq, entry.pos)? {
                DecodedBody::Snapshot(s) => state = s,
                DecodedBody::Delta(d) => state.apply(&d),
            }
        }
        Ok(state)
    }

    /// Reads and decodes the body of checkpoint `seq` of `task`, indexed at `pos`,
    /// migrating data written under another schema version. A record at `pos` that is not
    /// that checkpoint is an error, never a state.
    fn read_body(&self, task: &str, seq: u64, pos: RecordPos) -> Result<DecodedBody<S>> {
        self.inner.log.read_with(pos, |rec| {
            let c = indexed_checkpoint(&rec, task, seq)?;
            decode_body(&rec, &c)
        })
    }

    /// The task's retained checkpoints, oldest first (empty for an unknown task).
    pub fn list_checkpoints(&self, task: &str) -> Result<Vec<CheckpointInfo>> {
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        let Some(slot) = self.inner.index.get(task) else {
            return Ok(Vec::new());
        };
        let data = slot.data.read();
        let retained_from = self.retained_from(&data);
        Ok(data
            .checkpoints
            .iter()
            .enumerate()
            .filter(|(i, _)| data.first_seq + *i as u64 >= retained_from)
            .map(|(i, c)| {
                let seq = data.first_seq + i as u64;
                CheckpointInfo {
                    seq,
                    created_at_ms: c.created_at_ms,
                    bytes: u64::from(c.bytes),
                    snapshot: c.snapshot,
                    forked_from: (seq == 1)
                        .then(|| data.origin.as_deref().map(|(t, s)| (t.to_string(), *s)))
                        .flatten(),
                }
            })
            .collect())
    }

    /// Ids of all tasks, sorted.
    pub fn tasks(&self) -> Result<Vec<String>> {
        Ok(self.inner.index.task_ids())
    }

    /// Starts `new_task` from `task`'s state at `seq` (its checkpoint 1 is a snapshot of
    /// that state, which remembers where it came from). Later commits to either task do
    /// not affect the other. Returns the new task's seq (1).
    pub fn fork(&self, task: &str, seq: u64, new_task: &str) -> Result<u64> {
        self.writable()?;
        validate_id("task id", new_task, TASK_ID_BYTES_MAX)?;
        let Some(source) = self.load(task, seq)? else {
            return Err(if self.inner.index.get(task).is_none() {
                Error::UnknownTask {
                    task: task.to_string(),
                }
            } else {
                Error::InvalidArgument(format!(
                    "checkpoint {seq} of task {task:?} is no longer retained"
                ))
            });
        };
        let body = codec::encode(&*source.state)?;
        self.with_task_lock(new_task, |slot| {
            if slot.data.read().latest_seq() != 0 {
                return Err(Error::TaskExists {
                    task: new_task.to_string(),
                });
            }
            self.append_live(
                codec::KIND_CHECKPOINT,
                codec::Decoded::Checkpoint(CheckpointRec {
                    task: new_task,
                    seq: 1,
                    created_at_ms: now_ms(),
                    schema_version: S::VERSION,
                    body_kind: Body::Snapshot,
                    origin: Some(Origin { task, seq }),
                    body: &body,
                }),
            )?;
            Ok(1)
        })
    }

    /// Deletes a task durably: its checkpoints and tool calls are gone when this returns;
    /// compaction reclaims their space.
    pub fn delete_task(&self, task: &str) -> Result<()> {
        self.writable()?;
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        let Some(slot) = self.inner.index.get(task) else {
            return Err(Error::UnknownTask {
                task: task.to_string(),
            });
        };
        let _commit = slot.commit.lock();
        if slot.data.read().deleted {
            return Err(Error::UnknownTask {
                task: task.to_string(),
            });
        }
        let rec = DeleteRec {
            task,
            created_at_ms: now_ms(),
        };
        self.cache.remove(task);
        self.append_live(codec::KIND_DELETE, codec::Decoded::Delete(rec))
    }

    /// Makes everything committed so far durable (needed only with `SyncMode::Periodic`
    /// or `Never`).
    pub fn flush(&self) -> Result<()> {
        self.writable()?;
        self.inner.log.flush()
    }

    /// What `open` found: records replayed, torn bytes discarded, corruption skipped.
    pub fn recovery_report(&self) -> RecoveryReport {
        self.inner.report.clone()
    }

    /// The options this handle was opened with.
    pub fn options(&self) -> &Options {
        &self.inner.options
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        self.inner.log.dir()
    }

    /// Counters and sizes (see [`Stats`]).
    pub fn stats(&self) -> Stats {
        let log = self.inner.log.stats();
        let (mut live_bytes, mut tasks, mut checkpoints) = (0, 0, 0);
        self.inner.index.for_each(|_, d| {
            live_bytes += d.live_bytes();
            tasks += u64::from(!d.checkpoints.is_empty() || !d.calls.is_empty());
            checkpoints += d.checkpoints.len() as u64;
        });
        let sizes = self.inner.log.segment_sizes().unwrap_or_default();
        let (segments, disk_bytes) = (sizes.len() as u64, sizes.iter().map(|(_, b)| b).sum());
        let log_bytes = self.inner.report.bytes + log.bytes_written;
        Stats {
            commits: self.inner.commits.load(Ordering::Relaxed),
            appends: log.appends,
            fsyncs: log.fsyncs,
            batches: log.batches,
            mean_batch_records: if log.batches == 0 {
                0.0
            } else {
                log.appends as f64 / log.batches as f64
            },
            bytes_written: log.bytes_written,
            zero_bytes_written: log.zero_bytes_written,
            live_bytes,
            dead_bytes: log_bytes.saturating_sub(live_bytes),
            segments,
            disk_bytes,
            tasks,
            checkpoints,
            compactions: self.inner.compactions.load(Ordering::Relaxed),
        }
    }

    fn writable(&self) -> Result<()> {
        if self.inner.log.is_read_only() {
            Err(Error::ReadOnly)
        } else {
            Ok(())
        }
    }

    /// Runs `f` holding the task's commit lock (creating the task's slot if needed), so
    /// the check-then-append of one task's writes cannot interleave. Retries if the slot
    /// was deleted while waiting. A slot still empty afterwards (the write on a new task
    /// failed) is removed again unless someone else holds it (see `remove_if_unused`).
    fn with_task_lock<T>(
        &self,
        task: &str,
        f: impl FnOnce(&Arc<TaskSlot>) -> Result<T>,
    ) -> Result<T> {
        loop {
            let slot = self.inner.index.get_or_create(task);
            let commit = slot.commit.lock();
            if slot.data.read().deleted {
                continue;
            }
            let result = f(&slot);
            let empty = !slot.data.read().exists();
            // Both released before the check: it requires that no one holds the slot.
            drop(commit);
            drop(slot);
            if empty {
                self.inner.index.remove_if_unused(task);
            }
            return result;
        }
    }

    /// How many task slots the in-memory index holds, tasks or not. Equal to
    /// `stats().tasks` unless writes on other threads are under way; exposed for tests of
    /// the index's memory, not a stable API.
    #[doc(hidden)]
    pub fn index_slots(&self) -> usize {
        self.inner.index.slot_count()
    }
}

/// The checkpoint record `rec`, which the index of `task` points at for `seq`; an error if
/// the record is not that checkpoint.
fn indexed_checkpoint<'a>(rec: &RecordRef<'a>, task: &str, seq: u64) -> Result<CheckpointRec<'a>> {
    let codec::Decoded::Checkpoint(c) = codec::decode(rec)? else {
        let why = "index points at a non-checkpoint record".into();
        return Err(codec::decode_error(rec, why));
    };
    if (c.task, c.seq) != (task, seq) {
        let why = format!(
            "index of task {task:?} seq {seq} points at seq {} of {:?}",
            c.seq, c.task
        );
        return Err(codec::decode_error(rec, why));
    }
    Ok(c)
}

/// Decodes the body of checkpoint `c` (read at `rec`) as `S` or `S::Delta`, migrating data
/// written under another schema version. Reads nothing: every error is about the body.
fn decode_body<S: State>(rec: &RecordRef<'_>, c: &CheckpointRec<'_>) -> Result<DecodedBody<S>> {
    // The record checked out before this point, so a body that does not decode is not
    // damage (see `Error::BodyDecode`).
    let bad = |e: postcard::Error| Error::BodyDecode {
        segment: rec.segment.to_path_buf(),
        offset: rec.offset,
        task: c.task.to_string(),
        seq: c.seq,
        schema_version: c.schema_version,
        reason: e.to_string(),
    };
    let (version, body) = (c.schema_version, c.body);
    Ok(match (c.body_kind, version == S::VERSION) {
        (Body::Snapshot, true) => DecodedBody::Snapshot(postcard::from_bytes(body).map_err(bad)?),
        (Body::Snapshot, false) => DecodedBody::Snapshot(S::migrate_state(version, body)?),
        (Body::Delta, true) => DecodedBody::Delta(postcard::from_bytes(body).map_err(bad)?),
        (Body::Delta, false) => DecodedBody::Delta(S::migrate_delta(version, body)?),
    })
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub(crate) fn validate_id(what: &str, id: &str, max_bytes: usize) -> Result<()> {
    if id.is_empty() {
        return Err(Error::InvalidArgument(format!("{what} is empty")));
    }
    if id.len() > max_bytes {
        return Err(Error::InvalidArgument(format!(
            "{what} is {} bytes; the limit is {max_bytes}",
            id.len()
        )));
    }
    Ok(())
}

fn validate_options(options: &Options) -> Result<()> {
    if options.snapshot_every == 0 {
        return Err(Error::InvalidArgument(
            "snapshot_every must be at least 1".into(),
        ));
    }
    if options.keep_checkpoints == Some(0) {
        return Err(Error::InvalidArgument(
            "keep_checkpoints must be at least 1 (the latest checkpoint is always kept)".into(),
        ));
    }
    Ok(())
}
