//! The run's configuration, read from `AGENTWAL_BENCH_*` environment variables.

use std::path::PathBuf;

use crate::backends::{self, Backend};

/// Rounds of a full run. On the shared development disk one round's ratio of two backends
/// moves by about ±10%; two targets sit within 10% of parity, and their medians over 5
/// rounds still landed on either side of the line from run to run. 9 rounds take about
/// 4 minutes.
pub const FULL_ROUNDS_DEFAULT: usize = 9;

/// Rounds of a full compaction suite (`Suite::Compaction`): its figures are ratios of
/// byte counters, which move little from round to round, and latency tails, whose
/// compacting and not-compacting runs alternate within each round.
pub const COMPACTION_ROUNDS_DEFAULT: usize = 3;

/// Where each backend run happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Process {
    /// Every run in this process, one after another (the default).
    InProcess,
    /// `AGENTWAL_BENCH_PROCESS=fresh`: each (backend, T, round) in a fresh child process of
    /// this binary (`fresh`), so no run inherits another's heap, threads or allocator arenas:
    /// the setup of the independent harness whose figures disagreed with this bench's.
    Fresh,
}

impl Process {
    /// The name in the report, the JSON results and `AGENTWAL_BENCH_PROCESS`.
    pub fn name(self) -> &'static str {
        match self {
            Process::InProcess => "in-process",
            Process::Fresh => "fresh",
        }
    }
}

/// Which benchmark a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suite {
    /// The local stores (`bench-results/workload.md`).
    Local,
    /// `AGENTWAL_BENCH_SUITE=postgres`: agentwal on PostgreSQL against `postgres-seed`,
    /// the local engine beside them (`bench-results/workload-postgres.md`).
    Postgres,
    /// `AGENTWAL_BENCH_SUITE=compaction`: write amplification, recycled segments and commit
    /// latency under CPU contention of the background compactor (`compaction`,
    /// `bench-results/workload-compaction.md`); no backends.
    Compaction,
}

pub struct Config {
    pub quick: bool,
    pub suite: Suite,
    pub process: Process,
    pub steps: usize,
    pub threads: Vec<usize>,
    pub rounds: usize,
    pub backends: Vec<&'static dyn Backend>,
    pub warm_loads: usize,
    pub cold_loads: usize,
    pub large_store_bytes: u64,
    pub index_tasks: usize,
    /// Before each backend run, wait (up to 30 s) until the disk probe's fdatasync
    /// p50 is at most this many µs (0: do not wait).
    pub calm_us: f64,
    pub base: PathBuf,
    pub out_dir: PathBuf,
    /// `AGENTWAL_BENCH_BASELINE`: the JSON results (`workload.json`) of an earlier run, which
    /// the p99 no-regression target compares against.
    pub baseline: Option<PathBuf>,
}

fn env_parse<T: std::str::FromStr>(name: &str) -> Option<T> {
    let v = std::env::var(name).ok()?;
    Some(
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not valid")),
    )
}

fn threads_from_env(quick: bool) -> Vec<usize> {
    match std::env::var("AGENTWAL_BENCH_THREADS") {
        Ok(list) => list
            .split(',')
            .map(|t| t.trim().parse().expect("AGENTWAL_BENCH_THREADS: numbers"))
            .collect(),
        Err(_) if quick => vec![1, 8],
        Err(_) => vec![1, 8, 64],
    }
}

fn process_from_env(suite: Suite) -> Process {
    let process = match std::env::var("AGENTWAL_BENCH_PROCESS").as_deref() {
        Err(_) | Ok("") | Ok("in-process") => Process::InProcess,
        Ok("fresh") => Process::Fresh,
        Ok(other) => panic!("AGENTWAL_BENCH_PROCESS={other:?}: in-process or fresh"),
    };
    // The PostgreSQL peers reach the cluster this process started through a URL held in a
    // static; a child would have to be handed it, and nothing has needed that yet.
    assert!(
        process == Process::InProcess || suite == Suite::Local,
        "AGENTWAL_BENCH_PROCESS=fresh runs the local suite only"
    );
    process
}

