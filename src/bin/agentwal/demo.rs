//! `agentwal demo`: a simulated agent (deterministic fake model and tools, no network)
//! runs as a child process; the parent kills it with SIGKILL mid-step, then runs it again
//! and shows that it resumed from its last checkpoint with its side effect done once.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use agentwal::{AgentDelta, AgentState, Message, State, Store};
use serde_json::json;

use crate::Failure;
use crate::render::print_json;

const TASK: &str = "demo-agent";
const OUTBOX: &str = "outbox.txt";

/// Options of `agentwal demo`.
#[derive(clap::Args)]
pub struct DemoArgs {
    /// Store directory (default: a temporary directory, removed afterwards).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Steps the agent runs.
    #[arg(long, default_value_t = 12)]
    steps: u64,
    /// Kill the agent after it commits step K, mid-way through step K+1 (its email sent,
    /// the step not yet committed).
    #[arg(long, default_value_t = 4)]
    crash_at: u64,
}

/// Options of the hidden child process.
#[derive(clap::Args)]
pub struct ChildArgs {
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    steps: u64,
    /// Stop (and wait to be killed) once the tool of this step has run.
    #[arg(long)]
    pause_after_tool: Option<u64>,
}

pub fn run(args: &DemoArgs, json: bool) -> Result<(), Failure> {
    if args.crash_at == 0 || args.crash_at >= args.steps {
        return Err(Failure::Usage(format!(
            "--crash-at must be in 1..{} (below --steps)",
            args.steps
        )));
    }
    let (dir, temporary) = match &args.dir {
        Some(d) => (d.clone(), false),
        None => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let name = format!("agentwal-demo-{}-{nanos}", std::process::id());
            (std::env::temp_dir().join(name), true)
        }
    };
    if dir.exists() && std::fs::read_dir(&dir).map_or(true, |mut d| d.next().is_some()) {
        return Err(Failure::Usage(format!(
            "{} is not empty; give the demo a new directory",
            dir.display()
        )));
    }
    let result = run_in(&dir, args, json);
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

fn say(json: bool, line: impl AsRef<str>) {
    if !json {
        println!("{}", line.as_ref());
    }
}

fn run_in(dir: &Path, args: &DemoArgs, json: bool) -> Result<(), Failure> {
    let killed_step = args.crash_at + 1;
    say(
        json,
        format!(
            "agentwal demo: store {}, {} steps; the agent is killed (SIGKILL) during step {killed_step}",
            dir.display(),
            args.steps
        ),
    );
    say(json, "--- run 1");
    run_child(dir, args.steps, Some(killed_step), json)?;
    let effect = match tool_of(killed_step) {
        "send_email" => "its email went out",
        _ => "its tool ran",
    };
    say(
        json,
        format!(
            "--- SIGKILL during step {killed_step}: {effect}, its checkpoint was never committed"
        ),
    );
    let (crash_seq, intact) = reopen_after_crash(dir, json)?;

    say(json, "--- run 2");
    let resumed_at = run_child(dir, args.steps, None, json)?;
    let end = End::read(dir, args.steps)?;
    if json {
        print_json(&json!({
            "steps": args.steps, "crash_at": args.crash_at, "killed_during_step": killed_step,
            "checkpoint_after_crash": crash_seq, "resumed_at_step": resumed_at,
            "messages_intact_after_crash": intact, "final_seq": end.seq,
            "final_messages": end.messages, "final_state_intact": end.intact,
            "emails_expected": end.emails_expected, "emails_sent": end.emails_sent,
            "duplicate_side_effects": end.duplicates, "exactly_once": end.exactly_once,
        }));
    } else {
        println!(
            "--- done: {} steps, {} messages; outbox holds {} emails for {} sending steps: {}",
            end.seq,
            end.messages,
            end.emails_sent,
            end.emails_expected,
            if end.exactly_once {
                "each sent exactly once"
            } else {
                "DUPLICATES OR LOSSES"
            }
        );
    }
    if resumed_at != Some(killed_step) || !intact || !end.intact || !end.exactly_once {
        return Err(Failure::Problem(
            "the demo's checks failed (see above)".into(),
        ));
    }
    Ok(())
}

