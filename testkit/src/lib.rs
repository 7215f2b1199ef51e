//! qim-testkit: what the tests of every qim crate share, so each is written once.
//!
//! - [`stack`]: where the local stack's servers are (`QIM_TEST_*` variables, loopback
//!   defaults), checks that fail loudly naming the server and the command that starts it, and
//!   unique names for topics, groups, keyspaces and key namespaces.
//! - [`fault_stack`]: the second local stack on which the tests that kill servers run, so they
//!   run beside the others instead of alone.
//! - [`kafka`]: topics created and ready (every partition has a leader) before a test uses them,
//!   and the topics of exited test processes deleted.
//! - [`metrics`]: a service's `/metrics` text read back by metric name and labels.
//! - [`ports`]: loopback ports for the services a test starts, which no client connection takes.
//! - [`redis`]: a test's key namespace deleted at once.
//! - [`scylla`]: dropping a test keyspace, and those that finished test processes left behind.
//! - [`tokens`]: the APIs' bearer tokens minted with the test keys (HS256, RS256, ES256).

pub mod fault_stack;
pub mod kafka;
pub mod metrics;
pub mod ports;
pub mod redis;
pub mod redis_cluster;
pub mod scylla;
pub mod stack;
pub mod tokens;
