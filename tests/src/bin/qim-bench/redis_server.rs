//! What a Redis deployment did over a measured stretch, read from each of its servers' `INFO`:
//! CPU, bytes appended to the AOF, and the time spent in each command (`INFO commandstats`,
//! which counts the commands a script calls as well as the script itself). The profile the
//! `writer` benchmark prints per send comes from here.

use std::collections::BTreeMap;

use anyhow::Context;
use redis::InfoDict;

/// The servers of a Redis deployment: the one server of a `redis://` URL, or every live node of
/// a cluster, masters and replicas (a replica's copying is part of what a write costs the
/// cluster).
pub struct RedisServers {
    servers: Vec<redis::aio::MultiplexedConnection>,
}

/// One command's totals (`cmdstat_<name>`), summed over the servers.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CommandTime {
    /// Calls so far.
    pub calls: u64,
    /// Microseconds spent executing them (parsing and I/O not included).
    pub usec: u64,
}

/// The deployment's counters at one moment (or, after [`ServerStats::since`], over a stretch).
#[derive(Clone, Debug, Default)]
pub struct ServerStats {
    /// CPU seconds, `used_cpu_user` + `used_cpu_sys` (the main process and its threads, without
    /// AOF rewrite children).
    pub cpu: f64,
    /// Bytes in the AOF (`aof_current_size`; 0 with the AOF off). Over a stretch, what was
    /// appended, or `None` when a rewrite started over meanwhile (the size then says nothing).
    pub aof_bytes: Option<i64>,
    /// AOF rewrites begun so far (`aof_rewrites`) and the size the last one left
    /// (`aof_base_size`): while both stay, the AOF only grew.
    aof_rewrites: (u64, i64),
    /// Per command (`evalsha`, `hset`, `config|get`, ...).
    pub commands: BTreeMap<String, CommandTime>,
}

impl ServerStats {
    /// What happened from `before` to `self`.
    pub fn since(&self, before: &Self) -> Self {
        let commands = self
            .commands
            .iter()
            .map(|(name, now)| {
                let then = before.commands.get(name).copied().unwrap_or_default();
                let delta = CommandTime {
                    calls: now.calls.saturating_sub(then.calls),
                    usec: now.usec.saturating_sub(then.usec),
                };
                (name.clone(), delta)
            })
            .filter(|(_, d)| d.calls > 0)
            .collect();
        let aof_bytes = match (self.aof_bytes, before.aof_bytes) {
            (Some(now), Some(then)) if self.aof_rewrites == before.aof_rewrites && now >= then => Some(now - then),
            _ => None,
        };
        Self { cpu: self.cpu - before.cpu, aof_bytes, aof_rewrites: (0, 0), commands }
    }

    /// Adds the counters of `other`, another stretch, to these (the AOF bytes are known only
    /// when they are known for both).
    pub fn add(&mut self, other: &Self) {
        self.cpu += other.cpu;
        self.aof_bytes = self.aof_bytes.zip(other.aof_bytes).map(|(a, b)| a + b);
        for (name, t) in &other.commands {
            let mine = self.commands.entry(name.clone()).or_default();
            mine.calls += t.calls;
            mine.usec += t.usec;
        }
    }

    /// The commands that took the most time, at most `n`, slowest first.
    pub fn top_commands(&self, n: usize) -> Vec<(&str, CommandTime)> {
        let mut all: Vec<(&str, CommandTime)> = self.commands.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        all.sort_by_key(|(_, t)| std::cmp::Reverse(t.usec));
        all.truncate(n);
        all
    }

