//! An agent loop that survives being killed: it commits after every step, journals its
//! side-effecting tool, and on restart resumes from its last durable checkpoint.
//!
//! ```text
//! cargo run --example resume -- --dir /tmp/agent --crash-at 20   # dies during step 21
//! cargo run --example resume -- --dir /tmp/agent                 # resumes at step 21
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};

use agentwal::{AgentDelta, Message, Store};

const TASK: &str = "support-ticket-42";
const STEPS: u64 = 50;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (dir, crash_at) = parse_args()?;
    let store: Store = Store::open(&dir)?;
    let outbox = dir.join("outbox.txt");

    let latest = store.load_latest(TASK)?;
    let done = latest.as_ref().map_or(0, |c| c.seq);
    match &latest {
        Some(cp) => println!(
            "resumed: checkpoint {} has {} messages; continuing at step {}",
            cp.seq,
            cp.state.messages.len(),
            done + 1
        ),
        None => println!("new task: starting at step 1"),
    }
    for step in done + 1..=STEPS {
        let call_id = format!("email-{step}");
        let receipt = send_email_once(&store, &outbox, &call_id, step)?;
        if crash_at == Some(step - 1) {
            // Die after the side effect, before the step's commit: the worst moment.
            println!("crashing during step {step} (tool ran, step not committed)");
            std::io::stdout().flush()?;
            std::process::abort();
        }
        let delta = AgentDelta::default()
            .message(
                Message::assistant(format!("step {step}: emailing")).with_tool_call(
                    &call_id,
                    "send_email",
                    format!("update #{step}"),
                ),
            )
            .message(Message::tool(&call_id, receipt))
            .set("step", step as i64);
        store.commit(TASK, &delta)?;
    }
    let last = store
        .load_latest(TASK)?
        .ok_or("no checkpoint after the run")?;
    println!(
        "finished: {} steps, {} messages",
        last.seq,
        last.state.messages.len()
    );
    for m in last
        .state
        .messages
        .iter()
        .rev()
        .take(4)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
    {
        println!("  {:?}: {}", m.role, m.content);
    }
    let sent = std::fs::read_to_string(&outbox)?.lines().count();
    println!(
        "emails in outbox: {sent} (exactly one per step: {})",
        sent as u64 == STEPS
    );
    Ok(())
}

/// Runs the side-effecting tool through the tool-call journal so it never runs twice.
fn send_email_once(
    store: &Store,
    outbox: &Path,
    call_id: &str,
    step: u64,
) -> agentwal::Result<String> {
    if let Some(result) = store.call_result(TASK, call_id)? {
        println!("step {step}: tool already ran before the crash; reusing its result");
        return Ok(String::from_utf8_lossy(&result).into_owned());
    }
    if store
        .pending_calls(TASK)?
        .iter()
        .any(|p| p.call_id == call_id)
    {
        // Began but no result: the email may or may not have gone out. This tool is
        // idempotent by call id, so check the outbox before sending again.
        if already_sent(outbox, call_id) {
            let receipt = format!("sent {call_id}");
            store.finish_call(TASK, call_id, receipt.as_bytes())?;
            return Ok(receipt);
        }
    } else {
        store.begin_call(
            TASK,
            call_id,
            "send_email",
            format!("update #{step}").as_bytes(),
        )?;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(outbox)
        .map_err(|e| {
            agentwal::Error::InvalidArgument(format!(
                "cannot open outbox {}: {e}",
                outbox.display()
            ))
        })?;
    writeln!(file, "{call_id}")
        .and_then(|()| file.sync_data())
        .map_err(|e| agentwal::Error::InvalidArgument(format!("cannot write outbox: {e}")))?;
    let receipt = format!("sent {call_id}");
    store.finish_call(TASK, call_id, receipt.as_bytes())?;
    Ok(receipt)
}

fn already_sent(outbox: &Path, call_id: &str) -> bool {
    std::fs::read_to_string(outbox).is_ok_and(|s| s.lines().any(|l| l == call_id))
}

fn parse_args() -> Result<(PathBuf, Option<u64>), String> {
    let mut dir = std::env::temp_dir().join("agentwal-resume-example");
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
