//! Fuzz target `record_decode`: see `agentwal_fuzz::record_decode` (fuzz/src/record_decode.rs) for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| agentwal_fuzz::record_decode::check(data));
