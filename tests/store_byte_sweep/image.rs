//! Building the store image (fresh or in a recycled segment) and its record layout.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::common::panic_text;
use agentwal::log::RECORD_HEADER_BYTES;
use agentwal::log::record::{self, Salt};
use agentwal::log::{KIND_CLOSE, Log, LogOptions, SegmentHeader};
use agentwal::storage::Storage;
use agentwal::storage::sim::{SimImage, SimStorage};
use agentwal::{AgentDelta, Message, Store, SyncMode};

use crate::workload::{
    Answer, DIR, FILL_BLOCK_BYTES, FLIP_PAST_END, HEADER, Op, SEGMENT_BYTES, answer, open, ops,
    options, run,
};

/// A record's byte range in the segment, and its kind.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) kind: u8,
}

/// Where the swept segment comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Segment {
    /// The store's first segment: preallocated zeros past the data.
    Fresh,
    /// A retired file reused: the bytes of its earlier life past the data, and a close
    /// record at the end of the data.
    Recycled,
}

/// Before the operations of a [`Segment::Recycled`] build: commits that fill a few
/// segments with data (one each to tasks of their own, so every record is a delta of
/// about 1 KiB), the deletion of those tasks and a compaction (which retires those
/// segments), then a commit larger than a segment (which gets a segment of its own); the
/// next record goes to the segment after it, made from a retired file.
pub(crate) fn prelude(store: &Store) {
    let tasks: Vec<String> = (0..24).map(|i| format!("prelude-{i}")).collect();
    for (i, task) in tasks.iter().enumerate() {
        let text = "p".repeat(1000 + i);
        let d = AgentDelta::default().message(Message::user(text));
        store.commit(task, &d).expect("prelude commit");
    }
    for task in &tasks {
        store.delete_task(task).expect("prelude deletion");
    }
    let report = store.compact().expect("prelude compaction");
    assert!(
        report.segments_deleted > 0,
        "the prelude retired no segment"
    );
    let big = AgentDelta::default().message(Message::user("b".repeat(SEGMENT_BYTES as usize)));
    store
        .commit("big", &big)
        .expect("prelude commit larger than a segment");
}

/// The store after every operation, and what the sweeps need to judge a recovery.
pub(crate) struct Built {
    /// `expected[n]`: the answer after the first `n` operations.
    pub(crate) expected: Vec<Answer>,
    pub(crate) segment: PathBuf,
    pub(crate) image: SimImage,
    pub(crate) bytes: Vec<u8>,
    pub(crate) spans: Vec<Span>,
    /// The close record's span, in a recycled segment (a store that closes cleanly in one
    /// ends its data with it).
    pub(crate) close: Option<Span>,
}

impl Built {
    pub(crate) fn expected_after(&self, n: usize) -> &Answer {
        &self.expected[n]
    }

    pub(crate) fn data_end(&self) -> usize {
        self.spans.last().expect("records").end
    }

    /// End of the segment's records, the close record included.
    pub(crate) fn records_end(&self) -> usize {
        self.close.map_or(self.data_end(), |c| c.end)
    }

    /// The image with the segment's bytes replaced.
    pub(crate) fn with_segment(&self, bytes: Vec<u8>) -> SimImage {
        let mut image = self.image.clone();
        image.files.insert(self.segment.clone(), bytes);
        image
    }

    /// Records that are byte for byte intact in `bytes` (a prefix, for the damage here).
    pub(crate) fn intact(&self, bytes: &[u8]) -> usize {
        self.spans
            .iter()
            .take_while(|s| bytes.get(s.start..s.end) == Some(&self.bytes[s.start..s.end]))
            .count()
    }

    /// Index of the record holding byte `at`.
    pub(crate) fn record_at(&self, at: usize) -> Option<usize> {
        self.spans
            .iter()
            .position(|s| (s.start..s.end).contains(&at))
    }
}

