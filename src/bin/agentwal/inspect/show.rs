//! `agentwal show` and `agentwal calls`: one task's state as of a checkpoint, and its
//! tool calls.

use std::collections::BTreeMap;

use agentwal::{AgentState, Checkpoint, CheckpointInfo, Error};
use serde_json::{Value as J, json};

use super::{NOT_AGENT_STATE, unknown_task};
use crate::open::{Opened, Target};
use crate::render::{self, print_json};
use crate::{Failure, Outcome};

/// Runs `agentwal show`.
pub fn show(target: &Target, task: &str, seq: Option<u64>, json: bool) -> Outcome {
    let opened = Opened::open(target)?;
    unknown_task(&opened, task)?;
    let store = opened.api();
    let loaded = match seq {
        Some(seq) => store.load(task, seq),
        None => store.load_latest(task),
    };
    // A body that does not decode as AgentState is most likely another state type's: what
    // the index knows is still worth showing, and nothing is wrong with the store.
    let (cp, undecodable) = match loaded {
        Ok(cp) => (cp, None),
        Err(e @ Error::BodyDecode { schema_version, .. }) => {
            (None, Some((schema_version, e.to_string())))
        }
        Err(e @ Error::SchemaMismatch { found, .. }) => (None, Some((found, e.to_string()))),
        Err(e) => return Err(e.into()),
    };
    let retained = store.list_checkpoints(task)?;
    let info = match seq.or(cp.as_ref().map(|c| c.seq)) {
        Some(s) => retained.iter().find(|c| c.seq == s),
        None => retained.last(),
    };
    let Some(info) = info.filter(|_| cp.is_some() || undecodable.is_some()) else {
        return Err(Failure::Usage(format!(
            "checkpoint {} of task {task:?} is not retained",
            seq.map_or("latest".into(), |s| s.to_string())
        )));
    };
    match cp {
        Some(cp) => print_state(&cp, info, json),
        None => {
            let (version, why) = undecodable.unwrap_or_default();
            print_undecoded(task, info, version, &why, json);
        }
    }
    Ok(())
}

/// "snapshot" or "delta": how the checkpoint's record stores it.
fn kind(info: &CheckpointInfo) -> &'static str {
    if info.snapshot { "snapshot" } else { "delta" }
}

/// Prints what the index knows of a checkpoint whose body is not an [`AgentState`].
fn print_undecoded(task: &str, info: &CheckpointInfo, version: u32, why: &str, json: bool) {
    let kind = kind(info);
    if json {
        print_json(&json!({
            "task": task, "seq": info.seq, "created_at_ms": info.created_at_ms,
            "bytes": info.bytes, "kind": kind, "schema_version": version,
            "state": null, "state_error": format!("{NOT_AGENT_STATE}: {why}"),
        }));
        return;
    }
    println!(
        "task {task} @ seq {} ({}), {kind} record of {}",
        info.seq,
        render::time(info.created_at_ms),
        render::size(info.bytes)
    );
    println!("state not decoded (schema version {version}): {NOT_AGENT_STATE}");
    println!("  {why}");
}

/// Prints a checkpoint's state: its messages with their tool calls, vars and metadata.
fn print_state(cp: &Checkpoint<AgentState>, info: &CheckpointInfo, json: bool) {
    if json {
        print_json(&json!({
            "task": cp.task, "seq": cp.seq, "created_at_ms": cp.created_at_ms,
            "bytes": info.bytes, "kind": kind(info), "state": render::state(&cp.state),
        }));
        return;
    }
    println!(
        "task {} @ seq {} ({})",
        cp.task,
        cp.seq,
        render::time(cp.created_at_ms)
    );
    println!("messages ({}):", cp.state.messages.len());
    for (i, m) in cp.state.messages.iter().enumerate() {
        let role = format!("{:?}", m.role).to_lowercase();
        let reply = m
            .tool_call_id
            .as_ref()
            .map(|id| format!(" ({id})"))
            .unwrap_or_default();
        println!("  [{}] {role}{reply}: {}", i + 1, m.content);
        for c in &m.tool_calls {
            println!("      -> {} {}({})", c.id, c.name, render::value(&c.args));
        }
    }
    print_map("vars", &cp.state.vars);
    print_map("metadata", &cp.state.metadata);
}

fn print_map(name: &str, map: &BTreeMap<String, agentwal::Value>) {
    if map.is_empty() {
        return;
    }
    println!("{name}:");
    for (k, v) in map {
        println!("  {k} = {}", render::value(v));
    }
}

/// Runs `agentwal calls`.
pub fn calls(target: &Target, task: &str, json: bool) -> Outcome {
    let store = Opened::open(target)?;
    unknown_task(&store, task)?;
    let calls = store.calls(task)?;
    if json {
        let list: Vec<J> = calls
            .iter()
            .map(|c| {
                json!({
                    "call_id": c.call_id, "tool": c.tool, "args": render::bytes_text(&c.args),
                    "status": if c.result.is_some() { "finished" } else { "pending" },
                    "result": c.result.as_deref().map(render::bytes_text), "begun_at_ms": c.begun_at_ms,
                })
            })
            .collect();
        print_json(&json!({ "task": task, "calls": list }));
        return Ok(());
    }
    println!("{:<24} {:<16} {:<9} RESULT", "CALL", "TOOL", "STATUS");
    for c in &calls {
        let (status, result) = match &c.result {
            Some(r) => ("finished", render::bytes_text(r)),
            None => ("PENDING", "(side effects uncertain)".into()),
        };
        println!("{:<24} {:<16} {:<9} {result}", c.call_id, c.tool, status);
    }
    Ok(())
}
