//! Running a plan on the simulated storage: the log of what each call returned and
//! between which storage operations.

use std::sync::Mutex;

use agentwal::storage::sim::SimStorage;
use agentwal::{Error, Store};
use serde::{Deserialize, Serialize};

use super::plan::{Step, Tally};

/// What one call returned, and between which storage operations it ran: it started
/// after operation `start - 1` and returned before operation `end` began.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Event {
    pub thread: usize,
    pub step: Step,
    /// The seq a commit or fork returned (or, for a load, the seq loaded).
    pub seq: u64,
    /// For a fork: the source's seq it forked (0 if it failed before it knew).
    pub forked_seq: u64,
    /// The state a load returned.
    pub loaded: Option<Tally>,
    pub start: u64,
    pub end: u64,
    /// `Err` holds the error's text; `poisoned` whether it was `Error::Poisoned`.
    pub outcome: Result<(), String>,
    pub poisoned: bool,
}

impl Event {
    /// Acknowledged before a crash at operation `n`.
    pub fn acked(&self, n: u64) -> bool {
        self.outcome.is_ok() && self.end <= n
    }
    /// Started before a crash at operation `n` (so it may have had an effect).
    pub fn started(&self, n: u64) -> bool {
        self.start < n
    }
}

pub(super) fn step(
    store: &Store<Tally>,
    step: &Step,
    forked_seq: &mut u64,
) -> agentwal::Result<(u64, Option<Tally>)> {
    let none = |()| (0, None);
    match step {
        Step::Commit(task, delta) => store.commit(task, delta).map(|seq| (seq, None)),
        Step::Begin(task, call, args) => store.begin_call(task, call, "tool", args).map(none),
        Step::Finish(task, call, res) => store.finish_call(task, call, res).map(none),
        Step::Delete(task) => store.delete_task(task).map(none),
        Step::Compact => store.compact().map(|_| (0, None)),
        Step::Load(task) => Ok(store.load_latest(task)?.map_or((0, None), |c| {
            (c.seq, Some(std::sync::Arc::unwrap_or_clone(c.state)))
        })),
        Step::Fork(from, to) => {
            let Some(latest) = store.load_latest(from)? else {
                return Err(Error::InvalidArgument(format!(
                    "{from} has nothing to fork"
                )));
            };
            *forked_seq = latest.seq;
            store.fork(from, latest.seq, to).map(|seq| (seq, None))
        }
    }
}

/// Runs the plan, one thread per entry (inline when there is one), and logs every call.
pub fn run(store: &Store<Tally>, sim: &SimStorage, plan: &[Vec<Step>]) -> Vec<Event> {
    let events = Mutex::new(Vec::new());
    let thread = |t: usize, steps: &[Step]| {
        for s in steps {
            let start = sim.ops();
            let mut forked_seq = 0;
            let result = step(store, s, &mut forked_seq);
            let end = sim.ops();
            let poisoned = matches!(result, Err(Error::Poisoned { .. }));
            let (seq, loaded) = result.as_ref().cloned().unwrap_or_default();
            events.lock().unwrap().push(Event {
                thread: t,
                step: s.clone(),
                seq,
                forked_seq,
                loaded,
                start,
                end,
                outcome: result.map(|_| ()).map_err(|e| e.to_string()),
                poisoned,
            });
        }
    };
    if plan.len() == 1 {
        thread(0, &plan[0]);
    } else {
        std::thread::scope(|s| {
            for (t, steps) in plan.iter().enumerate() {
                s.spawn(move || thread(t, steps));
            }
        });
    }
    events.into_inner().unwrap()
}
