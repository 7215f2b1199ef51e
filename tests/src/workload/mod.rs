//! A realistic send workload through the writer's HTTP API, for the demo and the pipeline
//! benchmark: 1:1 conversations and groups (up to thousands of members), retries of the same
//! client message id, mixed retention classes, many sends in flight.
//!
//! Every acknowledged send is kept as an [`Ack`] (what the writer promised), which the
//! invariant checker later compares with Kafka, the archive, the hot tier and the mailboxes.

mod plan;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

pub use plan::{Conversation, Plan, PlannedSend};

/// What the writer answered for one send, with what was sent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    /// Tenant, hex.
    pub tenant: String,
    /// Conversation, hex.
    pub conversation: String,
    /// Sender, hex.
    pub sender: String,
    /// The client's idempotency key.
    pub client_message_id: String,
    /// Retention class name.
    pub retention: String,
    /// Message id, hex.
    pub message_id: String,
    /// Conversation seq.
    pub conversation_seq: u64,
    /// Creation time, Unix millis.
    pub created_at: i64,
}

impl Ack {
    /// The writer id (ten bits) its message id carries (`qim_writer::message_ids`: Redis mode's
    /// leased id; random bits in Scylla mode); `None` when the id is not 16 bytes of hex.
    pub fn writer_id(&self) -> Option<u16> {
        let bytes = hex::decode(&self.message_id).ok().filter(|b| b.len() == 16)?;
        Some(u16::from_be_bytes([bytes[6], bytes[7]]) & 0x0fff)
    }
}

/// How the workload went.
#[derive(Debug, Default)]
pub struct Report {
    /// Acknowledged sends, one per distinct client message id.
    pub acks: Vec<Ack>,
    /// Requests made (retries included).
    pub requests: u64,
    /// Retries whose answer matched the first answer.
    pub retries_matched: u64,
    /// Retries whose answer differed (an invariant violation).
    pub retries_mismatched: u64,
    /// Latency of every acknowledged request.
    pub latencies: Vec<Duration>,
    /// Wall time of the sending phase.
    pub wall: Duration,
}

/// How long one send is retried while the writer answers 503 or does not answer: longer than
/// the local stack takes to restart Cassandra (the writer needs it to extend a conversation's
/// seq lease, once per block of sends).
pub const SEND_PATIENCE: Duration = Duration::from_secs(240);

/// Sends `plan` through the writer at `base` (e.g. `http://127.0.0.1:8080`) with `concurrency`
/// requests in flight, printing progress every second unless `quiet`.
pub async fn run(
    base: &str,
    token: Option<&str>,
    plan: &Plan,
    concurrency: usize,
    quiet: bool,
) -> anyhow::Result<Report> {
    run_behind(&[base.to_owned()], token, plan, concurrency, quiet).await
}

