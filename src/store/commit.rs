//! The commit path: the snapshot policy, encoding, and appending a checkpoint.

use super::*;

impl<S: State> Store<S> {
    /// Checks a commit's arguments before it takes the task's gate.
    pub(crate) fn check_commit(&self, task: &str) -> Result<()> {
        self.writable()?;
        validate_id("task id", task, TASK_ID_BYTES_MAX)
    }

    /// Commits `delta` as the task's next checkpoint and returns its seq (1, 2, 3, ...).
    /// With `SyncMode::Always` the checkpoint is durable when this returns. Commits to one
    /// task are serialized; commits to different tasks share fsyncs.
    pub fn commit(&self, task: &str, delta: &S::Delta) -> Result<u64> {
        self.commit_inner(task, None, Cow::Borrowed(delta))
    }

    /// Like [`commit_if`](Self::commit_if) (with `expected_seq`) or [`commit`](Self::commit)
    /// (without), for a caller done with the delta: the cached state takes the delta's
    /// contents over instead of copying them (see [`State::apply_owned`]), so the commit
    /// spends less CPU. Same result, same record.
    pub fn commit_owned(
        &self,
        task: &str,
        expected_seq: Option<u64>,
        delta: S::Delta,
    ) -> Result<u64> {
        self.commit_inner(task, expected_seq, Cow::Owned(delta))
    }

    /// Like [`commit`](Self::commit), but only if the task's latest seq is `expected_seq`
    /// (0: the task must not exist); otherwise [`Error::Conflict`].
    pub fn commit_if(&self, task: &str, expected_seq: u64, delta: &S::Delta) -> Result<u64> {
        self.commit_inner(task, Some(expected_seq), Cow::Borrowed(delta))
    }

    /// `commit_if` with `Some(expected)`, `commit` with `None`.
    pub(crate) fn commit_inner(
        &self,
        task: &str,
        expected: Option<u64>,
        delta: Cow<'_, S::Delta>,
    ) -> Result<u64> {
        self.check_commit(task)?;
        codec::with_encoded(delta, |delta, delta_bytes| {
            self.with_task_lock(task, |slot| {
                self.commit_locked(task, slot, expected, delta, delta_bytes)
            })
        })
    }

    pub(super) fn commit_locked(
        &self,
        task: &str,
        slot: &Arc<TaskSlot>,
        expected: Option<u64>,
        delta: Cow<'_, S::Delta>,
        delta_bytes: &[u8],
    ) -> Result<u64> {
        let plan = self.plan_commit(task, slot, expected, delta, delta_bytes, Reads::Allowed)?;
        let Some(plan) = plan else {
            unreachable!("a commit that may read never defers")
        };
        let body = plan.body(self.inner.options.compression.at_commit(), delta_bytes);
        let rec = plan.record(task, &body);
        self.append_live(codec::KIND_CHECKPOINT, codec::Decoded::Checkpoint(rec))?;
        Ok(self.committed(task, slot, plan.seq, plan.next))
    }

    /// Everything a commit decides before it appends: the conflict check, the next seq,
    /// the next state, and whether to write a snapshot. `None` under `Reads::Refused`
    /// when the next state is neither cached nor new and a snapshot is due, so it would
    /// have to be folded from disk (the async API then commits on a blocking thread).
    pub(super) fn plan_commit(
        &self,
        task: &str,
        slot: &Arc<TaskSlot>,
        expected: Option<u64>,
        delta: Cow<'_, S::Delta>,
        delta_bytes: &[u8],
        reads: Reads,
    ) -> Result<Option<CommitPlan<S>>> {
        let at = self.commit_point(slot, delta_bytes.len());
        let (latest, snapshot_due) = (at.latest_seq, at.snapshot_due);
        if let Some(expected) = expected
            && expected != latest
        {
            return Err(Error::Conflict {
                task: task.to_string(),
                expected,
                actual: latest,
            });
        }
        if reads == Reads::Refused
            && snapshot_due
            && latest > 0
            && !self.cache.contains(task, slot, latest)
        {
            return Ok(None);
        }
        let mut next = self.state_after(task, slot, latest, delta, snapshot_due)?;
        let snapshot = match (&mut next, snapshot_due) {
            (Some(cached), true) => self
                .encode_snapshot(
                    task,
                    cached.folded(),
                    at.state_bytes + delta_bytes.len() as u64,
                )?
                .map(|raw| self.stored_snapshot(raw)),
            _ => None,
        };
        Ok(Some(CommitPlan {
            seq: latest + 1,
            // Never earlier than the previous checkpoint, so max_age retention can bisect.
            created_at_ms: now_ms().max(at.previous_ms),
            snapshot,
            next,
        }))
    }

