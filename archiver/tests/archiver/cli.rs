//! The archiver binary's command line: `--help` and `replay --help` list every variable it
//! reads with its default, and `replay` needs exactly one starting point. No servers.

use std::process::{Command, Output};

use qim_archiver::config::ArchiverEnv;
use qim_runtime::env::{variables, Environment};

fn archiver(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_qim-archiver"));
    cmd.env_clear().env("PATH", std::env::var("PATH").unwrap_or_default());
    cmd.args(args).output().expect("running qim-archiver")
}

#[test]
fn help_and_replay_help_list_every_variable_with_its_default() {
    let vars = variables(&ArchiverEnv::command());
    let top = String::from_utf8_lossy(&archiver(&["--help"]).stdout).into_owned();
    let replay = String::from_utf8_lossy(&archiver(&["replay", "--help"]).stdout).into_owned();
    for var in &vars {
        assert!(top.contains(&format!("  {} [default:", var.name)), "{} missing from:\n{top}", var.name);
        assert!(replay.contains(&format!("[env: {}=", var.name)), "{} missing from:\n{replay}", var.name);
        if let Some(default) = &var.default {
            assert!(replay.contains(&format!("[default: {default}]")), "{default} missing from:\n{replay}");
        }
    }
    assert!(replay.contains("A whole number in 1..=10000."), "ranges are shown:\n{replay}");
}

#[test]
fn replay_needs_one_starting_point() {
    let out = archiver(&["replay"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}