    /// Adds one server's `INFO` to these counters.
    fn add_server(&mut self, info: &InfoDict) {
        let number = |key: &str| info.get::<String>(key).and_then(|v| v.trim().parse::<f64>().ok()).unwrap_or(0.0);
        self.cpu += number("used_cpu_user") + number("used_cpu_sys");
        self.aof_bytes = Some(self.aof_bytes.unwrap_or(0) + number("aof_current_size") as i64);
        self.aof_rewrites.0 += number("aof_rewrites") as u64;
        self.aof_rewrites.1 += number("aof_base_size") as i64;
        for (key, value) in info.iter() {
            let Some(name) = key.strip_prefix("cmdstat_") else { continue };
            let Ok(text) = redis::from_redis_value_ref::<String>(value) else { continue };
            let t = parse_command_time(&text);
            let mine = self.commands.entry(name.to_owned()).or_default();
            mine.calls += t.calls;
            mine.usec += t.usec;
        }
    }
}

/// `calls=12,usec=345,usec_per_call=28.75,...` → calls and usec (absent fields count 0).
fn parse_command_time(text: &str) -> CommandTime {
    let mut t = CommandTime::default();
    for field in text.split(',') {
        match field.split_once('=') {
            Some(("calls", v)) => t.calls = v.parse().unwrap_or(0),
            Some(("usec", v)) => t.usec = v.parse().unwrap_or(0),
            _ => {}
        }
    }
    t
}

impl RedisServers {
    /// Connects to every server of the deployment at `url`.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let mut servers = Vec::new();
        for server in qim_testkit::redis::servers(url).await? {
            let client = redis::Client::open(server.as_str()).with_context(|| format!("redis url {server:?}"))?;
            servers.push(
                client.get_multiplexed_async_connection().await.with_context(|| format!("connecting to {server}"))?,
            );
        }
        Ok(Self { servers })
    }

    /// How many servers are read (1 for a single server).
    pub fn servers(&self) -> usize {
        self.servers.len()
    }

    /// CPU seconds the servers have used so far, summed.
    pub async fn seconds(&mut self) -> anyhow::Result<f64> {
        Ok(self.stats().await?.cpu)
    }

    /// The counters of every server now, summed.
    pub async fn stats(&mut self) -> anyhow::Result<ServerStats> {
        let mut total = ServerStats::default();
        for server in &mut self.servers {
            let info: InfoDict = redis::cmd("INFO")
                .arg("cpu")
                .arg("persistence")
                .arg("commandstats")
                .query_async(server)
                .await
                .context("reading INFO cpu, persistence and commandstats")?;
            total.add_server(&info);
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_stats_are_read_and_subtracted() {
        let before = "# Commandstats\r\ncmdstat_evalsha:calls=10,usec=100,usec_per_call=10.00,rejected_calls=0\r\n\
                      # CPU\r\nused_cpu_user:1.5\r\nused_cpu_sys:0.5\r\n# Persistence\r\naof_current_size:1000\r\n";
        let after = "cmdstat_evalsha:calls=30,usec=400,usec_per_call=13.33\r\ncmdstat_hset:calls=5,usec=7\r\n\
                     used_cpu_user:2.5\r\nused_cpu_sys:1.0\r\naof_current_size:4000\r\n";
        let read = |text: &str| {
            let mut s = ServerStats::default();
            s.add_server(&InfoDict::new(text));
            s
        };
        let delta = read(after).since(&read(before));
        assert!((delta.cpu - 1.5).abs() < 1e-9, "{}", delta.cpu);
        assert_eq!(delta.aof_bytes, Some(3000));
        let rewritten = read(&format!("{after}aof_rewrites:1\r\n")).since(&read(before));
        assert_eq!(rewritten.aof_bytes, None, "a rewrite between the two says nothing of what was appended");
        let finished = read(&format!("{after}aof_base_size:900\r\n")).since(&read(before));
        assert_eq!(finished.aof_bytes, None, "nor does one that began before and ended between them");
        assert_eq!(delta.commands["evalsha"], CommandTime { calls: 20, usec: 300 });
        assert_eq!(delta.top_commands(1), vec![("evalsha", CommandTime { calls: 20, usec: 300 })]);
        assert_eq!(delta.commands.len(), 2);
    }
}
