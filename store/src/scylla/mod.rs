//! The CQL backend (ScyllaDB in production, Apache Cassandra 5 on our machines).

pub mod mailbox;
