//! The rf3 guards ([`RF3_GUARDS`]) run in profile rf3 only, are waited for by the service they
//! protect, and really refuse the profile without its variables: each guard's script is run
//! with `sh -c` as rf3's variables resolve it (it must pass), as no variables do and as rf3's
//! without each variable it checks (it must fail).

use std::process::Command;

use crate::compose::deployment::{Guard, PROFILES, RF3_GUARDS};
use crate::compose::project::{words, Project};
use crate::compose::service::depends_on;
use crate::compose::Compose;

/// The rf3-guard problems of `compose` (empty when there are none). Loads the file once more
/// per variable set a guard is run with.
pub fn check(compose: &Compose) -> Vec<String> {
    let mut problems = Vec::new();
    let every = compose.every();
    let rf3 = PROFILES.iter().find(|p| p.name == "rf3").expect("rf3 is listed");
    for guard in RF3_GUARDS {
        let name = guard.service;
        let Some(service) = every.service(name) else {
            problems.push(format!("service {name} is missing"));
            continue;
        };
        if compose.variants().iter().any(|(label, p)| p.has(name) != (*label == "rf3")) {
            problems.push(format!("{name} must run in profile rf3 only"));
        }
        match every.service(guard.waiter) {
            None => problems.push(format!("{name}: the service it guards, {}, is missing", guard.waiter)),
            Some(waiter) => {
                let waits = depends_on(waiter)
                    .into_iter()
                    .any(|d| d.name == name && d.condition == "service_completed_successfully");
                if !waits {
                    problems.push(format!("{} does not wait for {name} to complete successfully", guard.waiter));
                }
            }
        }
        let entrypoint = words(service.get("entrypoint"));
        if entrypoint != ["/bin/sh", "-c"] {
            problems.push(format!("{name}: entrypoint {entrypoint:?}, expected [/bin/sh, -c]"));
        }
        for var in guard.vars {
            if !rf3.vars.iter().any(|(v, _)| v == var) {
                problems.push(format!("{name} checks {var}, which profile rf3 does not set"));
            }
        }
        problems.extend(runs(guard, rf3.vars));
    }
    problems
}

/// One run of a guard: with which compose-level variables, and whether it must pass.
struct Case<'a> {
    label: String,
    vars: Vec<(&'a str, &'a str)>,
    should_pass: bool,
}

/// Runs `guard`'s script as the file resolves it with rf3's variables `all` (it must pass),
/// with none, and with `all` but each variable the guard checks (it must fail).
fn runs(guard: &Guard, all: &[(&str, &str)]) -> Vec<String> {
    let mut cases = vec![
        Case { label: "profile rf3's variables".into(), vars: all.to_vec(), should_pass: true },
        Case { label: "no variables".into(), vars: Vec::new(), should_pass: false },
    ];
    for var in guard.vars {
        let vars = all.iter().filter(|(v, _)| v != var).copied().collect();
        cases.push(Case { label: format!("rf3's variables but {var}"), vars, should_pass: false });
    }
    let mut problems = Vec::new();
    for Case { label, vars, should_pass } in cases {
        let name = guard.service;
        let script = |p: &Project| words(p.ours(name).get("command")).join(" ");
        match Project::load(&["rf3"], &vars).map(|p| script(&p)) {
            Ok(script) => {
                let passed = Command::new("sh").arg("-c").arg(&script).output().expect("run sh").status.success();
                if passed != should_pass {
                    problems.push(format!(
                        "{name} with {label}: {} but should {}",
                        if passed { "passes" } else { "fails" },
                        if should_pass { "pass" } else { "fail" }
                    ));
                }
            }
            Err(e) => problems.push(format!("{name} with {label}: {e}")),
        }
    }
    problems
}
