//! Task gates: the lock that serializes one task's writes (check, append, index), held
//! by blocking callers and by async ones alike.
//!
//! A task's gate is one flag in its slot, so a task pays a byte for it. Waiters of every
//! gate of a store share one parking place ([`Gates`]): a condition variable for blocking
//! callers and a list of wakers for futures. Waiting on a task's gate is rare (one agent
//! writes one task), so a release that finds waiters wakes them all and each checks its
//! own gate again; a release without waiters touches nothing shared.
//!
//! A guard owns its slot and can be dropped on any thread: an async commit's guard is
//! released by whichever thread completes its batch, so no future holds a lock across an
//! `await`.

#[cfg(feature = "tokio")]
use std::future::Future;
#[cfg(feature = "tokio")]
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Waker;
#[cfg(feature = "tokio")]
use std::task::{Context, Poll};

use parking_lot::{Condvar, Mutex};

use super::index::TaskSlot;

/// Where the waiters of a store's gates park.
///
/// Why no wake-up is lost: a waiter counts itself in `waiting`, then tries the gate
/// again, both under `waiters`' lock and sequentially consistent; a release clears the
/// gate, then reads `waiting`, both sequentially consistent. Either the waiter's retry
/// sees the gate clear, or the release sees the count and takes the lock, which it gets
/// only once the waiter sleeps (a condition variable's wait releases it atomically) or has
/// stored its waker.
#[derive(Debug, Default)]
pub(crate) struct Gates {
    wakers: Mutex<Vec<Waker>>,
    blocked: Condvar,
    waiting: AtomicUsize,
}

/// A held gate; dropping it opens the gate again.
#[derive(Debug)]
pub(crate) struct GateGuard {
    slot: Arc<TaskSlot>,
    gates: Arc<Gates>,
}

impl GateGuard {
    /// The slot whose gate this holds.
    pub fn slot(&self) -> &Arc<TaskSlot> {
        &self.slot
    }
}

impl Drop for GateGuard {
    fn drop(&mut self) {
        self.slot.gate.store(false, Ordering::SeqCst);
        if self.gates.waiting.load(Ordering::SeqCst) > 0 {
            let mut wakers = self.gates.wakers.lock();
            for waker in wakers.drain(..) {
                waker.wake();
            }
            self.gates.blocked.notify_all();
        }
    }
}

impl Gates {
    fn try_take(self: &Arc<Self>, slot: &Arc<TaskSlot>) -> Option<GateGuard> {
        slot.gate
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
            .then(|| GateGuard {
                slot: slot.clone(),
                gates: self.clone(),
            })
    }

    /// Takes the slot's gate, blocking the thread while another writer holds it.
    pub fn lock(self: &Arc<Self>, slot: &Arc<TaskSlot>) -> GateGuard {
        loop {
            if let Some(guard) = self.try_take(slot) {
                return guard;
            }
            let mut wakers = self.wakers.lock();
            self.waiting.fetch_add(1, Ordering::SeqCst);
            let retry = self.try_take(slot);
            if retry.is_none() {
                self.blocked.wait(&mut wakers);
            }
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            if let Some(guard) = retry {
                return guard;
            }
        }
    }

    /// Takes the slot's gate without blocking a thread: the future waits while another
    /// writer holds it. Dropping the future gives up the wait and holds nothing.
    #[cfg(feature = "tokio")]
    pub fn lock_async(self: &Arc<Self>, slot: Arc<TaskSlot>) -> GateWait {
        GateWait {
            gates: self.clone(),
            slot,
            counted: false,
        }
    }
}

#[cfg(feature = "tokio")]
/// The future of [`Gates::lock_async`].
#[derive(Debug)]
pub(crate) struct GateWait {
    gates: Arc<Gates>,
    slot: Arc<TaskSlot>,
    /// Whether this future counts in `Gates::waiting` (from its first wait to its end).
    counted: bool,
}

#[cfg(feature = "tokio")]
impl Future for GateWait {
    type Output = GateGuard;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<GateGuard> {
        let this = &mut *self;
        if let Some(guard) = this.gates.try_take(&this.slot) {
            this.uncount();
            return Poll::Ready(guard);
        }
        let mut wakers = this.gates.wakers.lock();
        if !this.counted {
            this.gates.waiting.fetch_add(1, Ordering::SeqCst);
            this.counted = true;
        }
        wakers.push(cx.waker().clone());
        match this.gates.try_take(&this.slot) {
            Some(guard) => {
                drop(wakers);
                this.uncount();
                Poll::Ready(guard)
            }
            None => Poll::Pending,
        }
    }
}

#[cfg(feature = "tokio")]
impl GateWait {
    fn uncount(&mut self) {
        if std::mem::take(&mut self.counted) {
            self.gates.waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

#[cfg(feature = "tokio")]
impl Drop for GateWait {
    fn drop(&mut self) {
        self.uncount();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    #[cfg(feature = "tokio")]
    use std::task::Wake;

    #[cfg(feature = "tokio")]
    struct Flag(AtomicU64);
    #[cfg(feature = "tokio")]
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn blocking_holders_exclude_each_other() {
        let gates = Arc::new(Gates::default());
        let slot = Arc::new(TaskSlot::default());
        let inside = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (gates, slot, inside) = (gates.clone(), slot.clone(), inside.clone());
                std::thread::spawn(move || {
                    for _ in 0..2_000 {
                        let _g = gates.lock(&slot);
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("no holder panicked");
        }
    }

    #[cfg(feature = "tokio")]
    #[test]
    fn a_waiting_future_is_woken_by_the_release_and_then_holds_the_gate() {
        let gates = Arc::new(Gates::default());
        let slot = Arc::new(TaskSlot::default());
        let held = gates.lock(&slot);
        let flag = Arc::new(Flag(AtomicU64::new(0)));
        let waker = Waker::from(flag.clone());
        let mut cx = Context::from_waker(&waker);
        let mut wait = Box::pin(gates.lock_async(slot.clone()));
        assert!(wait.as_mut().poll(&mut cx).is_pending());
        assert_eq!(flag.0.load(Ordering::SeqCst), 0);
        // Released on another thread, as a batch's completion does.
        std::thread::spawn(move || drop(held))
            .join()
            .expect("released");
        assert_eq!(flag.0.load(Ordering::SeqCst), 1, "woken once");
        let Poll::Ready(guard) = wait.as_mut().poll(&mut cx) else {
            panic!("the gate is free");
        };
        assert!(
            gates.try_take(&slot).is_none(),
            "held by the future's guard"
        );
        drop(guard);
        assert_eq!(gates.waiting.load(Ordering::SeqCst), 0);
    }

    #[cfg(feature = "tokio")]
    #[test]
    fn a_dropped_wait_leaves_no_count_behind() {
        let gates = Arc::new(Gates::default());
        let slot = Arc::new(TaskSlot::default());
        let held = gates.lock(&slot);
        let waker = Waker::from(Arc::new(Flag(AtomicU64::new(0))));
        let mut wait = Box::pin(gates.lock_async(slot.clone()));
        assert!(
            wait.as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        assert_eq!(gates.waiting.load(Ordering::SeqCst), 1);
        drop(wait);
        assert_eq!(gates.waiting.load(Ordering::SeqCst), 0);
        drop(held);
        assert!(gates.try_take(&slot).is_some(), "free again");
    }
}
