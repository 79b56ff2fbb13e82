//! Fuzz target `recover_dir`: see `agentwal_fuzz::recover_dir` (fuzz/src/recover_dir.rs) for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| agentwal_fuzz::recover_dir::check(data));