pub(crate) fn build(kind: Segment) -> Built {
    let ops = ops();
    let reference: Store =
        Store::open_on(Arc::new(SimStorage::new()), DIR, options(SyncMode::Never))
            .expect("open reference store");
    let sim = SimStorage::new();
    let store = open(&sim).expect("open store");
    if kind == Segment::Recycled {
        prelude(&reference);
        prelude(&store);
    }
    let mut expected = vec![answer(&reference).expect("reference answer")];
    for (i, op) in ops.iter().enumerate() {
        run(&reference, op).unwrap_or_else(|e| panic!("reference op {i} {op:?}: {e}"));
        run(&store, op).unwrap_or_else(|e| panic!("op {i} {op:?}: {e}"));
        let want = answer(&reference).expect("reference answer");
        let live = answer(&store).expect("live answer");
        assert_eq!(live, want, "after op {i} {op:?}: the two stores disagree");
        expected.push(want);
    }
    // Every kind of checkpoint shows up: snapshots and deltas, a re-created task.
    let last = expected.last().expect("answers");
    let snapshots = last.by_task.values().flat_map(|t| &t.checkpoints);
    assert!(snapshots.clone().any(|c| c.1) && snapshots.clone().any(|c| !c.1));
    assert_eq!(last.by_task["gamma"].latest.as_ref().map(|l| l.0), Some(2));
    drop(store);

    let image = sim.volatile_image();
    assert_eq!(
        image.files,
        sim.durable_image().files,
        "with SyncMode::Always the disk holds what the page cache shows"
    );
    let segments: Vec<&PathBuf> = image
        .files
        .keys()
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    if kind == Segment::Fresh {
        assert_eq!(segments.len(), 1, "one segment: {:?}", image.files.keys());
    }
    let segment = segments.last().expect("a segment").to_path_buf();
    assert_eq!(segment.parent(), Some(Path::new(DIR)));
    let bytes = image.files[&segment].clone();
    let header = SegmentHeader::decode(&bytes, &segment).expect("the segment's header");
    assert_eq!(
        header.is_recycled(),
        kind == Segment::Recycled,
        "{kind:?} build: the segment's RECYCLED flag"
    );

    let mut spans = Vec::new();
    let log_options = LogOptions {
        segment_bytes: SEGMENT_BYTES,
        ..LogOptions::default()
    };
    let storage: Arc<dyn Storage> = Arc::new(SimStorage::from_image(&image));
    Log::open_read_only_on(storage, DIR, log_options, |r| {
        if r.segment != segment {
            return Ok(()); // the prelude's
        }
        let start = r.offset as usize;
        let end = start + RECORD_HEADER_BYTES + r.payload.len();
        spans.push(Span {
            start,
            end,
            kind: r.kind,
        });
        Ok(())
    })
    .expect("read the log");
    let kinds: Vec<u8> = spans.iter().map(|s| s.kind).collect();
    let want: Vec<u8> = ops.iter().map(Op::kind).collect();
    assert_eq!(kinds, want, "one record per operation, in operation order");
    assert_eq!(spans[0].start, HEADER);
    for w in spans.windows(2) {
        assert_eq!(w[0].end, w[1].start, "records are contiguous");
    }
    let data_end = spans.last().expect("records").end;
    // Recovery does not hand close records to visitors: decode it here.
    let close = record::decode(&bytes[data_end..], header.salt)
        .ok()
        .filter(|(h, _)| h.kind == KIND_CLOSE)
        .map(|(h, _)| Span {
            start: data_end,
            end: data_end + h.record_bytes() as usize,
            kind: KIND_CLOSE,
        });
    let end = close.map_or(data_end, |c| c.end);
    assert!(bytes.len() >= end + FLIP_PAST_END, "room past the data");
    match kind {
        Segment::Fresh => assert!(
            close.is_none() && bytes[data_end..].iter().all(|&b| b == 0),
            "the segment is preallocated with zeros past the data ({} bytes, data ends at \
             {data_end})",
            bytes.len()
        ),
        Segment::Recycled => {
            assert!(close.is_some(), "a clean close left no close record");
            let old_life = end.div_ceil(FILL_BLOCK_BYTES) * FILL_BLOCK_BYTES;
            assert!(
                bytes[data_end..old_life]
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b == 0 || data_end + i < end),
                "the writer fills the rest of the last block with zeros"
            );
            assert!(
                matches!(header.salt, Salt::Salted(_))
                    && bytes.len() >= old_life + FLIP_PAST_END
                    && bytes[old_life..old_life + FLIP_PAST_END]
                        .iter()
                        .any(|&b| b != 0),
                "no bytes of an earlier life past the data's last block"
            );
        }
    }
    Built {
        expected,
        segment,
        image,
        bytes,
        spans,
        close,
    }
}

/// Opens a writable store on `image`, under `catch_unwind`.
pub(crate) fn open_image(
    image: &SimImage,
) -> Result<(SimStorage, agentwal::Result<Store>), String> {
    let sim = SimStorage::from_image(image);
    catch_unwind(AssertUnwindSafe(|| open(&sim)))
        .map(|opened| (sim, opened))
        .map_err(|p| format!("open panicked: {}", panic_text(&p)))
}
