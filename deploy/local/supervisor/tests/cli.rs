//! The real `qim-stack` binary on a throwaway state dir and ports nobody uses: the paths that
//! need no server (exit codes, usage errors, `status`/`logs`/`kill` of a stack that is not
//! running, `up` refusing a taken port before it starts anything, `reset` refusing a dir that
//! is not a stack's; the same for `rf3`). Booting the servers is left to CI, whose
//! `deploy/local/test` starts with `deploy/local/stack up` and whose fault tests call `stack kill`
//! and `stack up`; the three-node mode is booted by hand (`stack rf3 up`, see the README).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Output};

/// A state dir under the temp dir, removed on drop.
struct StateDir(PathBuf);

impl StateDir {
    fn new(name: &str) -> StateDir {
        let d = std::env::temp_dir().join(format!("qim-stack-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        StateDir(d)
    }
}

impl Drop for StateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A port that was free a moment ago (the listener is returned to keep it taken, if wanted).
fn port() -> (u16, TcpListener) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    (l.local_addr().unwrap().port(), l)
}

/// Runs the binary on `dir` with every port moved off the defaults (`redis` as given), so it
/// never touches the default stack.
fn stack(dir: &StateDir, redis_port: u16, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_qim-stack"));
    cmd.args(args)
        .env("QIM_STACK_DIR", &dir.0)
        .env("QIM_STACK_CACHE", dir.0.join("cache"))
        .env("QIM_STACK_REDIS_PORT", redis_port.to_string());
    let vars = [
        "QIM_STACK_KAFKA_PORT",
        "QIM_STACK_KAFKA_CONTROLLER_PORT",
        "QIM_STACK_CASSANDRA_PORT",
        "QIM_STACK_CASSANDRA_STORAGE_PORT",
    ];
    // Held while it runs, so the five ports are distinct (nothing here binds them).
    let mut held = Vec::new();
    for var in vars {
        let (p, l) = port();
        cmd.env(var, p.to_string());
        held.push(l);
    }
    cmd.output().unwrap()
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn status_of_a_stack_that_is_not_running_lists_three_down_and_exits_1() {
    let dir = StateDir::new("status");
    let out = stack(&dir, port().0, &["status"]);
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let lines: Vec<&str> = stdout.lines().map(str::trim_end).collect();
    assert_eq!(lines, ["redis      down", "kafka      down", "cassandra  down"]);
}

#[test]
fn kill_logs_and_down_of_nothing_succeed_and_say_so() {
    let dir = StateDir::new("nothing");
    let out = stack(&dir, port().0, &["kill", "kafka"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out).1.contains("] kafka: not running"), "{:?}", text(&out));
    let out = stack(&dir, port().0, &["logs", "redis"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out).1.contains("] redis: no log yet ("), "{:?}", text(&out));
    let out = stack(&dir, port().0, &["down"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out).1.contains("nothing to stop ("), "{:?}", text(&out));
}

#[test]
fn usage_errors_exit_2_and_bad_server_names_1() {
    let dir = StateDir::new("usage");
    assert_eq!(stack(&dir, port().0, &[]).status.code(), Some(2));
    assert_eq!(stack(&dir, port().0, &["start"]).status.code(), Some(2));
    assert_eq!(stack(&dir, port().0, &["kill"]).status.code(), Some(1));
    assert_eq!(stack(&dir, port().0, &["kill", "zookeeper"]).status.code(), Some(1));
    assert_eq!(stack(&dir, port().0, &["logs", "zookeeper"]).status.code(), Some(1));
    let help = stack(&dir, port().0, &["help"]);
    assert_eq!(help.status.code(), Some(0));
    assert!(text(&help).0.contains(&format!("state: {}", dir.0.display())), "{:?}", text(&help));
}

#[test]
fn up_refuses_a_taken_port_before_starting_anything() {
    let dir = StateDir::new("taken");
    let (taken, _listener) = port();
    let out = stack(&dir, taken, &["up"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("port {taken} (needed by redis) is already in use")), "{stderr}");
    assert!(stderr.contains(&format!("ERROR: free port {taken}")), "{stderr}");
    assert!(!dir.0.join("redis").exists() && !dir.0.join("kafka").exists() && !dir.0.join("cassandra").exists());
    // ... and what it made is a stack's state dir, which reset deletes
    let out = stack(&dir, port().0, &["reset"]);
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    assert!(!dir.0.exists());
}

#[test]
fn reset_refuses_a_dir_without_the_marker() {
    let dir = StateDir::new("foreign");
    std::fs::create_dir_all(dir.0.join("precious")).unwrap();
    let out = stack(&dir, port().0, &["reset"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).1.contains("has no .qim-stack marker; not deleting it"), "{:?}", text(&out));
    assert!(dir.0.join("precious").is_dir());
}

#[test]
fn a_bad_knob_is_named() {
    let dir = StateDir::new("knob");
    let out = Command::new(env!("CARGO_BIN_EXE_qim-stack"))
        .arg("status")
        .env("QIM_STACK_DIR", &dir.0)
        .env("QIM_STACK_TIMEOUT", "soon")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).1.contains("QIM_STACK_TIMEOUT=\"soon\" is not a number"), "{:?}", text(&out));
}

