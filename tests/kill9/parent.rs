//! The parent's side of a round: running a child, reading its acks, killing it.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::workload::{ACK, ASYNC_ENV, CHILD_ENV, KEEP_ENV};

#[derive(Debug, Clone, Copy)]
pub(crate) enum Kill {
    AfterSpawn(Duration),
    AfterReady(Duration),
}

/// What one child acknowledged.
#[derive(Debug, Default)]
pub(crate) struct Acks {
    pub(crate) commits: Vec<(String, u64)>,
    pub(crate) begins: Vec<(String, u64)>,
    pub(crate) finishes: Vec<(String, u64)>,
    /// Forks made (name, source seq) and deleted (name).
    pub(crate) forks: Vec<(String, u64)>,
    pub(crate) deletions: Vec<String>,
}

#[derive(Debug, Default)]
pub(crate) struct Totals {
    pub(crate) commits: usize,
    pub(crate) begins: usize,
    pub(crate) finishes: usize,
    pub(crate) forks: usize,
    pub(crate) deletions: usize,
    pub(crate) recycled_seen: u64,
    pub(crate) oversized_seen: u64,
    pub(crate) big_state_bytes: usize,
}

impl Totals {
    pub(crate) fn add(&mut self, acks: &Acks) {
        self.commits += acks.commits.len();
        self.begins += acks.begins.len();
        self.finishes += acks.finishes.len();
        self.forks += acks.forks.len();
        self.deletions += acks.deletions.len();
    }
}

/// Kills the child if the parent panics before it does.
pub(crate) struct KillOnDrop(pub(crate) Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn run_child(
    dir: &Path,
    keep: Option<u32>,
    plan: Kill,
    asynchronous: bool,
    ctx: &str,
) -> Acks {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", "child_writer", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match keep {
        Some(k) => cmd.env(KEEP_ENV, k.to_string()),
        None => cmd.env_remove(KEEP_ENV),
    };
    match asynchronous {
        true => cmd.env(ASYNC_ENV, "1"),
        false => cmd.env_remove(ASYNC_ENV),
    };
    let spawned = Instant::now();
    let mut child = KillOnDrop(cmd.spawn().unwrap());
    let stdout = child.0.stdout.take().unwrap();
    let mut stderr = child.0.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        let mut out = BufReader::new(stdout);
        let mut line = String::new();
        let mut ready = Some(tx);
        loop {
            line.clear();
            match out.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                // A line cut by the kill was never acknowledged.
                Ok(_) if !line.ends_with('\n') => break,
                Ok(_) => {}
            }
            // The test harness may print "test child_writer ... " before an ack.
            let Some(at) = line.find(ACK) else { continue };
            let ack = line[at + ACK.len()..].trim_end();
            if ack.starts_with("R ") {
                ready.take().map(|tx| tx.send(()));
            }
            lines.push(ack.to_string());
        }
        lines
    });
    match plan {
        Kill::AfterSpawn(d) => std::thread::sleep(d.saturating_sub(spawned.elapsed())),
        Kill::AfterReady(d) => {
            // A child that fails exits, which also ends the wait (checked below).
            let ready = rx.recv_timeout(Duration::from_secs(30)).is_ok();
            let exited = child.0.try_wait().unwrap().is_some();
            assert!(
                ready || exited,
                "{ctx}: the child is not ready after 30 s (a hang?)"
            );
            std::thread::sleep(d);
        }
    }
    if let Some(status) = child.0.try_wait().unwrap() {
        let mut err = String::new();
        let _ = stderr.read_to_string(&mut err);
        panic!("{ctx}: the child exited by itself ({status}) before the kill:\n{err}");
    }
    child.0.kill().unwrap(); // SIGKILL
    child.0.wait().unwrap();
    let mut err = String::new();
    let _ = stderr.read_to_string(&mut err);
    assert!(
        !err.contains("child error") && !err.contains("panicked"),
        "{ctx}: the child reported an error:\n{err}"
    );
    let mut acks = Acks::default();
    for line in reader.join().unwrap() {
        let mut parts = line.split(' ');
        let (Some(kind), Some(task), Some(seq), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let Ok(seq) = seq.parse::<u64>() else {
            continue;
        };
        let entry = (task.to_string(), seq);
        match kind {
            "C" => acks.commits.push(entry),
            "B" => acks.begins.push(entry),
            "F" => acks.finishes.push(entry),
            "K" => acks.forks.push(entry),
            "D" => acks.deletions.push(entry.0),
            _ => {}
        }
    }
    acks
}
