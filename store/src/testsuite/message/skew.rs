//! Writers whose clocks disagree, sending into one conversation: the check each backend's
//! hybrid-logical-clock test runs on its own pair of stores.

use std::sync::Arc;

use super::commit_fully;
use crate::clock::ManualClock;
use crate::message::Commit;
use crate::testsuite::fixtures::{fresh_conversation, fresh_tenant, request, user};
use crate::MessageStore;

/// Sends `rounds` messages into one fresh conversation through `writers[0]` and `writers[1]` in
/// turn (each of `clocks` moving on a millisecond per send), then `2 * rounds` through both at
/// once, and asserts that `created_at` never decreases as the seq grows (the first send of the
/// second writer included). Returns every commit.
pub async fn skewed_writers_keep_created_at_in_seq_order<S>(
    writers: [&S; 2],
    clocks: &[Arc<ManualClock>; 2],
    rounds: u32,
) -> Vec<Commit>
where
    S: MessageStore + Clone + 'static,
{
    let (tenant, conversation) = (fresh_tenant(), fresh_conversation());
    let mut commits = Vec::new();
    for n in 0..rounds {
        let r = request(tenant, user(1 + n % 2), &format!("alt-{n}"), conversation, b"hi");
        commits.push(commit_fully(writers[(n % 2) as usize], &r).await);
        clocks.iter().for_each(|c| c.advance(1));
    }
    if commits.len() >= 2 {
        assert!(commits[1].intent.created_at >= commits[0].intent.created_at, "the second writer went back");
    }
    let sends = (0..2 * rounds).map(|n| {
        let store = writers[(n % 2) as usize].clone();
        let r = request(tenant, user(1 + n % 2), &format!("together-{n}"), conversation, b"hi");
        tokio::spawn(async move { commit_fully(&store, &r).await })
    });
    for send in sends.collect::<Vec<_>>() {
        commits.push(send.await.expect("a send task"));
    }
    assert_eq!(commits.len(), 3 * rounds as usize);
    assert_created_at_in_seq_order(commits.clone());
    commits
}

/// Asserts that `commits`, ordered by seq, never share a seq nor go back in `created_at`,
/// naming the first pair that does.
pub fn assert_created_at_in_seq_order(mut commits: Vec<Commit>) {
    commits.sort_by_key(|c| c.intent.seq);
    for w in commits.windows(2) {
        let (a, b) = (&w[0].intent, &w[1].intent);
        assert!(a.seq < b.seq, "seq {} issued twice", a.seq.0);
        assert!(
            a.created_at <= b.created_at,
            "seq {} has created_at {} but the later seq {} has {}",
            a.seq.0,
            a.created_at.0,
            b.seq.0,
            b.created_at.0
        );
    }
}
