//! A Redis Cluster on loopback beside the single Redis: three masters and three replicas
//! (`QIM_STACK_REDIS_CLUSTER_PORT` and the five ports after it; each node's cluster bus is its
//! port + 10000), each a daemonized `redis-server` with AOF (`appendfsync everysec`) and
//! `cluster-node-timeout` 2 s, in `<state>/redis-cluster/<port>/`. `up` starts the nodes that are
//! not running and, on a fresh state dir, joins them with `redis-cli --cluster create
//! --cluster-replicas 1`; it is ready when every node reports `cluster_state:ok`.

use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rustix::process::Signal;

use crate::install::ensure_redis_binary;
use crate::layout::{Identity, Settings, HOST};
use crate::process::{read_pid, signal, wait_gone, ProcInfo};
use crate::resp::{Connection, Reply};
use crate::{log, ports};

/// Six nodes: three masters, each with one replica.
pub const NODES: u16 = 6;
/// How long a failed master goes unanswered before its replica takes over (ms): short, so
/// failover tests are quick; long enough for a loaded two-core machine.
const NODE_TIMEOUT_MS: &str = "2000";
/// Each request to a node.
const REQUEST_LIMIT: Duration = Duration::from_secs(5);
/// How long the nodes may take to answer, and the cluster to agree, after `up`.
const READY_LIMIT: Duration = Duration::from_secs(60);

/// The nodes' ports, in order (the first three become the masters on a fresh create).
pub fn node_ports(settings: &Settings) -> Vec<u16> {
    (0..NODES).map(|i| settings.ports.redis_cluster + i).collect()
}

/// `<state>/redis-cluster/<port>`: one node's pid file, log, `nodes.conf` and data.
fn node_dir(settings: &Settings, port: u16) -> PathBuf {
    settings.stack_dir.join("redis-cluster").join(port.to_string())
}

fn pid_file(settings: &Settings, port: u16) -> PathBuf {
    node_dir(settings, port).join("redis.pid")
}

/// The URL qim's services and tests take for this cluster.
pub fn url(settings: &Settings) -> String {
    let seeds: Vec<String> = node_ports(settings).iter().take(3).map(|p| format!("{HOST}:{p}")).collect();
    format!("redis+cluster://{}", seeds.join(","))
}

/// The `redis-server` arguments of the node on `port`.
pub fn args(settings: &Settings, port: u16) -> Vec<String> {
    let dir = node_dir(settings, port);
    let path = |p: PathBuf| p.display().to_string();
    [
        "--bind",
        HOST,
        "--port",
        &port.to_string(),
        "--protected-mode",
        "yes",
        "--daemonize",
        "yes",
        "--pidfile",
        &path(pid_file(settings, port)),
        "--logfile",
        &path(dir.join("redis.log")),
        "--dir",
        &path(dir.join("data")),
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        NODE_TIMEOUT_MS,
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--save",
        "",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// The pid of the node on `port` if its pid file names a live `redis-server` in its data dir.
pub fn running_pid(settings: &Settings, port: u16) -> Option<i32> {
    let pid = read_pid(&pid_file(settings, port))?;
    let identity = Identity::CommIn { comm: "redis-server", cwd: node_dir(settings, port).join("data") };
    ProcInfo::of(pid)?.is(&identity).then_some(pid)
}

fn call(port: u16, args: &[&str]) -> anyhow::Result<Reply> {
    Connection::open(port, REQUEST_LIMIT)?.call(args)
}

/// `CLUSTER INFO` of one node as `key:value` lines.
fn cluster_info(port: u16) -> anyhow::Result<String> {
    match call(port, &["CLUSTER", "INFO"])? {
        Reply::Bulk(Some(text)) => Ok(text),
        other => bail!("CLUSTER INFO answered {other:?}"),
    }
}

fn info_field<'a>(info: &'a str, key: &str) -> Option<&'a str> {
    info.lines().find_map(|l| l.trim().strip_prefix(key)?.strip_prefix(':'))
}

