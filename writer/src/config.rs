//! The writer's documented configuration.

use qim_store::env::{EnvVar, HTTP_ENV, KAFKA_ENV, STORE_ENV};

/// Variables only the writer reads.
pub const WRITER_ENV: &[EnvVar] = &[
    EnvVar {
        name: "QIM_WRITER_HTTP_ADDR",
        default: Some("127.0.0.1:8080"),
        doc: "Listen address of the writer's HTTP API and `/metrics`.",
    },
    EnvVar {
        name: "QIM_MAX_BODY_BYTES",
        default: Some("65536"),
        doc: "Largest accepted message body; larger requests get 413.",
    },
    EnvVar {
        name: "QIM_MAX_IN_FLIGHT_COMMITS",
        default: Some("1024"),
        doc: "Commits in flight at once; further sends wait.",
    },
];

/// Every variable the writer reads, as documented in the README.
pub const ENVIRONMENT: &[&[EnvVar]] = &[STORE_ENV, KAFKA_ENV, HTTP_ENV, WRITER_ENV];
