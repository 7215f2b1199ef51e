//! The archiver's integration tests, one binary (one link): each module is one former test file.
//! `cassandra_restart` (stops the shared Cassandra) and `dead_letters` (asserts exact counts of
//! the process's metrics, which other archivers in the process would add to) stay binaries of
//! their own.

#[path = "../support/mod.rs"]
mod support;

mod archive_ttl;
mod cli;
mod conflicts;
mod hot_tier;
mod kill_restart;
mod rebalance;
mod replay;
