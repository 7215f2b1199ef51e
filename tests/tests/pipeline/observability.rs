//! The operator's dashboards and alerts against the services: the alert rules pass `promtool`
//! (syntax and the unit tests in `deploy/observability/alerts.test.yml`), every `qim_*` metric
//! a dashboard panel or an alert rule names is exported by a running service, and services
//! started with `QIM_LOG_FORMAT=json` write one JSON object per line.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use qim_testkit::metrics::Exposition;
use qim_tests::services::{Pipeline, PipelineEnv, Service, ServiceBinaries, ServiceKind};
use qim_tests::workload::{self, Plan};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;

fn observability_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/observability")
}

/// `promtool <args>` in the observability directory; fails loudly when promtool is missing.
fn promtool(args: &[&str]) -> String {
    let output = Command::new("promtool").args(args).current_dir(observability_dir()).output().unwrap_or_else(|e| {
        panic!("promtool did not run ({e}); the test command installs it (apt-get install prometheus)")
    });
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    let checked = promtool(&["check", "rules", "alerts.yml"]);
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool(&["test", "rules", "alerts.test.yml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}

/// The `qim_*` series names in the dashboard's queries and the alert rules.
fn referenced_metrics() -> BTreeSet<String> {
    let names = regex::Regex::new(r"\bqim_[a-z0-9_]+").expect("a valid pattern");
    let dir = observability_dir();
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("grafana/dashboards/qim.json")).expect("the dashboard"))
            .expect("the dashboard is JSON");
    let mut exprs: Vec<String> = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push(target["expr"].as_str().expect("a query").to_owned());
        }
    }
    // The rules file names metrics only in its expressions (comments and annotations name
    // services, with hyphens), so the whole text is searched.
    exprs.push(std::fs::read_to_string(dir.join("alerts.yml")).expect("the alert rules"));
    exprs.iter().flat_map(|e| names.find_iter(e).map(|m| m.as_str().to_owned())).collect()
}

/// A histogram's `_bucket`, `_sum` and `_count` series are one family in a parsed scrape.
fn family(series: &str) -> &str {
    ["_bucket", "_sum", "_count"].iter().find_map(|s| series.strip_suffix(s)).unwrap_or(series)
}

async fn scrape(base_url: &str) -> anyhow::Result<Exposition> {
    let text = reqwest::get(format!("{base_url}/metrics")).await?.error_for_status()?.text().await?;
    Ok(Exposition::parse(&text))
}

/// The metrics a panel or rule names, after a workload with one undecodable record on the
/// messages topic (the archiver and the router dead-letter it), all found on some service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_a_panel_or_an_alert_names_is_exported_by_a_running_service() {
    let referenced = referenced_metrics();
    assert!(referenced.len() > 20, "the dashboard and the rules name the services' metrics: {referenced:?}");

    let bins = ServiceBinaries::locate().expect("service binaries");
    let env = PipelineEnv::fresh("observability").await.expect("a fresh run (is the stack up?)");
    let json = [("QIM_LOG_FORMAT", "json")];
    let mut started = Vec::new();
    for kind in ServiceKind::ALL {
        started.push(Service::start(kind, &bins, &env, &json).await.expect("the service starts"));
    }
    let [writer, archiver, dispatcher]: [Service; 3] = started.try_into().ok().expect("three services");
    let pipeline = Pipeline::from_services(writer, archiver, dispatcher, &env);
    let plan = Plan::generate(5, 30, 3, &[12], 0);
    let report = workload::run(pipeline.writer.base_url(), None, &plan, 4, false).await.expect("the workload runs");
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &env.kafka_brokers)
        .set("message.timeout.ms", "10000")
        .create()
        .expect("a producer");
    producer
        .send(
            FutureRecord::to(&env.messages_topic).key(&b"not a conversation key"[..]).payload(&b"not a record"[..]),
            Duration::from_secs(10),
        )
        .await
        .map_err(|(e, _)| e)
        .context("producing the undecodable record")
        .unwrap();
    pipeline.converge(&report.acks, Duration::from_secs(90)).await.expect("converges");

    let services = [&pipeline.writer, &pipeline.archiver, &pipeline.dispatcher];
    let deadline = Instant::now() + Duration::from_secs(60);
    let missing = loop {
        let mut scrapes = Vec::new();
        for s in services {
            scrapes.push(scrape(s.base_url()).await.expect("a scrape"));
        }
        let missing: Vec<&String> =
            referenced.iter().filter(|name| !scrapes.iter().any(|e| e.has(family(name), &[]))).collect();
        if missing.is_empty() || Instant::now() > deadline {
            break missing.into_iter().cloned().collect::<Vec<_>>();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(missing.is_empty(), "named by a panel or an alert rule but exported by no service: {missing:?}");

    for service in services {
        let log = std::fs::read_to_string(service.log_path()).expect("the service's log");
        // The harness marks each start with a line of its own.
        let lines: Vec<&str> =
            log.lines().filter(|l| !l.trim().is_empty() && !l.starts_with("---- qim-tests:")).collect();
        assert!(!lines.is_empty(), "{} logged nothing", service.kind().name());
        for line in lines {
            let event: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{} wrote a line that is not JSON ({e}): {line}", service.kind().name()));
            assert!(event["level"].is_string() && event["fields"]["message"].is_string(), "{line}");
        }
    }
    pipeline.stop().await.expect("every service exits 0 on SIGTERM");
}
