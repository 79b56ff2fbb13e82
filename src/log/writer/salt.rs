//! Segment salts and store ids: where the numbers that tie a segment to its life and to
//! its store come from (docs/format.md §2 and §3).

use std::sync::atomic::{AtomicU32, Ordering};

/// Hands out segment salts: each new segment file (created, recycled or compacted) gets
/// the next one, so within a store the salts of segment lives only increase. A recycled
/// file's earlier lives all had lower salts than its new one, which therefore differs
/// from each (docs/format.md §3). It wraps after 2^32 segments.
#[derive(Debug)]
pub(crate) struct SaltSource(AtomicU32);

impl SaltSource {
    /// Salts after the highest one on disk, or from a random start for a store with no
    /// salted segment, so two stores' segments are unlikely to share salts.
    pub fn after(highest_on_disk: Option<u32>) -> Self {
        SaltSource(AtomicU32::new(match highest_on_disk {
            Some(salt) => salt.wrapping_add(1),
            None => random_u32(),
        }))
    }

    /// The salt for the next segment file (its records carry `Salt::Salted` of it).
    pub fn next(&self) -> u32 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

/// A new store id: 128 random bits, two draws of std's randomly keyed hasher.
pub(crate) fn random_store_id() -> u128 {
    (u128::from(random_u32()) << 96)
        | (u128::from(random_u32()) << 64)
        | (u128::from(random_u32()) << 32)
        | u128::from(random_u32())
}

/// 32 random bits from the OS, through std's randomly keyed hasher (no dependency).
fn random_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish() as u32
}
