//! Format v2: what the segment salt buys (every record checksum mixes in its segment's
//! salt, so a record image from another segment, another store or an earlier life of a
//! recycled file never validates), recycled segment files (old bytes past the data,
//! close records, the seal an open writes after a crash), and salt uniqueness.
//!
//! Record images are byte-exact copies of records another log wrote; bytes of "an earlier
//! life" are encoded with the salt that life's header carried (read from the `.free`
//! file before it was reused). Each test that relies on a planted image also shows, as a
//! control, that the same image under the segment's own salt would have been taken: the
//! image lies where it would count.

#[path = "../common/mod.rs"]
mod common;

mod closes_and_tears;
mod compaction;
mod foreign_images;
mod helpers;
mod recycled;
mod salts;
