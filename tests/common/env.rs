//! Knobs the tests read from the environment (sweep sizes, seeds, stress durations).

/// Variable `name` as a number (decimal or `0x` hex, `_` allowed, as seeds are printed),
/// `None` when unset. A value that is set but not a number panics: silently running the
/// default instead would make a long run that was asked for look like it passed.
pub fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let digits = v.trim().replace('_', "");
    let parsed = match digits.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => digits.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{name}={v:?} is not a number")))
}
