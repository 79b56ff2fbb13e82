//! Runs the workload against a backend's commit function and times what the figures
//! need: the commits (`drive`) and the loads and reopens afterwards (`time_loads`).

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use agentwal::{AgentDelta, AgentState};

use crate::config::Config;
use crate::generator::{make_delta, task_id};
use crate::measurement::median_duration;
use crate::metering::{minor_faults, thread_cpu_ns};

/// What `drive` measured.
pub struct RunTimes {
    pub wall: Duration,
    /// Commit latencies in nanoseconds, sorted.
    pub latencies: Vec<u64>,
    /// CPU time (user + system) the committing threads spent inside `step`, in nanoseconds.
    pub step_cpu_ns: u64,
    /// Minor page faults of the whole process from the common start until every worker
    /// was joined (background threads included).
    pub minor_faults: u64,
}

/// Runs the workload: `threads` threads, one task each, `steps` steps; `init` makes a
/// thread's private state (a connection, say) before the common start, `step` makes one
/// step durable. Only `step` is timed.
pub fn drive<W>(
    threads: usize,
    steps: usize,
    init: impl Fn(usize) -> W + Sync,
    step: impl Fn(&mut W, &str, u64, &AgentDelta) + Sync,
) -> RunTimes {
    let start_line = Barrier::new(threads + 1);
    let (started, finished, mut latencies, step_cpu_ns, minor_faults) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|task| {
                let (start_line, init, step) = (&start_line, &init, &step);
                s.spawn(move || {
                    let id = task_id(task);
                    let mut worker = init(task);
                    let mut latencies = Vec::with_capacity(steps);
                    let mut cpu_ns = 0;
                    start_line.wait();
                    // Each worker notes its own start: the main thread may be scheduled
                    // only after a fast backend's workers have finished.
                    let started = Instant::now();
                    for n in 0..steps {
                        let delta = make_delta(task, n);
                        let (t0, c0) = (Instant::now(), thread_cpu_ns());
                        step(&mut worker, &id, n as u64 + 1, &delta);
                        latencies.push(t0.elapsed().as_nanos() as u64);
                        cpu_ns += thread_cpu_ns() - c0;
                    }
                    let finished = Instant::now();
                    drop(worker);
                    (started, finished, latencies, cpu_ns)
                })
            })
            .collect();
        start_line.wait();
        // After the barrier: every worker's `init` (an SQLite connection, say) is done.
        let faults = minor_faults();
        let mut started: Option<Instant> = None;
        let mut finished: Option<Instant> = None;
        let mut all = Vec::with_capacity(threads * steps);
        let mut cpu_ns = 0;
        for w in workers {
            let (s, f, l, c) = w.join().expect("worker panicked");
            started = Some(started.map_or(s, |t| t.min(s)));
            finished = Some(finished.map_or(f, |t| t.max(f)));
            all.extend(l);
            cpu_ns += c;
        }
        let faults = minor_faults() - faults;
        let started = started.expect("at least one worker");
        let finished = finished.expect("at least one worker");
        (started, finished, all, cpu_ns, faults)
    });
    latencies.sort_unstable();
    RunTimes {
        wall: finished - started,
        latencies,
        step_cpu_ns,
        minor_faults,
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
