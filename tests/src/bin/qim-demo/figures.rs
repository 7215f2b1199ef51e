//! The demo's closing summary.

use std::collections::BTreeMap;
use std::time::Duration;

use qim_tests::checker::{Observed, Verdict};
use qim_tests::latency::Latencies;
use qim_tests::services::{Histogram, Pipeline, ServiceKind};
use qim_tests::workload::Report;

/// Figures read from the services before they stop.
#[derive(Debug, Default)]
pub struct ServiceMetrics {
    archive_e2e: Histogram,
    entries_written: f64,
}

impl ServiceMetrics {
    /// Reads what it can; a service that does not answer leaves its figures empty.
    pub async fn read(p: &Pipeline) -> Self {
        let archiver = p.metrics(ServiceKind::Archiver).await.ok();
        let dispatcher = p.metrics(ServiceKind::Dispatcher).await.ok();
        Self {
            archive_e2e: archiver
                .map(|m| m.histogram(qim_archiver::metrics::END_TO_END_SECONDS, &[]))
                .unwrap_or_default(),
            entries_written: dispatcher.map_or(0.0, |m| m.sum(qim_mailbox_dispatcher::metrics::ENTRIES_WRITTEN, &[])),
        }
    }
}

/// What the summary is made of.
pub struct Summary<'a> {
    pub report: &'a Report,
    pub drained: Duration,
    pub metrics: ServiceMetrics,
    pub observed: &'a Observed,
    pub verdict: &'a Verdict,
}

fn bound(b: Option<f64>) -> String {
    match b {
        Some(s) if s.is_finite() => format!("≤ {} ms", s * 1000.0),
        Some(_) => "> 10 s".to_owned(),
        None => "n/a".to_owned(),
    }
}

/// Prints the summary a person reads at the end of the demo.
pub fn print_summary(s: &Summary<'_>) {
    let r = s.report;
    let latencies = Latencies::of(&r.latencies);
    let secs = r.wall.as_secs_f64().max(1e-9);
    let c = &s.verdict.counts;
    println!("================ qim demo summary ================");
    println!(
        "messages       sent {} (requests {}, identical retries {} matched / {} mismatched)",
        r.acks.len(),
        r.requests,
        r.retries_matched,
        r.retries_mismatched
    );
    println!(
        "               committed {} in {:.1} s: {:.0} messages/s",
        r.acks.len(),
        secs,
        r.acks.len() as f64 / secs
    );
    println!(
        "commit latency p50 {:.1} ms, p99 {:.1} ms (HTTP send answered at COMMITTED)",
        latencies.quantile(0.50).as_secs_f64() * 1000.0,
        latencies.quantile(0.99).as_secs_f64() * 1000.0
    );
    let h = &s.metrics.archive_e2e;
    let mean = if h.count > 0.0 { h.sum / h.count * 1000.0 } else { 0.0 };
    println!(
        "archive lag    Kafka → archived: mean {mean:.0} ms, p50 {}, p99 {} over {:.0} records; all archived and dispatched {:.1} s after the last ack",
        bound(h.quantile_bound(0.5)),
        bound(h.quantile_bound(0.99)),
        h.count,
        s.drained.as_secs_f64()
    );
    println!("archive        {} records, hot tier {} records, {} seq holes", c.archived, c.hot, c.holes);
    println!(
        "mailboxes      {} entries in {} mailboxes ({} expected; {} written by the dispatcher incl. retries), {} dispatch records",
        c.mailbox_entries,
        s.observed.mailboxes.len(),
        c.expected_mailbox_entries,
        s.metrics.entries_written,
        c.dispatch_records
    );
    let mut shards: BTreeMap<u16, (u64, u64, usize)> = BTreeMap::new();
    for w in &s.observed.watermarks {
        let e = shards.entry(w.shard.0).or_insert((u64::MAX, 0, 0));
        if let Some(t) = w.through {
            e.0 = e.0.min(t);
            e.1 = e.1.max(t);
            e.2 += 1;
        }
    }
    let lines: Vec<String> = shards
        .iter()
        .map(|(shard, (lo, hi, n))| {
            if *n == 0 {
                format!("shard {shard}: no lane advanced")
            } else {
                format!("shard {shard}: {n}/64 lanes, through offsets {lo}..{hi}")
            }
        })
        .collect();
    println!("lane watermarks {} ({} dispatches verified under them)", lines.join("; "), c.lane_dispatches_verified);
    println!("checker        {}", s.verdict.to_string().replace('\n', "\n               "));
}
