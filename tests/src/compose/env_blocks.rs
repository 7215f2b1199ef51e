//! The `environment` blocks of our services in `docker-compose.yml`, generated from the
//! services' variable definitions (their clap environment commands) and the deployment's
//! values ([`SETTINGS`]).
//!
//! Where each variable goes is the definitions' answer, not the file's: a variable every
//! long-running service reads is set once in the shared `x-qim-env` anchor, any other in the
//! block of each service that reads it, in that service's definition order; a one-shot
//! (`migrate`) gets the shared block and [`ONE_SHOT_SETTINGS`]. A value in
//! [`SETTINGS`] for a variable no service reads is an error, so a renamed variable can not
//! linger in the file. The `compose_config` test compares the file with [`generate`];
//! `QIM_BLESS=1` writes it.

use crate::compose::deployment::{Ours, OURS};

/// One variable the compose deployment sets, with the comment shown above it.
pub struct Setting {
    /// The variable (`QIM_*`).
    pub name: &'static str,
    /// Its value as the container sees it; `${VAR:-default}` interpolates a compose-level knob.
    pub value: &'static str,
    /// Comment lines written above the variable (without `# `), or none.
    pub note: &'static [&'static str],
}

const fn set(name: &'static str, value: &'static str) -> Setting {
    Setting { name, value, note: &[] }
}

/// The values of the deployment; every other variable keeps its default.
pub const SETTINGS: &[Setting] = &[
    set("QIM_LOG", "info"),
    set("QIM_STORE_BACKEND", "redis"),
    set("QIM_REDIS_URL", "redis://redis:6379/0"),
    set("QIM_SCYLLA_HOSTS", "${SCYLLA_HOSTS:-scylla-1:9042}"),
    set("QIM_SCYLLA_KEYSPACE", "qim"),
    set("QIM_SCYLLA_DC", "datacenter1"),
    Setting {
        name: "QIM_SCYLLA_RF",
        value: "${SCYLLA_RF:-1}",
        note: &[
            "dev: RF 1 on a single node, declared by QIM_SCYLLA_DEV_SINGLE_NODE (production refuses",
            "RF < 3 otherwise). rf3: SCYLLA_RF=3 and SCYLLA_DEV_SINGLE_NODE=false.",
        ],
    },
    set("QIM_SCYLLA_DEV_SINGLE_NODE", "${SCYLLA_DEV_SINGLE_NODE:-true}"),
    set("QIM_DEFAULT_HISTORY_RETENTION_DAYS", "30"),
    set("QIM_HOT_WINDOW_DAYS", "7"),
    set("QIM_KAFKA_BROKERS", "${KAFKA_BROKERS:-redpanda-1:9092}"),
    set("QIM_MESSAGES_TOPIC", "qim.messages.v1"),
    set("QIM_WRITER_HTTP_ADDR", "0.0.0.0:8080"),
    Setting {
        name: "QIM_AUTH_HS256_SECRET",
        value: "${QIM_AUTH_HS256_SECRET:-compose-dev-secret-not-for-production-use}",
        note: &[
            "The key /v1 tokens are verified with (README: Identity). The default is public: set",
            "QIM_AUTH_HS256_SECRET (32+ bytes, your token issuer's) for anything but a private machine.",
        ],
    },
    set("QIM_MAX_BODY_BYTES", "65536"),
    set("QIM_MAX_IN_FLIGHT_COMMITS", "1024"),
    Setting {
        name: "QIM_ARCHIVER_GROUP",
        value: "qim-archiver",
        note: &["The archiver's consumer group (the writer reads where the archive ends in the topic)."],
    },
    set("QIM_ARCHIVER_HTTP_ADDR", "0.0.0.0:8081"),
    set("QIM_DLQ_TOPIC", "qim.messages.dlq.v1"),
    set("QIM_DISPATCHER_HTTP_ADDR", "0.0.0.0:8082"),
    Setting {
        name: "QIM_MAILBOX_SHARDS",
        value: "8",
        note: &["= partitions of qim.mailbox.dispatch.v1 (created by redpanda-init)."],
    },
    set("QIM_DISPATCH_TOPIC", "qim.mailbox.dispatch.v1"),
    set("QIM_MAILBOX_RETENTION_DAYS", "30"),
    set("QIM_DISPATCHER_GROUP", "qim-mailbox-dispatcher"),
    set("QIM_DISPATCHER_DLQ_TOPIC", "qim.mailbox.dlq.v1"),
];

/// Values the one-shot services (`migrate`) get after the shared merge, instead of their
/// binary's long-running settings.
pub const ONE_SHOT_SETTINGS: &[Setting] = &[Setting {
    name: "QIM_AUTH_DISABLED",
    value: "true",
    note: &[
        "migrate serves no API, but qim-writer checks its whole environment at any start, API",
        "keys included (it would exit 2 without one): there are none to check.",
    ],
}];

/// The line that opens the shared block.
const SHARED_ANCHOR: &str = "x-qim-env: &qim-env";
/// The line that opens the rest of a service's block, after the shared merge.
const SHARED_MERGE: &str = "      <<: *qim-env";
/// The indentation of a variable in the shared block, and in a service's block.
const SHARED_INDENT: &str = "  ";
const SERVICE_INDENT: &str = "      ";

fn long_running() -> impl Iterator<Item = &'static Ours> {
    OURS.iter().filter(|o| o.long_running)
}

