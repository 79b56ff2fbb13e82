//! How one pending file change lands in a crash image: whole, dropped, cut short, or
//! sector by sector kept, lost, zeroed or garbled.

use super::rng::Rng;
use super::{SECTOR_BYTES, SimOp};

/// How one pending file change lands in an image.
#[derive(Debug, Clone)]
pub(super) enum Land {
    /// All of it.
    Whole,
    /// None of it.
    Dropped,
    /// Only the first `n` bytes of the write.
    Cut(usize),
    /// Per sector of the write: 0 kept, 1 lost (old bytes), 2 zeros, 3 garbage (seeded).
    Sectors(Vec<u8>, u64),
}

fn write_at(buf: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let end = offset as usize + data.len();
    if buf.len() < end {
        buf.resize(end, 0);
    }
    buf[offset as usize..end].copy_from_slice(data);
}

/// Lands the file change `op` on `buf` as `how` says.
pub(super) fn land(buf: &mut Vec<u8>, op: &SimOp, how: &Land, powersafe: bool) {
    let (offset, data) = match (op, how) {
        (_, Land::Dropped) => return,
        (SimOp::Create(..), _) => return buf.clear(),
        (SimOp::Allocate(_, len), _) => return buf.resize((*len as usize).max(buf.len()), 0),
        (SimOp::Write(_, offset, data), _) => (*offset, data),
        _ => unreachable!("not a file change"),
    };
    let (fates, seed) = match how {
        Land::Cut(n) => return write_at(buf, offset, &data[..*n]),
        Land::Sectors(fates, seed) => (fates, seed),
        _ => return write_at(buf, offset, data),
    };
    let mut rng = Rng(*seed);
    let end = offset + data.len() as u64;
    for (k, fate) in fates.iter().enumerate() {
        let s = (offset / SECTOR_BYTES + k as u64) * SECTOR_BYTES;
        let (lo, hi) = (s.max(offset), (s + SECTOR_BYTES).min(end));
        let new = &data[(lo - offset) as usize..(hi - offset) as usize];
        // Without powersafe overwrite, a damaged sector loses its old bytes too.
        let (lo, hi) = match powersafe || *fate < 2 {
            true => (lo, hi),
            false => (s, (s + SECTOR_BYTES).min(end.max(buf.len() as u64))),
        };
        let mut garbage = || (lo..hi).map(|_| rng.next() as u8).collect::<Vec<_>>();
        match fate {
            0 => write_at(buf, lo, new),
            2 => write_at(buf, lo, &vec![0; (hi - lo) as usize]),
            3 => write_at(buf, lo, &garbage()),
            _ => {}
        }
    }
}
