//! The delete-before-write compaction order crashed at every point on the simulated
//! disk loses nothing (docs/log.md §4.4).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use agentwal::storage::sim::{SimOp, SimStorage};
use agentwal::{AgentState, Compression, Options, Store};

use crate::tmpfs::delta;

// ---- Crash points of delete-before-write compaction, on the simulated storage ----

const SIM_DIR: &str = "/store";

fn sim_options() -> Options {
    Options {
        segment_bytes: 4096,
        snapshot_every: 2,
        keep_checkpoints: Some(2),
        auto_compact: false,
        // The segment counts these tests plan on are in bytes as encoded.
        compression: Compression::None,
        ..Options::default()
    }
}

fn sim_open(sim: &SimStorage) -> agentwal::Result<Store> {
    Store::open_on(Arc::new(sim.clone()), SIM_DIR, sim_options())
}

/// Every retained checkpoint of every task, loaded, and the pending calls.
pub(crate) type Contents = BTreeMap<String, (Vec<(u64, AgentState)>, Vec<String>)>;

fn contents(store: &Store) -> Result<Contents, String> {
    let mut out = Contents::new();
    for task in store.tasks().map_err(|e| e.to_string())? {
        let mut cps = Vec::new();
        for c in store.list_checkpoints(&task).map_err(|e| e.to_string())? {
            let cp = store
                .load(&task, c.seq)
                .map_err(|e| format!("{task} {}: {e}", c.seq))?;
            let cp = cp.ok_or_else(|| format!("{task} seq {} is listed, not loaded", c.seq))?;
            cps.push((c.seq, (*cp.state).clone()));
        }
        let calls = store.pending_calls(&task).map_err(|e| e.to_string())?;
        out.insert(task, (cps, calls.into_iter().map(|c| c.call_id).collect()));
    }
    Ok(out)
}

#[test]
fn a_crash_at_every_point_of_delete_before_write_compaction_loses_nothing() {
    let sim = SimStorage::new();
    let store = sim_open(&sim).unwrap();
    // A long dead history first (only the last 2 of "a" are retained), then records that
    // stay live in sealed segments ("b", and a call kept forever), then more of "a".
    for i in 0..150 {
        store.commit("a", &delta("a", i)).unwrap();
    }
    for i in 0..5 {
        store.commit("b", &delta("b", i)).unwrap();
    }
    store.begin_call("b", "c1", "tool", b"args").unwrap();
    store.commit("gone", &delta("gone", 0)).unwrap();
    store.delete_task("gone").unwrap();
    for i in 150..200 {
        store.commit("a", &delta("a", i)).unwrap();
    }
    let expected = contents(&store).unwrap();
    let before = sim.fork();
    sim.record();
    let report = store.compact().unwrap();
    let ops = sim.take_recording();
    assert_eq!(
        contents(&store).unwrap(),
        expected,
        "compaction changed the contents"
    );
    drop(store);

    // The order: dead segments go before the compacted segment is written.
    let first_remove = ops
        .iter()
        .position(|op| matches!(op, SimOp::Remove(p) if p.extension().is_some_and(|e| e == "wal")));
    let compacted_created = ops.iter().position(
        |op| matches!(op, SimOp::Create(p, _) if p.to_string_lossy().ends_with(".compact.tmp")),
    );
    let (Some(first_remove), Some(compacted_created)) = (first_remove, compacted_created) else {
        panic!("compaction removed no segment or wrote no compacted one: {report:?}");
    };
    assert!(
        first_remove < compacted_created,
        "dead segments must be deleted before the compacted segment is written \
         (op {first_remove} removes, op {compacted_created} creates)"
    );
    assert!(report.segments_deleted >= 10, "{report:?}");

    // A crash before every operation that changes the disk, every image it may leave.
    let replay = before.fork();
    let (mut points, mut images) = (0, 0);
    for n in 0..=ops.len() {
        let next = ops.get(n);
        if next.is_none_or(SimOp::mutates) {
            points += 1;
            let kill = replay.fork();
            let crashes = replay
                .crash_images(n as u64, 4)
                .map(|i| SimStorage::from_image(&i));
            for (i, disk) in std::iter::once(kill).chain(crashes).enumerate() {
                images += 1;
                let store = sim_open(&disk)
                    .unwrap_or_else(|e| panic!("crash before op {n} ({next:?}), image {i}: {e}"));
                let got = contents(&store)
                    .unwrap_or_else(|e| panic!("crash before op {n}, image {i}: {e}"));
                assert_eq!(got, expected, "crash before op {n} ({next:?}), image {i}");
                if i == 0 {
                    // Writing after recovery works and is durable.
                    let seq = store.commit("b", &delta("b", 99)).unwrap();
                    let durable = SimStorage::from_image(&disk.durable_image());
                    drop(store);
                    let again = sim_open(&durable).unwrap();
                    assert_eq!(again.load_latest("b").unwrap().map(|c| c.seq), Some(seq));
                }
            }
        }
        if let Some(op) = next {
            replay.apply(op);
        }
    }
    println!("{points} crash points, {images} disk images recovered");
    assert!(
        points > 20 && images > points,
        "{points} points, {images} images"
    );
}

