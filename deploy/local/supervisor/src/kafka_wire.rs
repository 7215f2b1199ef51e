//! One Kafka request, spoken over a socket: Metadata (API key 3, version 4, all topics). It is
//! what the three-node mode's readiness and `status` ask each broker several times a second; an
//! admin-tool JVM per question would cost seconds of CPU each on a two-core machine, and a Kafka
//! client crate (librdkafka's build) would cost this program its quick build.
//!
//! Version 4 is the lowest that Kafka 4.0 still accepts (KIP-896 removed 0-3). Its request
//! header is v1 (api key, version, correlation id, client id), its response header v0 (the
//! correlation id), neither with tagged fields.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{bail, ensure, Context};

/// What one broker's metadata says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Metadata {
    /// The node ids of the brokers the cluster serves with (registered and unfenced).
    pub brokers: Vec<i32>,
    /// Under KRaft a broker picked at random (clients never reach the controllers).
    pub controller: i32,
    pub topics: Vec<Topic>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topic {
    pub name: String,
    pub error: i16,
    pub partitions: Vec<Partition>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    pub index: i32,
    /// -1 when the partition has none.
    pub leader: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

impl Metadata {
    /// The partitions (`topic:index`) without a leader or whose ISR lacks a replica.
    pub fn under_replicated(&self) -> Vec<String> {
        let mut out = Vec::new();
        for t in &self.topics {
            for p in &t.partitions {
                if p.leader < 0 || p.isr.len() < p.replicas.len() {
                    out.push(format!("{}:{}", t.name, p.index));
                }
            }
        }
        out
    }

    /// The replication factor of `topic` (its first partition's replica count), if listed.
    pub fn replication(&self, topic: &str) -> Option<usize> {
        self.topics.iter().find(|t| t.name == topic)?.partitions.first().map(|p| p.replicas.len())
    }
}

const API_METADATA: i16 = 3;
const VERSION: i16 = 4;
const CLIENT_ID: &str = "qim-stack";

/// The request, framed (size prefix included).
pub fn encode_request(correlation_id: i32) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(API_METADATA.to_be_bytes());
    body.extend(VERSION.to_be_bytes());
    body.extend(correlation_id.to_be_bytes());
    body.extend(i16::try_from(CLIENT_ID.len()).unwrap_or(0).to_be_bytes());
    body.extend(CLIENT_ID.as_bytes());
    body.extend((-1i32).to_be_bytes()); // topics: null = all
    body.push(0); // allow_auto_topic_creation: false
    let mut framed = i32::try_from(body.len()).unwrap_or(0).to_be_bytes().to_vec();
    framed.extend(body);
    framed
}

/// Sends the request to `127.0.0.1:port` and reads the answer, each step within `limit`.
pub fn metadata(port: u16, limit: Duration) -> anyhow::Result<Metadata> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, limit).with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(limit))?;
    s.set_write_timeout(Some(limit))?;
    s.write_all(&encode_request(1))?;
    let mut size = [0u8; 4];
    s.read_exact(&mut size).context("reading the response size")?;
    let size = usize::try_from(i32::from_be_bytes(size)).context("a negative response size")?;
    ensure!(size <= 64 << 20, "a response of {size} bytes");
    let mut body = vec![0u8; size];
    s.read_exact(&mut body).context("reading the response")?;
    decode_response(&body, 1)
}

/// A response body (after the size), checked against `correlation_id`.
pub fn decode_response(body: &[u8], correlation_id: i32) -> anyhow::Result<Metadata> {
    let mut r = Reader(body);
    let got = r.i32()?;
    ensure!(got == correlation_id, "correlation id {got}, expected {correlation_id}");
    let _throttle_ms = r.i32()?;
    let mut md = Metadata::default();
    for _ in 0..r.len()? {
        md.brokers.push(r.i32()?);
        r.string()?; // host
        r.i32()?; // port
        r.nullable_string()?; // rack
    }
    r.nullable_string()?; // cluster id
    md.controller = r.i32()?;
    for _ in 0..r.len()? {
        let error = r.i16()?;
        let name = r.string()?;
        r.bytes(1)?; // is_internal
        let mut partitions = Vec::new();
        for _ in 0..r.len()? {
            r.i16()?; // the partition's error code
            let index = r.i32()?;
            let leader = r.i32()?;
            let replicas = r.i32s()?;
            let isr = r.i32s()?;
            partitions.push(Partition { index, leader, replicas, isr });
        }
        md.topics.push(Topic { name, error, partitions });
    }
    md.brokers.sort_unstable();
    Ok(md)
}

