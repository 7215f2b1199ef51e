//! The `SeqHighWater` contract suite. Each function is one test; see
//! [`crate::seq_high_water_contract_suite`].

use std::sync::Arc;

use super::fixtures::*;
use super::SeqHighWaterHarness;
use crate::ids::ConversationSeq;
use crate::SeqHighWater;

/// A conversation that was never raised reads 0; a raise reads back; conversations and tenants
/// are apart.
pub async fn unknown_conversations_read_zero_and_raises_read_back(h: &dyn SeqHighWaterHarness) {
    let marks = h.open().await;
    let (t, c, other) = (fresh_tenant(), fresh_conversation(), fresh_conversation());
    assert_eq!(marks.high_water(t, c).await.unwrap(), ConversationSeq(0));
    marks.raise_high_water(t, c, ConversationSeq(64)).await.unwrap();
    assert_eq!(marks.high_water(t, c).await.unwrap(), ConversationSeq(64));
    assert_eq!(marks.high_water(t, other).await.unwrap(), ConversationSeq(0), "another conversation");
    let other_tenant = fresh_tenant();
    assert_eq!(marks.high_water(other_tenant, c).await.unwrap(), ConversationSeq(0), "another tenant");
}

/// A raise below the mark changes nothing, and raising to 0 is a no-op.
pub async fn the_mark_never_moves_down(h: &dyn SeqHighWaterHarness) {
    let marks = h.open().await;
    let (t, c) = (fresh_tenant(), fresh_conversation());
    marks.raise_high_water(t, c, ConversationSeq(1_000)).await.unwrap();
    marks.raise_high_water(t, c, ConversationSeq(999)).await.unwrap();
    marks.raise_high_water(t, c, ConversationSeq(0)).await.unwrap();
    assert_eq!(marks.high_water(t, c).await.unwrap(), ConversationSeq(1_000));
    marks.raise_high_water(t, c, ConversationSeq(1_001)).await.unwrap();
    assert_eq!(marks.high_water(t, c).await.unwrap(), ConversationSeq(1_001));
}

/// Concurrent raises, in any order, from stores opened separately (other processes), leave the
/// highest of them; another store reads it.
pub async fn concurrent_raises_leave_the_highest(h: &dyn SeqHighWaterHarness) {
    let (a, b) = (h.open().await, h.open().await);
    let (t, c) = (fresh_tenant(), fresh_conversation());
    let mut tasks = Vec::new();
    for i in (1..=40u64).rev() {
        let store: Arc<dyn SeqHighWater> = if i % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move { store.raise_high_water(t, c, ConversationSeq(i * 32)).await }));
    }
    for task in tasks {
        task.await.expect("raise task").expect("raise");
    }
    let reader = h.open().await;
    assert_eq!(reader.high_water(t, c).await.unwrap(), ConversationSeq(40 * 32));
}

/// The largest mark a backend takes (seqs stay below 2^53) reads back exactly.
pub async fn large_marks_read_back_exactly(h: &dyn SeqHighWaterHarness) {
    let marks = h.open().await;
    let (t, c) = (fresh_tenant(), fresh_conversation());
    let top = ConversationSeq((1 << 53) - 1);
    marks.raise_high_water(t, c, top).await.unwrap();
    assert_eq!(marks.high_water(t, c).await.unwrap(), top);
}
