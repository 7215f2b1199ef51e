//! The store's integration tests, one binary: the contract suites against every backend, the
//! backends' own behaviour, and the codecs' property tests. Redis tests take a fresh namespace
//! on the local stack's Redis ([`shared_redis`]) or a private `redis-server` when they flush or
//! restart it; Scylla tests share one migrated keyspace per run ([`scylla_support`]) unless they
//! need their own.

mod scylla_support;
mod shared_redis;

mod codec_props;
mod memory_contract;
mod message_model;
mod redis_cluster_topology;
mod redis_commit_layout;
mod redis_created_at_clock;
mod redis_group_commit;
mod redis_hot_tier;
mod redis_mailbox_contract;
mod redis_mailbox_differential;
mod redis_mailbox_fence;
mod redis_membership_contract;
mod redis_message_contract;
mod redis_seq_lease_edges;
mod redis_writer_id;
mod scylla_archive_ttl;
mod scylla_created_at_clock;
mod scylla_history_buckets;
mod scylla_mailbox_contract;
mod scylla_mailbox_lifecycle;
mod scylla_membership_contract;
mod scylla_message_behaviour;
mod scylla_message_contract;
mod scylla_message_recovery;
mod tiered_message_store;
mod tiered_send_membership;