/// Big-endian fields off the front of a slice.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn bytes(&mut self, n: usize) -> anyhow::Result<&[u8]> {
        if self.0.len() < n {
            bail!("the response ends early");
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn i16(&mut self) -> anyhow::Result<i16> {
        Ok(i16::from_be_bytes(self.bytes(2)?.try_into()?))
    }

    fn i32(&mut self) -> anyhow::Result<i32> {
        Ok(i32::from_be_bytes(self.bytes(4)?.try_into()?))
    }

    /// An array's length (-1, null, counts as 0).
    fn len(&mut self) -> anyhow::Result<usize> {
        Ok(usize::try_from(self.i32()?.max(0))?)
    }

    fn nullable_string(&mut self) -> anyhow::Result<Option<String>> {
        let n = self.i16()?;
        if n < 0 {
            return Ok(None);
        }
        Ok(Some(String::from_utf8_lossy(self.bytes(usize::try_from(n)?)?).into_owned()))
    }

    fn string(&mut self) -> anyhow::Result<String> {
        self.nullable_string()?.context("a null string")
    }

    fn i32s(&mut self) -> anyhow::Result<Vec<i32>> {
        (0..self.len()?).map(|_| self.i32()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes what a broker would answer.
    #[derive(Default)]
    struct W(Vec<u8>);
    impl W {
        fn i16(mut self, v: i16) -> W {
            self.0.extend(v.to_be_bytes());
            self
        }
        fn i32(mut self, v: i32) -> W {
            self.0.extend(v.to_be_bytes());
            self
        }
        fn s(self, v: &str) -> W {
            let mut w = self.i16(i16::try_from(v.len()).unwrap());
            w.0.extend(v.as_bytes());
            w
        }
        fn i32s(self, v: &[i32]) -> W {
            v.iter().fold(self.i32(i32::try_from(v.len()).unwrap()), |w, x| w.i32(*x))
        }
    }

    #[test]
    fn the_request_is_metadata_v4_for_all_topics() {
        let r = encode_request(7);
        assert_eq!(&r[..4], (i32::try_from(r.len() - 4).unwrap()).to_be_bytes());
        assert_eq!(&r[4..12], [0, 3, 0, 4, 0, 0, 0, 7]);
        assert_eq!(&r[12..14], [0, 9]);
        assert_eq!(&r[14..23], b"qim-stack");
        assert_eq!(&r[23..], [0xff, 0xff, 0xff, 0xff, 0]);
    }

    #[test]
    fn a_response_yields_brokers_and_replication() {
        let mut w = W::default().i32(1).i32(0).i32(3);
        for id in [3, 1, 2] {
            w = w.i32(id).s("127.0.0.1").i32(9190 + id).i16(-1);
        }
        w = w.s("clusterid").i32(2).i32(2);
        w = w.i16(0).s("qim.messages.v1");
        w.0.push(0);
        w = w.i32(2);
        w = w.i16(0).i32(0).i32(1).i32s(&[1, 2, 3]).i32s(&[1, 2, 3]);
        w = w.i16(0).i32(1).i32(2).i32s(&[2, 3, 1]).i32s(&[2, 1]);
        w = w.i16(0).s("__consumer_offsets");
        w.0.push(1);
        w = w.i32(1).i16(5).i32(0).i32(-1).i32s(&[1, 2, 3]).i32s(&[]);
        let md = decode_response(&w.0, 1).unwrap();
        assert_eq!(md.brokers, [1, 2, 3]);
        assert_eq!(md.controller, 2);
        assert_eq!(md.replication("qim.messages.v1"), Some(3));
        assert_eq!(md.replication("nope"), None);
        assert_eq!(md.under_replicated(), ["qim.messages.v1:1", "__consumer_offsets:0"]);
        assert!(decode_response(&w.0, 2).unwrap_err().to_string().contains("correlation id 1"));
        assert!(decode_response(&w.0[..w.0.len() - 3], 1).is_err());
    }

    #[test]
    fn nothing_listening_is_an_error_not_a_hang() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        assert!(metadata(port, Duration::from_millis(500)).is_err());
    }
}
