//! Guards the production-like deployment in `deploy/compose/` against drift from the code.
//!
//! That stack (Redpanda, ScyllaDB, Redis and the three qim services) can not be started on our
//! Docker-less machines, so this test is what keeps it valid. It reads
//! `deploy/compose/docker-compose.yml` with Compose's own loader (compose-go, `deploy/compose/load`
//! built once with `go build`, run once per profile with that profile's variables; what the loader
//! refuses or warns about fails the test), the `Dockerfile` next to it, the README and the root
//! `.dockerignore`, and checks that:
//!
//! - each of our services is built from the one Dockerfile, from a target that exists and runs
//!   that service's binary as a non-root user;
//! - our services' `environment` blocks are the ones their variable definitions generate
//!   (`qim_tests::compose::env_blocks`; `QIM_BLESS=1` rewrites them), and every variable a
//!   service is given is one its binary reads (its clap environment);
//! - HTTP listen addresses are `0.0.0.0:<documented default port>`, published and
//!   health-checked (`/healthz`) on that same port;
//! - the Kafka, Redis and Scylla addresses name services of the file, enabled in the profile
//!   (and Redpanda advertises the broker address the services use); every Kafka bootstrap list,
//!   the topic init's included, names every broker of the profile;
//! - the topic-init service creates every documented topic, the dispatch topic with exactly
//!   `QIM_MAILBOX_SHARDS` partitions, each with the profile's replication factor (and sets the
//!   cluster's default and minimum replication factor to it);
//! - Redis runs with AOF; profile `dev` has one Scylla node and RF 1 and one Redpanda broker,
//!   profile `rf3` three nodes and RF 3 and three brokers in one cluster (distinct node ids,
//!   addresses and volumes, seeded from the root broker);
//! - the rf3 guards run in rf3 only, are waited for, and refuse the profile without its
//!   variables;
//! - start-up order holds in every profile: `depends_on` targets exist and their conditions can
//!   be met.
//!
//! No servers and no Docker: file reads, the Go loader, and `sh -c` to run the rf3 guard
//! scripts.
//!
//! The readers and the checks live in `qim_tests::compose` (one concern per module, see
//! `checks`); each test below runs one check and fails with every problem it found.

use qim_tests::compose::checks::{
    backing, builds, environment, http, interpolation, redis, redpanda, rf3_guards, scylla, startup, topic_init,
    topic_replication,
};
use qim_tests::compose::{compose_dir, env_blocks, read, report, Compose};
use qim_tests::generated::bless_or_compare;

#[test]
fn our_services_are_built_from_dockerfile_targets_that_run_their_binary() {
    report("builds", builds::check(Compose::load()));
}

#[test]
fn every_variable_is_documented_for_its_service() {
    report("environment", environment::check(Compose::load()));
}

#[test]
fn http_addresses_ports_and_healthchecks_use_the_documented_port() {
    report("HTTP ports", http::check(Compose::load()));
}

#[test]
fn kafka_redis_and_scylla_addresses_name_services_of_the_profile() {
    report("backing services", backing::check(Compose::load()));
}

#[test]
fn topic_init_creates_every_documented_topic_and_one_partition_per_shard() {
    report("topics", topic_init::check(Compose::load()));
}

#[test]
fn topics_get_the_profiles_replication_factor_and_no_topic_fewer() {
    report("topic replication", topic_replication::check(Compose::load()));
}

#[test]
fn redis_keeps_an_append_only_file_on_a_volume() {
    report("redis", redis::check(Compose::load()));
}

#[test]
fn scylla_profiles_dev_has_one_node_and_rf3_three() {
    report("scylla", scylla::check(Compose::load()));
}

#[test]
fn redpanda_profiles_dev_has_one_broker_and_rf3_a_cluster_of_three() {
    report("redpanda", redpanda::check(Compose::load()));
}

#[test]
fn rf3_guards_refuse_the_profile_without_its_variables() {
    report("rf3 guards", rf3_guards::check(Compose::load()));
}

#[test]
fn start_up_order_holds_in_every_profile() {
    report("start-up order", startup::check(Compose::load()));
}

#[test]
fn interpolation_uses_only_known_variables_and_the_readme_documents_them() {
    report("interpolation", interpolation::check(Compose::load()));
}

#[test]
fn environment_blocks_are_the_ones_the_definitions_generate() {
    let path = compose_dir().join("docker-compose.yml");
    let current = read(&path);
    let wanted = env_blocks::generate(&current).unwrap_or_else(|e| panic!("generating the environment blocks: {e}"));
    bless_or_compare(&path.display().to_string(), &current, &wanted, "docker-compose.yml's environment blocks");
}
