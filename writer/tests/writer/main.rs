//! The writer's integration tests, one binary (one link): each module is one former test file.
//! `crash_recovery` (in-process failpoints, global to the process) and `kafka_restart` (stops the
//! shared broker) stay binaries of their own so nothing else runs beside them.

#[path = "../support/mod.rs"]
mod support;

mod admin;
mod api;
mod redis_loss;
mod shutdown;
