//! Ports: whether one is taken (before a start), and by whom (for the message), and whether a
//! server accepts connections on one.

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
    table.lines().skip(1).filter_map(|line| {
        let mut fields = line.split_whitespace();
        let local = fields.nth(1)?;
        let state = fields.nth(1)?;
        (state == "0A").then(|| u16::from_str_radix(local.rsplit(':').next()?, 16).ok()).flatten()
    })
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
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(port_taken(port));
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
