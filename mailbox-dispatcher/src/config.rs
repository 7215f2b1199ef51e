//! The mailbox dispatcher's documented configuration.

use qim_store::env::{EnvVar, HTTP_ENV, KAFKA_ENV, STORE_ENV};

/// Variables only the mailbox dispatcher reads.
pub const DISPATCHER_ENV: &[EnvVar] = &[
    EnvVar {
        name: "QIM_DISPATCHER_HTTP_ADDR",
        default: Some("127.0.0.1:8082"),
        doc: "Listen address of the mailbox read API and `/metrics`.",
    },
    EnvVar {
        name: "QIM_MAILBOX_SHARDS",
        default: Some("8"),
        doc: "Mailbox shards = partitions of the dispatch topic; 64 lanes per shard, fixed.",
    },
    EnvVar {
        name: "QIM_DISPATCH_TOPIC",
        default: Some("qim.mailbox.dispatch.v1"),
        doc: "Per-shard dispatch records, partition = shard.",
    },
    EnvVar {
        name: "QIM_MAILBOX_RETENTION_DAYS",
        default: Some("30"),
        doc: "Days a mailbox entry lives (1..=30, to the end of that UTC day); older cursors get 410.",
    },
];

/// Every variable the mailbox dispatcher reads, as documented in the README.
pub const ENVIRONMENT: &[&[EnvVar]] = &[STORE_ENV, KAFKA_ENV, HTTP_ENV, DISPATCHER_ENV];
