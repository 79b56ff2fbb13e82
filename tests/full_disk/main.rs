//! A full disk must not leave the store stuck (docs/log.md §1.5, §4.4, docs/store.md §7).
//!
//! The tmpfs tests fill a small tmpfs that the test mounts itself until a commit fails
//! with `ENOSPC`, then recover on the same, still full, disk: a writer's open, a
//! compaction that reclaims the dead segments, and new commits. They need root and
//! `mount(8)`; without them they fail loudly, unless `AGENTWAL_SKIP_MOUNT_TESTS=1` says
//! to skip them. The last test crashes the simulated storage at every point of the
//! delete-before-write compaction order and checks that nothing acknowledged is lost.

#[path = "../common/mod.rs"]
mod common;

mod delete_before_write;
mod enospc;
mod tmpfs;
