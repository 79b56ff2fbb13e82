//! Decoding a string-keyed map in one pass. Every map agentwal encodes is a `BTreeMap`,
//! which serializes its entries in key order; decoding them entry by entry (serde's
//! derived way) inserts each into the tree, a search from the root per key. Collecting
//! the entries first and building the tree from the sorted run (`BTreeMap::from_iter`)
//! fills its nodes left to right instead: a 1 MiB state of 2,200 variables decodes in
//! 0.83–0.85 of the time (bench-results/history.md; `cargo bench --bench micro --
//! decode_state` shows the two side by side).
//!
//! Input in another order, or with a key repeated (a hand-written JSON object, a corrupt
//! body), is inserted entry by entry, as the derived code does, so the map is the same
//! either way: the last of equal keys wins.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

/// At most this many entries are reserved ahead from a map's stated length: a corrupt
/// length must not allocate before its entries are there to read.
const RESERVE_ENTRIES_MAX: usize = 4096;

/// Deserializes a `BTreeMap<String, V>` (for `#[serde(deserialize_with = ...)]`).
pub(crate) fn deserialize<'de, D, V>(d: D) -> Result<BTreeMap<String, V>, D::Error>
where
    D: Deserializer<'de>,
    V: Deserialize<'de>,
{
    d.deserialize_map(SortedMapVisitor(PhantomData))
}

struct SortedMapVisitor<V>(PhantomData<V>);

impl<'de, V: Deserialize<'de>> Visitor<'de> for SortedMapVisitor<V> {
    type Value = BTreeMap<String, V>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map with string keys")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
        let reserve = access.size_hint().unwrap_or(0).min(RESERVE_ENTRIES_MAX);
        let mut entries: Vec<(String, V)> = Vec::with_capacity(reserve);
        while let Some(entry) = access.next_entry()? {
            entries.push(entry);
        }
        if entries.windows(2).all(|w| w[0].0 < w[1].0) {
            return Ok(BTreeMap::from_iter(entries));
        }
        let mut map = BTreeMap::new();
        for (k, v) in entries {
            map.insert(k, v);
        }
        Ok(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Deserialize)]
    struct OneByOne(BTreeMap<String, i64>);

    #[derive(Debug, PartialEq, Deserialize)]
    struct OnePass(#[serde(deserialize_with = "deserialize")] BTreeMap<String, i64>);

    #[test]
    fn any_order_and_repeated_keys_give_the_map_inserting_one_by_one_gives() {
        for json in [
            r#"{"a": 1, "b": 2, "c": 3}"#,
            r#"{"c": 3, "a": 1, "b": 2}"#,
            r#"{"a": 1, "b": 2, "a": 9}"#,
            r#"{"b": 1, "b": 2}"#,
            r#"{}"#,
        ] {
            let derived: OneByOne = serde_json::from_str(json).unwrap();
            let one_pass: OnePass = serde_json::from_str(json).unwrap();
            assert_eq!(derived.0, one_pass.0, "{json}");
        }
    }

    #[test]
    fn a_corrupt_length_allocates_nothing_ahead_and_fails() {
        // postcard: a map of 2^40 entries stated, one present.
        let mut body = vec![0x80, 0x80, 0x80, 0x80, 0x80, 0x20];
        body.extend_from_slice(&[1, b'a', 2]);
        assert!(postcard::from_bytes::<OnePass>(&body).is_err());
    }
}
