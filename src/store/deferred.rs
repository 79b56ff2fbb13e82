//! Deferred writes: a commit or journal entry decided and queued without blocking, whose
//! outcome reaches a callback once its batch is durable. The async API is built on these;
//! nothing here depends on an async runtime.
//!
//! A deferred write holds what a blocking write holds across its fsync (the task's gate
//! and a shared hold of the positions lock), but owns them: the thread that finishes its
//! batch indexes the record, updates the cache, releases both, then calls back. So no
//! future holds a lock across an `await`, and a dropped future changes nothing: the write
//! completes (or fails) as if its caller were still waiting.
//!
//! A write that would have to read the disk first (a commit whose snapshot is due while
//! the state is not cached, a journal entry that repeats an earlier one) is not deferred:
//! the caller gets its reply back and runs the blocking path on a blocking thread.

use std::marker::PhantomData;

use parking_lot::RawRwLock;
use parking_lot::lock_api::ArcRwLockReadGuard;

use super::codec::{CallBeginRec, CallFinishRec};
use super::commit::Reads;
use super::gate::{GateGuard, GateWait};
use super::*;
use crate::log::{AppendThen, Appended};
use crate::rules::journal::never_begun;

/// Where a deferred write's outcome goes.
pub(crate) type Reply<T> = Box<dyn FnOnce(Result<T>) + Send>;

/// What became of a write handed to a `*_deferred` method.
pub(crate) enum Deferred<T> {
    /// Queued or refused: the reply has been or will be called.
    Handled,
    /// It needs the disk before it can append: run the blocking method instead (the
    /// task's gate is released again, the reply dropped unused).
    Blocking(PhantomData<T>),
}

impl<S: State> Store<S> {
    /// Takes the task's gate without blocking a thread (creating its slot if needed);
    /// retries if the slot was deleted while waiting.
    pub(crate) async fn lock_task_async(&self, task: &str) -> GateGuard {
        loop {
            let slot = self.inner.index.get_or_create(task);
            let wait: GateWait = self.inner.gates.lock_async(slot.clone());
            let gate = wait.await;
            if !slot.data.read().deleted {
                return gate;
            }
        }
    }

    /// [`commit_if`](Self::commit_if) (or `commit`, without `expected`) for a caller
    /// holding the task's `gate`, deferred.
    pub(crate) fn commit_deferred(
        &self,
        gate: GateGuard,
        task: &str,
        expected: Option<u64>,
        delta: &S::Delta,
        reply: Reply<u64>,
    ) -> Deferred<u64> {
        // The slot through the gate only: an extra clone alive when a failed write on a
        // new task releases the gate would keep its empty slot in the index.
        let planned = codec::with_encoded(Cow::Borrowed(delta), |delta, delta_bytes| {
            let slot = gate.slot();
            let plan =
                self.plan_commit(task, slot, expected, delta, delta_bytes, Reads::Refused)?;
            let Some(plan) = plan else { return Ok(None) };
            let payload = {
                let body = plan.body(self.inner.options.compression.at_commit(), delta_bytes);
                self.encode_checkpoint(&plan.record(task, &body))?
            };
            Ok(Some((plan, payload)))
        });
        let (plan, payload) = match planned {
            Ok(Some(planned)) => planned,
            Ok(None) => return self.defer_to_blocking(task, gate, reply),
            Err(e) => return self.refuse(task, gate, reply, e),
        };
        let (seq, next) = (plan.seq, plan.next);
        let after: After<S, u64> =
            Box::new(move |store, task, slot| store.committed(task, slot, seq, next));
        self.queue(codec::KIND_CHECKPOINT, task, gate, payload, after, reply)
    }

    /// [`begin_call`](Self::begin_call) for a caller holding the task's `gate`, deferred
    /// (arguments checked by the caller).
    pub(crate) fn begin_call_deferred(
        &self,
        gate: GateGuard,
        (task, call_id, tool, args): (&str, &str, &str, &[u8]),
        reply: Reply<()>,
    ) -> Deferred<()> {
        let rec = CallBeginRec {
            task,
            call_id,
            tool,
            created_at_ms: now_ms(),
            args,
        };
        // A call begun before (or pruned, its id still taken) is compared with the one on
        // disk or refused: the blocking path.
        if gate.slot().data.read().calls.entry(rec.call_id).is_some() {
            return self.defer_to_blocking(task, gate, reply);
        }
        self.queue_call(
            codec::KIND_CALL_BEGIN,
            task,
            gate,
            codec::encode(&rec),
            reply,
        )
    }