    /// What follows a commit's record once it is durable and indexed: the counters and
    /// the cache. The task's gate is held: nothing else can have moved its latest seq, and
    /// a load of `seq` now checks the record it reads is this one (`indexed_checkpoint`).
    pub(super) fn committed(
        &self,
        task: &str,
        slot: &Arc<TaskSlot>,
        seq: u64,
        next: Option<Cached<S>>,
    ) -> u64 {
        assert_eq!(
            slot.data.read().latest_seq(),
            seq,
            "commit of {task:?} not indexed"
        );
        self.inner.commits.fetch_add(1, Ordering::Relaxed);
        if let Some(cached) = next {
            self.cache_put(task, slot, seq, cached);
        }
        seq
    }

    /// Where the task stands before a commit of a `delta_bytes` delta (read under the
    /// task's gate, so it holds until the append).
    fn commit_point(&self, slot: &TaskSlot, delta_bytes: usize) -> CommitPoint {
        let data = slot.data.read();
        CommitPoint {
            latest_seq: data.latest_seq(),
            // A history written under another schema version: rebuilding the state
            // (through the migration hooks) before writing refuses the commit if it
            // cannot be read, and the snapshot then written leaves it readable as is.
            snapshot_due: self.snapshot_due(&data, delta_bytes) || data.foreign_schema,
            previous_ms: data.latest_created_at_ms(),
            // What the state's encoding takes, give or take: the last snapshot and the
            // deltas since (an upper bound when deltas overwrite).
            state_bytes: data.snapshot_bytes + data.delta_bytes_since_snapshot,
        }
    }

    /// The task's state after `delta`, from the cache (or, for a new task, the default
    /// state); folded from disk only when a snapshot is due and the cache missed. `None`
    /// when neither is at hand, or the history cannot be folded (headless). Costs the
    /// delta, not the state: a state a reader still holds gets the delta queued.
    pub(super) fn state_after(
        &self,
        task: &str,
        slot: &Arc<TaskSlot>,
        latest: u64,
        delta: Cow<'_, S::Delta>,
        snapshot_due: bool,
    ) -> Result<Option<Cached<S>>> {
        let mut cached = if latest == 0 {
            Some(Cached::new(Arc::new(S::default())))
        } else {
            self.cache.take(task, slot, latest)
        };
        if cached.is_none() && snapshot_due {
            let _reading = self.inner.relocation.read();
            let plan = slot.data.read().fold_plan(latest);
            if let Some(plan) = plan {
                cached = Some(Cached::new(Arc::new(self.fold(task, latest, &plan)?)));
            }
        }
        if let Some(cached) = cached.as_mut() {
            cached.advance(delta);
        }
        Ok(cached)
    }

    /// Caches the task's state at `seq`, sized by the records a load would read.
    pub(super) fn cache_put(&self, task: &str, slot: &Arc<TaskSlot>, seq: u64, cached: Cached<S>) {
        let bytes = {
            let data = slot.data.read();
            data.snapshot_bytes + data.delta_bytes_since_snapshot
        };
        self.cache.put(task, slot, seq, cached, bytes);
    }

