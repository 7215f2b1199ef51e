//! qim-mailbox-dispatcher: turns committed messages into per-user mailbox entries over 64 lanes
//! per shard, and serves the mailbox read API.
//!
//! ```text
//! qim.messages.v1 ──▶ router ──▶ qim.mailbox.dispatch.v1 (partition = shard)
//!                     members → one dispatch record per shard, recipients frozen
//!                                   │
//!                                   ▼
//!                     shard worker: offset → canonical MailboxSeq → 64 lanes → chunks of ≤256
//!                                   → per-user entries → page-wise lane watermarks
//!                                   │
//!                     read API: entries after a cursor, never past the user's lane watermark
//! ```
//!
//! - [`config`]: the documented environment and its typed form;
//! - [`router`]: messages → dispatch records ([`router::route`] is the pure part);
//! - [`worker`]: dispatch records → mailbox entries and watermarks ([`worker::window`] is the
//!   pure bookkeeping, [`worker::pipeline`] the scheduling, [`worker::steps`] the store steps);
//! - [`api`]: the mailbox read API; [`kafka`]: consumer/producer plumbing; [`retry`]: backoff;
//! - [`backend`]: opening the stores; [`serve`]: startup, run and shutdown; [`replay`]: the
//!   groups rewound and the topics dispatched again; [`metrics`]: names;
//!   [`events`]: what the dispatcher reports, each event's log line and metrics in one place;
//! - [`failpoint`]: the crash points the fault-injection suite arms.
//!
//! Retention: entries expire `QIM_MAILBOX_RETENTION_DAYS` after their message was created (to
//! the end of that UTC day); the store keeps a per-user proof of what expired, so a cursor in an
//! expired region is answered `CursorExpired` (HTTP 410), never with a silent gap.

pub mod api;
pub mod backend;
pub mod config;
pub mod events;
pub mod failpoint;
pub mod kafka;
pub mod metrics;
pub mod replay;
pub mod retry;
pub mod router;
pub mod serve;
pub mod worker;
