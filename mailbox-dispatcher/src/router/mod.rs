//! The router: `qim.messages.v1` → one dispatch record per mailbox shard with recipients →
//! `qim.mailbox.dispatch.v1` (partition = shard).
//!
//! Each message goes through two stages, both windows in log order:
//! 1. *resolve* (concurrent, up to [`WINDOW`] messages): decode, read the conversation's members
//!    (the membership the writer's admin API manages), build the manifests ([`route`]);
//! 2. *deliver*: the head of the resolve window is enqueued in the idempotent producer — so the
//!    dispatch records of one source partition reach each shard's partition in log order — and
//!    its offset is stored only once the broker acknowledged every record of it.
//!
//! A crash between the acknowledgement and the offset commit produces the records again on
//! restart: the shard workers absorb such duplicates (same dispatch id, same manifest → the
//! first receipt). If the membership changed in between, the redelivered manifest differs and the
//! shard worker dead-letters it as a conflict; the first one stands.
//!
//! Records that can not be decoded, and messages whose shard would exceed the recipient limit
//! of a dispatch, go to the dispatcher's dead-letter topic (then their offset is stored).

pub mod route;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use qim_runtime::events::emit;
use qim_runtime::kafka::messages::decode;
use qim_store::{all_members, MembershipStore};
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::{Message, OwnedMessage};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use self::route::{encode, manifests, DispatchRecord};
use qim_runtime::kafka::consumer::{group_consumer_config, leave_group, GroupContext, Leases, LEAVE_TIMEOUT};

use crate::config::KafkaConfig;
use crate::kafka::{dead_letter, original_headers, AckedProducer, Outgoing, Refused, SendError};

use crate::events::{DispatchProduceFailed, MessageRefused, MessageRouted};
use crate::retry::{never, retry_store, Backoff};

/// Messages in flight (resolving or delivering) at once.
pub const WINDOW: usize = 256;
/// How long shutdown waits for in-flight messages before abandoning them (they are redone).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(20);

/// What resolving one message decided.
enum Resolved {
    /// Dispatch records to produce (none for a conversation without members).
    Records(Vec<DispatchRecord>),
    /// The message is refused: dead-letter it with this reason and what was wrong.
    Refuse(&'static str, String),
}

/// One message in a window.
struct InFlight<T> {
    message: Arc<OwnedMessage>,
    token: CancellationToken,
    task: JoinHandle<T>,
}

/// The router: a consumer of the messages topic and a producer of dispatch records.
pub struct Router {
    consumer: Arc<StreamConsumer<GroupContext>>,
    leases: Arc<Leases>,
    producer: AckedProducer,
    members: Arc<dyn MembershipStore>,
    kafka: KafkaConfig,
    shards: u16,
}

impl Router {
    /// Joins the router's consumer group (subscribed, not yet polling).
    pub fn new(
        kafka: &KafkaConfig,
        shards: u16,
        members: Arc<dyn MembershipStore>,
        producer: AckedProducer,
    ) -> anyhow::Result<Self> {
        let context = GroupContext::new("router", &kafka.messages_topic, crate::metrics::CONSUMER);
        let leases = context.leases();
        let consumer: StreamConsumer<GroupContext> = group_consumer_config(&kafka.brokers, &kafka.router_group())
            .create_with_context(context)
            .context("creating the router's consumer")?;
        consumer.subscribe(&[&kafka.messages_topic]).context("subscribing to the messages topic")?;
        Ok(Self { consumer: Arc::new(consumer), leases, producer, members, kafka: kafka.clone(), shards })
    }

