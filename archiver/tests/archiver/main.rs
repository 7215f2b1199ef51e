//! The archiver's integration tests, one binary (one link): each module is one former test file.
//! `cassandra_restart` (stops the shared Cassandra) stays a binary of its own so nothing else runs
//! beside it.

#[path = "../support/mod.rs"]
mod support;

mod archive_ttl;
mod cli;
mod conflicts;
mod dead_letters;
mod hot_tier;
mod kill_restart;
mod rebalance;
mod replay;
