//! The `SeqHighWater` contract suite. Each function is one test; see
//! [`crate::seq_high_water_contract_suite`].

use std::sync::Arc;

use super::fixtures::*;
use super::SeqHighWaterHarness;
use crate::error::StoreError;
use crate::ids::ConversationSeq;
use crate::{HighWater, SeqHighWater};

fn mark(through: u64, holder: &str) -> HighWater {
    HighWater { through: ConversationSeq(through), holder: holder.to_owned() }
}

/// A conversation never moved reads the default mark; a move reads back with its holder;
/// conversations and tenants are apart.
pub async fn unknown_conversations_read_zero_and_moves_read_back(h: &dyn SeqHighWaterHarness) {
    let marks = h.open().await;
    let (t, c, other) = (fresh_tenant(), fresh_conversation(), fresh_conversation());
    assert_eq!(marks.high_water(t, c).await.unwrap(), HighWater::default());
    assert_eq!(marks.advance_high_water(t, c, &HighWater::default(), &mark(64, "a")).await.unwrap(), None);
    assert_eq!(marks.high_water(t, c).await.unwrap(), mark(64, "a"));
    assert_eq!(marks.high_water(t, other).await.unwrap(), HighWater::default(), "another conversation");
    let other_tenant = fresh_tenant();
    assert_eq!(marks.high_water(other_tenant, c).await.unwrap(), HighWater::default(), "another tenant");
}

/// A move from anything but the current mark (another value, another holder, the default mark
/// of one already moved) changes nothing and answers the current mark.
pub async fn a_move_from_a_stale_mark_is_refused(h: &dyn SeqHighWaterHarness) {
    let marks = h.open().await;
    let (t, c) = (fresh_tenant(), fresh_conversation());
    assert_eq!(marks.advance_high_water(t, c, &HighWater::default(), &mark(64, "a")).await.unwrap(), None);
    let current = Some(mark(64, "a"));
    assert_eq!(marks.advance_high_water(t, c, &HighWater::default(), &mark(65, "b")).await.unwrap(), current);
    assert_eq!(marks.advance_high_water(t, c, &mark(64, "b"), &mark(128, "b")).await.unwrap(), current);
    assert_eq!(marks.advance_high_water(t, c, &mark(63, "a"), &mark(128, "a")).await.unwrap(), current);
    assert_eq!(marks.high_water(t, c).await.unwrap(), mark(64, "a"));
    assert_eq!(marks.advance_high_water(t, c, &mark(64, "a"), &mark(128, "b")).await.unwrap(), None);
    assert_eq!(marks.high_water(t, c).await.unwrap(), mark(128, "b"));
}

/// A move down (or to the same value) is refused as invalid input, changing nothing; a raise
/// below the mark changes nothing, and raising clears the holder.
pub async fn the_mark_never_moves_down(h: &dyn SeqHighWaterHarness) {
    let marks = h.open().await;
    let (t, c) = (fresh_tenant(), fresh_conversation());
    marks.raise_high_water(t, c, ConversationSeq(1_000)).await.unwrap();
    assert_eq!(marks.high_water(t, c).await.unwrap(), mark(1_000, ""));
    let down = marks.advance_high_water(t, c, &mark(1_000, ""), &mark(999, "a")).await;
    assert!(matches!(down, Err(StoreError::InvalidInput(_))), "{down:?}");
    let same = marks.advance_high_water(t, c, &mark(1_000, ""), &mark(1_000, "a")).await;
    assert!(matches!(same, Err(StoreError::InvalidInput(_))), "{same:?}");
    marks.raise_high_water(t, c, ConversationSeq(999)).await.unwrap();
    marks.raise_high_water(t, c, ConversationSeq(0)).await.unwrap();
    assert_eq!(marks.high_water(t, c).await.unwrap(), mark(1_000, ""));
    assert_eq!(marks.advance_high_water(t, c, &mark(1_000, ""), &mark(1_064, "a")).await.unwrap(), None);
    marks.raise_high_water(t, c, ConversationSeq(1_001)).await.unwrap();
    assert_eq!(marks.high_water(t, c).await.unwrap(), mark(1_064, "a"), "a raise below changes nothing");
    marks.raise_high_water(t, c, ConversationSeq(2_000)).await.unwrap();
    assert_eq!(marks.high_water(t, c).await.unwrap(), mark(2_000, ""));
}

/// Concurrent moves from one mark, from stores opened separately (other processes): exactly
/// one lands, every other answers the mark it left.
pub async fn concurrent_moves_from_one_mark_land_once(h: &dyn SeqHighWaterHarness) {
    let (a, b) = (h.open().await, h.open().await);
    let (t, c) = (fresh_tenant(), fresh_conversation());
    a.advance_high_water(t, c, &HighWater::default(), &mark(64, "start")).await.unwrap();
    let mut tasks = Vec::new();
    for i in 1..=12u64 {
        let store: Arc<dyn SeqHighWater> = if i % 2 == 0 { a.clone() } else { b.clone() };
        let to = mark(64 + i * 64, &format!("holder-{i}"));
        tasks.push(tokio::spawn(async move {
            let answer = store.advance_high_water(t, c, &mark(64, "start"), &to).await.expect("move");
            (to, answer)
        }));
    }
    let mut landed = Vec::new();
    let mut answers = Vec::new();
    for task in tasks {
        match task.await.expect("move task") {
            (to, None) => landed.push(to),
            (_, Some(current)) => answers.push(current),
        }
    }
    assert_eq!(landed.len(), 1, "exactly one move lands: {landed:?}");
    let reader = h.open().await;
    assert_eq!(reader.high_water(t, c).await.unwrap(), landed[0]);
    assert!(answers.iter().all(|a| *a == landed[0]), "refused moves answer the mark: {answers:?}");
}

/// Concurrent raises, in any order, from stores opened separately, leave the highest of them.
pub async fn concurrent_raises_leave_the_highest(h: &dyn SeqHighWaterHarness) {
    let (a, b) = (h.open().await, h.open().await);
    let (t, c) = (fresh_tenant(), fresh_conversation());
    let mut tasks = Vec::new();
    for i in (1..=12u64).rev() {
        let store: Arc<dyn SeqHighWater> = if i % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move { store.raise_high_water(t, c, ConversationSeq(i * 32)).await }));
    }
    for task in tasks {
        task.await.expect("raise task").expect("raise");
    }
    let reader = h.open().await;
    assert_eq!(reader.high_water(t, c).await.unwrap(), mark(12 * 32, ""));
}

/// The largest mark a backend takes (seqs stay below 2^53) reads back exactly.
pub async fn large_marks_read_back_exactly(h: &dyn SeqHighWaterHarness) {
    let marks = h.open().await;
    let (t, c) = (fresh_tenant(), fresh_conversation());
    let top = ConversationSeq((1 << 53) - 1);
    marks.raise_high_water(t, c, top).await.unwrap();
    assert_eq!(marks.high_water(t, c).await.unwrap().through, top);
}
