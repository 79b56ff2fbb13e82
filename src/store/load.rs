//! Loads: resolving a checkpoint through the index, the latest-state cache, folding
//! snapshots and deltas, and the identity checks on every record read.

use super::*;
use crate::rules::body::At;
use crate::rules::{self, BodyMeta, DecodedBody};

impl<S: State> Store<S> {
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

    /// [`load_latest`](Self::load_latest) when it needs no read of the disk: the task is
    /// unknown or has no checkpoint, or its latest state is cached. `None`: it needs one.
    #[cfg(feature = "tokio")]
    pub(crate) fn load_latest_cached(&self, task: &str) -> Option<Result<Option<Checkpoint<S>>>> {
        if let Err(e) = validate_id("task id", task, TASK_ID_BYTES_MAX) {
            return Some(Err(e));
        }
        let Some(slot) = self.inner.index.get(task) else {
            return Some(Ok(None));
        };
        let (latest, created_at_ms) = {
            let data = slot.data.read();
            let latest = data.latest_seq();
            if data.deleted || latest == 0 {
                return Some(Ok(None));
            }
            (latest, data.checkpoint(latest)?.created_at_ms)
        };
        let state = self.cache.get(task, &slot, latest)?;
        Some(Ok(Some(Checkpoint {
            task: task.to_string(),
            seq: latest,
            created_at_ms,
            state,
        })))
    }

    /// Oldest seq retention serves for this task.
    pub(super) fn retained_from(&self, data: &TaskData) -> u64 {
        let o = &self.inner.options;
        data.retained_from(o.keep_checkpoints, o.max_age, now_ms())
    }

    pub(super) fn load_from(
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
            self.cache_put(task, slot, seq, Cached::new(state.clone()));
        }
        Ok(checkpoint(state))
    }

    /// Rebuilds the state at `seq` from its fold plan (a snapshot or the first delta,
    /// then deltas up to `seq`: consecutive seqs).
    pub(super) fn fold(&self, task: &str, seq: u64, plan: &[CpEntry]) -> Result<S> {
        let mut state = S::default();
        // The plan ends at `seq` and holds consecutive seqs, none below 1.
        assert!(plan.len() as u64 <= seq, "fold plan longer than the task");
        let first = seq + 1 - plan.len() as u64;
        for (entry_seq, entry) in (first..).zip(plan) {
            self.read_body(task, entry_seq, entry.pos)?
                .fold_into(&mut state);
        }
        Ok(state)
    }

    /// Reads and decodes the body of checkpoint `seq` of `task`, indexed at `pos`,
    /// migrating data written under another schema version. A record at `pos` that is not
    /// that checkpoint is an error, never a state.
    pub(super) fn read_body(&self, task: &str, seq: u64, pos: RecordPos) -> Result<DecodedBody<S>> {
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
        Ok((retained_from.max(data.first_seq)..=data.latest_seq())
            .filter_map(|seq| info_of(&data, seq))
            .collect())
    }

    /// The task's newest checkpoint's info, without reading its state: an in-memory
    /// lookup here, one query on PostgreSQL. `None` if the task has no checkpoint. A
    /// cache of a task's state is valid while this is the checkpoint it was read at (seq
    /// and `created_at_ms`, since a deleted task's seqs start again at 1).
    pub fn latest_info(&self, task: &str) -> Result<Option<CheckpointInfo>> {
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        let Some(slot) = self.inner.index.get(task) else {
            return Ok(None);
        };
        let data = slot.data.read();
        Ok(info_of(&data, data.latest_seq()))
    }

    /// Ids of all tasks, sorted.
    pub fn tasks(&self) -> Result<Vec<String>> {
        Ok(self.inner.index.task_ids())
    }

    /// Ids of the tasks whose id starts with `prefix` (its bytes), sorted; every task for
    /// an empty prefix. On PostgreSQL a range of the key, so it reads only those tasks.
    pub fn tasks_with_prefix(&self, prefix: &str) -> Result<Vec<String>> {
        Ok(self.inner.index.task_ids_with_prefix(prefix))
    }
}

/// The info of checkpoint `seq` as the index `data` holds it; `None` if it holds no such
/// checkpoint.
fn info_of(data: &TaskData, seq: u64) -> Option<CheckpointInfo> {
    let c = data
        .checkpoints
        .get(seq.checked_sub(data.first_seq)? as usize)?;
    Some(CheckpointInfo {
        seq,
        created_at_ms: c.created_at_ms,
        bytes: u64::from(c.bytes),
        snapshot: c.snapshot,
        forked_from: (seq == 1)
            .then(|| data.origin.as_deref().map(|(t, s)| (t.to_string(), *s)))
            .flatten(),
    })
}

/// The checkpoint record `rec`, which the index of `task` points at for `seq`; an error if
/// the record is not that checkpoint.
pub(super) fn indexed_checkpoint<'a>(
    rec: &RecordRef<'a>,
    task: &str,
    seq: u64,
) -> Result<CheckpointRec<'a>> {
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

/// Decodes the body of checkpoint `c` (read at `rec`) as `S` or `S::Delta`, decompressing
/// it first and migrating data written under another schema version. Reads nothing: every
/// error is about the body.
pub(super) fn decode_body<S: State>(
    rec: &RecordRef<'_>,
    c: &CheckpointRec<'_>,
) -> Result<DecodedBody<S>> {
    rules::decode_body(&body_meta(rec, c), &stored_body(rec, c)?)
}

/// What the shared body rules need to know of checkpoint `c`, read at `rec`.
pub(super) fn body_meta<'a>(rec: &RecordRef<'a>, c: &CheckpointRec<'a>) -> BodyMeta<'a> {
    BodyMeta {
        task: c.task,
        seq: c.seq,
        schema_version: c.schema_version,
        snapshot: c.body_kind.is_snapshot(),
        at: At::Log(rec.segment, rec.offset),
    }
}

/// The body of checkpoint `c` (read at `rec`) as encoded: decompressed if it is stored
/// compressed. A frame that does not decompress is [`Error::Decode`]: the record passed its
/// checksum, so it was written so (or forged), and no state type would read it.
pub(super) fn stored_body<'a>(
    rec: &RecordRef<'_>,
    c: &CheckpointRec<'a>,
) -> Result<std::borrow::Cow<'a, [u8]>> {
    compress::body(c).map_err(|why| {
        let why = format!("checkpoint {} of task {:?}: {why}", c.seq, c.task);
        codec::decode_error(rec, why)
    })
}
