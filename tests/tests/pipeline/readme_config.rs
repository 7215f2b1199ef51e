//! Keeps what is generated from the services' variable definitions (their clap environment
//! commands) in step with them:
//!
//! - the README's configuration table: each row is a variable's name, default, the services
//!   that read it, and its help with its legal range, in definition order;
//! - `runtime/src/env/known.rs`, every variable some service reads (what lets a service accept
//!   a sibling's variable from a shared environment file).
//!
//! A change to a definition fails these tests until the generated text is updated: the failure
//! prints it, and `QIM_BLESS=1` writes it in place.

use std::collections::BTreeSet;

use qim_runtime::env::{variables, Environment, Variable};
use qim_tests::generated::{bless_or_compare, splice_lines};

const README: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
const KNOWN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../runtime/src/env/known.rs");

/// Each service and its variables.
fn services() -> Vec<(&'static str, Vec<Variable>)> {
    vec![
        ("writer", variables(&qim_writer::config::WriterEnv::command())),
        ("archiver", variables(&qim_archiver::config::ArchiverEnv::command())),
        ("dispatcher", variables(&qim_mailbox_dispatcher::config::DispatcherEnv::command())),
    ]
}

/// Every variable once, in definition order (the writer's first).
fn documented() -> Vec<Variable> {
    let mut seen = BTreeSet::new();
    services().into_iter().flat_map(|(_, vars)| vars).filter(|v| seen.insert(v.name.clone())).collect()
}

/// Who reads `name`: `all`, or the services among writer, archiver, dispatcher that do.
fn readers(name: &str) -> String {
    let services = services();
    let reading: Vec<&str> =
        services.iter().filter(|(_, vars)| vars.iter().any(|v| v.name == name)).map(|(s, _)| *s).collect();
    if reading.len() == services.len() {
        "all".to_owned()
    } else {
        reading.join(", ")
    }
}

/// The README row of `var`: name, default, readers, and its help with the legal range.
fn row(var: &Variable, readers: &str) -> String {
    let default = var.default.as_ref().map_or_else(|| "(unset)".to_owned(), |d| format!("`{d}`"));
    format!("| `{}` | {default} | {readers} | {} |", var.name, var.help)
}

/// Whether `line` is a row of the README's configuration table.
fn is_row(line: &str) -> bool {
    line.starts_with("| `QIM_")
}

#[test]
fn readme_table_is_the_one_the_definitions_generate() {
    let want: Vec<String> = documented().iter().map(|v| row(v, &readers(&v.name))).collect();
    let readme = std::fs::read_to_string(README).unwrap_or_else(|e| panic!("can not read {README}: {e}"));
    bless_or_compare(README, &readme, &splice_lines(&readme, is_row, &want), "the README configuration table");
}

#[test]
fn the_row_parser_finds_rows_and_a_row_names_its_range() {
    let text = "a\n| `QIM_X` | `1` | all | doc |\n| `QIM_Y` | `2` | all | doc |\nb\n";
    let spliced = splice_lines(text, is_row, &["| `QIM_Z` | z |".to_owned()]);
    assert_eq!(spliced, "a\n| `QIM_Z` | z |\nb\n");
    let vars = variables(&qim_writer::config::WriterEnv::command());
    let hot = vars.iter().find(|v| v.name == "QIM_HOT_WINDOW_DAYS").expect("the writer reads the hot window");
    assert!(row(hot, "all").ends_with(" once archived. A whole number in 1..=30. |"), "{}", row(hot, "all"));
}

#[test]
fn the_sibling_list_is_the_one_the_definitions_generate() {
    let names: BTreeSet<String> = documented().into_iter().map(|v| v.name).collect();
    let known = std::fs::read_to_string(KNOWN).unwrap_or_else(|e| panic!("can not read {KNOWN}: {e}"));
    let want: Vec<String> = names.iter().map(|n| format!("    \"{n}\",")).collect();
    let is_entry = |line: &str| line.starts_with("    \"QIM_");
    bless_or_compare(KNOWN, &known, &splice_lines(&known, is_entry, &want), "runtime/src/env/known.rs");
}

#[test]
fn every_variable_is_prefixed_unique_per_service_and_defined_once() {
    for (service, vars) in services() {
        let mut names: Vec<&str> = vars.iter().map(|v| v.name.as_str()).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len(), "{service} reads a variable twice");
        for v in &vars {
            assert!(v.name.starts_with("QIM_") && !v.help.is_empty(), "{service}: {v:?}");
        }
    }
    // A variable two services read is one definition (a shared group), so it reads the same.
    let all: Vec<Variable> = services().into_iter().flat_map(|(_, vars)| vars).collect();
    for v in &all {
        let first = all.iter().find(|w| w.name == v.name).expect("itself");
        assert_eq!(first, v, "{} is defined differently by two services", v.name);
    }
}

#[test]
fn every_duration_and_count_has_its_range_and_every_default_is_inside_it() {
    // The retention days are checked by their domain types (`RetentionPolicy`,
    // `MailboxRetention`), which own those bounds.
    let by_domain = ["QIM_DEFAULT_HISTORY_RETENTION_DAYS", "QIM_MAILBOX_RETENTION_DAYS"];
    let suffixes = ["_SECS", "_MILLIS", "_HOURS", "_DAYS", "_BYTES", "_RECORDS", "_CONCURRENCY", "_BLOCK"];
    for var in documented() {
        let numeric = suffixes.iter().any(|suffix| var.name.ends_with(suffix));
        if numeric && !by_domain.contains(&var.name.as_str()) {
            assert!(var.range.is_some(), "{} has no range", var.name);
        }
        if let (Some((lo, hi)), Some(default)) = (var.range, &var.default) {
            let n: u64 = default.parse().unwrap_or_else(|_| panic!("{} default {default:?}", var.name));
            assert!((lo..=hi).contains(&n), "{} default {n} outside {lo}..={hi}", var.name);
        }
    }
}
