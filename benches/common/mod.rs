//! The agent step the store benches commit (`store` and `micro`): deterministic, so runs
//! compare.

use agentwal::{AgentDelta, Message};

/// Deterministic lowercase text (xorshift).
pub fn text(seed: u64, len: usize) -> String {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (b'a' + (x % 26) as u8) as char
        })
        .collect()
}

/// One agent step: an assistant message with a tool call (~300 B), a tool result (~1.5 KB)
/// and three variables (~1.9 KB postcard-encoded).
pub fn step(task: u64, i: u64) -> AgentDelta {
    let call = format!("call-{task}-{i}");
    AgentDelta::default()
        .message(
            Message::assistant(text(task * 1000 + i, 240)).with_tool_call(
                &call,
                "search",
                text(i, 40),
            ),
        )
        .message(Message::tool(&call, text(task * 7 + i, 1500)))
        .set("phase", if i.is_multiple_of(2) { "plan" } else { "act" })
        .set("step", i as i64)
        .set("last_tool", "search")
}
