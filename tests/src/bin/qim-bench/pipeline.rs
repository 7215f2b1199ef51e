//! `qim-bench pipeline`: the whole pipeline (the three service binaries as processes, built
//! with `cargo build --release -p qim-writer -p qim-archiver -p qim-mailbox-dispatcher`) against
//! the raw primitives it is built from, measured in one run on the same servers, plus the whole
//! stack's CPU time per message.
//!
//! Raw primitives (`--concurrency` in flight, bodies as long as the workload's): pipelined
//! `EVALSHA` of one script with a commit's writes, a produce awaiting its delivery report
//! (`acks=all`, idempotent), both together (the writer's floor), and the archive's prepared
//! inserts per record (record row, then index and expiry rows).
//!
//! The pipeline runs in three phases on one isolated run (its own topics, keyspace, namespace):
//! the writer alone takes the workload (`--count` sends over `--conversations` 1:1 conversations
//! and two groups, see [`GROUPS`], or with `--fanout M` over `--conversations` groups of M
//! members; `--concurrency` in flight, through its HTTP API); then the
//! archiver starts and drains the topic; then the dispatcher starts and fans everything out.
//! Each stage's rate is its own counter's, from its first to its last record, so startup does
//! not count. CPU: every process's user + system time from `/proc` (the services, redis-server,
//! Kafka's and Cassandra's JVMs), per phase; the stack is shared, so its servers' CPU while idle
//! is measured first and reported beside the totals.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use qim_tests::services::{consumer_group_lag, Exposition, Pipeline, PipelineEnv, ServiceBinaries};
use qim_tests::workload::{self, Plan};
use rdkafka::producer::FutureRecord;
use rdkafka::util::Timeout;
use tokio_util::sync::CancellationToken;

use super::cpu::{self, Sample};
use super::{drive, ms, Args, Measurement};

/// Members of the two group conversations the workload has besides its 1:1 conversations.
pub const GROUPS: [usize; 2] = [20, 200];
/// The workload's conversations: `(1:1 conversations, group sizes)`, the standard mix or, with
/// `--fanout M`, `--conversations` groups of M members.
fn conversations(args: &Args) -> (usize, Vec<usize>) {
    match args.fanout {
        0 => (args.conversations, GROUPS.to_vec()),
        m => (0, vec![m; args.conversations]),
    }
}

/// How long the stack's servers are watched idle, for their background CPU.
const IDLE_FOR: Duration = Duration::from_secs(5);
/// How long a stage may take to drain.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(900);

/// The raw primitives' rates.
struct Raw {
    evalsha: Measurement,
    produce: Measurement,
    commit: Measurement,
    cql: Measurement,
}

async fn raw_produce(args: &Args, brokers: &str, topic: &str) -> anyhow::Result<Measurement> {
    let producer = super::writer::producer(brokers, topic, Default::default()).await?;
    let payload = Arc::new(vec![b'x'; args.payload]);
    let (topic, conversations) = (Arc::new(topic.to_owned()), args.conversations as u64);
    drive(args.count, args.concurrency, move |n| {
        let (producer, payload, topic) = (producer.clone(), payload.clone(), topic.clone());
        async move {
            let key = (n % conversations).to_be_bytes();
            producer
                .send(FutureRecord::to(&topic).key(&key[..]).payload(payload.as_slice()), Timeout::Never)
                .await
                .map_err(|(e, _)| anyhow::anyhow!("delivering: {e}"))?;
            Ok(())
        }
    })
    .await
}

