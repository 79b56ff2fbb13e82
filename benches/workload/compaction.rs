//! The compaction suite (`AGENTWAL_BENCH_SUITE=compaction`): what the background
//! compactor costs, in three experiments on local stores (`SyncMode::Always`).
//!
//! - Write amplification, `(bytes_written + compaction_bytes_written) / bytes_written`
//!   (`Stats`), on a large tool-call journal (`journal`, 64 KiB and 256 KiB segments,
//!   `keep_checkpoints = Some(4)`) and on the plain agent workload at the default segment
//!   size (`agent`, 64 MiB, default `Options`), with background compaction on.
//! - Segments: rotations onto recycled files against new ones, and zeros written ahead
//!   over appended bytes, over the whole run and over its second half (steady state: the
//!   workers stop at half-way, the counters are read, and they go on).
//! - Commit latency under CPU contention (`contended`): 4,000 tasks, 256 KiB segments,
//!   `keep_checkpoints = Some(8)`, two nice-0 threads spinning for the whole run (as many
//!   as cores on the development machine), the background compactor on against
//!   `auto_compact: false`, the two alternating in one process, each round.
//!
//! The workloads are deterministic; what each step does is in [`Workload`]. Sizes: the
//! `Shape`s of [`shapes`] (quick mode: a tenth of the steps).

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agentwal::{AgentDelta, AgentState, Message, Options, Stats, Store};

use crate::common::text;
use crate::config::Config;
use crate::generator::{make_delta, task_id};
use crate::measurement::percentile;
use crate::metering::{self, Meters};

/// What each step of a task does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// One task in [`JOURNAL_EVERY`] is a tool-calling task: each step begins a call
    /// (~200 B of args), finishes it with a 4 KiB result and commits a small delta (an
    /// assistant message of ~100 B and a variable); every [`PENDING_EVERY`] steps it also
    /// begins a long-running call with 8 KiB of args that finishes [`PENDING_FOR`] steps
    /// later (with a 4 KiB result), so about two calls per such task are pending at any
    /// time and the last ones stay pending. The other tasks commit small deltas (a user
    /// message of ~160 B and a variable).
    Journal,
    /// The workload bench's own step (`generator::make_delta`, ~1.9 KB postcard).
    Agent,
}

pub const JOURNAL_EVERY: usize = 8;
pub const PENDING_EVERY: usize = 32;
pub const PENDING_FOR: usize = 64;

/// One store configuration and the size of its run.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub name: &'static str,
    pub workload: Workload,
    pub segment_bytes: u64,
    pub keep: Option<u32>,
    pub auto_compact: bool,
    pub tasks: usize,
    /// Committing threads; thread `w` runs the tasks `t` with `t % threads == w`, each
    /// step of all its tasks in turn.
    pub threads: usize,
    pub steps: usize,
    /// Busy threads spinning at the process's priority for the whole run.
    pub spinners: usize,
}

/// The shapes of a run: the write-amplification and segment experiments, then the two
/// contended ones (compacting, not compacting), which the rounds alternate.
pub fn shapes(cfg: &Config) -> (Vec<Shape>, [Shape; 2]) {
    let scale = |steps: usize| if cfg.quick { steps / 10 } else { steps };
    let journal = |name, segment_bytes| Shape {
        name,
        workload: Workload::Journal,
        segment_bytes,
        keep: Some(4),
        auto_compact: true,
        tasks: 64,
        threads: 8,
        steps: scale(1000),
        spinners: 0,
    };
    let agent = Shape {
        name: "agent-64MiB",
        workload: Workload::Agent,
        segment_bytes: Options::default().segment_bytes,
        keep: None,
        auto_compact: true,
        // 256 tasks × 400 steps: ~100k commits, ~440 MiB appended (~4.4 KB a commit in
        // the quick run), about six rotations.
        tasks: 256,
        threads: 64,
        steps: scale(400),
        spinners: 0,
    };
    let contended = Shape {
        name: "contended-compacting",
        workload: Workload::Agent,
        segment_bytes: 256 << 10,
        keep: Some(8),
        auto_compact: true,
        tasks: 4000,
        threads: 4,
        steps: scale(16).max(2),
        spinners: 2,
    };
    let off = Shape {
        name: "contended-not-compacting",
        auto_compact: false,
        ..contended
    };
    let mut plain = vec![
        journal("journal-64KiB", 64 << 10),
        journal("journal-256KiB", 256 << 10),
    ];
    plain.push(agent);
    (plain, [contended, off])
}

/// The `Stats` counters the suite reports.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counters {
    pub bytes_written: u64,
    pub compaction_bytes_written: u64,
    pub zero_bytes_written: u64,
    pub fill_bytes_written: u64,
    pub segments_created: u64,
    pub segments_recycled: u64,
    pub compactions: u64,
    /// Sizes, as of the reading (not differences).
    pub segments: u64,
    pub free_segments: u64,
    pub disk_bytes: u64,
}

