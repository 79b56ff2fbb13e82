//! The typed Store: checkpoints, reopen, concurrency, fork, tool calls, bad input.

#[path = "../common/mod.rs"]
mod common;

use agentwal::{AgentDelta, AgentState, Message, State};

mod history;
mod input;
mod reads;

fn step(i: u64) -> AgentDelta {
    AgentDelta::default()
        .message(Message::assistant(format!("step {i}")).with_tool_call(
            format!("c{i}"),
            "search",
            "q",
        ))
        .message(Message::tool(format!("c{i}"), "x".repeat(200)))
        .set("step", i as i64)
        .set("phase", if i.is_multiple_of(2) { "even" } else { "odd" })
}

fn expected(n: u64) -> AgentState {
    let mut s = AgentState::default();
    for i in 1..=n {
        s.apply(&step(i));
    }
    s
}
