//! Seed 000's three-node release gates, on the three-node mode of the local stack
//! (`deploy/local/stack rf3 up`: three Kafka brokers with RF 3 and `min.insync.replicas=2`, a
//! Cassandra ring of three with keyspaces of RF 3) beside the shared stack's Redis. Each test
//! is named after the gate it proves; they take turns (they kill nodes the others use) and each
//! leaves the cluster whole. Fails, never skips, when the three-node mode is not up.
//!
//! `QIM_GATE_SENDS` scales the load of the tests under faults (default 400 sends each; the
//! README's full run uses more).

mod faults;
mod holes;
mod lwt;
mod ring;
mod support;
