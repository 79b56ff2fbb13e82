//! The checks behind agentwal's fuzz targets, one module per target.
//!
//! Each module's `check(data)` takes the raw fuzzer input and panics on a violated
//! property. The fuzz targets (`fuzz_targets/*.rs`) are one-line wrappers around them, and
//! `tests/fuzz_regressions.rs` in agentwal includes this file with `#[path]` to replay
//! every saved input under `fuzz/regressions/<target>/` as an ordinary `cargo test`. So the
//! logic exists once, builds on stable as a test and on nightly under libFuzzer, and the
//! library itself carries no test-only code or feature.
//!
//! Only `agentwal`, `arbitrary` and `tempfile` may be used here: they are dependencies of
//! the fuzz crate and dev-dependencies of agentwal alike (`arbitrary` pinned to the same
//! version in both, so an input decodes to the same operations in both).

pub mod record_decode;
pub mod recover_dir;
pub mod store_ops;

use std::path::Path;

/// A scratch directory, in memory where possible (fsync there costs nothing).
pub fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let in_memory = shm.is_dir() && std::env::var_os("AGENTWAL_FUZZ_ON_DISK").is_none();
    let made = if in_memory {
        tempfile::Builder::new()
            .prefix("agentwal-fuzz")
            .tempdir_in(shm)
    } else {
        tempfile::Builder::new().prefix("agentwal-fuzz").tempdir()
    };
    made.expect("creating a scratch directory")
}

/// Copies the regular files of `from` into `to` (created).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("creating a directory");
    for entry in std::fs::read_dir(from).expect("listing a directory") {
        let entry = entry.expect("listing a directory");
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copying a file");
        }
    }
}
