//! `okaywal`: one entry per step (the delta, postcard-encoded). A WAL only, with no state
//! index, so it has no load figure; recovery is `WriteAheadLog::recover` reading every
//! entry still in the log.

use std::path::Path;
use std::time::Instant;

use plotters::style::RGBColor;

use super::Backend;
use crate::config::Config;
use crate::generator::delta_payload;
use crate::harness::drive;
use crate::measurement::{Measurement, median_duration};
use crate::metering::{io_counters, io_since};

pub struct Okaywal;

pub const OKAYWAL: Okaywal = Okaywal;

impl Backend for Okaywal {
    fn name(&self) -> &'static str {
        "okaywal"
    }

    fn color(&self) -> RGBColor {
        RGBColor(0x2C, 0xA0, 0x2C)
    }

    fn run(&self, cfg: &Config, dir: &Path, threads: usize) -> Measurement {
        let payload = delta_payload(threads, cfg.steps);
        let io = io_counters();
        let wal =
            okaywal::WriteAheadLog::recover(dir, OkayManager::default()).expect("open okaywal");
        let times = drive(
            threads,
            cfg.steps,
            |_| (),
            |_, _, _, delta| {
                let bytes = postcard::to_allocvec(delta).expect("encode delta");
                let mut entry = wal.begin_entry().expect("begin_entry");
                entry.write_chunk(&bytes).expect("write_chunk");
                entry.commit().expect("commit");
            },
        );
        wal.shutdown().expect("shut okaywal down");
        let mut m = Measurement::from_run(&times, io_since(io), dir, payload);
        let mut recovery = Vec::new();
        for _ in 0..cfg.cold_loads {
            let t0 = Instant::now();
            let wal = okaywal::WriteAheadLog::recover(dir, OkayManager::default())
                .expect("reopen okaywal");
            recovery.push(t0.elapsed());
            wal.shutdown().expect("shut okaywal down");
        }
        m.recovery_ms = Some(median_duration(&mut recovery).as_secs_f64() * 1e3);
        m
    }
}

/// okaywal's hook: recovery reads every entry; checkpointing has nothing to persist.
#[derive(Debug, Default)]
struct OkayManager {
    entries: u64,
}

impl okaywal::LogManager for OkayManager {
    fn recover(&mut self, entry: &mut okaywal::Entry<'_>) -> std::io::Result<()> {
        if entry.read_all_chunks()?.is_some() {
            self.entries += 1;
        }
        Ok(())
    }

    fn checkpoint_to(
        &mut self,
        _last_checkpointed_id: okaywal::EntryId,
        _checkpointed_entries: &mut okaywal::SegmentReader,
        _wal: &okaywal::WriteAheadLog,
    ) -> std::io::Result<()> {
        Ok(())
    }
}
