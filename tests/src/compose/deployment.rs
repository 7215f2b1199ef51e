//! What the compose deployment must consist of: our services and how each is built and
//! configured, the profiles and the compose-level variables they set, and the names of the
//! supporting services the checks look for. The checks in [`super::checks`] compare
//! `docker-compose.yml` against these tables.

use std::collections::BTreeMap;

use qim_runtime::env::{variables, Environment, Variable};

/// One of our services in the compose file.
pub struct Ours {
    /// Compose service name.
    pub service: &'static str,
    /// Dockerfile target it must be built from.
    pub target: &'static str,
    /// The binary that target runs; also its cargo package name.
    pub binary: &'static str,
    /// The command of the binary's environment.
    pub env: fn() -> clap::Command,
    /// `false` for the one-shot migration, which serves no HTTP and must not restart.
    pub long_running: bool,
    /// The binary's own start-up check of an environment (`check-config`: every value, the
    /// rules between them, required variables such as `QIM_SCYLLA_*`); connects to nothing.
    pub check: CheckEnvironment,
}

/// A binary's check of an environment (name → value): `Err` holds every problem.
pub type CheckEnvironment = fn(&BTreeMap<String, String>) -> Result<(), Vec<String>>;

/// [`Ours::check`] for the binary whose environment is `E`.
fn check<E: Environment>(env: &BTreeMap<String, String>) -> Result<(), Vec<String>> {
    qim_runtime::env::check::<E>(&|name| env.get(name).cloned(), env.keys().cloned()).map(drop)
}

impl Ours {
    /// The variables the binary reads, in declaration order.
    pub fn variables(&self) -> Vec<Variable> {
        variables(&(self.env)())
    }

    /// Whether the binary reads `name`.
    pub fn reads(&self, name: &str) -> bool {
        self.variables().iter().any(|v| v.name == name)
    }
}

/// Our services, the writer first.
pub const OURS: &[Ours] = &[
    Ours {
        service: "writer",
        target: "writer",
        binary: "qim-writer",
        env: qim_writer::config::WriterEnv::command,
        long_running: true,
        check: check::<qim_writer::config::WriterEnv>,
    },
    Ours {
        service: "archiver",
        target: "archiver",
        binary: "qim-archiver",
        env: qim_archiver::config::ArchiverEnv::command,
        long_running: true,
        check: check::<qim_archiver::config::ArchiverEnv>,
    },
    Ours {
        service: "mailbox-dispatcher",
        target: "mailbox-dispatcher",
        binary: "qim-mailbox-dispatcher",
        env: qim_mailbox_dispatcher::config::DispatcherEnv::command,
        long_running: true,
        check: check::<qim_mailbox_dispatcher::config::DispatcherEnv>,
    },
    Ours {
        service: "migrate",
        target: "writer",
        binary: "qim-writer",
        env: qim_writer::config::WriterEnv::command,
        long_running: false,
        check: check::<qim_writer::config::WriterEnv>,
    },
];

/// The one-shot schema migration every long-running service waits for.
pub const MIGRATE: &str = "migrate";

/// A Compose profile and the compose-level variables its README command line sets.
pub struct Profile {
    /// The profile name (`--profile <name>`).
    pub name: &'static str,
    /// The compose-level variables (name, value) the README sets on its command line.
    pub vars: &'static [(&'static str, &'static str)],
    /// How many Scylla nodes the profile starts.
    pub scylla_nodes: usize,
    /// The replication factor our services must use in it.
    pub rf: u32,
    /// How many Redpanda brokers the profile starts.
    pub brokers: usize,
    /// The replication factor its Kafka topics are created with.
    pub kafka_rf: u32,
}

/// The profiles the README documents.
pub const PROFILES: &[Profile] = &[
    Profile { name: "dev", vars: &[], scylla_nodes: 1, rf: 1, brokers: 1, kafka_rf: 1 },
    Profile {
        name: "rf3",
        vars: &[
            ("SCYLLA_RF", "3"),
            ("SCYLLA_DEV_SINGLE_NODE", "false"),
            ("SCYLLA_HOSTS", "scylla-1:9042,scylla-2:9042,scylla-3:9042"),
            ("KAFKA_RF", "3"),
            ("KAFKA_BROKERS", "redpanda-1:9092,redpanda-2:9092,redpanda-3:9092"),
        ],
        scylla_nodes: 3,
        rf: 3,
        brokers: 3,
        kafka_rf: 3,
    },
];

/// The only variables the compose file may interpolate (compose-level knobs, not container
/// variables).
pub const COMPOSE_VARS: &[&str] =
    &["SCYLLA_RF", "SCYLLA_HOSTS", "SCYLLA_DEV_SINGLE_NODE", "KAFKA_RF", "KAFKA_BROKERS", "QIM_AUTH_HS256_SECRET"];

/// An rf3-only one-shot that refuses to let the stack start unless the compose-level variables
/// of the profile are set: Compose can not tie a value to a profile.
pub struct Guard {
    /// The guard service.
    pub service: &'static str,
    /// The service that waits for it to complete successfully (and so everything after that).
    pub waiter: &'static str,
    /// The variables of the rf3 profile it checks: without any one of them it must fail.
    pub vars: &'static [&'static str],
}

/// The rf3 guards: Scylla's replication factor before the migration, the Kafka replication
/// factor and bootstrap list before the topics are created.
pub const RF3_GUARDS: &[Guard] = &[
    Guard { service: "scylla-rf3-check", waiter: MIGRATE, vars: &["SCYLLA_RF"] },
    Guard { service: "redpanda-rf3-check", waiter: TOPIC_INIT, vars: &["KAFKA_RF", "KAFKA_BROKERS"] },
];

/// Every Scylla node is seeded from this one.
pub const SCYLLA_SEED: &str = "scylla-1";

/// The Redpanda broker that founds the cluster (it has no seeds); every other broker is seeded
/// from it.
pub const REDPANDA_ROOT: &str = "redpanda-1";

/// The one-shot that sets the Redpanda cluster up and creates the topics.
pub const TOPIC_INIT: &str = "redpanda-init";

/// The command the README must give for the dev profile.
pub const UP_DEV: &str = "docker compose -f deploy/compose/docker-compose.yml --profile dev up --build";

#[cfg(test)]
mod tests {
    use super::*;

    /// Each binary's check refuses an environment without the Scylla cluster, naming what is
    /// missing, and accepts one that names it.
    #[test]
    fn the_check_refuses_an_environment_without_the_scylla_cluster() {
        let full: BTreeMap<String, String> = [
            ("QIM_SCYLLA_HOSTS", "scylla-1:9042"),
            ("QIM_SCYLLA_KEYSPACE", "qim"),
            ("QIM_SCYLLA_DC", "datacenter1"),
            ("QIM_SCYLLA_RF", "3"),
            ("QIM_AUTH_DISABLED", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        for ours in OURS {
            assert_eq!((ours.check)(&full), Ok(()), "{}", ours.service);
            let mut without = full.clone();
            without.remove("QIM_SCYLLA_DC");
            let refused = (ours.check)(&without).expect_err(ours.service);
            assert!(
                refused.iter().any(|p| p.starts_with("QIM_SCYLLA_DC: is not set")),
                "{}: {refused:?}",
                ours.service
            );
        }
    }
}