/// `cluster up`: starts the nodes not running, creates the cluster if its nodes do not know
/// each other yet, waits until every node reports `cluster_state:ok`.
pub fn up(settings: &Settings) -> anyhow::Result<ExitCode> {
    let t0 = Instant::now();
    ensure_redis_binary(settings)?;
    let ports = node_ports(settings);
    for &port in &ports {
        if running_pid(settings, port).is_some() {
            continue;
        }
        for p in [port, port + 10_000] {
            if ports::port_taken(p) {
                bail!(
                    "redis cluster: port {p} is in use ({}); set QIM_STACK_REDIS_CLUSTER_PORT",
                    ports::who_listens(p)
                );
            }
        }
        std::fs::create_dir_all(node_dir(settings, port).join("data"))?;
        let ok = Command::new("redis-server")
            .args(args(settings, port))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .context("running redis-server")?
            .success();
        if !ok {
            bail!(
                "redis cluster: the node on port {port} failed to start (log: {})",
                node_dir(settings, port).join("redis.log").display()
            );
        }
    }
    let deadline = Instant::now() + READY_LIMIT;
    for &port in &ports {
        while !call(port, &["PING"]).is_ok_and(|r| r == Reply::Simple("PONG".into())) {
            if Instant::now() >= deadline {
                bail!("redis cluster: the node on port {port} does not answer PING");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let known = info_field(&cluster_info(ports[0])?, "cluster_known_nodes").unwrap_or("1").to_owned();
    if known == "1" {
        create(&ports)?;
    }
    for &port in &ports {
        while info_field(&cluster_info(port)?, "cluster_state") != Some("ok") {
            if Instant::now() >= deadline {
                bail!(
                    "redis cluster: the node on port {port} does not report cluster_state:ok after {}s",
                    READY_LIMIT.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    log!("redis cluster up in {}s: {} (3 masters, 3 replicas, AOF on)", t0.elapsed().as_secs(), url(settings));
    Ok(ExitCode::SUCCESS)
}

/// `redis-cli --cluster create` of fresh nodes: the first three become masters.
fn create(ports: &[u16]) -> anyhow::Result<()> {
    let nodes: Vec<String> = ports.iter().map(|p| format!("{HOST}:{p}")).collect();
    let out = Command::new("redis-cli")
        .arg("--cluster")
        .arg("create")
        .args(&nodes)
        .args(["--cluster-replicas", "1", "--cluster-yes"])
        .stdin(Stdio::null())
        .output()
        .context("running redis-cli --cluster create")?;
    if !out.status.success() {
        bail!("redis-cli --cluster create failed: {}", String::from_utf8_lossy(&out.stdout).trim());
    }
    log!("redis cluster created: masters {}, replicas {}", nodes[..3].join(" "), nodes[3..].join(" "));
    Ok(())
}

/// Stops every node of the cluster that runs (SIGTERM, SIGKILL after the stop timeout).
pub fn stop(settings: &Settings) {
    for port in node_ports(settings) {
        let Some(pid) = running_pid(settings, port) else { continue };
        signal(pid, Signal::TERM);
        if !wait_gone(pid, Some(settings.stop_timeout), Duration::from_millis(100)) {
            signal(pid, Signal::KILL);
            wait_gone(pid, Some(Duration::from_secs(5)), Duration::from_millis(100));
        }
        let _ = std::fs::remove_file(pid_file(settings, port));
        log!("redis cluster: node {port} stopped");
    }
}

/// `cluster kill <port>`: SIGKILL of one node, as a crash; `cluster up` starts it again (as a
/// replica of whichever node took over its slots).
pub fn kill(settings: &Settings, port: u16) -> anyhow::Result<ExitCode> {
    if !node_ports(settings).contains(&port) {
        bail!("port {port} is not a node of this cluster ({:?})", node_ports(settings));
    }
    let Some(pid) = running_pid(settings, port) else {
        log!("redis cluster: node {port} not running");
        return Ok(ExitCode::SUCCESS);
    };
    signal(pid, Signal::KILL);
    wait_gone(pid, None, Duration::from_millis(50));
    let _ = std::fs::remove_file(pid_file(settings, port));
    log!("redis cluster: node {port} killed (pid {pid})");
    Ok(ExitCode::SUCCESS)
}

/// `cluster status`: one line per node (role, state); exit 0 only if every node runs and
/// reports `cluster_state:ok`.
pub fn status(settings: &Settings) -> anyhow::Result<ExitCode> {
    let mut all_ok = true;
    for port in node_ports(settings) {
        let line = match running_pid(settings, port) {
            None => {
                all_ok = false;
                "down".to_owned()
            }
            Some(pid) => {
                let state = cluster_info(port).ok().and_then(|i| info_field(&i, "cluster_state").map(str::to_owned));
                let role = match call(port, &["ROLE"]) {
                    Ok(Reply::Array(Some(items))) => items.first().and_then(Reply::text).unwrap_or("?").to_owned(),
                    _ => "?".to_owned(),
                };
                all_ok &= state.as_deref() == Some("ok");
                format!("pid {pid}  {role}  cluster_state:{}", state.as_deref().unwrap_or("?"))
            }
        };
        println!("redis-cluster {HOST}:{port}  {line}");
    }
    Ok(if all_ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// `cluster reset`: stops the nodes and deletes their state.
pub fn reset(settings: &Settings) -> anyhow::Result<ExitCode> {
    stop(settings);
    let dir = settings.stack_dir.join("redis-cluster");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("deleting {}", dir.display()))?;
    }
    log!("redis cluster: reset ({} deleted)", dir.display());
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_run_from_their_own_dirs_with_cluster_mode_and_aof() {
        let s = Settings::from_lookup(|k| match k {
            "QIM_STACK_DIR" => Some("/s".into()),
            "QIM_STACK_REDIS_CLUSTER_PORT" => Some("17301".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(node_ports(&s), vec![17301, 17302, 17303, 17304, 17305, 17306]);
        let a = args(&s, 17302).join(" ");
        assert!(a.contains("--port 17302 "), "{a}");
        assert!(a.contains("--dir /s/redis-cluster/17302/data"), "{a}");
        assert!(
            a.contains("--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000"),
            "{a}"
        );
        assert!(a.contains("--appendonly yes --appendfsync everysec"), "{a}");
        assert_eq!(url(&s), "redis+cluster://127.0.0.1:17301,127.0.0.1:17302,127.0.0.1:17303");
        assert_eq!(info_field("cluster_state:ok\r\ncluster_known_nodes:6\r\n", "cluster_known_nodes"), Some("6"));
    }
}
