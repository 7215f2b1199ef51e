//! What each path of `qim-bench writer` cost over its rounds: rate, latency and CPU per send of
//! this process, the Redis server and the Kafka broker.

use super::redis_server::{RedisServers, ServerStats};
use super::{cpu, ms, Measurement};

/// CPU seconds used so far by this process (the bench client *and* the in-process writer), the
/// Redis servers (with their AOF growth and time per command) and the Kafka broker (when it runs
/// on this machine).
#[derive(Clone, Default)]
pub struct Cpu {
    /// This process, user + system.
    pub process: f64,
    /// The Redis servers (CPU of each one's main process, without its AOF rewrite children).
    pub redis: ServerStats,
    /// The Kafka broker, when found on this machine.
    pub kafka: Option<f64>,
}

impl Cpu {
    /// The counters now.
    pub async fn now(redis: &mut RedisServers, kafka_pid: Option<u32>) -> anyhow::Result<Self> {
        Ok(Self {
            process: cpu::own_seconds(),
            redis: redis.stats().await?,
            kafka: kafka_pid.and_then(cpu::process_seconds),
        })
    }

    /// What was used from `before` to `self`.
    pub fn since(self, before: &Self) -> Self {
        Self {
            process: self.process - before.process,
            redis: self.redis.since(&before.redis),
            kafka: self.kafka.zip(before.kafka).map(|(a, b)| a - b),
        }
    }

    fn add(&mut self, other: Self) {
        self.process += other.process;
        let aof = self.redis.aof_bytes.unwrap_or(0) + other.redis.aof_bytes.unwrap_or(0);
        self.redis.add(&other.redis);
        self.redis.aof_bytes = Some(aof);
        self.kafka = match (self.kafka, other.kafka) {
            (Some(a), Some(b)) => Some(a + b),
            (None, b) => b,
            (a, None) => a,
        };
    }
}

/// The Kafka broker's pid, when it runs on this machine: the local stack's (its pid file), else
/// the first `kafka.Kafka` process (another stack's broker, a fault stack's, may run beside it).
pub fn kafka_pid() -> Option<u32> {
    cpu::stack_pids()
        .into_iter()
        .find(|(name, _)| name == "kafka")
        .map(|(_, pid)| pid)
        .or_else(|| cpu::pid_with_argument("kafka.Kafka"))
}

/// What one path did over its rounds.
#[derive(Default)]
pub struct Totals {
    ops: u64,
    wall: f64,
    p50: Vec<f64>,
    p99: Vec<f64>,
    /// Operations over the rounds in which no AOF rewrite began (the AOF's growth is known).
    aof_ops: u64,
    /// CPU used over the rounds (the AOF's growth: over those rounds only).
    pub cpu: Cpu,
}

impl Totals {
    /// Adds one round: `ops` operations measured as `m`, using `cpu`.
    pub fn add(&mut self, ops: u64, m: &Measurement, cpu: Cpu) {
        self.ops += ops;
        self.wall += ops as f64 / m.per_second;
        self.p50.push(ms(m.p50));
        self.p99.push(ms(m.p99));
        if cpu.redis.aof_bytes.is_some() {
            self.aof_ops += ops;
        }
        self.cpu.add(cpu);
    }

    /// Operations per second over all rounds.
    pub fn per_second(&self) -> f64 {
        self.ops as f64 / self.wall
    }

    /// The median round's p50.
    pub fn p50(&self) -> f64 {
        let mut v = self.p50.clone();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }

    /// The worst round's p99.
    pub fn p99(&self) -> f64 {
        self.p99.iter().copied().fold(0.0, f64::max)
    }

    /// `seconds` of CPU as microseconds per operation.
    pub fn micros(&self, seconds: f64) -> f64 {
        seconds * 1e6 / self.ops as f64
    }

    /// The broker's CPU per operation, when measured.
    pub fn kafka_micros(&self) -> Option<f64> {
        self.cpu.kafka.map(|k| self.micros(k))
    }

    /// CPU per operation of this process, Redis and (when measured) Kafka together.
    pub fn total_micros(&self) -> f64 {
        self.micros(self.cpu.process + self.cpu.redis.cpu + self.cpu.kafka.unwrap_or(0.0))
    }

    /// Bytes appended to the AOF per operation (over every server), over the rounds without a
    /// rewrite; `None` when every round had one.
    pub fn aof_bytes_per_op(&self) -> Option<f64> {
        (self.aof_ops > 0).then(|| self.cpu.redis.aof_bytes.unwrap_or(0) as f64 / self.aof_ops as f64)
    }

    /// The Redis commands that took the most time, per operation: `name calls×/µs`, slowest
    /// first (a script's own `redis.call`s are counted under their names and inside the
    /// script's time).
    pub fn redis_profile(&self, n: usize) -> Vec<(String, f64, f64)> {
        let per_op = |v: u64| v as f64 / self.ops as f64;
        self.cpu
            .redis
            .top_commands(n)
            .into_iter()
            .map(|(name, t)| (name.to_owned(), per_op(t.calls), per_op(t.usec)))
            .collect()
    }
}
