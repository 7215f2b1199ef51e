//! Keeps the README's configuration table in step with the variables the services read.
//!
//! The README's configuration table is generated from the services' `ENVIRONMENT` tables: each
//! row is a variable's name, default, the services that read it, and its description with its
//! legal range, in table order; a change to a definition fails this test until the README shows
//! it (the failure prints the rows to paste).

use std::collections::BTreeSet;

use qim_runtime::env::EnvVar;

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

/// Who reads `name`: `all`, or the services among writer, archiver, dispatcher that do.
fn readers(name: &str) -> String {
    let services = [
        ("writer", qim_writer::config::ENVIRONMENT),
        ("archiver", qim_archiver::config::ENVIRONMENT),
        ("dispatcher", qim_mailbox_dispatcher::config::ENVIRONMENT),
    ];
    let reading: Vec<&str> =
        services.iter().filter(|(_, env)| qim_runtime::env::find(env, name).is_some()).map(|(s, _)| *s).collect();
    if reading.len() == services.len() {
        "all".to_owned()
    } else {
        reading.join(", ")
    }
}

/// The README row of `var`, generated from its definition: name, default, readers, and its
/// description with the legal range ([`EnvVar::describe`]).
fn row(var: &EnvVar) -> String {
    let default = var.default.map_or_else(|| "(unset)".to_owned(), |d| format!("`{d}`"));
    format!("| `{}` | {default} | {} | {} |", var.name, readers(var.name), var.describe())
}

/// The README's configuration rows: `| `QIM_...` | ... |` lines, as written.
fn readme_rows(text: &str) -> Vec<String> {
    text.lines().filter(|line| line.starts_with("| `QIM_")).map(str::to_owned).collect()
}

#[test]
fn readme_table_is_the_one_the_definitions_generate() {
    let want: Vec<String> = documented().iter().map(row).collect();
    let got = readme_rows(&readme());
    assert!(got == want, "README configuration table is out of date; replace its rows with:\n{}", want.join("\n"));
}

#[test]
fn the_row_parser_finds_rows_and_a_row_names_its_range() {
    let rows = readme_rows("| `QIM_X` | `1` | all | doc |\n| not a row |\n");
    assert_eq!(rows, vec!["| `QIM_X` | `1` | all | doc |".to_owned()]);
    let var = EnvVar { name: "QIM_X", default: Some("5"), doc: "Seconds.", range: Some((1, 9)) };
    assert!(row(&var).ends_with("| Seconds. A whole number in 1..=9. |"), "{}", row(&var));
}
