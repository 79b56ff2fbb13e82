//! Fault injection on the plain log: a cut at every byte offset, zeroed tails, every bit
//! flip of acknowledged records, damaged segment chains, malformed segment files, and
//! read-only opens racing a writer. Every test asserts exact outcomes: which records
//! come back, how many torn bytes, and which segment and offset an error names.
//!
//! Not covered here: poisoning after a failed fsync, which needs a storage seam to inject
//! the failure.

mod cuts;
mod flips;
mod helpers;
mod one_segment;
mod read_only;
mod recovery_modes;
mod segment_chains;
