//! The workspace's cross-service tests that leave the shared servers running, one binary (one
//! link): smoke tests of each engine, the services harness, the checker, replay, Redis losing its
//! state (on private Redis servers) and the configuration documents. The fault suites
//! (`faults_*`) kill shared servers and stay binaries of their own.

mod api_spec;
mod checker;
mod compose_config;
mod dlq;
mod observability;
mod readme_config;
mod redis_cluster;
mod redis_loss;
mod replay_rebuild;
mod services_harness;
mod smoke_cassandra;
mod smoke_kafka;
mod smoke_redis;
mod two_writers;
