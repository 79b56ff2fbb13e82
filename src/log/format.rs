//! On-disk constants shared by the writer and recovery. docs/format.md holds the same
//! tables; change both together, and bump [`FORMAT_VERSION`].

/// Magic bytes opening every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"AGENTWAL";
/// Format version written into every new segment header. Version 3 adds the store's id
/// and the links that tie each segment to its predecessor (a 64-byte header); version 2
/// added the segment's salt (mixed into every record checksum), recycled segments, close
/// records and records larger than `segment_bytes`. Segments of versions 1 and 2 are
/// still read (and the final one appended to, under its own version's rules, until the
/// writer moves to a new segment).
pub const FORMAT_VERSION: u32 = 3;
/// The previous format version, still read: a 40-byte header with a salt, no store id
/// and no links.
pub const FORMAT_VERSION_V2: u32 = 2;
/// The first format version, still read: no salt, a pad field where v2 has its salt.
pub const FORMAT_VERSION_V1: u32 = 1;

// Segment header layout: each offset is the previous offset plus its field's size.
pub(crate) const SEG_MAGIC_OFFSET: usize = 0;
pub(crate) const SEG_VERSION_OFFSET: usize = SEG_MAGIC_OFFSET + 8;
pub(crate) const SEG_FLAGS_OFFSET: usize = SEG_VERSION_OFFSET + 4;
pub(crate) const SEG_ID_OFFSET: usize = SEG_FLAGS_OFFSET + 4;
pub(crate) const SEG_FIRST_LSN_OFFSET: usize = SEG_ID_OFFSET + 8;
// Versions 2 and 3: the salt.
pub(crate) const SEG_SALT_OFFSET: usize = SEG_FIRST_LSN_OFFSET + 8;
// Version 2: then the CRC of every byte before it.
pub(crate) const SEG_V2_CRC_OFFSET: usize = SEG_SALT_OFFSET + 4;
/// Size of a format v1 or v2 segment header; the first record starts right after it.
pub const SEGMENT_HEADER_BYTES_V2: usize = SEG_V2_CRC_OFFSET + 4;
// Version 3: the links and the store id, then the CRC of every byte before it.
pub(crate) const SEG_PREV_LINK_OFFSET: usize = SEG_SALT_OFFSET + 4;
pub(crate) const SEG_NEXT_LINK_OFFSET: usize = SEG_PREV_LINK_OFFSET + 4;
pub(crate) const SEG_STORE_ID_OFFSET: usize = SEG_NEXT_LINK_OFFSET + 4;
pub(crate) const SEG_CRC_OFFSET: usize = SEG_STORE_ID_OFFSET + 16;
/// Size of the segment header [`FORMAT_VERSION`] writes; the first record starts right
/// after it. (A v1 or v2 segment's header is [`SEGMENT_HEADER_BYTES_V2`] long.)
pub const SEGMENT_HEADER_BYTES: usize = SEG_CRC_OFFSET + 4;
// Version 1: the CRC of the first 32 bytes, then a pad field that must be 0.
pub(crate) const SEG_V1_CRC_OFFSET: usize = SEG_FIRST_LSN_OFFSET + 8;
pub(crate) const SEG_V1_PAD_OFFSET: usize = SEG_V1_CRC_OFFSET + 4;

// Record header layout.
pub(crate) const REC_CRC_OFFSET: usize = 0;
pub(crate) const REC_LEN_OFFSET: usize = REC_CRC_OFFSET + 4;
pub(crate) const REC_LSN_OFFSET: usize = REC_LEN_OFFSET + 4;
pub(crate) const REC_KIND_OFFSET: usize = REC_LSN_OFFSET + 8;
pub(crate) const REC_FLAGS_OFFSET: usize = REC_KIND_OFFSET + 1;
pub(crate) const REC_RESERVED_OFFSET: usize = REC_FLAGS_OFFSET + 1;
/// Size of a record header; the payload follows it.
pub const RECORD_HEADER_BYTES: usize = REC_RESERVED_OFFSET + 2;

const _: () = assert!(SEGMENT_HEADER_BYTES_V2 == 40 && SEGMENT_HEADER_BYTES == 64);

/// Segment flag: written by compaction. It holds the live records of every segment with a
/// smaller id (their LSNs increase but skip), and supersedes those segments.
pub const SEGMENT_FLAG_COMPACTED: u32 = 1 << 0;
/// Segment flag (version 2): the file held an earlier segment before it was recycled for
/// this one. Past this segment's data it may hold an earlier life's bytes, which never
/// validate (their checksums carry another salt) but are not zeros either.
pub const SEGMENT_FLAG_RECYCLED: u32 = 1 << 1;
/// Every segment flag a writer may set.
pub const SEGMENT_FLAGS_KNOWN: u32 = SEGMENT_FLAG_COMPACTED | SEGMENT_FLAG_RECYCLED;
const _: () = assert!(RECORD_HEADER_BYTES == 20);