impl From<&Stats> for Counters {
    fn from(s: &Stats) -> Self {
        Counters {
            bytes_written: s.bytes_written,
            compaction_bytes_written: s.compaction_bytes_written,
            zero_bytes_written: s.zero_bytes_written,
            fill_bytes_written: s.fill_bytes_written,
            segments_created: s.segments_created,
            segments_recycled: s.segments_recycled,
            compactions: s.compactions,
            segments: s.segments,
            free_segments: s.free_segments,
            disk_bytes: s.disk_bytes,
        }
    }
}

impl Counters {
    /// What the counts moved since `earlier`; the sizes are this reading's.
    pub fn since(&self, earlier: &Counters) -> Counters {
        Counters {
            bytes_written: self.bytes_written - earlier.bytes_written,
            compaction_bytes_written: self.compaction_bytes_written
                - earlier.compaction_bytes_written,
            zero_bytes_written: self.zero_bytes_written - earlier.zero_bytes_written,
            fill_bytes_written: self.fill_bytes_written - earlier.fill_bytes_written,
            segments_created: self.segments_created - earlier.segments_created,
            segments_recycled: self.segments_recycled - earlier.segments_recycled,
            compactions: self.compactions - earlier.compactions,
            ..*self
        }
    }

    /// Write amplification of compaction.
    pub fn write_amplification(&self) -> f64 {
        (self.bytes_written + self.compaction_bytes_written) as f64
            / self.bytes_written.max(1) as f64
    }

    /// Zeros written ahead over bytes appended.
    pub fn zeros_ratio(&self) -> f64 {
        self.zero_bytes_written as f64 / self.bytes_written.max(1) as f64
    }
}

/// Commit latencies, in ms.
#[derive(Debug, Clone, Copy, Default)]
pub struct Latency {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    fn of(sorted_ns: &[u64]) -> Latency {
        let ms = |p| percentile(sorted_ns, p) as f64 / 1e6;
        Latency {
            p50_ms: ms(50.0),
            p99_ms: ms(99.0),
            p999_ms: ms(99.9),
            max_ms: sorted_ns.last().copied().unwrap_or(0) as f64 / 1e6,
        }
    }
}

/// One run of one shape.
#[derive(Debug, Clone)]
pub struct StoreRun {
    pub shape: Shape,
    pub commits: u64,
    /// Commits and tool-call records (`begin_call`, `finish_call`): durable operations.
    pub ops: u64,
    pub wall_s: f64,
    pub total: Counters,
    /// The second half of the steps.
    pub steady: Counters,
    pub latency: Latency,
    /// The whole machine's busy share during the run (every core; `None` if unreadable).
    pub machine_busy: Option<f64>,
    /// The spinning threads' nice value (as they read it themselves).
    pub spinner_nice: Option<i32>,
}

/// Runs `shape` once in a fresh directory.
pub fn run(cfg: &Config, shape: &Shape) -> StoreRun {
    let dir = cfg.tmpdir(&format!("bench-compaction-{}-", shape.name));
    metering::wait_for_calm_disk(cfg);
    let options = Options {
        segment_bytes: shape.segment_bytes,
        keep_checkpoints: shape.keep,
        auto_compact: shape.auto_compact,
        ..Options::default()
    };
    let store: Store<AgentState> = Store::open_with(dir.path(), options).expect("open agentwal");
    let ids: Vec<String> = (0..shape.tasks).map(task_id).collect();
    let half = shape.steps / 2;
    let line = Barrier::new(shape.threads + 1);
    let stop = AtomicBool::new(false);
    let (worked, mid, end, wall, busy, spinner_nice) = std::thread::scope(|s| {
        let spinners: Vec<_> = (0..shape.spinners)
            .map(|_| s.spawn(|| spin(&stop)))
            .collect();
        let workers: Vec<_> = (0..shape.threads)
            .map(|w| {
                let (store, ids, line) = (&store, &ids, &line);
                s.spawn(move || {
                    let mut worked = Worked::default();
                    line.wait();
                    for (from, to) in [(0, half), (half, shape.steps)] {
                        for step in from..to {
                            for task in (w..shape.tasks).step_by(shape.threads) {
                                step_of(store, shape.workload, &ids[task], task, step, &mut worked);
                            }
                        }
                        line.wait();
                        line.wait();
                    }
                    worked
                })
            })
            .collect();
        line.wait();
        let (meters, t0) = (Meters::now(), Instant::now());
        line.wait();
        let mid = Counters::from(&store.stats());
        line.wait();
        line.wait();
        let wall = t0.elapsed();
        let busy = meters.since().machine.map(|m| m.fraction);
        let end = Counters::from(&store.stats());
        line.wait();
        stop.store(true, Ordering::Relaxed);
        let worked: Vec<Worked> = workers
            .into_iter()
            .map(|w| w.join().expect("worker"))
            .collect();
        let nice = spinners
            .into_iter()
            .map(|s| s.join().expect("spinner"))
            .next();
        (worked, mid, end, wall, busy, nice)
    });
    drop(store);
    let mut latencies: Vec<u64> = worked
        .iter()
        .flat_map(|w| w.commit_ns.iter().copied())
        .collect();
    latencies.sort_unstable();
    StoreRun {
        shape: *shape,
        commits: latencies.len() as u64,
        ops: worked.iter().map(|w| w.ops).sum(),
        wall_s: wall.as_secs_f64(),
        total: end,
        steady: end.since(&mid),
        latency: Latency::of(&latencies),
        machine_busy: busy,
        spinner_nice,
    }
}