    /// [`finish_call`](Self::finish_call) for a caller holding the task's `gate`,
    /// deferred (arguments checked by the caller).
    pub(crate) fn finish_call_deferred(
        &self,
        gate: GateGuard,
        (task, call_id, result): (&str, &str, &[u8]),
        reply: Reply<()>,
    ) -> Deferred<()> {
        let rec = CallFinishRec {
            task,
            call_id,
            created_at_ms: now_ms(),
            result,
        };
        let call = gate.slot().data.read().calls.entry(rec.call_id).copied();
        match call {
            None => self.refuse(task, gate, reply, never_begun(task, call_id)),
            // A finished call is compared with the result on disk (or refused, if pruned):
            // the blocking path.
            Some(call) if call.finish.is_some() => self.defer_to_blocking(task, gate, reply),
            Some(_) => {
                let payload = codec::encode(&rec);
                self.queue_call(codec::KIND_CALL_FINISH, task, gate, payload, reply)
            }
        }
    }

    /// Queues an encoded journal entry (nothing follows its indexing), or refuses it if
    /// it could not be encoded.
    fn queue_call(
        &self,
        kind: u8,
        task: &str,
        gate: GateGuard,
        payload: Result<Vec<u8>>,
        reply: Reply<()>,
    ) -> Deferred<()> {
        match payload {
            Ok(payload) => self.queue(kind, task, gate, payload, Box::new(|_, _, _| ()), reply),
            Err(e) => self.refuse(task, gate, reply, e),
        }
    }

    fn defer_to_blocking<T>(&self, task: &str, gate: GateGuard, reply: Reply<T>) -> Deferred<T> {
        self.release_task(task, gate);
        drop(reply);
        Deferred::Blocking(PhantomData)
    }

    fn refuse<T>(&self, task: &str, gate: GateGuard, reply: Reply<T>, e: Error) -> Deferred<T> {
        self.release_task(task, gate);
        reply(Err(e));
        Deferred::Handled
    }

    /// Queues the record; `after` runs once it is durable and indexed.
    fn queue<T: Send + 'static>(
        &self,
        kind: u8,
        task: &str,
        gate: GateGuard,
        payload: Vec<u8>,
        after: After<S, T>,
        reply: Reply<T>,
    ) -> Deferred<T> {
        // Contended only while a compaction switches positions: then block on a blocking
        // thread rather than here.
        let Some(positions) = self.inner.relocation.try_read_arc() else {
            return self.defer_to_blocking(task, gate, reply);
        };
        let write = DeferredWrite {
            store: self.clone(),
            task: task.to_string(),
            kind,
            payload,
            gate,
            positions,
            after,
            reply,
        };
        self.inner.log.append_then(kind, Box::new(write));
        Deferred::Handled
    }
}

/// What a deferred write does once its record is indexed, under its task's gate.
type After<S, T> = Box<dyn FnOnce(&Store<S>, &str, &Arc<TaskSlot>) -> T + Send>;

/// A queued write and everything it holds until its batch is done.
struct DeferredWrite<S: State, T> {
    store: Store<S>,
    task: String,
    kind: u8,
    payload: Vec<u8>,
    gate: GateGuard,
    /// Held from the append until the record is indexed, as a blocking append holds it:
    /// compaction's barrier then knows every durable record below the active segment is
    /// indexed.
    positions: ArcRwLockReadGuard<RawRwLock, ()>,
    after: After<S, T>,
    reply: Reply<T>,
}

impl<S: State, T: Send + 'static> AppendThen for DeferredWrite<S, T> {
    fn payload(&self) -> &[u8] {
        &self.payload
    }

    fn done(self: Box<Self>, outcome: Result<Appended>) {
        let DeferredWrite {
            store,
            task,
            kind,
            payload,
            gate,
            positions,
            after,
            reply,
        } = *self;
        let result = outcome.and_then(|appended| {
            let rec = codec::decode_payload(kind, &payload).map_err(|reason| Error::Decode {
                segment: store.inner.log.path_of(appended.pos),
                offset: appended.pos.offset,
                reason,
            })?;
            store.apply_live(&rec, appended.pos, appended.bytes)?;
            Ok(after(&store, &task, gate.slot()))
        });
        drop(positions);
        store.release_task(&task, gate);
        // Before the reply: a caller that closes the store once its writes are answered
        // must not find it still held by this one (it may be the last handle, and then
        // the store closes here, on this thread).
        drop(store);
        reply(result);
    }
}
