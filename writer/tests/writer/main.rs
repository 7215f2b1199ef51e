//! The writer's integration tests, one binary (one link): each module is one former test file.
//! `crash_recovery` (in-process failpoints, global to the process) and `kafka_restart` (stops the
//! shared broker) stay binaries of their own so nothing else runs beside them.

#[path = "../support/mod.rs"]
mod support;

/// Runs one case against each backend (a module's `Kind` in scope): `both!(case, ...)` makes
/// `redis_backend::case` and `scylla_backend::case`.
macro_rules! both {
    ($($case:ident),* $(,)?) => {
        mod redis_backend {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() { super::$case(super::Kind::Redis).await }) *
        }
        mod scylla_backend {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() { super::$case(super::Kind::Scylla).await }) *
        }
    };
}

mod admin;
mod api;
mod auth_matrix;
mod redis_loss;
mod shutdown;
