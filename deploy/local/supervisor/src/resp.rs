//! The few Redis requests the stack makes (PING, SET/GET, CONFIG GET), in RESP2 over a plain TCP
//! connection with a time limit on every step.
//!
//! Not the `redis` crate: even without its default features it pulls `url` and with it the ICU
//! normalisation crates (88 crates, about a minute to compile on two cores), and this program is
//! built before anything else on a fresh machine. Four commands need only this.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{bail, Context};

/// A reply, as RESP2 has them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Integer(i64),
    /// `None` is the nil bulk string.
    Bulk(Option<String>),
    /// `None` is the nil array.
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The text of a simple or bulk string reply.
    pub fn text(&self) -> Option<&str> {
        match self {
            Reply::Simple(s) | Reply::Bulk(Some(s)) => Some(s),
            _ => None,
        }
    }
}

/// One connection to a Redis server.
pub struct Connection {
    reader: BufReader<TcpStream>,
}

impl Connection {
    /// Connects to `127.0.0.1:port`; connecting and every later read or write may take `limit`.
    pub fn open(port: u16, limit: Duration) -> anyhow::Result<Connection> {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let stream = TcpStream::connect_timeout(&addr, limit).with_context(|| format!("connecting to {addr}"))?;
        stream.set_read_timeout(Some(limit))?;
        stream.set_write_timeout(Some(limit))?;
        Ok(Connection { reader: BufReader::new(stream) })
    }

    /// Sends one command and reads its reply.
    pub fn call(&mut self, args: &[&str]) -> anyhow::Result<Reply> {
        self.reader.get_mut().write_all(&encode(args))?;
        read_reply(&mut self.reader)
    }
}

/// A command as a RESP array of bulk strings.
pub fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Reads one reply (nested arrays included).
pub fn read_reply(r: &mut impl BufRead) -> anyhow::Result<Reply> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        bail!("connection closed");
    }
    let line = line.strip_suffix("\r\n").context("a reply line without CRLF")?;
    let (kind, rest) = line.split_at_checked(1).context("an empty reply line")?;
    let number = || rest.parse::<i64>().with_context(|| format!("bad length or integer {rest:?}"));
    Ok(match kind {
        "+" => Reply::Simple(rest.to_owned()),
        "-" => Reply::Error(rest.to_owned()),
        ":" => Reply::Integer(number()?),
        "$" => match usize::try_from(number()?) {
            Err(_) => Reply::Bulk(None),
            Ok(len) => {
                let mut buf = vec![0; len + 2];
                r.read_exact(&mut buf)?;
                buf.truncate(len);
                Reply::Bulk(Some(String::from_utf8_lossy(&buf).into_owned()))
            }
        },
        "*" => match usize::try_from(number()?) {
            Err(_) => Reply::Array(None),
            Ok(n) => Reply::Array(Some((0..n).map(|_| read_reply(r)).collect::<anyhow::Result<_>>()?)),
        },
        other => bail!("unknown reply type {other:?}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> anyhow::Result<Reply> {
        read_reply(&mut &bytes[..])
    }

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        assert_eq!(encode(&["PING"]), b"*1\r\n$4\r\nPING\r\n");
        assert_eq!(encode(&["SET", "k", "ok"]), b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nok\r\n");
    }

    #[test]
    fn every_reply_kind_parses() {
        assert_eq!(parse(b"+PONG\r\n").unwrap(), Reply::Simple("PONG".into()));
        assert_eq!(parse(b"-ERR no\r\n").unwrap(), Reply::Error("ERR no".into()));
        assert_eq!(parse(b":42\r\n").unwrap(), Reply::Integer(42));
        assert_eq!(parse(b"$2\r\nok\r\n").unwrap().text(), Some("ok"));
        assert_eq!(parse(b"$-1\r\n").unwrap(), Reply::Bulk(None));
        assert_eq!(
            parse(b"*2\r\n$10\r\nappendonly\r\n$3\r\nyes\r\n").unwrap(),
            Reply::Array(Some(vec![Reply::Bulk(Some("appendonly".into())), Reply::Bulk(Some("yes".into()))]))
        );
        assert_eq!(parse(b"*-1\r\n").unwrap(), Reply::Array(None));
    }

    #[test]
    fn broken_replies_are_errors() {
        assert!(parse(b"").is_err());
        assert!(parse(b"+PONG\n").is_err());
        assert!(parse(b"?x\r\n").is_err());
        assert!(parse(b"$5\r\nab\r\n").is_err());
    }
}