    /// Routes until `shutdown`, then drains what is in flight (abandoning it after
    /// [`DRAIN_TIMEOUT`]) and commits the stored offsets.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let mut resolving: VecDeque<InFlight<Option<Resolved>>> = VecDeque::new();
        let mut delivering: VecDeque<InFlight<bool>> = VecDeque::new();
        let drain_deadline = async {
            shutdown.cancelled().await;
            tokio::time::sleep(DRAIN_TIMEOUT).await;
        };
        tokio::pin!(drain_deadline);
        let mut abandoned = false;
        loop {
            let stopping = shutdown.is_cancelled();
            if stopping && resolving.is_empty() && delivering.is_empty() {
                break;
            }
            let room = resolving.len() + delivering.len() < WINDOW;
            tokio::select! {
                biased;
                done = head(&mut delivering), if !delivering.is_empty() => {
                    let f = delivering.pop_front().expect("not empty");
                    self.delivered(&f, done.unwrap_or(false));
                }
                done = head(&mut resolving), if !resolving.is_empty() => {
                    let f = resolving.pop_front().expect("not empty");
                    let task = match done.flatten() {
                        Some(resolved) => self.deliver(&f, resolved).await,
                        None => tokio::spawn(async { false }),
                    };
                    delivering.push_back(InFlight { message: f.message, token: f.token, task });
                }
                () = &mut drain_deadline, if !abandoned => {
                    let in_flight = resolving.len() + delivering.len();
                    tracing::warn!(in_flight, "router drain timed out, abandoning (they are redelivered)");
                    self.leases.release_all();
                    abandoned = true;
                }
                received = self.consumer.recv(), if room && !stopping => match received {
                    Ok(m) => self.accept(m.detach(), &mut resolving),
                    Err(e) => {
                        tracing::warn!(error = %e, "router consumer error");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                () = shutdown.cancelled(), if !stopping => {}
            }
        }
        self.leases.release_all();
        if let Err(e) = self.consumer.commit_consumer_state(CommitMode::Sync) {
            tracing::debug!(error = %e, "final router commit (nothing stored?)");
        }
        leave_group(&self.consumer, LEAVE_TIMEOUT).await;
        tracing::info!("router stopped");
        Ok(())
    }

    /// Starts resolving a received message, if its partition is still ours.
    fn accept(&self, m: OwnedMessage, resolving: &mut VecDeque<InFlight<Option<Resolved>>>) {
        let Some(token) = self.leases.get(m.partition()).map(|lease| lease.token().clone()) else {
            tracing::debug!(
                partition = m.partition(),
                offset = m.offset(),
                "message of a partition not owned, skipped"
            );
            return;
        };
        let message = Arc::new(m);
        let (m, members, shards, cancel) =
            (Arc::clone(&message), Arc::clone(&self.members), self.shards, token.clone());
        let task = tokio::spawn(async move { resolve(&m, members.as_ref(), shards, &cancel).await });
        resolving.push_back(InFlight { message, token, task });
    }

    /// Enqueues the records of a resolved message now (log order); the returned task is `true`
    /// once every record is acknowledged (or the message was dead-lettered).
    async fn deliver(&self, f: &InFlight<Option<Resolved>>, resolved: Resolved) -> JoinHandle<bool> {
        let records = match resolved {
            Resolved::Refuse(reason, detail) => return self.refuse(f, reason, detail),
            Resolved::Records(records) => records,
        };
        let mut pending = Vec::with_capacity(records.len());
        for r in &records {
            pending.push(self.producer.enqueue(self.outgoing(r)).await);
        }
        let (this, message, token) = (self.handles(), Arc::clone(&f.message), f.token.clone());
        tokio::spawn(async move {
            let mut shards = 0usize;
            for (r, first) in records.iter().zip(pending) {
                let acked = match first {
                    Ok(p) => p.acked().await,
                    Err(e) => Err(e),
                };
                match this.until_acked(r, acked, &token).await {
                    Some(Ok(())) => shards += 1,
                    Some(Err(e)) => {
                        tracing::error!(error = %e, partition = r.partition, "a dispatch record was refused by the broker");
                        return this.dead_letter(&message, "dispatch_rejected", &e.to_string(), &token).await;
                    }
                    None => return false,
                }
            }
            emit(MessageRouted { recipients: records.iter().map(|r| r.recipients).sum(), shards });
            true
        })
    }

    fn refuse(&self, f: &InFlight<Option<Resolved>>, reason: &'static str, detail: String) -> JoinHandle<bool> {
        let (this, message, token) = (self.handles(), Arc::clone(&f.message), f.token.clone());
        tokio::spawn(async move { this.dead_letter(&message, reason, &detail, &token).await })
    }

    fn outgoing<'a>(&'a self, r: &'a DispatchRecord) -> Outgoing<'a> {
        Outgoing {
            topic: &self.kafka.dispatch_topic,
            partition: Some(r.partition),
            key: &r.key,
            value: &r.value,
            headers: None,
        }
    }

    fn handles(&self) -> Handles {
        Handles { producer: self.producer.clone(), kafka: self.kafka.clone() }
    }

    /// Stores the offset of a delivered message (if its partition is still ours).
    fn delivered(&self, f: &InFlight<bool>, done: bool) {
        let (partition, offset) = (f.message.partition(), f.message.offset());
        if !done || f.token.is_cancelled() {
            tracing::debug!(partition, offset, "abandoned message, offset not stored");
            return;
        }
        crate::failpoint::crash_point("dispatcher::router_before_store_offset");
        if let Err(e) = self.consumer.store_offset(&self.kafka.messages_topic, partition, offset) {
            tracing::debug!(partition, offset, error = %e, "storing an offset failed (revoked?)");
        }
    }
}

/// What a delivery task needs of the router.
struct Handles {
    producer: AckedProducer,
    kafka: KafkaConfig,
}

impl Handles {
    /// Re-sends `r` after transient failures until acknowledged; a permanent refusal is
    /// returned; `None` when `cancel` fired between attempts.
    async fn until_acked(
        &self,
        r: &DispatchRecord,
        mut acked: Result<(), SendError>,
        cancel: &CancellationToken,
    ) -> Option<Result<(), SendError>> {
        let mut backoff = Backoff::default();
        loop {
            match acked {
                Ok(()) => return Some(Ok(())),
                Err(SendError::Permanent(m)) => return Some(Err(SendError::Permanent(m))),
                Err(SendError::Transient(e)) => {
                    emit(DispatchProduceFailed { partition: r.partition, error: &e });
                    if !backoff.pause(cancel).await {
                        return None;
                    }
                }
            }
            let out = Outgoing {
                topic: &self.kafka.dispatch_topic,
                partition: Some(r.partition),
                key: &r.key,
                value: &r.value,
                headers: None,
            };
            acked = self.producer.send(out).await;
        }
    }

