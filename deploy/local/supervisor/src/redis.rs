//! Redis: started daemonized by `redis-server` itself (which writes its pid file), AOF on
//! (`appendfsync everysec`), no RDB snapshots; ready when PING answers PONG.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::layout::{Service, Settings, HOST};
use crate::output::failed;
use crate::process::running_pid;
use crate::resp::{Connection, Reply};
use crate::{log, ports};

/// How long a freshly started Redis may take to answer and write its pid file.
const READY_LIMIT: Duration = Duration::from_secs(30);
/// Each readiness request.
const REQUEST_LIMIT: Duration = Duration::from_secs(5);

/// The `redis-server` arguments of this stack.
pub fn args(settings: &Settings) -> Vec<String> {
    let dir = settings.dir(Service::Redis);
    let path = |p: PathBuf| p.display().to_string();
    [
        "--bind",
        HOST,
        "--port",
        &settings.ports.redis.to_string(),
        "--protected-mode",
        "yes",
        "--daemonize",
        "yes",
        "--pidfile",
        &path(settings.pid_file(Service::Redis)),
        "--logfile",
        &path(settings.main_log(Service::Redis)),
        "--dir",
        &path(dir.join("data")),
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

/// Starts Redis unless it runs already.
///
/// # Errors
///
/// Its port is taken, or `redis-server` failed to daemonize.
pub fn start(settings: &Settings) -> anyhow::Result<()> {
    if let Some(pid) = running_pid(settings, Service::Redis) {
        log!("redis already running (pid {pid})");
        return Ok(());
    }
    ports::assert_free(settings, Service::Redis)?;
    std::fs::create_dir_all(settings.dir(Service::Redis).join("data"))?;
    let _ = std::fs::remove_file(settings.pid_file(Service::Redis));
    let ok = Command::new("redis-server")
        .args(args(settings))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .context("running redis-server")?
        .success();
    if !ok {
        return Err(failed(settings, Service::Redis, "redis-server failed to start".into()));
    }
    log!("redis starting on {HOST}:{}", settings.ports.redis);
    Ok(())
}

/// Whether Redis answers PING with PONG within 5 s.
pub fn ready(settings: &Settings) -> bool {
    Connection::open(settings.ports.redis, REQUEST_LIMIT)
        .and_then(|mut c| c.call(&["PING"]))
        .is_ok_and(|r| r == Reply::Simple("PONG".into()))
}

/// Waits (30 s at most) until Redis answers and its pid file names it.
pub fn wait(settings: &Settings) -> anyhow::Result<()> {
    let deadline = Instant::now() + READY_LIMIT;
    while !ready(settings) {
        if Instant::now() >= deadline {
            return Err(failed(settings, Service::Redis, "redis not ready after 30s".into()));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // the pid file is written by redis itself once it has daemonized
    while running_pid(settings, Service::Redis).is_none() {
        if Instant::now() >= deadline {
            let msg =
                format!("redis answers but its pid file {} is missing", settings.pid_file(Service::Redis).display());
            return Err(failed(settings, Service::Redis, msg));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    log!(
        "redis ready: {HOST}:{} (PING -> PONG, AOF on, data in {})",
        settings.ports.redis,
        settings.dir(Service::Redis).join("data").display()
    );
    Ok(())
}

/// `check`'s Redis part: PING, a SET with a 10 s expiry read back by GET, and the `appendonly`
/// setting, which it returns.
pub fn self_test(settings: &Settings) -> anyhow::Result<String> {
    let mut c = Connection::open(settings.ports.redis, REQUEST_LIMIT)?;
    if c.call(&["PING"])? != Reply::Simple("PONG".into()) {
        bail!("PING did not answer PONG");
    }
    if c.call(&["SET", "qim:stack:selftest", "ok", "EX", "10"])? != Reply::Simple("OK".into()) {
        bail!("SET failed");
    }
    if c.call(&["GET", "qim:stack:selftest"])?.text() != Some("ok") {
        bail!("GET did not read back the SET");
    }
    match c.call(&["CONFIG", "GET", "appendonly"])? {
        Reply::Array(Some(items)) => Ok(items.last().and_then(Reply::text).unwrap_or_default().to_owned()),
        _ => Ok(String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_runs_from_the_state_dir_on_its_port() {
        let s = Settings::from_lookup(|k| match k {
            "QIM_STACK_DIR" => Some("/s".into()),
            "QIM_STACK_REDIS_PORT" => Some("16379".into()),
            _ => None,
        })
        .unwrap();
        let a = args(&s).join(" ");
        assert!(a.starts_with("--bind 127.0.0.1 --port 16379 --protected-mode yes --daemonize yes"), "{a}");
        assert!(a.contains("--pidfile /s/redis/redis.pid --logfile /s/redis/redis.log --dir /s/redis/data"), "{a}");
        assert!(a.ends_with("--appendonly yes --appendfsync everysec --save "), "{a}");
    }
}
