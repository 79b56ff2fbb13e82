//! A worker: its settings, its steps and their tool calls, the outbox that honours
//! fencing tokens, and its loop over the tasks.

use std::fs::OpenOptions;
use std::io::{Read, Seek, Write};
use std::path::Path;
use std::time::Duration;

use crate::common::env::env_u64;
use crate::common::rng::Rng;
use agentwal::postgres::{Lease, PgOptions, PgStore};
use agentwal::{AgentDelta, Error, Message};

const TASKS_ENV: &str = "AGENTWAL_PG_WORKERS_TASKS";

const STEPS_ENV: &str = "AGENTWAL_PG_WORKERS_STEPS";

/// Child mode: the schema of the run.
pub(crate) const SCHEMA_ENV: &str = "AGENTWAL_PG_WORKER_SCHEMA";

pub(crate) const OUTBOX_ENV: &str = "AGENTWAL_PG_WORKER_OUTBOX";

pub(crate) const NAME_ENV: &str = "AGENTWAL_PG_WORKER_NAME";

/// A lease's ttl; renewed after every step (a step takes 5 to 30 ms).
pub(crate) const TTL: Duration = Duration::from_millis(500);

/// A worker's lines to the parent start with this (the harness may print before it).
pub(crate) const MARK: &str = "@ ";

pub(crate) fn tasks() -> u64 {
    env_u64(TASKS_ENV).unwrap_or(100)
}

pub(crate) fn steps() -> u64 {
    env_u64(STEPS_ENV).unwrap_or(5)
}

pub(crate) fn options(schema: String) -> PgOptions {
    PgOptions {
        deadline: Duration::from_secs(3),
        snapshot_every: 2,
        schema,
        ..PgOptions::default()
    }
}

pub(crate) fn task_name(i: u64) -> String {
    format!("task{i:04}")
}

pub(crate) fn call_id(task: &str, k: u64) -> String {
    format!("{task}-step{k}")
}

pub(crate) fn call_result(call: &str) -> Vec<u8> {
    format!("sent {call}").into_bytes()
}

/// Step `k`'s delta: its message is `K CALL EPOCH HOLDER`.
pub(crate) fn step(k: u64, call: &str, lease: &Lease) -> AgentDelta {
    AgentDelta::default()
        .message(Message::user(format!(
            "{k} {call} {} {}",
            lease.epoch, lease.holder
        )))
        .set("k", k as i64)
}

/// A step as the history holds it: (k, call id, epoch).
pub(crate) fn parse_step(m: &Message) -> (u64, String, u64) {
    let w: Vec<&str> = m.content.split(' ').collect();
    assert_eq!(w.len(), 4, "a step message: {:?}", m.content);
    (
        w[0].parse().expect("a step number"),
        w[1].to_string(),
        w[2].parse().expect("an epoch"),
    )
}

// ---------------------------------------------------------------------------------------
// The outbox: one file per task, a line `CALL EPOCH` per side effect.

pub(crate) enum Sent {
    /// The effect happened now.
    Now,
    /// The outbox already had this call: a killed worker sent it, its result unrecorded.
    Already,
    /// A newer epoch has written to this task's outbox: this sender was fenced.
    Refused,
}

/// Sends `call` once, under the outbox's lock: never twice, and never under an epoch older
/// than one the task's outbox has seen.
fn send_once(outbox: &Path, task: &str, call: &str, epoch: u64) -> Sent {
    let path = outbox.join(format!("{task}.txt"));
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("open the outbox {}: {e}", path.display()));
    file.lock().expect("lock the outbox");
    let mut text = String::new();
    file.rewind().expect("rewind the outbox");
    file.read_to_string(&mut text).expect("read the outbox");
    let mut newest = 0;
    for line in text.lines() {
        let (c, e) = line.split_once(' ').expect("an outbox line");
        if c == call {
            return Sent::Already;
        }
        newest = newest.max(e.parse::<u64>().expect("an outbox epoch"));
    }
    if newest > epoch {
        return Sent::Refused;
    }
    // One write(2) of a whole line: a SIGKILL leaves it written or not.
    file.write_all(format!("{call} {epoch}\n").as_bytes())
        .expect("append to the outbox");
    Sent::Now
}

// ---------------------------------------------------------------------------------------
// The worker child

/// A worker's report line.
pub(crate) fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{MARK}{line}").expect("worker: write to the parent");
    out.flush().expect("worker: flush to the parent");
}

/// Why a worker dropped a task.
pub(crate) enum Dropped {
    /// `Error::Fenced` (or the outbox's refusal) at operation `op`, step `k`.
    Fenced(&'static str, u64),
    Other(Error),
}

/// Runs the remaining steps of `lease.task`.
pub(crate) fn work(
    store: &PgStore,
    lease: &Lease,
    steps: u64,
    outbox: &Path,
    rng: &mut Rng,
) -> std::result::Result<(), Dropped> {
    let h = store.with_lease(lease);
    let task = lease.task.as_str();
    let on = |op: &'static str, k: u64| {
        move |e: Error| match e {
            Error::Fenced { .. } => Dropped::Fenced(op, k),
            e => Dropped::Other(e),
        }
    };
    let mut seq = h
        .load_latest(task)
        .map_err(on("load", 0))?
        .map_or(0, |c| c.seq);
    while seq < steps {
        let k = seq + 1;
        let call = call_id(task, k);
        // The model's think time, outside any transaction (the parent freezes a worker
        // here, so that its lease can run out while it holds no row lock).
        say(&format!("think {task} {k}"));
        std::thread::sleep(Duration::from_millis(5 + rng.below(10)));
        if h.call_result(task, &call)
            .map_err(on("call_result", k))?
            .is_none()
        {
            h.begin_call(task, &call, "outbox", call.as_bytes())
                .map_err(on("begin_call", k))?;
            match send_once(outbox, task, &call, lease.epoch) {
                Sent::Now | Sent::Already => {}
                Sent::Refused => return Err(Dropped::Fenced("outbox", k)),
            }
            h.finish_call(task, &call, &call_result(&call))
                .map_err(on("finish_call", k))?;
        }
        seq = h
            .commit_if(task, seq, &step(k, &call, lease))
            .map_err(on("commit", k))?;
        say(&format!("ack {task} {seq} {}", lease.epoch));
        store.renew(lease, TTL).map_err(on("renew", k))?;
    }
    store.release(lease).map_err(on("release", steps))?;
    Ok(())
}