/// [`run`] through several writer instances behind one address, as a load balancer spreads
/// them: send `i` goes to `bases[i % n]` and its retry (when planned) to the next instance, so
/// with two or more every retry lands on another instance than its first attempt.
pub async fn run_behind(
    bases: &[String],
    token: Option<&str>,
    plan: &Plan,
    concurrency: usize,
    quiet: bool,
) -> anyhow::Result<Report> {
    anyhow::ensure!(!bases.is_empty(), "no writer to send to");
    let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build()?;
    let client = Arc::new(Writer { bases: bases.to_vec(), token: token.map(str::to_owned), http });
    for conversation in &plan.conversations {
        for chunk in conversation.members.chunks(1_000) {
            client.add_members(&plan.tenant, &conversation.id, chunk).await?;
        }
    }
    let sends = Arc::new(plan.sends.clone());
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let progress = (!quiet).then(|| tokio::spawn(show_progress(done.clone(), sends.len() as u64)));
    let mut workers = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (client, sends, next, done, tenant) =
            (client.clone(), sends.clone(), next.clone(), done.clone(), plan.tenant.clone());
        workers.push(tokio::spawn(async move {
            let mut part = Report::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                let Some(send) = sends.get(i) else { return anyhow::Ok(part) };
                let (ack, latency) = client.send(i, &tenant, send).await?;
                part.requests += 1;
                part.latencies.push(latency);
                if send.retry {
                    let (again, latency) = client.send(i + 1, &tenant, send).await?;
                    part.requests += 1;
                    part.latencies.push(latency);
                    if again == ack {
                        part.retries_matched += 1
                    } else {
                        part.retries_mismatched += 1
                    }
                }
                part.acks.push(ack);
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let mut report = Report::default();
    for w in workers {
        let part = w.await.context("a sender task panicked")??;
        report.acks.extend(part.acks);
        report.requests += part.requests;
        report.retries_matched += part.retries_matched;
        report.retries_mismatched += part.retries_mismatched;
        report.latencies.extend(part.latencies);
    }
    report.wall = started.elapsed();
    if let Some(p) = progress {
        p.abort();
        eprintln!();
    }
    Ok(report)
}

/// Every record of a conversation's history as `viewer` reads it through the writer at `base`,
/// oldest first: `(message id, seq)`.
///
/// # Errors
///
/// The writer refused a page (not a member: 403) or did not answer.
pub async fn history(base: &str, tenant: &str, conversation: &str, viewer: &str) -> anyhow::Result<Vec<(String, u64)>> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build()?;
    let mut out = Vec::new();
    let mut anchor = String::new();
    loop {
        let url = format!(
            "{base}/v1/tenants/{tenant}/conversations/{conversation}/messages?viewer={viewer}&direction=newer&max_items=500{anchor}"
        );
        let r = http.get(&url).send().await?;
        if !r.status().is_success() {
            bail!("GET {url}: {} {}", r.status(), r.text().await.unwrap_or_default());
        }
        let page: serde_json::Value = r.json().await?;
        for record in page["records"].as_array().context("records")? {
            let id = record["message_id"].as_str().context("message_id")?.to_owned();
            out.push((id, record["seq"].as_u64().context("seq")?));
        }
        match (page["has_more"].as_bool(), out.last()) {
            (Some(true), Some((_, seq))) => anchor = format!("&anchor={seq}"),
            _ => return Ok(out),
        }
    }
}

/// A progress bar of the sends committed, until aborted.
async fn show_progress(done: Arc<AtomicU64>, total: u64) {
    let bar = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template("  sending {wide_bar} {pos}/{len} committed, {per_sec}") {
        bar.set_style(style);
    }
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        bar.set_position(done.load(Ordering::Relaxed));
    }
}

struct Writer {
    bases: Vec<String>,
    token: Option<String>,
    http: reqwest::Client,
}

impl Writer {
    /// A POST to instance `instance` (modulo their number).
    fn post(&self, instance: usize, path: &str) -> reqwest::RequestBuilder {
        let r = self.http.post(format!("{}{path}", self.bases[instance % self.bases.len()]));
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    async fn add_members(&self, tenant: &str, conversation: &str, users: &[String]) -> anyhow::Result<()> {
        let path = format!("/v1/tenants/{tenant}/conversations/{conversation}/members/add");
        let r = self.post(0, &path).json(&serde_json::json!({ "users": users })).send().await?;
        if !r.status().is_success() {
            bail!("adding members: {} {}", r.status(), r.text().await.unwrap_or_default());
        }
        Ok(())
    }

    /// Sends to instance `instance` until acknowledged; `503` (a backend briefly down) and
    /// connection failures are retried with the same key every 500 ms for up to
    /// [`SEND_PATIENCE`].
    async fn send(&self, instance: usize, tenant: &str, s: &PlannedSend) -> anyhow::Result<(Ack, Duration)> {
        let give_up = Instant::now() + SEND_PATIENCE;
        let body = serde_json::json!({
            "tenant": tenant, "conversation": s.conversation, "sender": s.sender,
            "client_message_id": s.client_message_id, "body": s.body, "retention": s.retention,
        });
        loop {
            let began = Instant::now();
            let patient = began < give_up;
            let r = self.post(instance, "/v1/messages").json(&body).send().await;
            match r {
                Ok(r) if r.status() == 200 => {
                    let a: serde_json::Value = r.json().await?;
                    let ack = Ack {
                        tenant: tenant.to_owned(),
                        conversation: s.conversation.clone(),
                        sender: s.sender.clone(),
                        client_message_id: s.client_message_id.clone(),
                        retention: s.retention.clone(),
                        message_id: a["message_id"].as_str().context("message_id")?.to_owned(),
                        conversation_seq: a["conversation_seq"].as_u64().context("conversation_seq")?,
                        created_at: a["created_at"].as_i64().context("created_at")?,
                    };
                    return Ok((ack, began.elapsed()));
                }
                Ok(r) if r.status() == 503 && patient => {}
                Ok(r) => bail!("send {}: {} {}", s.client_message_id, r.status(), r.text().await.unwrap_or_default()),
                Err(e) if patient => eprintln!("  send failed ({e}); retrying the same request"),
                Err(e) => return Err(e).context("sending"),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}
