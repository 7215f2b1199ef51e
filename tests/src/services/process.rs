//! One service as a child process: started, probed, killed, restarted, terminated.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::process::{Child, Command};

use super::{PipelineEnv, ServiceBinaries, ServiceKind};

/// How long a service may take to answer `/readyz` 200 after it was spawned.
pub const READY_TIMEOUT: Duration = Duration::from_secs(90);
/// How long [`Service::terminate`] waits after SIGTERM.
pub const TERMINATE_TIMEOUT: Duration = Duration::from_secs(30);

/// A running (or stopped) service child process. Dropping it kills a live child.
pub struct Service {
    kind: ServiceKind,
    binary: PathBuf,
    env: Vec<(String, String)>,
    base_url: String,
    log: PathBuf,
    child: Option<Child>,
    starts: u32,
}

impl Service {
    /// Spawns `kind` with `env.service_env(kind)` plus `extra_env` (later values win), stdout
    /// and stderr appended to `<run dir>/<kind>.log`, and waits until `/readyz` answers 200.
    /// An HTTP address in `extra_env` ([`ServiceKind::http_addr_var`]) is the instance's for
    /// good: its [`base_url`](Self::base_url), kept by [`restart`](Self::restart), and its log
    /// is `<kind>-<port>.log`.
    ///
    /// # Errors
    ///
    /// The child could not be spawned, exited before it was ready, or was not ready within
    /// [`READY_TIMEOUT`]; the error carries the tail of its log.
    pub async fn start(
        kind: ServiceKind,
        bins: &ServiceBinaries,
        env: &PipelineEnv,
        extra_env: &[(&str, &str)],
    ) -> anyhow::Result<Service> {
        let mut own_env = env.service_env(kind);
        let mut base_url = env.base_url(kind);
        let mut log = env.run_dir.join(format!("{}.log", kind.name()));
        if let Some((var, addr)) = extra_env.iter().rev().find(|(k, _)| *k == kind.http_addr_var()) {
            own_env.retain(|(k, _)| k != var);
            own_env.push(((*var).to_owned(), (*addr).to_owned()));
            base_url = format!("http://{addr}");
            // An instance beside the run's own: a log of its own, named after its port.
            let port = addr.rsplit(':').next().unwrap_or(addr);
            log = env.run_dir.join(format!("{}-{port}.log", kind.name()));
        }
        let mut service = Service {
            kind,
            binary: bins.path(kind).to_path_buf(),
            env: own_env,
            base_url,
            log,
            child: None,
            starts: 0,
        };
        service.spawn(extra_env).await?;
        Ok(service)
    }

    /// Which service this is.
    pub fn kind(&self) -> ServiceKind {
        self.kind
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The log file (appended to by every start).
    pub fn log_path(&self) -> &std::path::Path {
        &self.log
    }

    /// The child's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// How many times the child has been spawned.
    pub fn starts(&self) -> u32 {
        self.starts
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// SIGKILL, then reaps the child. A no-op when it is not running.
    pub async fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }

    /// Starts the service again with the same environment plus `extra_env` (killing it first
    /// if alive) and waits until it is ready.
    ///
    /// # Errors
    ///
    /// As [`Service::start`].
    pub async fn restart(&mut self, extra_env: &[(&str, &str)]) -> anyhow::Result<()> {
        self.kill9().await;
        self.spawn(extra_env).await
    }

    /// SIGTERM, then waits up to [`TERMINATE_TIMEOUT`] for the exit (SIGKILL after that).
    ///
    /// # Errors
    ///
    /// The child is not running, or did not exit in time (it is then killed).
    pub async fn terminate(&mut self) -> anyhow::Result<ExitStatus> {
        let Some(mut child) = self.child.take() else { bail!("{} is not running", self.kind) };
        if let Some(pid) = child.id() {
            // SAFETY: kill(2) with a pid we spawned and still own (not yet reaped).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        }
        match tokio::time::timeout(TERMINATE_TIMEOUT, child.wait()).await {
            Ok(status) => status.with_context(|| format!("waiting for {}", self.kind)),
            Err(_) => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                bail!(
                    "{} did not exit within {TERMINATE_TIMEOUT:?} of SIGTERM (killed)\n{}",
                    self.kind,
                    self.log_tail(20)
                )
            }
        }
    }

    /// Waits up to `timeout` for the child to exit by itself (a failpoint crash); `None` when it
    /// is still running (or was not running at all).
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        match tokio::time::timeout(timeout, child.wait()).await {
            Ok(Ok(status)) => {
                self.child = None;
                Some(status)
            }
            _ => None,
        }
    }

    /// Whether the child is alive (reaps it if it exited).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => true,
            Some(_) => {
                self.child = None;
                false
            }
            None => false,
        }
    }

    async fn spawn(&mut self, extra_env: &[(&str, &str)]) -> anyhow::Result<()> {
        self.starts += 1;
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        writeln!(log, "---- qim-tests: start #{} of {} ----", self.starts, self.kind)?;
        let mut cmd = Command::new(&self.binary);
        cmd.arg(self.kind.subcommand());
        for (k, _) in std::env::vars_os() {
            if k.to_str().is_some_and(|k| k.starts_with("QIM_") || k == "FAILPOINTS") {
                cmd.env_remove(k);
            }
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        cmd.envs(extra_env.iter().copied());
        cmd.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log).kill_on_drop(true);
        let child = cmd.spawn().with_context(|| format!("spawning {}", self.binary.display()))?;
        self.child = Some(child);
        self.wait_ready().await
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build()?;
        let url = format!("{}/readyz", self.base_url);
        let began = Instant::now();
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                self.child = None;
                bail!(
                    "{} exited ({status}) before it was ready; log {}:\n{}",
                    self.kind,
                    self.log.display(),
                    self.log_tail(30)
                );
            }
            if let Ok(r) = http.get(&url).send().await {
                if r.status().is_success() {
                    return Ok(());
                }
            }
            if began.elapsed() > READY_TIMEOUT {
                self.kill9().await;
                bail!(
                    "{} was not ready within {READY_TIMEOUT:?}; log {}:\n{}",
                    self.kind,
                    self.log.display(),
                    self.log_tail(30)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }
}
