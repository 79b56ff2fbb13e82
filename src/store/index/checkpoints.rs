//! Checkpoint entries of the index: one per checkpoint, packed into 20 bytes, held
//! inline for the first few and in a `Vec` beyond.

use crate::log::RecordPos;

/// Index entry of one checkpoint, as the rest of the store sees it (stored packed, see
/// [`PackedCp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CpEntry {
    pub pos: RecordPos,
    pub created_at_ms: u64,
    /// Bytes of the record on disk (header + payload).
    pub bytes: u32,
    pub snapshot: bool,
}

/// Largest segment id the index can hold: 48 bits. Unreachable in practice: ids are
/// sequential and a segment is at least 4 KiB, so a log would have to write 1 EiB first.
const SEGMENT_ID_MAX: u64 = (1 << 48) - 1;
/// Latest `created_at_ms` the index can hold: 48 bits, the year 10889. The store writes
/// the wall clock, so only a damaged (or forged) record goes beyond.
const CREATED_AT_MS_MAX: u64 = (1 << 48) - 1;
const SNAPSHOT_BIT: u32 = 1 << 31;

/// A [`CpEntry`] in 20 B (five `u32`s, so a `Vec` of them has no padding):
/// `[offset, bytes | snapshot << 31, segment id low 32, segment id high 16 | created_at
/// low 16 << 16, created_at high 32]`. Offsets fit 32 bits and record bytes 31 because a
/// segment holds at most `SEGMENT_BYTES_MAX` (2 GiB) bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PackedCp([u32; 5]);

const _: () = assert!(std::mem::size_of::<PackedCp>() == 20);
const _: () = assert!(crate::log::format::SEGMENT_BYTES_MAX <= 1 << 31);

impl PackedCp {
    /// Packs `e`; an error names the field out of the index's range.
    pub(super) fn pack(e: &CpEntry) -> Result<PackedCp, String> {
        let (segment, offset) = pack_pos(e.pos)?;
        if e.created_at_ms > CREATED_AT_MS_MAX {
            return Err(format!(
                "checkpoint time {} ms is beyond the year 10889",
                e.created_at_ms
            ));
        }
        if e.bytes & SNAPSHOT_BIT != 0 {
            return Err(format!(
                "checkpoint record of {} bytes (2 GiB at most)",
                e.bytes
            ));
        }
        let ms = e.created_at_ms;
        let packed = PackedCp([
            offset,
            e.bytes | if e.snapshot { SNAPSHOT_BIT } else { 0 },
            segment as u32,
            (segment >> 32) as u32 | ((ms as u32 & 0xFFFF) << 16),
            (ms >> 16) as u32,
        ]);
        // The read-back: every field survives the packing (the range checks above are
        // what makes this hold).
        debug_assert_eq!(packed.unpack(), *e, "a packed checkpoint unpacks to itself");
        Ok(packed)
    }

    pub(super) fn unpack(self) -> CpEntry {
        let [offset, bytes, seg_lo, mixed, ms_hi] = self.0;
        CpEntry {
            pos: RecordPos {
                segment_id: u64::from(seg_lo) | (u64::from(mixed & 0xFFFF) << 32),
                offset: u64::from(offset),
            },
            created_at_ms: u64::from(mixed >> 16) | (u64::from(ms_hi) << 16),
            bytes: bytes & !SNAPSHOT_BIT,
            snapshot: bytes & SNAPSHOT_BIT != 0,
        }
    }

    pub(super) fn snapshot(self) -> bool {
        self.0[1] & SNAPSHOT_BIT != 0
    }

    pub(super) fn bytes(self) -> u32 {
        self.0[1] & !SNAPSHOT_BIT
    }

    pub(super) fn created_at_ms(self) -> u64 {
        self.unpack().created_at_ms
    }
}

/// (segment id, offset) of `pos` if the index can hold it.
fn pack_pos(pos: RecordPos) -> Result<(u64, u32), String> {
    match u32::try_from(pos.offset) {
        Ok(offset) if pos.segment_id <= SEGMENT_ID_MAX => Ok((pos.segment_id, offset)),
        _ => Err(format!(
            "record position {pos:?} is beyond the index's range (48-bit segment ids, \
             32-bit offsets)"
        )),
    }
}