    /// An encoded snapshot as the store's compression setting stores it.
    pub(super) fn stored_snapshot(&self, raw: Vec<u8>) -> StoredBody<'static> {
        compress::compress_owned(self.inner.options.compression.at_commit(), true, raw)
    }

    /// Encodes `state` as a snapshot, unless it cannot fit in a record (uncompressed: the
    /// limit counts uncompressed bytes). `estimate_bytes` sizes the buffer up front.
    pub(super) fn encode_snapshot(
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
    pub(super) fn snapshot_due(&self, data: &TaskData, next_delta_bytes: usize) -> bool {
        let counters = policy::SnapshotCounters {
            snapshot_bytes: data.snapshot_bytes,
            deltas_since_snapshot: data.deltas_since_snapshot,
            delta_bytes_since_snapshot: data.delta_bytes_since_snapshot,
        };
        let every = self.inner.options.snapshot_every;
        policy::snapshot_due(counters, next_delta_bytes as u64, every)
    }

    /// Appends a record and applies it to the index, as replay would.
    pub(super) fn append_live(&self, kind: u8, rec: codec::Decoded<'_>) -> Result<()> {
        let append = |payload: &[u8]| {
            // Held from append to index update: compaction's barrier (an exclusive hold)
            // then knows every durable record below the active segment is indexed.
            let _indexing = self.inner.relocation.read();
            let appended = self.inner.log.append(kind, payload)?;
            self.apply_live(&rec, appended.pos, appended.bytes)
        };
        match &rec {
            codec::Decoded::CallBegin(b) => append(&codec::encode(b)?),
            codec::Decoded::CallFinish(f) => append(&codec::encode(f)?),
            // Into a reused buffer: the log copies the payload into its batch.
            codec::Decoded::Checkpoint(c) => codec::with_checkpoint_encoded(c, |payload| {
                self.check_checkpoint_size(c, payload.len())?;
                append(payload)
            }),
            codec::Decoded::Delete(d) => append(&codec::encode(d)?),
        }
    }

    /// Encodes a checkpoint record for the async API's deferred commits, refusing one whose
    /// payload would exceed the log's limit with its body uncompressed (as the log refuses a
    /// raw one that does).
    #[cfg(feature = "tokio")]
    pub(super) fn encode_checkpoint(&self, c: &CheckpointRec<'_>) -> Result<Vec<u8>> {
        let payload = codec::encode_checkpoint(c)?;
        self.check_checkpoint_size(c, payload.len())?;
        Ok(payload)
    }

    /// Refuses a checkpoint record of `payload_bytes` that would exceed the log's
    /// limit with its body uncompressed.
    fn check_checkpoint_size(&self, c: &CheckpointRec<'_>, payload_bytes: usize) -> Result<()> {
        let limit = self.inner.log.payload_bytes_max();
        compress::check_uncompressed_size(c, payload_bytes, limit)
    }

    /// Applies a record this handle just made durable to the index.
    pub(super) fn apply_live(
        &self,
        rec: &codec::Decoded<'_>,
        pos: RecordPos,
        bytes: u32,
    ) -> Result<()> {
        replay::apply(&self.inner.index, rec, pos, bytes).map_err(|why| Error::Corruption {
            segment: self.inner.log.path_of(pos),
            offset: pos.offset,
            reason: CorruptionReason::Inconsistent(why),
        })
    }
}

/// Where a task stands when a commit begins.
struct CommitPoint {
    /// Its latest seq (0: no checkpoint yet).
    latest_seq: u64,
    /// Whether this commit writes a snapshot rather than the delta.
    snapshot_due: bool,
    /// `created_at_ms` of its latest checkpoint (the new one is never earlier).
    previous_ms: u64,
    /// About what its state's encoding takes (sizes the snapshot buffer).
    state_bytes: u64,
}

/// Whether a write may read the disk before it appends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reads {
    /// A blocking caller: it may.
    Allowed,
    /// An async caller on a runtime worker: it must not; the write is deferred instead.
    Refused,
}

/// A commit decided, not yet appended.
pub(super) struct CommitPlan<S: State> {
    pub seq: u64,
    pub created_at_ms: u64,
    /// The next state as stored (encoded, perhaps compressed), if this commit writes a
    /// snapshot (else the delta).
    pub snapshot: Option<StoredBody<'static>>,
    /// The next state, when at hand, for the cache.
    pub next: Option<Cached<S>>,
}

impl<S: State> CommitPlan<S> {
    /// The body this plan stores: its snapshot, or the delta that encodes to
    /// `delta_bytes`, compressed as `compression` says (only now, once it is known that
    /// the delta is written).
    pub fn body<'a>(&'a self, compression: Compression, delta_bytes: &'a [u8]) -> StoredBody<'a> {
        match &self.snapshot {
            Some(s) => StoredBody {
                kind: s.kind,
                bytes: Cow::Borrowed(&s.bytes),
            },
            None => compress::compress(compression, false, delta_bytes),
        }
    }

    /// The checkpoint record of this plan for `task`, with `body` (from [`body`](Self::body)).
    pub fn record<'a>(&self, task: &'a str, body: &'a StoredBody<'_>) -> CheckpointRec<'a> {
        CheckpointRec {
            task,
            seq: self.seq,
            created_at_ms: self.created_at_ms,
            schema_version: S::VERSION,
            body_kind: body.kind,
            origin: None,
            body: &body.bytes,
        }
    }
}