/// Opens the store the killed agent left and reports its latest checkpoint and journal.
/// Returns that checkpoint's seq and whether its state is what the steps before produce.
fn reopen_after_crash(dir: &Path, json: bool) -> Result<(u64, bool), Failure> {
    let store: Store = Store::open(dir)?;
    let latest = store
        .load_latest(TASK)?
        .ok_or_else(|| Failure::Problem("no checkpoint after the crash".into()))?;
    let intact = *latest.state == expected_state(latest.seq);
    say(
        json,
        format!(
            "--- reopened: latest checkpoint seq {} with {} messages ({}); journal: {} finished, {} pending call(s)",
            latest.seq,
            latest.state.messages.len(),
            if intact {
                "every message intact"
            } else {
                "MESSAGES DIFFER"
            },
            store
                .calls(TASK)?
                .iter()
                .filter(|c| c.result.is_some())
                .count(),
            store.pending_calls(TASK)?.len(),
        ),
    );
    Ok((latest.seq, intact))
}

/// What the store and the outbox hold once the agent has run every step.
struct End {
    /// The latest checkpoint's seq.
    seq: u64,
    /// Its message count.
    messages: usize,
    /// Whether its state is what the steps produce.
    intact: bool,
    /// Emails the steps send.
    emails_expected: usize,
    /// Emails in the outbox.
    emails_sent: usize,
    /// Emails in the outbox more than once.
    duplicates: usize,
    /// Whether every email went out once and none twice.
    exactly_once: bool,
}

impl End {
    fn read(dir: &Path, steps: u64) -> Result<End, Failure> {
        let store: Store = Store::open(dir)?;
        let last = store
            .load_latest(TASK)?
            .ok_or_else(|| Failure::Problem("no checkpoint at the end".into()))?;
        let outbox = std::fs::read_to_string(dir.join(OUTBOX)).unwrap_or_default();
        let sent: Vec<&str> = outbox.lines().collect();
        let emails_expected = (1..=steps).filter(|s| tool_of(*s) == "send_email").count();
        let mut unique = sent.clone();
        unique.sort_unstable();
        unique.dedup();
        let duplicates = sent.len() - unique.len();
        Ok(End {
            seq: last.seq,
            messages: last.state.messages.len(),
            intact: *last.state == expected_state(last.seq),
            emails_expected,
            emails_sent: sent.len(),
            duplicates,
            exactly_once: duplicates == 0 && sent.len() == emails_expected,
        })
    }
}

/// Runs the agent process; with `pause_after_tool`, kills it when it reports that step's
/// tool done. Returns the step it resumed at.
fn run_child(
    dir: &Path,
    steps: u64,
    pause_after_tool: Option<u64>,
    json: bool,
) -> Result<Option<u64>, Failure> {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::Usage(format!("cannot find own binary: {e}")))?;
    let mut cmd = Command::new(exe);
    cmd.arg("demo-child")
        .arg("--dir")
        .arg(dir)
        .arg("--steps")
        .arg(steps.to_string());
    if let Some(k) = pause_after_tool {
        cmd.arg("--pause-after-tool").arg(k.to_string());
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| Failure::Usage(format!("cannot start the agent process: {e}")))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| Failure::Usage("no pipe to the agent".into()))?;
    let mut resumed_at = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.map_err(|e| Failure::Usage(format!("reading the agent's output: {e}")))?;
        if let Some(rest) = line.strip_prefix("resume ") {
            resumed_at = rest.parse().ok();
        }
        say(json, format!("  agent: {line}"));
        if line.starts_with("paused ") {
            child
                .kill()
                .map_err(|e| Failure::Usage(format!("cannot kill the agent: {e}")))?;
            break;
        }
    }
    let status = child
        .wait()
        .map_err(|e| Failure::Usage(format!("waiting for the agent: {e}")))?;
    if pause_after_tool.is_none() && !status.success() {
        return Err(Failure::Problem(format!(
            "the agent process failed: {status}"
        )));
    }
    Ok(resumed_at)
}

