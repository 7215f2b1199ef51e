//! The CQL readiness check, `qim-stack-probe` (deploy/local/probe): the scylla driver the
//! services use. It is a separate program so that this one stays quick to build: `up` starts
//! its build ([`Build::start`]) once the servers are launched, so a fresh machine compiles the
//! driver while the JVMs boot, and waits for it ([`Build::finish`]) only before the Cassandra
//! wait. Both programs share one target dir (`QIM_STACK_TARGET_DIR`), apart from the
//! workspace's, so neither waits for a `cargo test` of the workspace nor makes it rebuild.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};

use crate::layout::{Service, Settings, HOST};
use crate::logfile::last_lines;
use crate::process::output_within;

/// The package and binary name.
const PACKAGE: &str = "qim-stack-probe";
/// The longest one probe run may take (it bounds each of its own steps by `--timeout 5`).
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// A built probe.
pub struct Probe {
    exe: PathBuf,
}

/// A build of the probe under way.
pub struct Build {
    child: Child,
    err: PathBuf,
}

fn cargo_build(settings: &Settings, err: &Path) -> anyhow::Result<Command> {
    let err =
        File::options().create(true).append(true).open(err).with_context(|| format!("opening {}", err.display()))?;
    let mut cmd = Command::new("cargo");
    cmd.args(["build", "--quiet", "--locked", "--manifest-path"])
        .arg(settings.repo.join("Cargo.toml"))
        .args(["-p", PACKAGE, "--target-dir"])
        .arg(&settings.target_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err);
    Ok(cmd)
}

fn exe(settings: &Settings) -> PathBuf {
    settings.target_dir.join("debug").join(PACKAGE)
}

impl Build {
    /// Starts `cargo build -p qim-stack-probe` (a no-op check when it is fresh); its errors go
    /// to `<state>/cql_probe_build.err`.
    pub fn start(settings: &Settings) -> anyhow::Result<Build> {
        Build::start_into(settings, &settings.stack_dir)
    }

    /// [`Build::start`], its errors into `<dir>/cql_probe_build.err`.
    pub fn start_into(settings: &Settings, dir: &Path) -> anyhow::Result<Build> {
        let err = dir.join("cql_probe_build.err");
        let child = cargo_build(settings, &err)?.spawn().context("running cargo")?;
        Ok(Build { child, err })
    }

    /// Waits for the build.
    ///
    /// # Errors
    ///
    /// It failed (the last 20 lines of its errors go to stderr).
    pub fn finish(mut self, settings: &Settings) -> anyhow::Result<Probe> {
        if !self.child.wait()?.success() {
            eprint!("{}", last_lines(&self.err, 20));
            bail!("building {PACKAGE} failed");
        }
        Ok(Probe { exe: exe(settings) })
    }
}

impl Probe {
    /// Builds the probe now (for `status` and `check`), errors into `cassandra/cql_probe.err`.
    pub fn build_now(settings: &Settings) -> anyhow::Result<Probe> {
        let ok = cargo_build(settings, &err_file(settings))?.status().context("running cargo")?.success();
        if !ok {
            bail!("building {PACKAGE} failed");
        }
        Ok(Probe { exe: exe(settings) })
    }

    /// Runs `qim-stack-probe cql` against this stack's Cassandra: its release (with `lwt`,
    /// followed by ` (LWT ok)`). Its complaints are appended to `cassandra/cql_probe.err`.
    pub fn cql(&self, settings: &Settings, lwt: bool) -> anyhow::Result<String> {
        let port = settings.ports.cassandra_cql.to_string();
        let mut args = vec!["--host", HOST, "--port", &port];
        if lwt {
            args.push("--lwt");
        }
        self.run(&args, &err_file(settings))
    }

    /// `qim-stack-probe cql` against the ring node `host:port`: its release; with `ring`, also
    /// that it sees that many nodes NORMAL and answering (`<release> (ring: ...)`). Complaints
    /// are appended to `err`.
    pub fn ring_node(&self, host: &str, port: u16, ring: Option<usize>, err: &Path) -> anyhow::Result<String> {
        let port = port.to_string();
        let nodes = ring.map(|n| n.to_string());
        let mut args = vec!["--host", host, "--port", &port];
        if let Some(n) = &nodes {
            args.extend(["--ring", n]);
        }
        self.run(&args, err)
    }

    fn run(&self, args: &[&str], err: &Path) -> anyhow::Result<String> {
        let mut cmd = Command::new(&self.exe);
        cmd.args(["cql", "--timeout", "5"]).args(args);
        let err = File::options().create(true).append(true).open(err)?;
        cmd.stdin(Stdio::null()).stderr(err);
        let (ok, out) = output_within(&mut cmd, RUN_LIMIT)?;
        if !ok {
            bail!("the CQL probe failed");
        }
        Ok(out.trim_end().to_owned())
    }
}

/// Where the probe's complaints go: its last line is what `check` shows on failure.
pub fn err_file(settings: &Settings) -> PathBuf {
    settings.dir(Service::Cassandra).join("cql_probe.err")
}