fn suite_from_env() -> Suite {
    match std::env::var("AGENTWAL_BENCH_SUITE").as_deref() {
        Err(_) | Ok("") | Ok("local") => Suite::Local,
        Ok("postgres") => Suite::Postgres,
        Ok("compaction") => Suite::Compaction,
        Ok(other) => panic!("AGENTWAL_BENCH_SUITE={other:?}: local, postgres or compaction"),
    }
}

/// Every backend this build has.
pub fn known() -> Vec<&'static dyn Backend> {
    let mut all = backends::ALL.to_vec();
    all.extend_from_slice(backends::BY_NAME_ONLY);
    #[cfg(feature = "postgres")]
    for b in backends::POSTGRES_SUITE {
        if !all.iter().any(|a| backends::is(*a, *b)) {
            all.push(*b);
        }
    }
    all
}

/// A PostgreSQL peer was asked for in a build without them.
fn not_built() -> ! {
    panic!(
        "the PostgreSQL peers ({}) are built only with `--features postgres` \
         (AGENTWAL_BENCH_SUITE=postgres cargo bench --features tokio,postgres --bench workload)",
        backends::POSTGRES_PEERS.join(", ")
    )
}

fn backends_from_env(suite: Suite) -> Vec<&'static dyn Backend> {
    match std::env::var("AGENTWAL_BENCH_BACKENDS") {
        Ok(list) => list
            .split(',')
            .map(|name| {
                known()
                    .into_iter()
                    .find(|b| b.name() == name.trim())
                    .unwrap_or_else(|| {
                        if backends::POSTGRES_PEERS.contains(&name.trim()) {
                            not_built()
                        }
                        panic!("unknown backend {name:?}")
                    })
            })
            .collect(),
        Err(_) => match suite {
            Suite::Local => backends::ALL.to_vec(),
            #[cfg(feature = "postgres")]
            Suite::Postgres => backends::POSTGRES_SUITE.to_vec(),
            #[cfg(not(feature = "postgres"))]
            Suite::Postgres => not_built(),
            Suite::Compaction => Vec::new(),
        },
    }
}

impl Config {
    pub fn from_env() -> Config {
        let quick = std::env::var("AGENTWAL_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let suite = suite_from_env();
        Config {
            quick,
            suite,
            process: process_from_env(suite),
            steps: env_parse("AGENTWAL_BENCH_STEPS").unwrap_or(if quick { 20 } else { 200 }),
            threads: threads_from_env(quick),
            rounds: env_parse("AGENTWAL_BENCH_ROUNDS").unwrap_or(if quick {
                1
            } else if suite == Suite::Compaction {
                COMPACTION_ROUNDS_DEFAULT
            } else {
                FULL_ROUNDS_DEFAULT
            }),
            backends: backends_from_env(suite),
            warm_loads: if quick { 20 } else { 200 },
            cold_loads: if quick { 2 } else { 5 },
            large_store_bytes: env_parse::<u64>("AGENTWAL_BENCH_LARGE_MIB").unwrap_or(if quick {
                32
            } else {
                1024
            }) << 20,
            calm_us: env_parse("AGENTWAL_BENCH_CALM_US").unwrap_or(0.0),
            index_tasks: env_parse("AGENTWAL_BENCH_INDEX_TASKS").unwrap_or(if quick {
                0
            } else {
                100_000
            }),
            base: std::env::var_os("AGENTWAL_BENCH_DIR")
                .map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")), PathBuf::from),
            out_dir: std::env::var_os("AGENTWAL_BENCH_OUT").map_or_else(
                || {
                    if quick {
                        manifest.join("target").join("bench-results")
                    } else {
                        manifest.join("bench-results")
                    }
                },
                PathBuf::from,
            ),
            baseline: std::env::var_os("AGENTWAL_BENCH_BASELINE").map(PathBuf::from),
        }
    }

    /// The report's file name stem: a fresh-process run writes beside an in-process one
    /// instead of over it.
    pub fn report_stem(&self) -> &'static str {
        match self.process {
            Process::InProcess => "workload",
            Process::Fresh => "workload-fresh",
        }
    }

    /// The largest T: the figures that are not per T are judged there.
    pub fn tmax(&self) -> usize {
        *self.threads.iter().max().expect("some T")
    }

    pub fn tmpdir(&self, prefix: &str) -> tempfile::TempDir {
        std::fs::create_dir_all(&self.base).expect("create the bench directory");
        tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(&self.base)
            .expect("create a temporary directory")
    }
}