async fn raw_primitives(args: &Args, env: &PipelineEnv) -> anyhow::Result<Raw> {
    let ns = format!("{}raw", env.redis_namespace);
    let redis = qim_store::redis::RedisConfig { url: env.redis_url.clone(), namespace: ns.clone() };
    let conn = qim_store::redis::connect(&redis).await?;
    let topic = format!("{}.raw", env.messages_topic);
    super::writer::create_topic(&env.kafka_brokers, &topic).await?;
    let session = Arc::new(qim_store::scylla::open_session(&env.scylla_config()).await?);
    let inserts = Arc::new(super::archiver::prepare(&session, &env.keyspace).await?);
    let policy = qim_store::retention::RetentionPolicy::with_default_days(env.retention_days)?;
    let records = |n| Arc::new(super::archiver::records(n, args.conversations, args.payload, &policy));

    let warm = Args { count: args.concurrency as u64 * 10, ..args.clone() };
    super::redis::raw_path(conn.clone(), &warm, &ns).await?;
    raw_produce(&warm, &env.kafka_brokers, &topic).await?;
    let producer = super::writer::producer(&env.kafka_brokers, &topic, Default::default()).await?;
    super::archiver::raw_loop(session.clone(), inserts.clone(), records(warm.count), args.concurrency).await?;
    let raw = Raw {
        evalsha: super::redis::raw_path(conn.clone(), args, &ns).await?,
        produce: raw_produce(args, &env.kafka_brokers, &topic).await?,
        commit: super::writer::raw_loop(args, &conn, &producer, &topic, &ns, 0, super::writer::AfterDelivery::Nothing)
            .await?,
        cql: super::archiver::raw_loop(session, inserts, records(args.count), args.concurrency).await?,
    };
    drop(conn);
    qim_testkit::redis::wipe_namespace(&env.redis_url, &ns).await?;
    super::writer::delete_topic(&env.kafka_brokers, &topic).await?;
    Ok(raw)
}

/// A counter sampled over time: `(seconds since the start, value)`.
type Samples = Vec<(f64, f64)>;

