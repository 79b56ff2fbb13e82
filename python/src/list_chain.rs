//! The LangGraph saver's list blobs, resolved in the engine's memory: a list channel's blob
//! `b:<json [channel, version]>` holds `[marker, base version or None, [[type, bytes]...]]`
//! (the prefix rule, docs/store.md §11), so a list's items are its chain of bases' items
//! followed by its own. Walking that chain in Python built a key with `json.dumps` and
//! converted a whole blob at each of a long thread's hundreds of steps; here each step is a
//! lookup, and only the items are made Python objects. The keys are built as Python's
//! `json.dumps([channel, version])` writes them (`", "` between items, `ensure_ascii`),
//! for a `str` or `int` version; anything else is left to the saver's Python walk.

use std::collections::BTreeMap;
use std::fmt::Write;

use agentwal::Value;

/// Bases followed before a chain is given up as looping (a thread's list has one base per
/// step that appended to it; the saver's Python walk reports the loop).
const CHAIN_LINKS_MAX: usize = 1 << 20;

/// A version as the saver's keys hold it.
pub enum Version<'a> {
    /// A string version (LangGraph's default versions are these).
    Str(&'a str),
    /// An integer version.
    Int(i64),
}

/// `s` as Python's `json.dumps(s)` writes a `str` (with `ensure_ascii`, its default).
fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
}

/// The key of blob `(channel, version)`: `"b:" + json.dumps([channel, version])`.
pub fn blob_key(channel: &str, version: &Version<'_>) -> String {
    let mut key = String::from("b:[");
    push_json_str(&mut key, channel);
    key.push_str(", ");
    match version {
        Version::Str(s) => push_json_str(&mut key, s),
        Version::Int(n) => {
            let _ = write!(key, "{n}");
        }
    }
    key.push(']');
    key
}

/// The `(type, bytes)` items of the list blob `(channel, version)`, oldest first, following
/// its bases; `None` if a blob of the chain is absent, not in the list form marked `marker`,
/// holds an item or a base of another shape, or the chain loops (the caller's Python walk
/// then decides, and reports what is wrong).
pub fn items<'s>(
    vars: &'s BTreeMap<String, Value>,
    channel: &str,
    version: Version<'_>,
    marker: &str,
) -> Option<Vec<(&'s str, &'s [u8])>> {
    let mut parts: Vec<&'s [Value]> = Vec::new();
    let mut next = Some(blob_key(channel, &version));
    while let Some(key) = next.take() {
        if parts.len() == CHAIN_LINKS_MAX {
            return None;
        }
        let Value::List(blob) = vars.get(&key)? else {
            return None;
        };
        let [Value::Str(m), base, Value::List(own)] = blob.as_slice() else {
            return None;
        };
        if m != marker {
            return None;
        }
        parts.push(own);
        next = match base {
            Value::Null => None,
            Value::Str(s) => Some(blob_key(channel, &Version::Str(s))),
            Value::Int(n) => Some(blob_key(channel, &Version::Int(*n))),
            _ => return None,
        };
    }
    let mut out = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts.iter().rev() {
        for item in part.iter() {
            let Value::List(pair) = item else {
                return None;
            };
            let [Value::Str(t), Value::Bytes(b)] = pair.as_slice() else {
                return None;
            };
            out.push((t.as_str(), b.as_slice()));
        }
    }
    Some(out)
}
