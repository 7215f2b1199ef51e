//! Loopback ports for the services a test starts, chosen below the kernel's ephemeral range.
//!
//! A port that `bind(0)` hands out comes from the ephemeral range (`ip_local_port_range`,
//! 32768–60999 here), from which every outgoing connection on the machine also takes its local
//! port. A test that picks one, lets it go and starts a service on it, or restarts a service on
//! the same port, can find it taken by another test's client connection in between: with eight
//! tests at once a writer restarted on its port failed with "Address already in use". Ports
//! below the ephemeral range are never given to outgoing connections, so only another test
//! choosing the same port at the same moment could take one, and [`free_port`] picks at random
//! among thousands.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::net::TcpListener;
use std::ops::Range;

/// Where [`free_port`] picks from: above every port of the shared and the fault stack (up to
/// 19093), below those of the second stack `deploy/local/README.md` shows (from 26379) and below
/// the ephemeral range.
pub const RANGE: Range<u16> = 20_000..26_000;

/// How many random ports [`free_port`] tries before it takes one from `bind(0)`.
const TRIES: usize = 64;

/// The first port of the kernel's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`),
/// or `None` where it can not be read.
fn ephemeral_start() -> Option<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

/// A random number: the standard library's hasher keys are random per process and differ for
/// every `RandomState` (no generator crate for one number).
fn random() -> u64 {
    RandomState::new().build_hasher().finish()
}

/// A loopback TCP port that is free now and that no outgoing connection will take: a random
/// one of [`RANGE`] below the ephemeral range, or (where that range starts too low to leave
/// room, or every try was taken) one from `bind(0)`.
///
/// # Panics
///
/// When not even `bind(0)` on 127.0.0.1 works.
pub fn free_port() -> u16 {
    let end = ephemeral_start().map_or(RANGE.end, |start| start.min(RANGE.end));
    if end > RANGE.start {
        let span = u64::from(end - RANGE.start);
        for _ in 0..TRIES {
            let port = RANGE.start + u16::try_from(random() % span).expect("below the span");
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a loopback port");
    listener.local_addr().expect("a bound listener's address").port()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_free_and_outside_the_ephemeral_range() {
        let start = ephemeral_start().unwrap_or(u16::MAX);
        let ports: Vec<u16> = (0..20).map(|_| free_port()).collect();
        for port in &ports {
            assert!(RANGE.contains(port) || start <= RANGE.start, "{port} (ephemeral from {start})");
            assert!(*port < start, "{port} is in the ephemeral range from {start}");
            TcpListener::bind(("127.0.0.1", *port)).expect("the port is free");
        }
        let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
        assert!(distinct.len() > 15, "random picks: {ports:?}");
    }
}
