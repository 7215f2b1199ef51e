//! Keeps the README's configuration table in step with the variables the services read.
//!
//! Every variable of every service's `ENVIRONMENT` table must appear in the README's table with
//! its default, and the table must list nothing the code does not read.

use std::collections::BTreeSet;

use qim_store::env::EnvVar;

fn readme() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("can not read {path}: {e}"))
}

fn documented() -> Vec<EnvVar> {
    let tables = [
        qim_writer::config::ENVIRONMENT,
        qim_archiver::config::ENVIRONMENT,
        qim_mailbox_dispatcher::config::ENVIRONMENT,
    ];
    let mut seen = BTreeSet::new();
    tables.iter().flat_map(|t| t.iter()).flat_map(|t| t.iter()).copied().filter(|v| seen.insert(v.name)).collect()
}

/// The README's configuration rows: `| `NAME` | default | ... |`.
fn readme_rows(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix("`QIM_")?.strip_suffix('`')?;
            Some((format!("QIM_{name}"), cells.get(2)?.to_string()))
        })
        .collect()
}

#[test]
fn readme_lists_every_variable_with_its_default() {
    let rows = readme_rows(&readme());
    let mut problems = Vec::new();
    for var in documented() {
        let want = var.default.map_or_else(|| "(unset)".to_owned(), |d| format!("`{d}`"));
        match rows.iter().find(|(name, _)| name == var.name) {
            None => problems.push(format!("{} is read by a service but missing from the README table", var.name)),
            Some((_, got)) if *got != want => {
                problems.push(format!("{}: README says default {got}, code says {want}", var.name))
            }
            Some(_) => {}
        }
    }
    let known: BTreeSet<&str> = documented().iter().map(|v| v.name).collect();
    for (name, _) in &rows {
        if !known.contains(name.as_str()) {
            problems.push(format!("{name} is in the README table but no service reads it"));
        }
    }
    assert!(problems.is_empty(), "README configuration table is out of date:\n{}", problems.join("\n"));
}

#[test]
fn the_row_parser_finds_rows() {
    let rows = readme_rows("| `QIM_X` | `1` | doc |\n| not a row |\n");
    assert_eq!(rows, vec![("QIM_X".to_owned(), "`1`".to_owned())]);
}
