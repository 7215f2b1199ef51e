//! The deterministic shape of a workload: who talks where, what is sent, what is retried.

use rand::{Rng as _, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// One conversation and its members (hex ids).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Conversation {
    /// Conversation id, hex.
    pub id: String,
    /// Member ids, hex.
    pub members: Vec<String>,
}

/// One send.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlannedSend {
    /// Conversation id, hex.
    pub conversation: String,
    /// Sender (a member), hex.
    pub sender: String,
    /// The idempotency key.
    pub client_message_id: String,
    /// Body text.
    pub body: String,
    /// Retention class name.
    pub retention: String,
    /// Whether the client sends it twice (an identical retry).
    pub retry: bool,
}

/// A whole workload.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Plan {
    /// Tenant id, hex.
    pub tenant: String,
    /// Conversations with their members.
    pub conversations: Vec<Conversation>,
    /// Sends, in issue order.
    pub sends: Vec<PlannedSend>,
}

/// The seeded generator of a plan, so a seed reproduces a workload.
struct Rng(ChaCha8Rng);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(ChaCha8Rng::seed_from_u64(seed))
    }

    /// A random 16-byte id in hex.
    fn id(&mut self) -> String {
        hex::encode(self.0.random::<[u8; 16]>())
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    fn below(&mut self, n: usize) -> usize {
        self.0.random_range(0..n.max(1))
    }
}

impl Plan {
    /// `messages` sends over `pairs` 1:1 conversations and one group per entry of
    /// `group_sizes`; one send in `retry_every` is retried; retention is 80% `default`, 10%
    /// `ephemeral_24h`, 10% `compliance_hold`. Groups get a fifth of the sends.
    pub fn generate(seed: u64, messages: usize, pairs: usize, group_sizes: &[usize], retry_every: usize) -> Self {
        let mut rng = Rng::new(seed);
        let tenant = rng.id();
        let mut conversations = Vec::new();
        for _ in 0..pairs {
            conversations.push(Conversation { id: rng.id(), members: vec![rng.id(), rng.id()] });
        }
        for &size in group_sizes {
            let members = (0..size.max(2)).map(|_| rng.id()).collect();
            conversations.push(Conversation { id: rng.id(), members });
        }
        let groups = group_sizes.len();
        let sends = (0..messages)
            .map(|n| {
                let c = if groups > 0 && (n % 5 == 4 || pairs == 0) {
                    &conversations[pairs + rng.below(groups)]
                } else {
                    &conversations[rng.below(pairs)]
                };
                let retention = match rng.below(10) {
                    0 => "ephemeral_24h",
                    1 => "compliance_hold",
                    _ => "default",
                };
                PlannedSend {
                    conversation: c.id.clone(),
                    sender: c.members[rng.below(c.members.len())].clone(),
                    client_message_id: format!("demo-{seed}-{n}"),
                    body: format!("message {n} of the demo workload"),
                    retention: retention.to_owned(),
                    retry: retry_every > 0 && n % retry_every == 0,
                }
            })
            .collect();
        Self { tenant, conversations, sends }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_reproduces_its_plan_and_senders_are_members() {
        let a = Plan::generate(7, 500, 20, &[50, 300], 10);
        let b = Plan::generate(7, 500, 20, &[50, 300], 10);
        assert_eq!(serde_json::to_string(&a).unwrap(), serde_json::to_string(&b).unwrap());
        for s in &a.sends {
            let c = a.conversations.iter().find(|c| c.id == s.conversation).unwrap();
            assert!(c.members.contains(&s.sender));
        }
        assert_eq!(a.sends.iter().filter(|s| s.retry).count(), 50);
        assert!(a.sends.iter().any(|s| s.retention == "compliance_hold"));
        let group_sends = a.sends.iter().filter(|s| a.conversations[20..].iter().any(|c| c.id == s.conversation));
        assert_eq!(group_sends.count(), 100, "a fifth of the sends go to groups");
    }
}