/// Runs `stack rf3 ARGS` with the mode's state dir inside `dir`, its ports moved off the
/// defaults (a real three-node mode may run) unless `env`, added last, gives them.
fn rf3(dir: &StateDir, env: &[(&str, String)], args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_qim-stack"));
    cmd.arg("rf3")
        .args(args)
        .env("QIM_STACK_DIR", &dir.0)
        .env("QIM_STACK_RF3_DIR", dir.0.join("rf3"))
        .env("QIM_STACK_CACHE", dir.0.join("cache"));
    // Eleven ports above an ephemeral one, which nobody listens on either.
    let base = port().0 + 10;
    for (knob, offset) in [
        ("QIM_STACK_RF3_KAFKA_PORT", 0),
        ("QIM_STACK_RF3_CASSANDRA_PORT", 6),
        ("QIM_STACK_RF3_CASSANDRA_STORAGE_PORT", 7),
        ("QIM_STACK_RF3_JMX_PORT", 8),
    ] {
        cmd.env(knob, (base + offset).to_string());
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[test]
fn rf3_status_of_nothing_lists_six_nodes_down_and_exits_1() {
    let dir = StateDir::new("rf3-status");
    let out = rf3(&dir, &[], &["status"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let lines: Vec<&str> = stdout.lines().map(str::trim_end).collect();
    assert_eq!(
        lines,
        [
            "kafka-1      down",
            "kafka-2      down",
            "kafka-3      down",
            "cassandra-1  down",
            "cassandra-2  down",
            "cassandra-3  down"
        ]
    );
}

#[test]
fn rf3_kill_and_down_of_nothing_succeed_and_bad_node_names_are_usage_errors() {
    let dir = StateDir::new("rf3-nothing");
    let out = rf3(&dir, &[], &["kill", "cassandra-2"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out).1.contains("] rf3 cassandra-2: not running"), "{:?}", text(&out));
    let out = rf3(&dir, &[], &["down"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out).1.contains("rf3: nothing to stop ("), "{:?}", text(&out));
    for bad in ["kafka-4", "cassandra", "redis-1"] {
        let out = rf3(&dir, &[], &["kill", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {:?}", text(&out));
    }
}

#[test]
fn rf3_up_refuses_a_taken_port_before_starting_anything() {
    let dir = StateDir::new("rf3-taken");
    let (taken, _listener) = port();
    let out = rf3(&dir, &[("QIM_STACK_RF3_CASSANDRA_STORAGE_PORT", taken.to_string())], &["up"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("127.0.0.1:{taken} (needed by rf3 cassandra-1) is already in use")), "{stderr}");
    assert!(stderr.contains(&format!("ERROR: free 127.0.0.1:{taken}")), "{stderr}");
    let rf3_dir = dir.0.join("rf3");
    assert!(!rf3_dir.join("kafka-1").exists() && !rf3_dir.join("cassandra-1").exists());
    assert_eq!(std::fs::read_to_string(rf3_dir.join(".gitignore")).unwrap(), "*\n");
    // ... and what it made is the mode's state dir, which reset deletes
    let out = rf3(&dir, &[], &["reset"]);
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    assert!(!rf3_dir.exists());
}

#[test]
fn rf3_reset_refuses_a_dir_without_the_marker_and_a_clash_with_the_single_stack_is_named() {
    let dir = StateDir::new("rf3-foreign");
    std::fs::create_dir_all(dir.0.join("rf3/precious")).unwrap();
    let out = rf3(&dir, &[], &["reset"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).1.contains("has no .qim-stack-rf3 marker; not deleting it"), "{:?}", text(&out));
    assert!(dir.0.join("rf3/precious").is_dir());
    let out = rf3(&dir, &[("QIM_STACK_RF3_CASSANDRA_PORT", "9042".into())], &["status"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).1.contains("port 9042 is given twice"), "{:?}", text(&out));
}
