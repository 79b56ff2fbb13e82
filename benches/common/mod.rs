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

/// The median of `v` (sorted in place); the mean of the two middle values for an even count.
#[allow(dead_code)] // each bench that includes this module uses some of it
pub fn median(v: &mut [f64]) -> f64 {
    assert!(!v.is_empty(), "the median of nothing");
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Real text for the compression probes: the crate's top-level files `top` and every `.rs`
/// and `.md` file under `src/` and `benches/`, in path order, concatenated.
#[allow(dead_code)] // each bench that includes this module uses some of it
pub fn repo_text(top: &[&str]) -> Vec<u8> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<_> = top.iter().map(|f| root.join(f)).collect();
    let mut stack = vec![root.join("src"), root.join("benches")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read a source folder") {
            let p = e.expect("a folder entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs" || x == "md") {
                files.push(p);
            }
        }
    }
    files.sort();
    let mut all = Vec::new();
    for f in files {
        all.extend(std::fs::read(f).expect("read a source file"));
    }
    all
}
