//! The drift checks behind the `compose_config` test, one concern per module.
//!
//! Each module has one `check(&Compose) -> Vec<String>` that compares the deployment (the
//! compose file, and where it matters the Dockerfile, README, `.dockerignore` and workspace
//! manifest) with the code and [`super::deployment`], and returns every problem it finds as
//! one human-readable line (possibly repeated; [`super::report`] removes duplicates). An empty
//! list means the check holds. Checks read files but start no containers or servers.

pub mod backing;
pub mod builds;
pub mod environment;
pub mod http;
pub mod interpolation;
pub mod redis;
pub mod redpanda;
pub mod rf3_guards;
pub mod scylla;
pub mod startup;
pub mod topic_init;
pub mod topic_replication;
