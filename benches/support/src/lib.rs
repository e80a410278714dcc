//! What the benchmarks share, as `tests/testkit` is for the tests: each
//! bench target is a crate of its own, and this is where the code two of
//! them need lives, rather than in files each would include.

pub mod cluster;
pub mod counting;
pub mod fixtures;
pub mod ipvs;
pub mod proxy;
pub mod result_line;
pub mod tool;
pub mod view_node;