/// Samples the sum of `metric` in `url`'s `/metrics` every 100 ms until `stop`.
async fn sample_counter(url: String, metric: &'static str, stop: CancellationToken) -> Samples {
    let http = reqwest::Client::new();
    let (start, mut out) = (Instant::now(), Vec::new());
    while !stop.is_cancelled() {
        if let Ok(r) = http.get(&url).timeout(Duration::from_secs(2)).send().await {
            if let Ok(text) = r.text().await {
                let v = Exposition::parse(&text).sum(metric, &[]);
                out.push((start.elapsed().as_secs_f64(), v));
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    out
}

/// Rate from the first non-zero sample to the first sample at the final value.
fn rate(samples: &Samples) -> (f64, f64) {
    let last = samples.last().map_or(0.0, |s| s.1);
    let first = samples.iter().find(|s| s.1 > 0.0).copied().unwrap_or((0.0, 0.0));
    let done = samples.iter().find(|s| s.1 >= last).copied().unwrap_or(first);
    ((last - first.1) / (done.0 - first.0).max(0.001), last)
}

/// One phase's CPU seconds per process.
type Cpu = BTreeMap<String, f64>;

fn processes(p: &mut Pipeline) -> Vec<(String, u32)> {
    let mut v = cpu::stack_pids();
    for s in [&mut p.writer, &mut p.archiver, &mut p.dispatcher] {
        if let Some(pid) = s.is_running().then(|| s.pid()).flatten() {
            v.push((s.kind().name().to_owned(), pid));
        }
    }
    v
}

/// What the pipeline did.
struct Run {
    messages: usize,
    entries: f64,
    writer: Measurement,
    archiver_per_second: f64,
    dispatcher_per_second: f64,
    cpu: BTreeMap<&'static str, Cpu>,
    phase_seconds: BTreeMap<&'static str, f64>,
    idle_per_second: Cpu,
}

async fn pipeline(args: &Args, bins: &ServiceBinaries, env: &PipelineEnv, plan: &Plan) -> anyhow::Result<Run> {
    let mut p = Pipeline::start(bins, env).await?;
    p.archiver.terminate().await?;
    p.dispatcher.terminate().await?;
    let idle = Sample::take(&cpu::stack_pids());
    tokio::time::sleep(IDLE_FOR).await;
    let idle_per_second = Sample::take(&cpu::stack_pids())
        .since(&idle)
        .into_iter()
        .map(|(n, s)| (n, s / IDLE_FOR.as_secs_f64()))
        .collect();
    let (mut cpu, mut phase_seconds) = (BTreeMap::new(), BTreeMap::new());

    let (before, began) = (Sample::take(&processes(&mut p)), Instant::now());
    let report = workload::run(p.writer.base_url(), None, plan, args.concurrency, false).await?;
    cpu.insert("writer", Sample::take(&processes(&mut p)).since(&before));
    phase_seconds.insert("writer", began.elapsed().as_secs_f64());
    let writer = Measurement::new(&report.latencies, report.wall);
    let in_topic = consumer_group_lag(&env.kafka_brokers, &env.archiver_group, &env.messages_topic).await?.end;

    let (before, began) = (Sample::take(&processes(&mut p)), Instant::now());
    p.archiver.restart(&[]).await?;
    let stop = CancellationToken::new();
    let url = format!("{}/metrics", p.archiver.base_url());
    let sampler = tokio::spawn(sample_counter(url.clone(), qim_archiver::metrics::RECORDS, stop.clone()));
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    loop {
        let text = reqwest::get(&url).await?.text().await?;
        let archived = Exposition::parse(&text).sum(qim_archiver::metrics::RECORDS, &[]);
        if archived >= in_topic as f64 {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "the archiver handled {archived} of {in_topic} records in time");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    let (archiver_per_second, _) = rate(&sampler.await?);
    cpu.insert("archiver", Sample::take(&processes(&mut p)).since(&before));
    phase_seconds.insert("archiver", began.elapsed().as_secs_f64());

    let (before, began) = (Sample::take(&processes(&mut p)), Instant::now());
    p.dispatcher.restart(&[]).await?;
    let stop = CancellationToken::new();
    let url = format!("{}/metrics", p.dispatcher.base_url());
    let metric = qim_mailbox_dispatcher::metrics::ENTRIES_WRITTEN;
    let sampler = tokio::spawn(sample_counter(url, metric, stop.clone()));
    p.converge(&report.acks, DRAIN_TIMEOUT).await.context("the dispatcher did not catch up")?;
    stop.cancel();
    let (dispatcher_per_second, entries) = rate(&sampler.await?);
    cpu.insert("dispatcher", Sample::take(&processes(&mut p)).since(&before));
    phase_seconds.insert("dispatcher", began.elapsed().as_secs_f64());
    p.stop().await?;
    let messages = report.acks.len();
    Ok(Run {
        messages,
        entries,
        writer,
        archiver_per_second,
        dispatcher_per_second,
        cpu,
        phase_seconds,
        idle_per_second,
    })
}

/// Runs the raw primitives and the pipeline, prints the comparison and the CPU per message.
pub async fn run(args: &Args) -> anyhow::Result<serde_json::Value> {
    anyhow::ensure!(args.fanout != 1, "--fanout counts a group's members, the sender among them: at least 2");
    let bins = ServiceBinaries::locate()?;
    let env = PipelineEnv::fresh("bench").await.context("preparing the run (is the stack up?)")?;
    let (pairs, groups) = conversations(args);
    let plan = Plan::generate(u64::from(std::process::id()), args.count as usize, pairs, &groups, 0);
    let body = plan.sends.iter().map(|s| s.body.len()).sum::<usize>() / plan.sends.len().max(1);
    let raw_args = Args { payload: body, ..args.clone() };
    let raw = raw_primitives(&raw_args, &env).await?;
    let run = pipeline(args, &bins, &env, &plan).await?;
    let report = report(args, &env, &raw, &run);
    // The run's hot tier and mailboxes (hundreds of MB at the default count) would otherwise stay
    // in the shared Redis, and be rewritten with its AOF under every later benchmark. A wipe that
    // fails (a large run's keys outlast the client's timeout) keeps the figures: a later run's
    // sweep of leftover namespaces removes the keys.
    if let Err(e) = qim_testkit::redis::wipe_namespace(&env.redis_url, &env.redis_namespace).await {
        eprintln!("warning: could not remove the run's keys of {}: {e:#}", env.redis_namespace);
    }
    report
}

fn report(args: &Args, env: &PipelineEnv, raw: &Raw, run: &Run) -> anyhow::Result<serde_json::Value> {
    let (m, n) = (&run.writer, run.messages as f64);
    let mix = match args.fanout {
        0 => format!("{} conversations of 2, groups of {GROUPS:?}", args.conversations),
        m => format!("{} groups of {m}", args.conversations),
    };
    let fanout = run.entries / n.max(1.0);
    println!(
        "pipeline: {} messages ({mix}; {fanout:.1} mailbox entries per message), concurrency {}, run {}",
        run.messages, args.concurrency, env.name
    );
    println!("  {:<58} {:>10} {:>10} {:>10}", "", "per sec", "p50 ms", "p99 ms");
    let row = |name: &str, m: &Measurement| {
        println!("  {:<58} {:>10.0} {:>10.2} {:>10.2}", name, m.per_second, ms(m.p50), ms(m.p99));
    };
    row("raw pipelined EVALSHA (a commit's writes in one script)", &raw.evalsha);
    row("raw produce, awaiting the delivery report", &raw.produce);
    row("raw EVALSHA + produce + delivery (the writer's floor)", &raw.commit);
    row("raw prepared CQL inserts, per archived record (3 rows)", &raw.cql);
    row("writer: sends committed over HTTP", m);
    println!("  {:<58} {:>10.0}", "archiver: records archived", run.archiver_per_second);
    println!(
        "  {:<58} {:>10.0}",
        format!("dispatcher: mailbox entries ({:.0} in all)", run.entries),
        run.dispatcher_per_second
    );
    let ratios = serde_json::json!({
        "writer_over_raw_commit": m.per_second / raw.commit.per_second,
        "writer_over_raw_evalsha": m.per_second / raw.evalsha.per_second,
        "writer_over_raw_produce": m.per_second / raw.produce.per_second,
        "archiver_over_raw_cql": run.archiver_per_second / raw.cql.per_second,
        "dispatcher_entries_over_raw_evalsha": run.dispatcher_per_second / raw.evalsha.per_second,
    });
    println!("  ratios: {ratios}");
    // Per process over all phases: measured, and net of what it burnt idle (others' load on
    // the shared stack) over the same time.
    let (mut per_process, mut net): (BTreeMap<String, f64>, BTreeMap<String, f64>) = Default::default();
    for (phase, used) in &run.cpu {
        let seconds = run.phase_seconds.get(phase).copied().unwrap_or(0.0);
        for (name, s) in used {
            *per_process.entry(name.clone()).or_default() += s;
            let idle = run.idle_per_second.get(name).copied().unwrap_or(0.0) * seconds;
            *net.entry(name.clone()).or_default() += (s - idle).max(0.0);
        }
    }
    let (total, total_net): (f64, f64) = (per_process.values().sum(), net.values().sum());
    println!(
        "  CPU per message over all phases (µs): {:.0} measured, {:.0} net of the servers' idle use",
        total * 1e6 / n,
        total_net * 1e6 / n
    );
    for (name, s) in &per_process {
        let idle =
            run.idle_per_second.get(name).map_or(String::new(), |r| format!("  (idle: {:.0}% of a core)", r * 100.0));
        println!("    {name:<12} {:>8.0} {:>8.0}{idle}", s * 1e6 / n, net[name] * 1e6 / n);
    }
    Ok(serde_json::json!({
        "run": env.name, "messages": run.messages, "mailbox_entries": run.entries,
        "concurrency": args.concurrency, "conversations": args.conversations,
        "groups": conversations(args).1,
        "entries_per_message": fanout,
        "machine": machine(), "unix_time": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs(),
        "raw": {
            "evalsha_per_second": raw.evalsha.per_second, "produce_per_second": raw.produce.per_second,
            "commit_per_second": raw.commit.per_second, "cql_records_per_second": raw.cql.per_second,
        },
        "pipeline": {
            "writer_per_second": m.per_second, "writer_p50_ms": ms(m.p50), "writer_p99_ms": ms(m.p99),
            "archiver_records_per_second": run.archiver_per_second,
            "dispatcher_entries_per_second": run.dispatcher_per_second,
        },
        "ratios": ratios,
        "cpu_seconds_by_phase": run.cpu,
        "cpu_us_per_message": per_process.iter().map(|(k, s)| (k.clone(), s * 1e6 / n)).collect::<BTreeMap<_, _>>(),
        "cpu_us_per_message_total": total * 1e6 / n,
        "cpu_us_per_message_net": net.iter().map(|(k, s)| (k.clone(), s * 1e6 / n)).collect::<BTreeMap<_, _>>(),
        "cpu_us_per_message_net_total": total_net * 1e6 / n,
        "phase_seconds": run.phase_seconds,
        "idle_cpu_cores_before": run.idle_per_second,
    }))
}

/// Cores and memory of this machine, from `/proc`.
fn machine() -> serde_json::Value {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    serde_json::json!({ "cores": cores, "memory_gib": cpu::memory_gib() })
}
