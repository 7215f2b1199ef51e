//! The files a run leaves for `qim-check`: `env.json` (the [`PipelineEnv`]), `plan.json` (the
//! workload's [`Plan`]), `acks.json` (`Vec<Ack>`) and `workload.json` ([`WorkloadFacts`]), all in
//! the run directory.

use std::path::Path;

use anyhow::Context;
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use super::CheckInput;
use crate::services::PipelineEnv;
use crate::workload::{Ack, Plan};

/// What the workload observed that the checker needs besides the acks.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WorkloadFacts {
    /// Client retries answered differently.
    pub retries_mismatched: u64,
    /// Client retries answered identically.
    pub retries_matched: u64,
    /// See [`CheckInput::hot_exempt_before`].
    pub hot_exempt_before: Option<i64>,
}

fn write<T: Serialize>(dir: &Path, name: &str, value: &T) -> anyhow::Result<()> {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec(value)?).with_context(|| format!("writing {}", path.display()))
}

fn read<T: DeserializeOwned>(dir: &Path, name: &str) -> anyhow::Result<T> {
    let path = dir.join(name);
    let text = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&text).with_context(|| format!("{} is not a valid {name}", path.display()))
}

/// Writes the four files into `dir`.
///
/// # Errors
///
/// The directory is not writable.
pub fn save(dir: &Path, env: &PipelineEnv, plan: &Plan, acks: &[Ack], facts: &WorkloadFacts) -> anyhow::Result<()> {
    write(dir, "env.json", env)?;
    write(dir, "plan.json", plan)?;
    write(dir, "acks.json", &acks)?;
    write(dir, "workload.json", facts)
}

/// Reads the four files of `dir` into a [`CheckInput`] (`workload.json` is optional).
///
/// # Errors
///
/// A file is missing or malformed (the error names it).
pub fn load(dir: &Path) -> anyhow::Result<CheckInput> {
    let env: PipelineEnv = read(dir, "env.json")?;
    let plan: Plan = read(dir, "plan.json")?;
    let acks: Vec<Ack> = read(dir, "acks.json")?;
    let facts: WorkloadFacts =
        if dir.join("workload.json").exists() { read(dir, "workload.json")? } else { WorkloadFacts::default() };
    let mut input = CheckInput::new(env, &plan, acks, facts.retries_mismatched);
    input.hot_exempt_before = facts.hot_exempt_before;
    Ok(input)
}
