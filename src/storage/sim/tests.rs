//! Tests of the simulated disk through its public API: what crash images keep of
//! unsynced writes and directory changes, injected faults, recording and replay.

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::{SimImage, SimStorage};
use crate::storage::{Storage, StorageFile};

fn p(s: &str) -> PathBuf {
    PathBuf::from(s)
}

/// A disk with a durable, empty `/d/a`, open as the returned handle.
fn disk() -> (SimStorage, Box<dyn StorageFile>) {
    let sim = SimStorage::new();
    sim.create_dir_all(&p("/d")).unwrap();
    let f = sim.create(&p("/d/a")).unwrap();
    sim.sync_dir(&p("/d")).unwrap();
    (sim, f)
}

fn a_of(images: impl Iterator<Item = SimImage>) -> Vec<Vec<u8>> {
    images.map(|i| i.files[&p("/d/a")].clone()).collect()
}

#[test]
fn unsynced_writes_are_volatile_and_the_last_is_cut_at_every_byte() {
    let (sim, f) = disk();
    f.write_all_at(b"hello", 0).unwrap();
    f.sync_data().unwrap();
    f.write_all_at(b" world", 5).unwrap();
    assert_eq!(f.read_all().unwrap(), b"hello world");
    let cut = |n: usize| b"hello world"[..5 + n].to_vec();
    let expected: Vec<_> = [0, 6].into_iter().chain(0..6).map(cut).collect();
    assert_eq!(a_of(sim.crash_images(1, 0)), expected);
    assert_eq!(sim.images_generated(), 8);
    f.sync_data().unwrap();
    assert_eq!(a_of(sim.crash_images(1, 50)), [b"hello world"]);
}

#[test]
fn large_writes_are_cut_at_sectors_and_sampled_deterministically() {
    let (sim, f) = disk();
    f.sync_data().unwrap();
    f.write_all_at(&[7u8; 3000], 100).unwrap();
    let lens: Vec<_> = a_of(sim.crash_images(1, 0)).iter().map(Vec::len).collect();
    assert_eq!(lens, [0, 3100, 100, 512, 1024, 1536, 2048, 2560, 3072]);
    let a = a_of(sim.crash_images(9, 60));
    assert_eq!(a, a_of(sim.crash_images(9, 60)));
    assert!(a.iter().collect::<BTreeSet<_>>().len() > 20);
    assert!(a.iter().any(|b| b.len() == 3100 && b[100..].contains(&0)));
    // Powersafe overwrite: damage stays within the bytes written.
    assert!(a.iter().all(|b| b.iter().take(100).all(|&b| b == 0)));
    sim.set_powersafe_overwrite(false);
    let b = a_of(sim.crash_images(9, 60));
    assert!(b.iter().any(|b| b.iter().take(100).any(|&b| b != 0)));
}

#[test]
fn directory_changes_need_sync_dir() {
    let (sim, _) = disk();
    sim.create(&p("/d/x.tmp")).unwrap().sync_data().unwrap();
    sim.rename(&p("/d/x.tmp"), &p("/d/x")).unwrap();
    sim.remove(&p("/d/a")).unwrap();
    let names = |sim: &SimStorage| -> BTreeSet<Vec<PathBuf>> {
        let images = sim.crash_images(3, 20);
        images.map(|i| i.files.into_keys().collect()).collect()
    };
    let got = names(&sim);
    for want in [
        &["/d/a"][..],
        &["/d/x"],
        &["/d/a", "/d/x.tmp"],
        &["/d/a", "/d/x"],
    ] {
        let want: Vec<_> = want.iter().map(|s| p(s)).collect();
        assert!(got.contains(&want), "{want:?} in {got:?}");
    }
    assert!(
        !got.iter()
            .any(|n| n.contains(&p("/d/x.tmp")) && n.contains(&p("/d/x")))
    );
    sim.sync_dir(&p("/d")).unwrap();
    assert_eq!(names(&sim), BTreeSet::from([vec![p("/d/x")]]));
    assert_eq!(sim.list(&p("/d")).unwrap(), ["x"]);
}

#[test]
fn injected_failures_and_crashes_have_no_effect() {
    let (sim, f) = disk();
    f.write_all_at(b"ab", 0).unwrap();
    let n = sim.ops();
    sim.fail_at(n, false);
    assert!(f.sync_data().is_err());
    assert_eq!(sim.durable_image().files[&p("/d/a")], b"", "failed fsync");
    f.sync_data().unwrap();
    sim.fail_at(n + 3, true);
    f.write_all_at(b"c", 2).unwrap();
    assert!(f.write_all_at(b"d", 3).is_err() && f.read_all().is_err());
    sim.fail_at(u64::MAX, false);
    assert_eq!(f.read_all().unwrap(), b"abc");
    sim.crash_after(sim.ops() + 1);
    f.write_all_at(b"e", 3).unwrap();
    assert!(f.sync_data().is_err() && sim.list(&p("/d")).is_err());
    assert_eq!(sim.volatile_image().files[&p("/d/a")], b"abce");
    assert_eq!(sim.durable_image().files[&p("/d/a")], b"ab");
}

#[test]
fn recording_replay_images_and_locks() {
    let (sim, _) = disk();
    let start = sim.volatile_image();
    sim.record();
    let f = sim.create(&p("/d/b")).unwrap();
    f.allocate(0, 8).unwrap();
    f.write_all_at(b"xy", 2).unwrap();
    assert_eq!(f.read_all().unwrap(), b"\0\0xy\0\0\0\0");
    let ops = sim.take_recording();
    assert_eq!((ops.len(), ops[3].mutates()), (4, false));
    let copy = SimStorage::from_image(&start);
    ops.iter().for_each(|op| copy.apply(op));
    assert_eq!(copy.volatile_image(), sim.volatile_image());
    let booted = SimStorage::from_image(&sim.volatile_image());
    assert_eq!(booted.durable_image().files, sim.volatile_image().files);
    assert!(booted.is_dir(&p("/d")) && booted.open(&p("/d/none"), false).is_err());
    let lock = booted.try_lock(&p("/d/LOCK")).unwrap();
    assert!(lock.is_some() && booted.try_lock(&p("/d/LOCK")).unwrap().is_none());
    drop(lock);
    assert!(booted.try_lock(&p("/d/LOCK")).unwrap().is_some());
}