/// The fake agent. One line per event on stdout, flushed at once.
pub fn child(args: &ChildArgs) -> Result<(), Failure> {
    let store: Store = Store::open(&args.dir)?;
    let start = store.load_latest(TASK)?.map_or(0, |c| c.seq) + 1;
    emit(&format!("resume {start}"));
    for step in start..=args.steps {
        let tool = tool_of(step);
        let call_id = format!("call-{step}");
        let (result, how) = run_tool_once(&store, &args.dir, &call_id, tool, step)?;
        emit(&format!("step {step}: {tool} {how}"));
        if args.pause_after_tool == Some(step) {
            emit(&format!("paused {step} (before commit)"));
            loop {
                std::thread::park(); // wait for SIGKILL
            }
        }
        store.commit(TASK, &step_delta(step, &result))?;
        emit(&format!("step {step}: committed seq {step}"));
    }
    Ok(())
}

fn emit(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Every third step searches (no side effect); the others send an email.
fn tool_of(step: u64) -> &'static str {
    if step.is_multiple_of(3) {
        "search"
    } else {
        "send_email"
    }
}

fn tool_result(step: u64, tool: &str) -> String {
    format!("{tool} #{step}: ok")
}

/// The deterministic delta of a step (a fake model's reply plus the tool's result).
fn step_delta(step: u64, result: &str) -> AgentDelta {
    let tool = tool_of(step);
    let call_id = format!("call-{step}");
    AgentDelta::default()
        .message(
            Message::assistant(format!("Step {step}: calling {tool}")).with_tool_call(
                &call_id,
                tool,
                format!("request #{step}"),
            ),
        )
        .message(Message::tool(&call_id, result))
        .set("phase", "working")
        .set("step", step as i64)
        .set("last_tool", tool)
}

fn expected_state(seq: u64) -> AgentState {
    let mut state = AgentState::default();
    for step in 1..=seq {
        state.apply(&step_delta(step, &tool_result(step, tool_of(step))));
    }
    state
}

/// Runs a tool through the journal: a finished call is never run again.
fn run_tool_once(
    store: &Store,
    dir: &Path,
    call_id: &str,
    tool: &str,
    step: u64,
) -> Result<(String, &'static str), Failure> {
    if let Some(r) = store.call_result(TASK, call_id)? {
        return Ok((
            String::from_utf8_lossy(&r).into_owned(),
            "already ran before the crash: journaled result reused, not run again",
        ));
    }
    let pending = store
        .pending_calls(TASK)?
        .iter()
        .any(|p| p.call_id == call_id);
    if !pending {
        store.begin_call(TASK, call_id, tool, format!("request #{step}").as_bytes())?;
    }
    let outbox = dir.join(OUTBOX);
    // A pending send_email may or may not have happened: the outbox tells (idempotent by id).
    let already =
        pending && std::fs::read_to_string(&outbox).is_ok_and(|s| s.lines().any(|l| l == call_id));
    if tool == "send_email" && !already {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&outbox)
            .map_err(|e| Failure::Usage(format!("outbox: {e}")))?;
        writeln!(f, "{call_id}")
            .and_then(|()| f.sync_data())
            .map_err(|e| Failure::Usage(format!("outbox: {e}")))?;
    }
    let result = tool_result(step, tool);
    store.finish_call(TASK, call_id, result.as_bytes())?;
    Ok((
        result,
        if tool == "send_email" {
            "ran (email sent)"
        } else {
            "ran"
        },
    ))
}