#[derive(Default)]
struct Worked {
    commit_ns: Vec<u64>,
    ops: u64,
}

/// Spins until `stop`, at the priority it was started with; returns its nice value.
fn spin(stop: &AtomicBool) -> i32 {
    // SAFETY: getpriority has no memory-safety preconditions; `who` 0 is this thread.
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    let mut x = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..1000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    nice
}

/// One step of `task`: its commit is timed (only the commit), every durable operation
/// counted.
fn step_of(
    store: &Store<AgentState>,
    workload: Workload,
    id: &str,
    task: usize,
    step: usize,
    worked: &mut Worked,
) {
    let seed = ((task as u64) << 32) | step as u64;
    let delta = match workload {
        Workload::Agent => make_delta(task, step),
        Workload::Journal if task.is_multiple_of(JOURNAL_EVERY) => {
            let call = format!("call-{step}");
            store
                .begin_call(id, &call, "http_get", text(seed, 200).as_bytes())
                .expect("begin_call");
            store
                .finish_call(id, &call, text(seed ^ 0x5EED, 4096).as_bytes())
                .expect("finish_call");
            worked.ops += 2;
            if step.is_multiple_of(PENDING_EVERY) {
                let long = format!("long-{step}");
                store
                    .begin_call(id, &long, "run_job", text(seed ^ 0xA7, 8192).as_bytes())
                    .expect("begin_call");
                worked.ops += 1;
            }
            if step >= PENDING_FOR && (step - PENDING_FOR).is_multiple_of(PENDING_EVERY) {
                let long = format!("long-{}", step - PENDING_FOR);
                store
                    .finish_call(id, &long, text(seed ^ 0xF1, 4096).as_bytes())
                    .expect("finish_call");
                worked.ops += 1;
            }
            AgentDelta::default()
                .message(Message::assistant(text(seed, 100)))
                .set("last_call", call)
        }
        Workload::Journal => AgentDelta::default()
            .message(Message::user(text(seed, 160)))
            .set("step", step as i64),
    };
    let t0 = Instant::now();
    store.commit(id, &delta).expect("agentwal commit");
    worked.commit_ns.push(t0.elapsed().as_nanos() as u64);
    worked.ops += 1;
}

/// Everything the suite measured: per shape, one run per round.
pub struct Suite {
    pub plain: Vec<Vec<StoreRun>>,
    /// Per round: (compacting, not compacting), in the order they ran.
    pub contended: Vec<[StoreRun; 2]>,
    pub elapsed: Duration,
}

/// Runs every shape `cfg.rounds` times; the contended pair alternates which goes first.
pub fn run_suite(cfg: &Config) -> Suite {
    let started = Instant::now();
    let (plain, contended) = shapes(cfg);
    let mut suite = Suite {
        plain: vec![Vec::new(); plain.len()],
        contended: Vec::new(),
        elapsed: Duration::ZERO,
    };
    for round in 0..cfg.rounds {
        for (i, shape) in plain.iter().enumerate() {
            let r = run(cfg, shape);
            log(round, cfg.rounds, &r);
            suite.plain[i].push(r);
        }
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        let mut pair: [Option<StoreRun>; 2] = [None, None];
        for k in order {
            let r = run(cfg, &contended[k]);
            log(round, cfg.rounds, &r);
            pair[k] = Some(r);
        }
        let [on, off] = pair;
        suite.contended.push([on.expect("ran"), off.expect("ran")]);
    }
    suite.elapsed = started.elapsed();
    suite
}

fn log(round: usize, rounds: usize, r: &StoreRun) {
    eprintln!(
        "round {}/{rounds} {:<26} {:>7} commits in {:>6.1} s  WA {:.2}×  rotations {} ({} recycled)  p99.9 {:.2} ms  max {:.2} ms  busy {}",
        round + 1,
        r.shape.name,
        r.commits,
        r.wall_s,
        r.total.write_amplification(),
        r.total.segments_created,
        r.total.segments_recycled,
        r.latency.p999_ms,
        r.latency.max_ms,
        r.machine_busy
            .map_or_else(|| "–".into(), |b| format!("{:.0}%", b * 100.0)),
    );
}
