//! 64 agents on a 2-worker tokio runtime, each a loop of steps: call a model, run a tool
//! with a side effect through the tool-call journal, commit the step. Killed and
//! restarted, every agent resumes from its last checkpoint and no side effect happens
//! twice, or not at all.
//!
//! ```text
//! cargo run --features tokio --example async_agent -- --dir /tmp/agents --crash-at 5
//! cargo run --features tokio --example async_agent -- --dir /tmp/agents   # resumes
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agentwal::{AgentDelta, AsyncStore, Message};

const AGENTS: u64 = 64;
const STEPS: u64 = 20;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let (dir, crash_at) = parse_args()?;
    let store: AsyncStore = AsyncStore::open(&dir).await?;
    // The tool's "external system": one outbox file per agent, next to the store.
    let outbox = dir.join("outbox");
    std::fs::create_dir_all(&outbox)?;

    let agents: Vec<_> = (0..AGENTS)
        .map(|a| tokio::spawn(run_agent(store.clone(), outbox.clone(), a, crash_at)))
        .collect();
    let (mut resumed, mut from_outbox) = (0, 0);
    for agent in agents {
        let (was_resumed, resolved) = agent.await??;
        resumed += u64::from(was_resumed);
        from_outbox += resolved;
    }
    println!("resumed {resumed} agents from a checkpoint");
    println!("pending calls resolved from the outbox: {from_outbox}");

    // Check the outcome: every agent at its last step, and each step's side effect in
    // its outbox exactly once.
    let mut effects = 0;
    let mut exactly_once = true;
    for a in 0..AGENTS {
        let task = agent_task(a);
        let latest = store
            .load_latest(&task)
            .await?
            .ok_or("an agent without a checkpoint")?;
        let sent = std::fs::read_to_string(outbox.join(format!("{task}.txt")))?;
        let mut lines: Vec<&str> = sent.lines().collect();
        effects += lines.len();
        lines.sort_unstable();
        let mut expected: Vec<String> = (1..=STEPS).map(|s| call_id(&task, s)).collect();
        expected.sort_unstable();
        exactly_once &= latest.seq == STEPS && lines == expected;
    }
    println!(
        "agents: {AGENTS}, steps: {}, side effects: {effects} (exactly once: {exactly_once})",
        AGENTS * STEPS
    );
    Ok(())
}

/// One agent: resumes after its latest checkpoint and runs its remaining steps. Returns
/// whether it resumed, and how many pending calls the outbox resolved.
async fn run_agent(
    store: AsyncStore,
    outbox: PathBuf,
    agent: u64,
    crash_at: Option<u64>,
) -> agentwal::Result<(bool, u64)> {
    let task = agent_task(agent);
    let outbox = outbox.join(format!("{task}.txt"));
    // A commit per step, so a checkpoint's seq is the number of steps done.
    let done = store.load_latest(&task).await?.map_or(0, |cp| cp.seq);
    let mut resolved = 0;
    for step in done + 1..=STEPS {
        let reply = call_model(agent, step).await;
        let id = call_id(&task, step);
        let crash = agent == 0 && crash_at == Some(step - 1);
        let (receipt, from_outbox) = send_once(&store, &task, &id, &reply, &outbox, crash).await?;
        resolved += u64::from(from_outbox);
        let call = Message::assistant(&reply).with_tool_call(&id, "send_notice", reply.as_str());
        let delta = AgentDelta::default()
            .message(call)
            .message(Message::tool(&id, receipt))
            .set("step", step as i64);
        // Returns once the step is durable; the task waits without holding a thread.
        store.commit(&task, &delta).await?;
    }
    Ok((done > 0, resolved))
}

/// A fake model: some latency, and a reply that depends only on the step, so a step
/// redone after a crash asks the tool for the same thing.
async fn call_model(agent: u64, step: u64) -> String {
    tokio::time::sleep(Duration::from_millis(2)).await;
    format!("agent {agent}, step {step}: notify the customer")
}

/// Runs the side-effecting tool at most once per call id, through the journal: begin the
/// call (durable before the effect), do it, record its result. Returns the result and
/// whether a call left pending by a crash was resolved from the outbox.
async fn send_once(
    store: &AsyncStore,
    task: &str,
    id: &str,
    notice: &str,
    outbox: &Path,
    crash: bool,
) -> agentwal::Result<(String, bool)> {
    let receipt = format!("sent {id}");
    // Finished before a crash: reuse the recorded result.
    if let Some(result) = store.call_result(task, id).await? {
        return Ok((String::from_utf8_lossy(&result).into_owned(), false));
    }
    let pending = store
        .pending_calls(task)
        .await?
        .iter()
        .any(|p| p.call_id == id);
    if pending && already_sent(outbox, id) {
        // Begun, done, but its result not recorded: the outbox says it went out.
        store.finish_call(task, id, receipt.as_bytes()).await?;
        return Ok((receipt, true));
    }
    // Pending but not in the outbox: the crash came before the effect, which runs now.
    if !pending {
        store
            .begin_call(task, id, "send_notice", notice.as_bytes())
            .await?;
    }
    // The side effect: a short append to a local file, so it runs right on the worker
    // (a slow or blocking tool would go through `tokio::task::spawn_blocking`).
    append_line(outbox, id).map_err(|e| agentwal::Error::Io {
        context: format!("cannot write the outbox {}", outbox.display()),
        source: e,
    })?;
    if crash {
        // Die after the side effect, before its result is recorded: the worst moment.
        println!("crashing in {id} (sent, result not recorded)");
        let _ = std::io::stdout().flush();
        std::process::abort();
    }
    store.finish_call(task, id, receipt.as_bytes()).await?;
    Ok((receipt, false))
}

fn append_line(path: &Path, line: &str) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    // A line this short goes out in one write(2): a crash leaves it whole or absent. Not
    // fsynced: the crash this demo makes is a process crash, which keeps what was written
    // (a real external system acknowledges durably).
    file.write_all(format!("{line}\n").as_bytes())
}

/// Asks the "external system" whether a call's effect happened (a real tool would look
/// the call id up, e.g. as an idempotency key).
fn already_sent(outbox: &Path, id: &str) -> bool {
    std::fs::read_to_string(outbox).is_ok_and(|s| s.lines().any(|l| l == id))
}

fn agent_task(agent: u64) -> String {
    format!("agent-{agent:02}")
}

fn call_id(task: &str, step: u64) -> String {
    format!("{task}/notice-{step}")
}

fn parse_args() -> Result<(PathBuf, Option<u64>), String> {
    let mut dir = std::env::temp_dir().join("agentwal-async-agent-example");
    let mut crash_at = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--dir" => dir = args.next().ok_or("--dir needs a path")?.into(),
            "--crash-at" => {
                let k = args.next().ok_or("--crash-at needs a step number")?;
                crash_at = Some(k.parse().map_err(|_| format!("bad step number {k:?}"))?);
            }
            other => {
                return Err(format!(
                    "unknown argument {other:?}; use --dir D [--crash-at K]"
                ));
            }
        }
    }
    Ok((dir, crash_at))
}