/// Kind 0 is never written: preallocated space reads as zeros, and a zero kind
/// marks the end of the data.
pub const KIND_UNWRITTEN: u8 = 0;
/// Internal kind closing a full segment; its payload is the next segment's id.
pub const KIND_SEAL: u8 = 0xFF;
/// Internal kind (version 2) a writer appends when it closes cleanly in a recycled
/// segment: no payload, no LSN of its own. It tells the next writer that nothing of this
/// segment's life lies past it, so it may append there.
pub const KIND_CLOSE: u8 = 0xFE;
/// Largest kind a user of the log may append (1..=`KIND_USER_MAX`).
pub const KIND_USER_MAX: u8 = 0xEF;

/// Flag: first record of a batch.
pub const FLAG_BATCH_START: u8 = 1 << 0;
/// Flag: last record of a batch.
pub const FLAG_BATCH_END: u8 = 1 << 1;
/// Flag (batch start only): every byte before this batch was durable when it was written.
/// Recovery uses it to tell a torn tail from corruption.
pub const FLAG_DURABLE_BEFORE: u8 = 1 << 2;
/// Every flag bit a writer may set.
pub const FLAGS_KNOWN: u8 = FLAG_BATCH_START | FLAG_BATCH_END | FLAG_DURABLE_BEFORE;

/// Payload bytes of a seal record (the next segment id, u64 LE).
pub const SEAL_PAYLOAD_BYTES: usize = 8;
/// Bytes a seal record takes; every segment keeps room for one.
pub const SEAL_RECORD_BYTES: usize = RECORD_HEADER_BYTES + SEAL_PAYLOAD_BYTES;

/// Smallest `segment_bytes` accepted: room for the header, a seal and some records.
pub const SEGMENT_BYTES_MIN: u64 = 4096;
/// Largest `segment_bytes` accepted (offsets and lengths are u32 inside a segment).
pub const SEGMENT_BYTES_MAX: u64 = 1 << 31;
/// Largest record (header and payload). The store's index packs a record's size into 31
/// bits (docs/store.md §1); a record larger than `segment_bytes` allows gets a segment of
/// its own, sized to hold it (docs/format.md §5).
pub const RECORD_BYTES_MAX: u64 = (1 << 31) - 1;
/// Largest payload of a record, whatever `segment_bytes` is.
pub const RECORD_PAYLOAD_BYTES_MAX: u64 = RECORD_BYTES_MAX - RECORD_HEADER_BYTES as u64;
/// Default segment size.
pub const SEGMENT_BYTES_DEFAULT: u64 = 64 << 20;
/// The writer extends a segment by this many preallocated bytes at a time, so most
/// fdatasync calls need not update the file size.
pub const PREALLOCATE_BYTES: u64 = 4 << 20;

/// Masks a CRC so that all-zero bytes never carry a valid checksum (as LevelDB does).
pub fn mask_crc(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// File name of segment `id`: zero-padded so names sort in log order.
pub fn segment_file_name(id: u64) -> String {
    format!("{id:020}.wal")
}

/// Parses a segment file name back to its id.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".wal")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Suffix of a file being written (a segment being created, a compacted segment); such
/// files are never part of the log.
pub const TEMP_SUFFIX: &str = ".tmp";
/// What a compacted segment's temporary name adds before [`TEMP_SUFFIX`].
const COMPACT_INFIX: &str = ".compact";

/// Suffix of a retired segment file kept for recycling (`<id>.wal.free`): never part of
/// the log, taken by the writer's next rotation instead of creating a file.
pub const FREE_SUFFIX: &str = ".free";

/// Name of retired segment file `id`, waiting to be recycled.
pub fn free_file_name(id: u64) -> String {
    format!("{}{FREE_SUFFIX}", segment_file_name(id))
}

/// Parses a retired segment file's name back to the id it had.
pub fn parse_free_file_name(name: &str) -> Option<u64> {
    parse_segment_file_name(name.strip_suffix(FREE_SUFFIX)?)
}

/// Temporary name of segment `id` while it is created (`<id>.wal.tmp`).
pub fn temp_file_name(id: u64) -> String {
    format!("{}{TEMP_SUFFIX}", segment_file_name(id))
}

/// Temporary name of the compacted segment `id` while it is written
/// (`<id>.wal.compact.tmp`).
pub fn compact_temp_file_name(id: u64) -> String {
    format!("{}{COMPACT_INFIX}{TEMP_SUFFIX}", segment_file_name(id))
}

/// Whether `name` is one of the temporary names above. Only these are ever deleted: a
/// user's `notes.tmp` in the directory is not the engine's to remove.
pub fn is_temp_file_name(name: &str) -> bool {
    let Some(base) = name.strip_suffix(TEMP_SUFFIX) else {
        return false;
    };
    let base = base.strip_suffix(COMPACT_INFIX).unwrap_or(base);
    parse_segment_file_name(base).is_some()
}
/// Name of the lock file a writer holds.
pub const LOCK_FILE_NAME: &str = "LOCK";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_engines_temporary_names_are_temporary() {
        assert!(is_temp_file_name(&temp_file_name(7)));
        assert!(is_temp_file_name(&compact_temp_file_name(u64::MAX)));
        for name in [
            "notes.tmp",
            "x.tmp",
            ".tmp",
            "00000000000000000001.wal",
            "0000000000000000001.wal.tmp",
            "00000000000000000001.wal.other.tmp",
            "00000000000000000001.compact.tmp",
            "LOCK",
        ] {
            assert!(!is_temp_file_name(name), "{name}");
        }
    }
}
