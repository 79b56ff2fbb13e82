//! Output helpers: JSON shapes, times, sizes.

use agentwal::{AgentState, Message, Value};
use serde_json::{Value as J, json};

/// A `Value` as JSON; bytes become `{"bytes_hex": "..."}`, non-finite floats strings.
pub fn value(v: &Value) -> J {
    match v {
        Value::Null => J::Null,
        Value::Bool(b) => J::Bool(*b),
        Value::Int(i) => json!(i),
        Value::Float(f) => {
            serde_json::Number::from_f64(*f).map_or_else(|| J::String(f.to_string()), J::Number)
        }
        Value::Str(s) => J::String(s.clone()),
        Value::Bytes(b) => json!({ "bytes_hex": hex(b) }),
        Value::List(l) => J::Array(l.iter().map(value).collect()),
        Value::Map(m) => J::Object(m.iter().map(|(k, v)| (k.clone(), value(v))).collect()),
    }
}

/// A message as JSON.
pub fn message(m: &Message) -> J {
    json!({
        "role": format!("{:?}", m.role).to_lowercase(),
        "content": m.content,
        "tool_calls": m.tool_calls.iter().map(|c| json!({"id": c.id, "name": c.name, "args": value(&c.args)})).collect::<Vec<_>>(),
        "tool_call_id": m.tool_call_id,
        "data": m.data.as_ref().map(value),
    })
}

/// A state as JSON.
pub fn state(s: &AgentState) -> J {
    json!({
        "messages": s.messages.iter().map(message).collect::<Vec<_>>(),
        "vars": s.vars.iter().map(|(k, v)| (k.clone(), value(v))).collect::<serde_json::Map<_, _>>(),
        "metadata": s.metadata.iter().map(|(k, v)| (k.clone(), value(v))).collect::<serde_json::Map<_, _>>(),
    })
}

/// Lowercase hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Bytes as text when they are UTF-8, else hex.
pub fn bytes_text(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => s.to_string(),
        Err(_) => format!("0x{}", hex(b)),
    }
}

/// Milliseconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC).
pub fn time(ms: u64) -> String {
    if ms == 0 {
        return "-".into();
    }
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// A byte count for humans.
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// Prints JSON, pretty.
pub fn print_json(v: &J) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn time_formats_utc() {
        assert_eq!(super::time(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }
}
