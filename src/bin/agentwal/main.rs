//! `agentwal`: inspect, verify and compact an agentwal store, copy one into PostgreSQL
//! (`migrate`), and a demo that crashes and resumes. Read commands open the store
//! read-only, a directory or (built with `--features postgres`) a PostgreSQL database, and
//! work while agents write to it.
//!
//! Exit codes: 0 ok, 1 damage was found (or the demo's checks failed), 2 anything else that
//! stopped a command: bad usage, I/O errors, a held lock, a state the CLI cannot decode.

mod compact;
mod demo;
mod inspect;
mod migrate;
mod open;
mod progress;
mod render;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use open::{PgArgs, Target};

/// Inspect, verify and compact agentwal stores.
#[derive(Parser)]
#[command(name = "agentwal", version, about, propagate_version = true)]
struct Cli {
    /// Log engine events to stderr (-v: info, -vv: debug).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Print machine-readable JSON (shapes documented in docs/cli.md).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a simulated agent, kill it with SIGKILL mid-step, and resume it.
    Demo(demo::DemoArgs),
    /// Internal: the demo's agent process.
    #[command(hide = true)]
    DemoChild(demo::ChildArgs),
    /// List tasks: id, latest seq, last commit time, bytes.
    Tasks {
        /// The store: a directory, or a postgres:// URL (or omit it and give --pg).
        store: Option<String>,
        #[command(flatten)]
        pg: PgArgs,
    },
    /// A task's checkpoints: seq, time, size, snapshot or delta, fork origin.
    History {
        /// The store: a directory, or a postgres:// URL (or omit it and give --pg).
        store: Option<String>,
        /// The task id.
        task: Option<String>,
        #[command(flatten)]
        pg: PgArgs,
    },
    /// A task's state (latest, or as of --seq).
    Show {
        /// The store: a directory, or a postgres:// URL (or omit it and give --pg).
        store: Option<String>,
        /// The task id.
        task: Option<String>,
        /// Show the state as of this checkpoint.
        #[arg(long)]
        seq: Option<u64>,
        #[command(flatten)]
        pg: PgArgs,
    },
    /// A task's tool calls, finished and pending.
    Calls {
        /// The store: a directory, or a postgres:// URL (or omit it and give --pg).
        store: Option<String>,
        /// The task id.
        task: Option<String>,
        #[command(flatten)]
        pg: PgArgs,
    },
    /// Check every checksum and every task's records; exit 1 on corruption, 2 on I/O errors.
    /// On PostgreSQL: every task's rows, bodies and journal.
    Verify {
        /// The store: a directory, or a postgres:// URL (or omit it and give --pg).
        store: Option<String>,
        #[command(flatten)]
        pg: PgArgs,
    },
    /// Print raw records (LSN, kind, task, seq, length, offset) for forensics.
    Dump {
        /// The store directory.
        dir: PathBuf,
        /// Only this segment id.
        #[arg(long)]
        segment: Option<u64>,
    },
    /// Segments, live and dead bytes, tasks, biggest tasks, snapshot/delta counts.
    Stats {
        /// The store: a directory, or a postgres:// URL (or omit it and give --pg).
        store: Option<String>,
        #[command(flatten)]
        pg: PgArgs,
    },
    /// Compact the store now (needs the writer lock). Works on a full disk: segments
    /// with nothing live are deleted before anything is written.
    Compact {
        /// The store directory.
        dir: PathBuf,
        /// Retention to apply first: keep the latest N checkpoints of each task (the
        /// store's `keep_checkpoints`). Without it every checkpoint is kept.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        keep_checkpoints: Option<u32>,
        /// Retention to apply first: keep checkpoints younger than this many seconds (the
        /// store's `max_age`; the latest is always kept).
        #[arg(long, value_name = "SECONDS")]
        max_age_secs: Option<u64>,
    },
    /// Copy a local store into PostgreSQL (every task's retained checkpoints, fork
    /// origins and tool calls, one transaction per task), then check that every retained
    /// checkpoint loads the same state there and every call has the same status. Safe to
    /// run again: tasks already copied are checked and skipped. Needs --features postgres.
    Migrate {
        /// The local store directory (opened read-only).
        dir: PathBuf,
        /// The PostgreSQL database: a postgres:// URL or key=value words (or give --pg).
        url: Option<String>,
        /// Retention to apply while copying: only the latest N checkpoints of each task
        /// (the store's `keep_checkpoints`). Without it every checkpoint the log holds.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        keep_checkpoints: Option<u32>,
        #[command(flatten)]
        pg: PgArgs,
    },
}

