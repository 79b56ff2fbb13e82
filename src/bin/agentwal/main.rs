//! `agentwal`: inspect, verify and compact an agentwal store, and a demo that crashes and
//! resumes. Read commands open the store read-only and work while an agent writes to it.
//!
//! Exit codes: 0 ok, 1 damage was found (or the demo's checks failed), 2 anything else that
//! stopped a command: bad usage, I/O errors, a held lock, a state the CLI cannot decode.

mod compact;
mod demo;
mod inspect;
mod open;
mod progress;
mod render;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Inspect, verify and compact agentwal stores.
#[derive(Parser)]
#[command(name = "agentwal", version, about, propagate_version = true)]
struct Cli {
    /// Log engine events to stderr (-v: info, -vv: debug).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Print machine-readable JSON (shapes documented in README, "CLI JSON").
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
        /// The store directory.
        dir: PathBuf,
    },
    /// A task's checkpoints: seq, time, size, snapshot or delta, fork origin.
    History {
        /// The store directory.
        dir: PathBuf,
        /// The task id.
        task: String,
    },
    /// A task's state (latest, or as of --seq).
    Show {
        /// The store directory.
        dir: PathBuf,
        /// The task id.
        task: String,
        /// Show the state as of this checkpoint.
        #[arg(long)]
        seq: Option<u64>,
    },
    /// A task's tool calls, finished and pending.
    Calls {
        /// The store directory.
        dir: PathBuf,
        /// The task id.
        task: String,
    },
    /// Check every checksum and every task's records; exit 1 on corruption, 2 on I/O errors.
    Verify {
        /// The store directory.
        dir: PathBuf,
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
        /// The store directory.
        dir: PathBuf,
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
        Command::Tasks { dir } => inspect::tasks(&dir, json),
        Command::History { dir, task } => inspect::history(&dir, &task, json),
        Command::Show { dir, task, seq } => inspect::show(&dir, &task, seq, json),
        Command::Calls { dir, task } => inspect::calls(&dir, &task, json),
        Command::Verify { dir } => inspect::verify(&dir, json),
        Command::Dump { dir, segment } => inspect::dump(&dir, segment, json),
        Command::Stats { dir } => inspect::stats(&dir, json),
        Command::Compact {
            dir,
            keep_checkpoints,
            max_age_secs,
        } => compact::compact(&dir, keep_checkpoints, max_age_secs, json),
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
