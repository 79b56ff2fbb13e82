//! Mapped and open segments stay readable after a compaction retires them.

use std::collections::HashMap;

use parking_lot::Mutex;

/// Segments larger than the copy threshold are pinned by their memory map, the final one by
/// its open file: after the writer compacts (renaming a new file over a segment and deleting
/// the ones below it), every record the handle indexed reads back as it was.
#[test]
fn mapped_and_open_segments_stay_readable_after_compaction() {
    use agentwal::log::{Log, LogOptions, RecordPos};
    let dir = tempfile::tempdir().expect("tempdir");
    let options = LogOptions {
        sync: agentwal::SyncMode::Never,
        segment_bytes: 2 << 20,
        ..LogOptions::default()
    };
    let writer = Log::open(dir.path(), options).expect("open");
    let payload = |i: u32| vec![(i % 251) as u8; 60_000 + i as usize];
    let mut appended = Vec::new();
    for i in 0..110 {
        appended.push((writer.append(1, &payload(i)).expect("append").pos, i));
    }
    writer.flush().expect("flush");
    let mut seen = Vec::new();
    let reader = Log::open_read_only(dir.path(), options, |rec| {
        seen.push(rec.pos());
        Ok(())
    })
    .expect("open read-only");
    assert_eq!(seen, appended.iter().map(|(p, _)| *p).collect::<Vec<_>>());
    // Keep one record of the first segment; everything else the writer sealed goes.
    let hooks = KeepOnly {
        lock: parking_lot::RwLock::new(()),
        at: Mutex::new(appended[0].0),
    };
    let done = writer
        .compact(true, &hooks)
        .expect("compact")
        .expect("a pass ran");
    assert!(
        done.removed.len() >= 2,
        "the test needs sealed segments of more than 1 MiB"
    );
    assert_ne!(*hooks.at.lock(), appended[0].0, "the kept record moved");
    assert_eq!(
        writer
            .read(*hooks.at.lock())
            .expect("the writer reads it there"),
        payload(0)
    );
    for (pos, i) in &appended {
        let read = reader.read(*pos).expect("a pinned segment reads");
        assert_eq!(read, payload(*i), "record {i} at {pos:?}");
    }
    let elsewhere = RecordPos {
        segment_id: 1 << 40,
        offset: 40,
    };
    assert!(matches!(
        reader.read(elsewhere),
        Err(agentwal::Error::StoreChanged { .. })
    ));
}

/// Compaction hooks of an index that holds one record.
pub(crate) struct KeepOnly {
    pub(crate) lock: parking_lot::RwLock<()>,
    /// Where the one indexed record is now.
    pub(crate) at: Mutex<agentwal::log::RecordPos>,
}

impl agentwal::log::CompactionHooks for KeepOnly {
    fn positions_lock(&self) -> &parking_lot::RwLock<()> {
        &self.lock
    }
    fn live_records(
        &self,
        sealed: &dyn Fn(agentwal::log::RecordPos) -> bool,
    ) -> (Vec<agentwal::log::RecordPos>, u64) {
        let at = *self.at.lock();
        (vec![at].into_iter().filter(|p| sealed(*p)).collect(), 0)
    }
    fn orphan(
        &self,
        vanishes: &dyn Fn(agentwal::log::RecordPos) -> bool,
        moved: &HashMap<agentwal::log::RecordPos, agentwal::log::Moved>,
    ) -> Option<agentwal::log::RecordPos> {
        let at = *self.at.lock();
        (vanishes(at) && !moved.contains_key(&at)).then_some(at)
    }
    fn remap(&self, moved: &HashMap<agentwal::log::RecordPos, agentwal::log::Moved>) {
        let mut at = self.at.lock();
        if let Some(new) = moved.get(&*at) {
            *at = new.pos;
        }
    }
}