    async fn dead_letter(
        &self,
        m: &OwnedMessage,
        reason: &'static str,
        detail: &str,
        cancel: &CancellationToken,
    ) -> bool {
        let headers = original_headers(m.headers());
        let refused = Refused {
            topic: &self.kafka.messages_topic,
            partition: m.partition(),
            offset: m.offset(),
            key: m.key(),
            value: m.payload(),
            headers: &headers,
            reason,
            detail,
        };
        let done = dead_letter(&self.producer, &self.kafka.dlq_topic, refused, cancel).await;
        if done {
            emit(MessageRefused);
        }
        done
    }
}

/// Decodes `m`, reads its conversation's members and builds the dispatch records. `None` when
/// `cancel` fired while the membership store was failing.
async fn resolve(
    m: &OwnedMessage,
    members: &dyn MembershipStore,
    shards: u16,
    cancel: &CancellationToken,
) -> Option<Resolved> {
    let record = match decode(m) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(partition = m.partition(), offset = m.offset(), error = %e, "undecodable message");
            return Some(Resolved::Refuse(e.reason(), e.to_string()));
        }
    };
    // `never` gives up, so only cancellation ends this without the members.
    let users = retry_store("read_members", cancel, never, || all_members(members, record.tenant, record.conversation))
        .await?
        .ok()?;
    match manifests(&record, &users, shards) {
        Ok(ms) => Some(Resolved::Records(ms.iter().map(encode).collect())),
        Err(why) => {
            tracing::error!(message_id = %record.message_id, %why, "message can not be dispatched");
            Some(Resolved::Refuse("too_many_recipients", why.to_string()))
        }
    }
}

/// Awaits the head task of a window (the caller checked it is not empty); `None` if the task
/// was cancelled (never: tasks are not aborted), a panic is propagated.
async fn head<T>(q: &mut VecDeque<InFlight<T>>) -> Option<T> {
    let f = q.front_mut().expect("checked not empty");
    match (&mut f.task).await {
        Ok(v) => Some(v),
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(_) => None,
        },
    }
}
