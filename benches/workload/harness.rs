//! Runs the workload against a backend's commit function and times what the figures
//! need: the commits (`drive`) and the loads and reopens afterwards (`time_loads`).

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use agentwal::{AgentDelta, AgentState};

use crate::config::Config;
use crate::generator::{make_delta, task_id};
use crate::measurement::median_duration;
use crate::metering::{Metered, Meters, thread_cpu_ns};

/// What `drive` measured.
pub struct RunTimes {
    pub wall: Duration,
    /// Commit latencies in nanoseconds, sorted.
    pub latencies: Vec<u64>,
    /// CPU time (user + system) the committing threads spent inside `step`, in nanoseconds.
    pub step_cpu_ns: u64,
    /// The whole process's and the whole machine's counters from the moment every
    /// worker's `init` was done until every worker's last commit was (background threads
    /// and other processes included).
    pub counters: Metered,
}

/// What one worker measured.
struct Worked {
    started: Instant,
    finished: Instant,
    latencies: Vec<u64>,
    cpu_ns: u64,
}

/// Crosses `line` when dropped: a worker whose `step` panics still reaches the last
/// crossing, so the others and the main thread do not wait for it forever.
struct Arrive<'a>(&'a Barrier);

impl Drop for Arrive<'_> {
    fn drop(&mut self) {
        self.0.wait();
    }
}

/// Runs the workload: `threads` threads, one task each, `steps` steps; `init` makes a
/// thread's private state (a connection, say) before the common start, `step` makes one
/// step durable. Only `step` is timed; it may take the delta over (as a caller done with it
/// would hand it to `Store::commit_owned`), and whatever it leaves is dropped untimed.
pub fn drive<W>(
    threads: usize,
    steps: usize,
    init: impl Fn(usize) -> W + Sync,
    step: impl Fn(&mut W, &str, u64, &mut AgentDelta) + Sync,
) -> RunTimes {
    // Every worker and the main thread cross this line three times: every `init` done
    // (the counters start, so no `init` is in them), go, every last commit done (they
    // stop, before a worker drops its state: closing SQLite's last connection checkpoints
    // its WAL, which is no commit's work).
    let line = Barrier::new(threads + 1);
    let (worked, counters) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|task| {
                let (line, init, step) = (&line, &init, &step);
                s.spawn(move || work(task, steps, line, init, step))
            })
            .collect();
        line.wait();
        let meters = Meters::now();
        line.wait();
        line.wait();
        let counters = meters.since();
        let worked: Vec<Worked> = workers
            .into_iter()
            .map(|w| w.join().expect("worker panicked"))
            .collect();
        (worked, counters)
    });
    let started = worked.iter().map(|w| w.started).min();
    let finished = worked.iter().map(|w| w.finished).max();
    let mut latencies: Vec<u64> = worked
        .iter()
        .flat_map(|w| w.latencies.iter().copied())
        .collect();
    latencies.sort_unstable();
    RunTimes {
        wall: finished.expect("at least one worker") - started.expect("at least one worker"),
        latencies,
        step_cpu_ns: worked.iter().map(|w| w.cpu_ns).sum(),
        counters,
    }
}

/// One worker of `drive`: its task's steps, timed, between the crossings of `line`.
fn work<W>(
    task: usize,
    steps: usize,
    line: &Barrier,
    init: impl Fn(usize) -> W,
    step: impl Fn(&mut W, &str, u64, &mut AgentDelta),
) -> Worked {
    let id = task_id(task);
    let mut worker = init(task);
    let mut latencies = Vec::with_capacity(steps);
    let mut cpu_ns = 0;
    line.wait();
    line.wait();
    let last_crossing = Arrive(line);
    // Each worker notes its own start: the main thread may be scheduled only after a
    // fast backend's workers have finished.
    let started = Instant::now();
    for n in 0..steps {
        let mut delta = make_delta(task, n);
        let (t0, c0) = (Instant::now(), thread_cpu_ns());
        step(&mut worker, &id, n as u64 + 1, &mut delta);
        latencies.push(t0.elapsed().as_nanos() as u64);
        cpu_ns += thread_cpu_ns() - c0;
    }
    let finished = Instant::now();
    drop(last_crossing);
    drop(worker);
    Worked {
        started,
        finished,
        latencies,
        cpu_ns,
    }
}

/// Times `load` on fresh handles (`cold` times: `open`, then one timed load) and on one
/// warm handle (`warm` timed loads); checks the state each load returns.
pub fn time_loads<H, L: std::borrow::Borrow<AgentState>>(
    cfg: &Config,
    open: impl Fn() -> H,
    load: impl Fn(&H) -> L,
    expected: &AgentState,
) -> (f64, f64, f64) {
    let mut recovery = Vec::new();
    let mut cold = Vec::new();
    for _ in 0..cfg.cold_loads {
        let t0 = Instant::now();
        let handle = open();
        recovery.push(t0.elapsed());
        let t1 = Instant::now();
        let state = load(&handle);
        cold.push(t1.elapsed());
        assert!(
            state.borrow() == expected,
            "a cold load returned the wrong state"
        );
        drop(handle);
    }
    let handle = open();
    assert!(
        load(&handle).borrow() == expected,
        "a load returned the wrong state"
    );
    let mut warm = Vec::with_capacity(cfg.warm_loads);
    for _ in 0..cfg.warm_loads {
        let t0 = Instant::now();
        black_box(load(&handle));
        warm.push(t0.elapsed());
    }
    (
        median_duration(&mut warm).as_secs_f64() * 1e6,
        median_duration(&mut cold).as_secs_f64() * 1e6,
        median_duration(&mut recovery).as_secs_f64() * 1e3,
    )
}
