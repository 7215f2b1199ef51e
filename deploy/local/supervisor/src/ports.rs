//! Ports: whether one is taken (before a start), and by whom (for the message), and whether a
//! server accepts connections on one.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::Command;
use std::time::Duration;

use anyhow::bail;

use crate::layout::{Service, Settings, HOST};
use crate::log;

/// Fails, naming the squatter, if something listens on a port `svc` needs.
///
/// # Errors
///
/// A port of `svc` is taken (by anything: this is only called when our `svc` is not running).
pub fn assert_free(settings: &Settings, svc: Service) -> anyhow::Result<()> {
    for port in settings.ports.of(svc) {
        if port_taken(port) {
            log!("port {port} (needed by {svc}) is already in use by another process:");
            eprint!("{}", who_listens(port));
            bail!("free port {port} (e.g. stop the system service) and retry");
        }
    }
    Ok(())
}

/// Whether something listens on TCP `port` (any address, IPv4 or IPv6), from `/proc/net/tcp{,6}`.
pub fn port_taken(port: u16) -> bool {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .any(|table| listening_ports(&table).any(|p| p == port))
}

/// The local ports of the `LISTEN` (state `0A`) sockets in a `/proc/net/tcp` table.
fn listening_ports(table: &str) -> impl Iterator<Item = u16> + '_ {
    listening(table).map(|(_, port)| port)
}

/// The local `(address in hex, port)` of the `LISTEN` sockets in a `/proc/net/tcp{,6}` table.
fn listening(table: &str) -> impl Iterator<Item = (&str, u16)> + '_ {
    table.lines().skip(1).filter_map(|line| {
        let mut fields = line.split_whitespace();
        let local = fields.nth(1)?;
        let state = fields.nth(1)?;
        let (addr, port) = local.split_once(':')?;
        (state == "0A").then(|| Some((addr, u16::from_str_radix(port, 16).ok()?))).flatten()
    })
}

/// Whether something listens on `addr:port` (or on the wildcard address, IPv4 or IPv6, or on
/// `addr` as an IPv4-mapped IPv6 address): a server of ours could not bind it. A listener on
/// another loopback address with the same port does not count (127.0.0.2:9142 beside
/// 127.0.0.1:9142).
pub fn taken_on(addr: Ipv4Addr, port: u16) -> bool {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .any(|table| listening(&table).any(|(hex, p)| p == port && blocks(hex, addr)))
}

/// Whether a listener on the `/proc/net/tcp{,6}` address `hex` keeps `addr` from being bound.
fn blocks(hex: &str, addr: Ipv4Addr) -> bool {
    // Each 32-bit word of the address (network byte order in memory) is printed as the host reads it.
    let words: Option<Vec<u32>> =
        (0..hex.len() / 8).map(|i| u32::from_str_radix(hex.get(i * 8..i * 8 + 8)?, 16).ok()).collect();
    let Some(words) = words else { return true };
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    match bytes.len() {
        4 => {
            let ip = Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]);
            ip.is_unspecified() || ip == addr
        }
        16 => {
            let ip = Ipv6Addr::from(<[u8; 16]>::try_from(bytes.as_slice()).unwrap_or_default());
            ip.is_unspecified() || ip.to_ipv4_mapped() == Some(addr)
        }
        _ => true,
    }
}

/// The `ss` lines of whoever listens on `port` (with the process, where we may see it), for the
/// message that names a squatter.
pub fn who_listens(port: u16) -> String {
    Command::new("ss")
        .args(["-Hltnp", &format!("sport = :{port}")])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// Whether a TCP connection to [`HOST`]`:port` is accepted (within a second).
pub fn port_open(port: u16) -> bool {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    debug_assert_eq!(addr.ip().to_string(), HOST);
    std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_sockets_are_read_from_the_table() {
        let table =
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
           0: 0100007F:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n\
           1: 0100007F:A2C4 0100007F:18EB 01 00000000:00000000 00:00000000 00000000     0        0 2 1\n";
        assert_eq!(listening_ports(table).collect::<Vec<_>>(), [6379]);
        let lo = Ipv4Addr::LOCALHOST;
        let two = Ipv4Addr::new(127, 0, 0, 2);
        assert!(blocks("0100007F", lo) && !blocks("0100007F", two));
        assert!(blocks("0200007F", two) && blocks("00000000", two));
        assert!(blocks("0000000000000000FFFF00000100007F", lo), "::ffff:127.0.0.1");
        assert!(!blocks("0000000000000000FFFF00000100007F", two));
        assert!(blocks("00000000000000000000000000000000", two), "::");
        assert!(!blocks("00000000000000000000000001000000", two), "::1");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(port_taken(port));
        assert!(taken_on(Ipv4Addr::LOCALHOST, port) && !taken_on(Ipv4Addr::new(127, 0, 0, 2), port));
        assert!(port_open(port));
        drop(listener);
        // A child that a parallel test forks may hold the socket until its exec closes it.
        let freed = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            !port_taken(port)
        });
        assert!(freed, "port {port} still listening");
    }
}