/// A disk whose final segment is sealed and has no successor, as a full disk leaves it
/// (the rotation failed creating the next segment), and the contents it holds.
fn sealed_final_segment() -> (SimStorage, Contents) {
    let sim = SimStorage::new();
    sim.record();
    let store = sim_open(&sim).unwrap();
    for i in 0..40 {
        store.commit("a", &delta("a", i)).unwrap();
    }
    drop(store);
    let ops = sim.take_recording();
    let last_rotation = ops
        .iter()
        .rposition(
            |op| matches!(op, SimOp::Create(p, _) if p.to_string_lossy().ends_with(".wal.tmp")),
        )
        .expect("a rotation");
    // A process kill right before that segment was created: the seal is durable.
    let disk = SimStorage::new();
    ops[..last_rotation].iter().for_each(|op| disk.apply(op));
    let store = sim_open(&disk.fork()).unwrap();
    let contents = contents(&store).unwrap();
    assert!(
        contents["a"].0.last().unwrap().0 > 20,
        "most commits are there"
    );
    (disk, contents)
}

#[test]
fn reopening_a_sealed_final_segment_writes_nothing() {
    let (disk, expected) = sealed_final_segment();
    let before: Vec<PathBuf> = disk.volatile_image().files.into_keys().collect();
    disk.record();
    let store = sim_open(&disk).unwrap();
    let ops = disk.take_recording();
    let writes: Vec<String> = ops
        .iter()
        .filter_map(|op| match op {
            SimOp::Create(path, _) => Some(format!("create {}", path.display())),
            SimOp::Write(ino, at, data) => {
                Some(format!("write {} bytes at {at} of inode {ino}", data.len()))
            }
            SimOp::Allocate(ino, len) => Some(format!("allocate inode {ino} to {len} bytes")),
            _ => None,
        })
        .collect();
    assert!(
        writes.is_empty(),
        "the open must need no space (a full disk), but it did: {writes:?}"
    );
    assert_eq!(contents(&store).unwrap(), expected);
    let after: Vec<PathBuf> = disk.volatile_image().files.into_keys().collect();
    assert_eq!(before, after, "the open created or removed files");
    // The first append creates the next segment, and it holds.
    let seq = store.commit("a", &delta("a", 1000)).unwrap();
    drop(store);
    let store = sim_open(&SimStorage::from_image(&disk.durable_image())).unwrap();
    assert_eq!(store.load_latest("a").unwrap().map(|c| c.seq), Some(seq));
}

#[test]
fn a_crash_while_the_first_append_creates_the_next_segment_loses_nothing() {
    let (disk, before) = sealed_final_segment();
    let store = sim_open(&disk).unwrap();
    let start = disk.fork();
    disk.record();
    let d = delta("a", 1000);
    let seq = store.commit("a", &d).unwrap();
    let ops = disk.take_recording();
    drop(store);
    let mut with_new = before.clone();
    let cps = &mut with_new.get_mut("a").unwrap().0;
    let mut state = cps.last().unwrap().1.clone();
    agentwal::State::apply(&mut state, &d);
    cps.push((seq, state));
    cps.remove(0); // keep_checkpoints: Some(2)

    let replay = start.fork();
    let mut images = 0;
    for n in 0..=ops.len() {
        let next = ops.get(n);
        if next.is_none_or(SimOp::mutates) {
            let kill = replay.fork();
            let crashes = replay
                .crash_images(n as u64, 4)
                .map(|i| SimStorage::from_image(&i));
            for (i, disk) in std::iter::once(kill).chain(crashes).enumerate() {
                images += 1;
                let what = format!("crash before op {n} ({next:?}), image {i}");
                let store = sim_open(&disk).unwrap_or_else(|e| panic!("{what}: {e}"));
                let got = contents(&store).unwrap_or_else(|e| panic!("{what}: {e}"));
                // The commit had not returned: either outcome, but whole.
                assert!(got == before || got == with_new, "{what}: {got:?}");
                let seq = store.commit("a", &delta("a", 2000)).unwrap();
                drop(store);
                let again = sim_open(&SimStorage::from_image(&disk.durable_image())).unwrap();
                assert_eq!(
                    again.load_latest("a").unwrap().map(|c| c.seq),
                    Some(seq),
                    "{what}"
                );
            }
        }
        if let Some(op) = next {
            replay.apply(op);
        }
    }
    // Acknowledged: the disk after every operation holds it, even on a power loss.
    let store = sim_open(&SimStorage::from_image(&replay.durable_image())).unwrap();
    assert_eq!(contents(&store).unwrap(), with_new);
    assert!(images > 10, "{images} images");
}