/// How many checkpoints a task holds without a heap allocation of their own.
pub(crate) const INLINE_CHECKPOINTS: usize = 4;

/// A task's checkpoint entries, oldest first: up to [`INLINE_CHECKPOINTS`] in place, more
/// in a `Vec`. Entries are handed out unpacked, by value.
#[derive(Debug, Clone)]
pub(crate) struct CpList(CpRepr);

#[derive(Debug, Clone)]
enum CpRepr {
    Inline {
        len: u8,
        items: [PackedCp; INLINE_CHECKPOINTS],
    },
    Heap(Vec<PackedCp>),
}

const _: () = assert!(INLINE_CHECKPOINTS <= u8::MAX as usize);

impl Default for CpList {
    fn default() -> Self {
        CpList(CpRepr::Inline {
            len: 0,
            items: [PackedCp::default(); INLINE_CHECKPOINTS],
        })
    }
}

impl CpList {
    pub(super) fn as_slice(&self) -> &[PackedCp] {
        match &self.0 {
            CpRepr::Inline { len, items } => &items[..usize::from(*len)],
            CpRepr::Heap(v) => v,
        }
    }

    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }

    /// Entry `i` (0: the oldest).
    pub fn get(&self, i: usize) -> Option<CpEntry> {
        self.as_slice().get(i).map(|p| p.unpack())
    }

    pub fn last(&self) -> Option<CpEntry> {
        self.as_slice().last().map(|p| p.unpack())
    }

    /// The entries, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = CpEntry> + ExactSizeIterator + '_ {
        self.as_slice().iter().map(|p| p.unpack())
    }

    /// Appends an entry already packed.
    pub(super) fn push(&mut self, p: PackedCp) {
        match &mut self.0 {
            CpRepr::Inline { len, items } if usize::from(*len) < INLINE_CHECKPOINTS => {
                items[usize::from(*len)] = p;
                *len += 1;
            }
            CpRepr::Inline { items, .. } => {
                let mut v = Vec::with_capacity(2 * INLINE_CHECKPOINTS);
                v.extend_from_slice(items);
                v.push(p);
                self.0 = CpRepr::Heap(v);
            }
            CpRepr::Heap(v) => v.push(p),
        }
    }

    /// Drops the `n` oldest entries (at most all); a list that fits in place again
    /// returns its heap allocation.
    pub(super) fn drop_front(&mut self, n: usize) {
        let rest = &self.as_slice()[n.min(self.len())..];
        if rest.len() <= INLINE_CHECKPOINTS {
            let mut items = [PackedCp::default(); INLINE_CHECKPOINTS];
            items[..rest.len()].copy_from_slice(rest);
            self.0 = CpRepr::Inline {
                len: rest.len() as u8,
                items,
            };
        } else if let CpRepr::Heap(v) = &mut self.0 {
            v.drain(..n);
        }
    }

    /// Moves every entry through `relocate` (compaction), which gives an entry's new
    /// position and record size, or `None` to leave it. Panics if a new position is
    /// beyond the index's range, which no log can reach (see `SEGMENT_ID_MAX`).
    pub fn relocate(&mut self, mut relocate: impl FnMut(RecordPos) -> Option<(RecordPos, u32)>) {
        let entries: &mut [PackedCp] = match &mut self.0 {
            CpRepr::Inline { len, items } => &mut items[..usize::from(*len)],
            CpRepr::Heap(v) => v,
        };
        for p in entries {
            let mut e = p.unpack();
            if let Some((pos, bytes)) = relocate(e.pos) {
                (e.pos, e.bytes) = (pos, bytes);
                *p = PackedCp::pack(&e).expect("a compacted record's place fits the index");
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::store::index::TaskData;

    pub(crate) fn entry(
        segment_id: u64,
        offset: u64,
        ms: u64,
        bytes: u32,
        snapshot: bool,
    ) -> CpEntry {
        CpEntry {
            pos: RecordPos { segment_id, offset },
            created_at_ms: ms,
            bytes,
            snapshot,
        }
    }

    #[test]
    fn packed_entries_round_trip_up_to_their_limits() {
        for e in [
            entry(1, 40, 0, 0, false),
            entry(7, 1 << 31, 1_700_000_000_000, 123, true),
            entry(
                SEGMENT_ID_MAX,
                u64::from(u32::MAX),
                CREATED_AT_MS_MAX,
                (1 << 31) - 1,
                true,
            ),
            entry(
                0x1234_5678_9ABC,
                0xDEAD_BEEF,
                0xFEDC_BA98_7654,
                0x7654_3210,
                false,
            ),
        ] {
            let p = PackedCp::pack(&e).unwrap();
            assert_eq!(p.unpack(), e);
            assert_eq!((p.snapshot(), p.bytes()), (e.snapshot, e.bytes));
            assert_eq!(p.created_at_ms(), e.created_at_ms);
        }
        for bad in [
            entry(SEGMENT_ID_MAX + 1, 40, 0, 0, false),
            entry(1, 1 << 32, 0, 0, false),
            entry(1, 40, CREATED_AT_MS_MAX + 1, 0, false),
            entry(1, 40, 0, 1 << 31, false),
        ] {
            assert!(PackedCp::pack(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn out_of_range_checkpoint_is_refused_not_mangled() {
        let mut d = TaskData::default();
        let far = entry(1, 40, u64::MAX, 10, true);
        assert!(d.push_checkpoint(1, far, 0, false).is_err());
        assert_eq!((d.latest_seq(), d.snapshot_bytes), (0, 0));
    }

    #[test]
    fn checkpoints_spill_to_the_heap_and_come_back_after_pruning() {
        let mut d = TaskData::default();
        let all: Vec<CpEntry> = (1..=11u64)
            .map(|i| entry(1 + i / 4, 40 * i, 1000 + i, i as u32, i % 5 == 1))
            .collect();
        for (i, e) in all.iter().enumerate() {
            d.push_checkpoint(i as u64 + 1, *e, u64::from(e.bytes), false)
                .unwrap();
            assert_eq!(d.checkpoints.iter().collect::<Vec<_>>(), all[..=i]);
            let spilled = matches!(d.checkpoints.0, CpRepr::Heap(_));
            assert_eq!(spilled, i >= INLINE_CHECKPOINTS);
        }
        assert_eq!(d.checkpoint(3), Some(all[2]));
        assert_eq!(d.fold_plan(9), Some(all[5..9].to_vec()));
        assert_eq!(d.live_bytes(), (1..=11).sum::<u64>());
        assert_eq!(d.latest_created_at_ms(), 1011);
        // Every entry moves; the even-offset ones also shrink to 3 bytes.
        d.checkpoints.relocate(|p| {
            let new = RecordPos {
                segment_id: p.segment_id + 10,
                offset: p.offset,
            };
            Some((
                new,
                if p.offset % 80 == 0 {
                    3
                } else {
                    (p.offset / 40) as u32
                },
            ))
        });
        assert_eq!(d.checkpoint(11).unwrap().pos.segment_id, 1 + 11 / 4 + 10);
        assert_eq!(d.checkpoint(10).unwrap().bytes, 3);
        assert_eq!(d.checkpoint(10).unwrap().snapshot, all[9].snapshot);
        assert_eq!(d.checkpoint(9).unwrap().bytes, 9);
        d.prune_before(6);
        assert_eq!((d.first_seq, d.checkpoints.len()), (6, 6));
        assert!(matches!(d.checkpoints.0, CpRepr::Heap(_)));
        d.prune_before(11);
        assert_eq!((d.first_seq, d.latest_seq()), (11, 11));
        assert!(matches!(d.checkpoints.0, CpRepr::Inline { len: 1, .. }));
        assert_eq!(d.checkpoint(11).unwrap().bytes, 11);
    }
}
