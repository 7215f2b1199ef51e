//! The commands. Each returns the exit code on success (`status` and `check` report failures
//! through it); an `Err` is printed as `[stack ..] ERROR: ..` and exits 1.

use std::fs::File;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rustix::process::Signal;

use crate::install::{ensure_java, ensure_redis_binary, fetch_cassandra, fetch_kafka, find_java17, on_path};
use crate::layout::{Service, Settings, HOST};
use crate::output::show_failure;
use crate::probe::{self, Probe};
use crate::process::{running_pid, signal, wait_gone};
use crate::{cassandra, kafka, log, logfile, ports, redis, redis_cluster, topics};

/// Takes the state dir's lock (blocking while another `up`/`down`/`reset` holds it). The lock
/// lasts as long as the returned file; servers never inherit it (close-on-exec).
fn lock(settings: &Settings) -> anyhow::Result<File> {
    lock_at(&settings.lock_file())
}

/// [`lock`] of the lock file `path` (another state dir's, say the three-node mode's).
pub fn lock_at(path: &Path) -> anyhow::Result<File> {
    let f = File::create(path).with_context(|| format!("opening {}", path.display()))?;
    f.lock().context("locking the state dir")?;
    Ok(f)
}

/// `up`: installs and downloads what is missing, starts what is not running (Cassandra first:
/// it is the slowest), waits until each server answers a real request, creates the topics.
pub fn up(settings: &Settings) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&settings.stack_dir)
        .with_context(|| format!("creating {}", settings.stack_dir.display()))?;
    std::fs::create_dir_all(&settings.cache_dir)?;
    File::create(settings.marker_file())?;
    let _lock = lock(settings)?;
    let t0 = Instant::now();
    // Before starting anything: the ports of the servers we will start must be free.
    for svc in Service::ALL {
        if running_pid(settings, svc).is_none() {
            ports::assert_free(settings, svc)?;
        }
    }
    let java_home = ensure_java(settings)?;
    let java = java_home.join("bin/java");
    // Cold path: install redis (apt) while Maven downloads the jars.
    let redis_install = (!on_path("redis-server")).then(|| {
        let s = settings.clone();
        std::thread::spawn(move || ensure_redis_binary(&s))
    });
    let mut started = Vec::new();
    fetch_cassandra(settings, &java_home)?;
    if cassandra::start(settings, &java)? {
        started.push(Service::Cassandra);
    }
    fetch_kafka(settings, &java_home)?;
    let kafka_started_now = kafka::start(settings, &java)?;
    if kafka_started_now {
        started.push(Service::Kafka);
    }
    if let Some(install) = redis_install {
        install.join().map_err(|_| anyhow::anyhow!("redis install panicked"))?.context("redis install failed")?;
    }
    ensure_redis_binary(settings)?;
    redis::start(settings)?;
    // The CQL probe is built while the servers boot (on a fresh machine cargo compiles it once,
    // about a minute), and waited for before the Cassandra wait, which so times Cassandra alone.
    let probe_build = probe::Build::start(settings)?;

    // While waiting on one server, notice at once if another one started now died.
    let others_alive = || -> anyhow::Result<()> {
        for &svc in &started {
            if running_pid(settings, svc).is_none() {
                show_failure(settings, svc);
                bail!("{svc} process exited during startup");
            }
        }
        Ok(())
    };
    redis::wait(settings)?;
    let listed = kafka::wait(settings, &java, kafka_started_now, &others_alive)?;
    topics::ensure(settings, &java, &listed)?;
    let probe = probe_build.finish(settings)?;
    cassandra::wait(settings, &probe, &others_alive)?;
    let p = &settings.ports;
    log!(
        "stack up in {}s: redis {HOST}:{}, kafka {HOST}:{}, cassandra {HOST}:{} (state: {})",
        t0.elapsed().as_secs(),
        p.redis,
        p.kafka,
        p.cassandra_cql,
        settings.stack_dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Stops one server: SIGTERM, SIGKILL after `QIM_STACK_STOP_TIMEOUT`; removes its pid file.
fn stop_one(settings: &Settings, svc: Service) {
    let Some(pid) = running_pid(settings, svc) else {
        let _ = std::fs::remove_file(settings.pid_file(svc));
        log!("{svc}: not running");
        return;
    };
    log!("{svc}: stopping pid {pid} (SIGTERM)");
    signal(pid, Signal::TERM);
    if !wait_gone(pid, Some(settings.stop_timeout), Duration::from_millis(200)) {
        log!("{svc}: still alive after {}s, SIGKILL", settings.stop_timeout.as_secs());
        signal(pid, Signal::KILL);
        std::thread::sleep(Duration::from_millis(500));
    }
    let _ = std::fs::remove_file(settings.pid_file(svc));
    log!("{svc}: stopped");
}

/// `down`: stops the three servers of this state dir, all at once.
pub fn down(settings: &Settings) -> anyhow::Result<ExitCode> {
    if !settings.stack_dir.is_dir() {
        log!("nothing to stop ({} does not exist)", settings.stack_dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    let _lock = lock(settings)?;
    stop_all(settings);
    Ok(ExitCode::SUCCESS)
}

/// Stops the three servers in parallel (the caller holds the lock).
fn stop_all(settings: &Settings) {
    let t0 = Instant::now();
    std::thread::scope(|scope| {
        for svc in Service::ALL {
            scope.spawn(move || stop_one(settings, svc));
        }
        scope.spawn(move || redis_cluster::stop(settings));
    });
    log!("down in {}s", t0.elapsed().as_secs());
}

/// `kill <svc>`: SIGKILL, as a crash (no shutdown hooks), waiting until the process is gone;
/// `up` restarts it.
pub fn kill(settings: &Settings, svc: Service) -> anyhow::Result<ExitCode> {
    let Some(pid) = running_pid(settings, svc) else {
        log!("{svc}: not running");
        return Ok(ExitCode::SUCCESS);
    };
    log!("{svc}: killing pid {pid} (SIGKILL)");
    signal(pid, Signal::KILL);
    wait_gone(pid, None, Duration::from_millis(100));
    let _ = std::fs::remove_file(settings.pid_file(svc));
    log!("{svc}: killed");
    Ok(ExitCode::SUCCESS)
}

/// `status`: one line per server; exit 0 only if all three run and answer.
pub fn status(settings: &Settings) -> anyhow::Result<ExitCode> {
    let java = find_java17(settings).map(|h| h.join("bin/java"));
    let mut all_up = true;
    for svc in Service::ALL {
        let p = &settings.ports;
        let (state, detail) = match running_pid(settings, svc) {
            None => ("down".to_owned(), String::new()),
            Some(pid) => {
                let (up, detail) = match svc {
                    Service::Redis => (redis::ready(settings), format!("{HOST}:{}", p.redis)),
                    Service::Kafka => (
                        java.as_ref().is_some_and(|j| kafka::list_topics(settings, j).is_some()),
                        format!("{HOST}:{} (controller {})", p.kafka, p.kafka_controller),
                    ),
                    Service::Cassandra => match Probe::build_now(settings).and_then(|pr| pr.cql(settings, false)) {
                        Ok(release) => (true, format!("{HOST}:{} (Cassandra {release})", p.cassandra_cql)),
                        Err(_) => (false, format!("{HOST}:{}", p.cassandra_cql)),
                    },
                };
                let state = if up { "up" } else { "running, not answering" };
                (state.to_owned(), format!("pid {pid}  {detail}"))
            }
        };
        all_up &= state == "up";
        println!("{:<10} {:<24} {}", svc.name(), state, detail);
    }
    Ok(if all_up { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// `logs [svc..] [-f]`: the last `QIM_STACK_LOG_LINES` lines of the servers' logs (all three
/// without a name), through `tail` (`-F` follows them across rollovers).
pub fn logs(settings: &Settings, names: &[Service], follow: bool) -> anyhow::Result<ExitCode> {
    let names = if names.is_empty() { &Service::ALL[..] } else { names };
    let mut files = Vec::new();
    for &svc in names {
        let f = settings.main_log(svc);
        if f.is_file() {
            files.push(f);
        } else {
            log!("{svc}: no log yet ({})", f.display());
        }
    }
    if files.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    let mut tail = Command::new("tail");
    tail.args(["-n", &settings.log_lines]);
    if follow {
        tail.arg("-F");
        tail.args(&files);
        return Err(anyhow::Error::new(tail.exec()).context("running tail"));
    }
    let status = tail.args(&files).status().context("running tail")?;
    Ok(if status.success() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// `check`: Redis PING and SET/GET, Kafka metadata with every qim topic, Cassandra CQL with an
/// LWT round trip; one line each on stdout, exit 1 if any failed.
pub fn check(settings: &Settings) -> anyhow::Result<ExitCode> {
    let java = ensure_java(settings)?.join("bin/java");
    let mut ok = true;
    match redis::self_test(settings) {
        Ok(appendonly) => println!("redis      ok  PING, SET/GET; appendonly={appendonly}"),
        Err(_) => {
            println!("redis      FAIL");
            ok = false;
        }
    }
    match kafka::list_topics(settings, &java) {
        Some(listed) => {
            let absent = topics::missing(&listed);
            if absent.is_empty() {
                let names: String = listed.iter().map(|t| format!("{t} ")).collect();
                println!("kafka      ok  metadata; topics: {names}");
            } else {
                let names: String = absent.iter().map(|(n, _)| format!(" {n}")).collect();
                println!("kafka      FAIL missing topics:{names}");
                ok = false;
            }
        }
        None => {
            println!("kafka      FAIL");
            ok = false;
        }
    }
    match Probe::build_now(settings).and_then(|p| p.cql(settings, true)) {
        Ok(release) => println!("cassandra  ok  CQL query, INSERT ... IF NOT EXISTS; release {release}"),
        Err(_) => {
            let last = logfile::last_lines(&probe::err_file(settings), 1);
            println!("cassandra  FAIL ({})", last.trim_end());
            ok = false;
        }
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// `reset`: `down`, then deletes the state dir (under the same lock), which must carry our
/// marker file.
pub fn reset(settings: &Settings) -> anyhow::Result<ExitCode> {
    let dir = &settings.stack_dir;
    if !dir.is_dir() {
        log!("nothing to stop ({} does not exist)", dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    let _lock = lock(settings)?;
    stop_all(settings);
    if !settings.marker_file().is_file() {
        bail!("{} has no .qim-stack marker; not deleting it", dir.display());
    }
    std::fs::remove_dir_all(dir).with_context(|| format!("deleting {}", dir.display()))?;
    log!("deleted {}", dir.display());
    Ok(ExitCode::SUCCESS)
}
