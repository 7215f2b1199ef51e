//! The message ids this writer mints, and the writer-id lease they carry.
//!
//! An id has UUIDv7's layout (RFC 9562): 48 bits of Unix milliseconds, the version (7), 12 bits
//! that hold this instance's leased writer id (10 bits, [`WRITER_IDS`]), the variant, and 62
//! bits of a counter that starts at a random value. While the lease is held no other instance
//! mints with the same writer id, and this one never repeats a counter value within 2^62 ids,
//! so two instances behind one address never mint the same id, whatever their clocks say.
//! Without a lease (the Scylla backend, which connects no Redis) the writer-id bits are random,
//! as in a plain UUIDv7.
//!
//! A lease that could not be renewed within its life fences the writer: [`MessageIds::mint`]
//! answers `Unavailable` (a 503, and `/readyz` fails) until [`keep`] renews it or takes a new
//! id; sends retried meanwhile land on another instance.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use qim_runtime::events::emit;
use qim_store::error::StoreResult;
use qim_store::ids::{MessageId, UnixMillis};
use qim_store::redis::{Renewal, WriterIdLease, WRITER_IDS};
use tokio_util::sync::CancellationToken;

use crate::events::{WriterIdReleased, WriterIdRenewed};

/// Mints message ids (see the module docs). Cheap to share.
#[derive(Debug)]
pub struct MessageIds {
    lease: Option<Arc<WriterIdLease>>,
    counter: AtomicU64,
}

impl MessageIds {
    /// Ids carrying `lease`'s writer id (random bits in its place when `None`).
    pub fn new(lease: Option<Arc<WriterIdLease>>) -> Self {
        Self { lease, counter: AtomicU64::new(random_u64()) }
    }

    /// The lease, if any.
    pub fn lease(&self) -> Option<&Arc<WriterIdLease>> {
        self.lease.as_ref()
    }

    /// A new id stamped `at`; `Unavailable` while the lease is fenced.
    pub fn mint(&self, at: UnixMillis) -> StoreResult<MessageId> {
        let writer = match &self.lease {
            Some(lease) => u64::from(lease.current()?.0),
            None => random_u64() % u64::from(WRITER_IDS),
        };
        let count = self.counter.fetch_add(1, Ordering::Relaxed) & ((1 << 62) - 1);
        Ok(MessageId(layout(at, writer, count)))
    }
}

/// UUIDv7's layout with `writer` (below [`WRITER_IDS`]) in `rand_a` and `count` (62 bits) in
/// `rand_b`.
fn layout(at: UnixMillis, writer: u64, count: u64) -> [u8; 16] {
    let millis = u64::try_from(at.0).unwrap_or(0) & ((1 << 48) - 1);
    let high = (millis << 16) | (0x7 << 12) | (writer & 0x0fff);
    let low = (0b10 << 62) | count;
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&high.to_be_bytes());
    bytes[8..].copy_from_slice(&low.to_be_bytes());
    bytes
}

fn random_u64() -> u64 {
    // uuid's v4 is the random source the writer has already.
    uuid::Uuid::new_v4().as_u64_pair().0
}

/// Renews `lease` every third of its life until `shutdown`, then gives it back. A failed
/// renewal is reported and tried again at the next tick; a lost id is replaced by the renewal.
pub async fn keep(lease: Arc<WriterIdLease>, shutdown: CancellationToken) {
    let every = lease.renew_every();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(every) => {}
        }
        match lease.renew().await {
            Ok(Renewal::Held(_)) => emit(WriterIdRenewed::Held),
            Ok(Renewal::Replaced { lost, now }) => emit(WriterIdRenewed::Replaced { lost, now }),
            Err(error) => emit(WriterIdRenewed::Failed { error }),
        }
    }
    emit(WriterIdReleased { result: lease.release().await });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_carry_time_version_writer_variant_and_count() {
        let id = MessageId(layout(UnixMillis(0x0123_4567_89ab), 1023, (1 << 62) - 1));
        let uuid = uuid::Uuid::from_bytes(id.0);
        assert_eq!(uuid.get_version_num(), 7);
        assert_eq!(uuid.get_variant(), uuid::Variant::RFC4122);
        assert_eq!(&id.0[..6], &[0x01, 0x23, 0x45, 0x67, 0x89, 0xab]);
        assert_eq!(u16::from_be_bytes([id.0[6], id.0[7]]) & 0x0fff, 1023);
        assert_eq!(u64::from_be_bytes(id.0[8..].try_into().unwrap()) & ((1 << 62) - 1), (1 << 62) - 1);
    }

    #[test]
    fn one_minter_never_repeats_and_two_writers_never_collide() {
        let (a, b) = (MessageIds::new(None), MessageIds::new(None));
        // Two writers with the same counter and clock differ by their writer ids.
        a.counter.store(7, Ordering::Relaxed);
        assert_ne!(layout(UnixMillis(5), 1, 7), layout(UnixMillis(5), 2, 7));
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            assert!(seen.insert(a.mint(UnixMillis(5)).unwrap()));
        }
        assert!(b.mint(UnixMillis(5)).is_ok());
    }
}
