//! Stand-in name servers for weft's lookups on loopback: the question of
//! a DNS query, an A-record answer to it, and [`NameServer`], a UDP
//! server that knows a fixed table of names (the demo's; the exit tests
//! keep their own, with slow and silent names).

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

/// The query's name, each label as sent (0x20 case kept), and where its
/// question section ends (after QTYPE and QCLASS). None if `query` is
/// too short for its own labels.
pub fn question(query: &[u8]) -> Option<(Vec<String>, usize)> {
    let mut i = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*query.get(i)?);
        i += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(query.get(i..i + len)?).to_string());
        i += len;
    }
    query.get(i..i + 4)?;
    Some((labels, i + 4))
}

/// The response to query `q` whose question ends at `end` (from
/// [`question`]): NOERROR with `ip` as its A record (TTL 60) when the
/// query asks for an A record, NOERROR without answers for other types,
/// NXDOMAIN when `ip` is None.
pub fn a_response(q: &[u8], end: usize, ip: Option<Ipv4Addr>) -> Vec<u8> {
    let qtype = u16::from_be_bytes([q[end - 4], q[end - 3]]);
    let mut r = Vec::with_capacity(end + 16);
    r.extend_from_slice(&q[..2]);
    let rcode = if ip.is_some() { 0 } else { 3 };
    r.extend_from_slice(&[0x81, 0x80 | rcode]);
    let answers = u16::from(ip.is_some() && qtype == 1);
    r.extend_from_slice(&[0, 1]);
    r.extend_from_slice(&answers.to_be_bytes());
    r.extend_from_slice(&[0, 0, 0, 0]);
    r.extend_from_slice(&q[12..end]);
    if let (Some(ip), 1) = (ip, answers) {
        r.extend_from_slice(&[0xC0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
        r.extend_from_slice(&ip.octets());
    }
    r
}

/// A UDP name server on loopback that answers A queries for a fixed table
/// of names (case-insensitive) and NXDOMAIN for the rest, until dropped.
pub struct NameServer {
    addr: SocketAddr,
    answered: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl NameServer {
    /// Listen on `addr` (a loopback address: resolv.conf names port 53
    /// only) and answer for `names`.
    pub fn start(addr: SocketAddr, names: &[(&str, Ipv4Addr)]) -> Result<NameServer> {
        let sock = UdpSocket::bind(addr)
            .with_context(|| format!("binding the stand-in name server to {addr}"))?;
        sock.set_read_timeout(Some(Duration::from_millis(200)))?;
        let addr = sock.local_addr()?;
        let table: Vec<(String, Ipv4Addr)> = names
            .iter()
            .map(|(n, ip)| (n.to_ascii_lowercase(), *ip))
            .collect();
        let answered = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, st) = (answered.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while !st.load(Ordering::Relaxed) {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                let q = &buf[..n];
                let Some((labels, end)) = question(q) else {
                    continue;
                };
                let name = labels.join(".").to_ascii_lowercase();
                let ip = table.iter().find(|(t, _)| *t == name).map(|(_, ip)| *ip);
                if sock.send_to(&a_response(q, end, ip), from).is_ok() && ip.is_some() {
                    a.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        Ok(NameServer {
            addr,
            answered,
            stop,
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queries answered with an address so far.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }
}

impl Drop for NameServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_question_is_read_with_its_case() {
        let mut q = vec![0u8; 12];
        q.extend_from_slice(b"\x03wWw\x07example\x03com\x00\x00\x01\x00\x01");
        let (labels, end) = super::question(&q).unwrap();
        assert_eq!(labels, ["wWw", "example", "com"]);
        assert_eq!(end, q.len());
        assert!(super::question(&q[..q.len() - 1]).is_none());
        assert!(super::question(&q[..15]).is_none());
    }

    #[test]
    fn the_name_server_answers_its_names_and_refuses_others() {
        use std::net::{Ipv4Addr, UdpSocket};
        use std::time::Duration;
        let ns = super::NameServer::start(
            "127.0.0.1:0".parse().unwrap(),
            &[("Sink.Weft.Demo", Ipv4Addr::new(127, 0, 0, 7))],
        )
        .unwrap();
        let c = UdpSocket::bind("127.0.0.1:0").unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let ask = |name: &[u8]| {
            let mut q = vec![0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
            q.extend_from_slice(name);
            q.extend_from_slice(b"\x00\x01\x00\x01");
            c.send_to(&q, ns.addr()).unwrap();
            let mut buf = [0u8; 512];
            let n = c.recv(&mut buf).unwrap();
            buf[..n].to_vec()
        };
        let r = ask(b"\x04sInK\x04weft\x04demo\x00");
        assert_eq!(&r[..2], &[0x12, 0x34]);
        assert_eq!(r[3] & 0x0f, 0, "NOERROR");
        assert_eq!(&r[6..8], &[0, 1], "one answer");
        assert_eq!(&r[r.len() - 4..], &[127, 0, 0, 7]);
        let nx = ask(b"\x05other\x04weft\x04demo\x00");
        assert_eq!(nx[3] & 0x0f, 3, "NXDOMAIN");
        assert_eq!(&nx[6..8], &[0, 0]);
        assert_eq!(ns.answered(), 1);
    }
}
