//! Fuzz target `store_ops`: see `agentwal_fuzz::store_ops` (fuzz/src/store_ops/) for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| agentwal_fuzz::store_ops::check(data));