/// How a command ended, beyond success.
pub enum Failure {
    /// The store is damaged, or the demo's checks failed (exit 1).
    Problem(String),
    /// Bad usage, an I/O error, or anything else that is not damage (exit 2).
    Usage(String),
}

/// What a command returns.
pub type Outcome = Result<(), Failure>;

impl From<agentwal::Error> for Failure {
    fn from(e: agentwal::Error) -> Self {
        // Only bytes that fail their checks are damage. A body that does not decode as
        // AgentState (`BodyDecode`, `SchemaMismatch`) was written by another state type,
        // and an I/O error (a segment a concurrent compaction deleted, say) says nothing
        // about the data.
        match e {
            agentwal::Error::Corruption { .. } | agentwal::Error::Decode { .. } => {
                Failure::Problem(e.to_string())
            }
            other => Failure::Usage(other.to_string()),
        }
    }
}

fn main() -> ExitCode {
    // Die quietly on a closed pipe (`agentwal dump DIR | head`), as Unix tools do.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    init_tracing(cli.verbose);
    let json = cli.json;
    let result = match cli.command {
        Command::Demo(args) => demo::run(&args, json),
        Command::DemoChild(args) => demo::child(&args),
        Command::Tasks { store, pg } => {
            Target::resolve(store, None, pg, false).and_then(|(t, _)| inspect::tasks(&t, json))
        }
        Command::History { store, task, pg } => {
            with_task(store, task, pg, |t, task| inspect::history(t, task, json))
        }
        Command::Show {
            store,
            task,
            seq,
            pg,
        } => with_task(store, task, pg, |t, task| inspect::show(t, task, seq, json)),
        Command::Calls { store, task, pg } => {
            with_task(store, task, pg, |t, task| inspect::calls(t, task, json))
        }
        Command::Verify { store, pg } => {
            Target::resolve(store, None, pg, false).and_then(|(t, _)| inspect::verify(&t, json))
        }
        Command::Dump { dir, segment } => {
            local_only(&dir, "dump", DUMP_ON_PG).and_then(|()| inspect::dump(&dir, segment, json))
        }
        Command::Stats { store, pg } => {
            Target::resolve(store, None, pg, false).and_then(|(t, _)| inspect::stats(&t, json))
        }
        Command::Compact {
            dir,
            keep_checkpoints,
            max_age_secs,
        } => local_only(&dir, "compact", COMPACT_ON_PG)
            .and_then(|()| compact::compact(&dir, keep_checkpoints, max_age_secs, json)),
        Command::Migrate {
            dir,
            url,
            keep_checkpoints,
            pg,
        } => migrate::migrate(&dir, url, keep_checkpoints, pg, json),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Problem(msg)) => {
            eprintln!("agentwal: {msg}");
            ExitCode::from(1)
        }
        Err(Failure::Usage(msg)) => {
            eprintln!("agentwal: {msg}");
            ExitCode::from(2)
        }
    }
}

/// Why `dump` refuses a PostgreSQL address.
const DUMP_ON_PG: &str = "dump prints a local store's raw log records, and a PostgreSQL \
     store has no log: read it with tasks, history, show, calls, verify and stats";
/// Why `compact` refuses a PostgreSQL address.
const COMPACT_ON_PG: &str = "compact rewrites a local store's log, and a PostgreSQL store has \
     none: there, retention is PgOptions::keep_checkpoints (applied at each commit) and dead \
     rows are VACUUM's";

/// A usage error if `dir` is a PostgreSQL URL: `command` works on local stores only.
fn local_only(dir: &std::path::Path, command: &str, why: &str) -> Outcome {
    match dir.to_str() {
        Some(s) if open::is_url(s) => Err(Failure::Usage(format!(
            "{command} works on a store directory only, not on {}: {why}",
            open::redact(s)
        ))),
        _ => Ok(()),
    }
}

/// Resolves a read command's store and task, then runs it.
fn with_task(
    store: Option<String>,
    task: Option<String>,
    pg: PgArgs,
    run: impl FnOnce(&Target, &str) -> Outcome,
) -> Outcome {
    let (target, task) = Target::resolve(store, task, pg, true)?;
    run(&target, task.as_deref().unwrap_or_default())
}

fn init_tracing(verbose: u8) {
    let level = match verbose {
        0 => return,
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::new(format!("agentwal={level}"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
