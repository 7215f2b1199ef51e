//! HTTP listen addresses are `0.0.0.0:<documented default port>`, published and health-checked
//! (`/healthz`) on that same port; the one-shot migration serves no HTTP.

use std::collections::BTreeMap;

use qim_runtime::env::Variable;

use crate::compose::deployment::OURS;
use crate::compose::project::words;
use crate::compose::service::{env_of, host_port, ports};
use crate::compose::Compose;

/// The HTTP address, port and healthcheck problems of `compose` (empty when there are none),
/// including two services of one profile publishing the same host port.
pub fn check(compose: &Compose) -> Vec<String> {
    let mut problems = Vec::new();
    let every = compose.every();
    for ours in OURS {
        let service = every.ours(ours.service);
        let Some(env) = env_of(every, ours.service, &mut problems) else {
            continue;
        };
        let vars = ours.variables();
        let http: Vec<&Variable> = vars.iter().filter(|v| v.name.ends_with("_HTTP_ADDR")).collect();
        let [addr_var] = http.as_slice() else {
            problems.push(format!(
                "{}: expected exactly one documented *_HTTP_ADDR variable, found {}",
                ours.binary,
                http.len()
            ));
            continue;
        };
        let published = match ports(service) {
            Ok(p) => p,
            Err(e) => {
                problems.push(format!("{}: ports: {e}", ours.service));
                continue;
            }
        };
        if !ours.long_running {
            if env.contains_key(&addr_var.name) || !published.is_empty() {
                problems.push(format!(
                    "{}: a one-shot serves no HTTP; it sets {} or publishes ports",
                    ours.service, addr_var.name
                ));
            }
            continue;
        }
        let Some(port) = addr_var.default.as_deref().and_then(host_port).map(|(_, p)| p) else {
            problems.push(format!("{}: has no host:port default", addr_var.name));
            continue;
        };
        let expected = format!("0.0.0.0:{port}");
        match env.get(&addr_var.name) {
            Some(v) if *v == expected => {}
            other => problems.push(format!(
                "{}: {} is {other:?}; inside a container it must be {expected} \
                 (the documented default binds loopback only)",
                ours.service, addr_var.name
            )),
        }
        if published.is_empty() {
            problems.push(format!("{}: publishes no port (expected {port})", ours.service));
        }
        for p in &published {
            if p.target != port || p.published != Some(port) {
                problems.push(format!(
                    "{}: publishes {:?}:{}, expected {port}:{port} (documented default of {})",
                    ours.service, p.published, p.target, addr_var.name
                ));
            }
        }
        let test = words(service.get("healthcheck").and_then(|h| h.get("test"))).join(" ");
        if !test.contains(&format!(":{port}/healthz")) {
            problems.push(format!("{}: healthcheck `{test}` does not probe /healthz on port {port}", ours.service));
        }
    }
    // No two services of one profile may publish the same host port.
    for (profile, project) in compose.variants() {
        let mut seen: BTreeMap<u16, String> = BTreeMap::new();
        for name in project.names() {
            for p in ports(project.ours(&name)).unwrap_or_default() {
                if let Some(host) = p.published {
                    if let Some(other) = seen.insert(host, name.clone()) {
                        problems.push(format!("[{profile}] {name} and {other} both publish host port {host}"));
                    }
                }
            }
        }
    }
    problems
}