/// `setting` as YAML lines at `indent`, its value quoted where YAML would read a number or a
/// boolean.
fn lines_of(setting: &Setting, indent: &str) -> Vec<String> {
    let plain = !setting.value.is_empty()
        && !setting.value.bytes().all(|b| b.is_ascii_digit())
        && !matches!(setting.value, "true" | "false" | "yes" | "no" | "null" | "~");
    let value = if plain { setting.value.to_owned() } else { format!("\"{}\"", setting.value) };
    let mut out: Vec<String> = setting.note.iter().map(|n| format!("{indent}# {n}")).collect();
    out.push(format!("{indent}{}: {value}", setting.name));
    out
}

/// The settings `ours` reads, in its definition order, that pass `keep`.
fn block(ours: &Ours, keep: impl Fn(&str) -> bool, indent: &str) -> Vec<String> {
    ours.variables()
        .iter()
        .filter(|v| keep(&v.name))
        .filter_map(|v| SETTINGS.iter().find(|s| s.name == v.name))
        .flat_map(|s| lines_of(s, indent))
        .collect()
}

fn read_by_all(name: &str) -> bool {
    long_running().all(|o| o.reads(name))
}

/// `text` (the compose file) with the shared block, each long-running service's own block and
/// each one-shot's ([`ONE_SHOT_SETTINGS`]) replaced by the generated ones.
///
/// # Errors
///
/// A setting no service reads, or a block that is not where this expects it (the anchor line,
/// a service's `<<: *qim-env` merge).
pub fn generate(text: &str) -> Result<String, String> {
    if let Some(orphan) = SETTINGS.iter().find(|s| !OURS.iter().any(|o| o.reads(s.name))) {
        return Err(format!("{} is set for the compose deployment but no service reads it", orphan.name));
    }
    if let Some(orphan) = ONE_SHOT_SETTINGS.iter().find(|s| !OURS.iter().any(|o| !o.long_running && o.reads(s.name))) {
        return Err(format!("{} is set for the one-shot services but none reads it", orphan.name));
    }
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let writer = long_running().next().ok_or("no long-running service")?;
    let shared = block(writer, read_by_all, SHARED_INDENT);
    replace_after(&mut lines, |l| l == SHARED_ANCHOR, 0, SHARED_INDENT.len(), shared)?;
    for ours in long_running() {
        let own = block(ours, |n| !read_by_all(n), SERVICE_INDENT);
        let header = format!("  {}:", ours.service);
        let start = lines.iter().position(|l| *l == header).ok_or(format!("no service {}", ours.service))?;
        replace_after(&mut lines, |l| l == SHARED_MERGE, start, SERVICE_INDENT.len(), own)
            .map_err(|e| format!("service {}: {e}", ours.service))?;
    }
    for ours in OURS.iter().filter(|o| !o.long_running) {
        let own: Vec<String> =
            ONE_SHOT_SETTINGS.iter().filter(|s| ours.reads(s.name)).flat_map(|s| lines_of(s, SERVICE_INDENT)).collect();
        let header = format!("  {}:", ours.service);
        let start = lines.iter().position(|l| *l == header).ok_or(format!("no service {}", ours.service))?;
        replace_after(&mut lines, |l| l == SHARED_MERGE, start, SERVICE_INDENT.len(), own)
            .map_err(|e| format!("service {}: {e}", ours.service))?;
    }
    let mut out = lines.join("\n");
    if text.ends_with('\n') {
        out.push('\n');
    }
    Ok(out)
}

/// Replaces the lines after the first line at or after `from` for which `opens` holds, up to
/// (not including) the first blank line or line indented less than `depth`, by `block`.
fn replace_after(
    lines: &mut Vec<String>,
    opens: impl Fn(&str) -> bool,
    from: usize,
    depth: usize,
    block: Vec<String>,
) -> Result<(), String> {
    let open = (from..lines.len()).find(|&i| opens(&lines[i])).ok_or("the block's opening line is missing")?;
    let indent = |l: &str| l.len() - l.trim_start().len();
    let end = (open + 1..lines.len())
        .find(|&i| lines[i].trim().is_empty() || indent(&lines[i]) < depth)
        .unwrap_or(lines.len());
    lines.splice(open + 1..end, block);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_booleans_are_quoted_and_notes_come_first() {
        let s = Setting { name: "QIM_X", value: "30", note: &["why"] };
        assert_eq!(lines_of(&s, "  "), ["  # why", "  QIM_X: \"30\""]);
        assert_eq!(lines_of(&set("QIM_Y", "true"), ""), ["QIM_Y: \"true\""]);
        assert_eq!(lines_of(&set("QIM_Z", "${A:-1}"), ""), ["QIM_Z: ${A:-1}"]);
    }

    #[test]
    fn a_block_ends_at_a_blank_or_shallower_line() {
        let mut lines: Vec<String> =
            ["x-qim-env: &qim-env", "  A: 1", "  # c", "  B: 2", "", "next:"].map(str::to_owned).to_vec();
        replace_after(&mut lines, |l| l == SHARED_ANCHOR, 0, 2, vec!["  C: 3".to_owned()]).unwrap();
        assert_eq!(lines, ["x-qim-env: &qim-env", "  C: 3", "", "next:"]);
        let mut svc: Vec<String> =
            ["    environment:", SHARED_MERGE, "      A: 1", "    ports:"].map(str::to_owned).to_vec();
        replace_after(&mut svc, |l| l == SHARED_MERGE, 0, 6, vec![]).unwrap();
        assert_eq!(svc, ["    environment:", SHARED_MERGE, "    ports:"]);
    }
}
