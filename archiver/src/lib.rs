//! qim-archiver: consumes committed records into the Scylla archive with remaining-retention TTLs.

pub mod config;
