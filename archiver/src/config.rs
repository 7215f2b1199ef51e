//! The archiver's documented configuration.

use qim_store::env::{EnvVar, HTTP_ENV, KAFKA_ENV, STORE_ENV};

/// Variables only the archiver reads.
pub const ARCHIVER_ENV: &[EnvVar] = &[
    EnvVar {
        name: "QIM_ARCHIVER_HTTP_ADDR",
        default: Some("127.0.0.1:8081"),
        doc: "Listen address of `/metrics`, `/healthz` and `/readyz`.",
    },
    EnvVar { name: "QIM_ARCHIVER_GROUP", default: Some("qim-archiver"), doc: "Kafka consumer group." },
    EnvVar {
        name: "QIM_DLQ_TOPIC",
        default: Some("qim.messages.dlq.v1"),
        doc: "Dead-letter topic for records that can not be decoded or validated.",
    },
];

/// Every variable the archiver reads, as documented in the README.
pub const ENVIRONMENT: &[&[EnvVar]] = &[STORE_ENV, KAFKA_ENV, HTTP_ENV, ARCHIVER_ENV];
