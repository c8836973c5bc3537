//! The test's name server and the names it knows.

use std::net::{Ipv4Addr, UdpSocket};
use std::time::Duration;

/// Where it listens (a loopback address of its own: port 53 is the
/// only port resolv.conf can name).
pub const ADDR: &str = "127.53.0.1:53";
/// How long `slow.weft.test` takes.
pub const SLOW: Duration = Duration::from_secs(6);
/// A name the server never answers.
pub const SILENT: &str = "silent.weft.test";

fn answer_for(name: &str) -> Option<(Ipv4Addr, Duration)> {
    match name {
        "fast.weft.test" => Some((Ipv4Addr::LOCALHOST, Duration::ZERO)),
        "slow.weft.test" => Some((Ipv4Addr::LOCALHOST, SLOW)),
        "rejected.weft.test" => Some((Ipv4Addr::new(10, 0, 0, 1), Duration::ZERO)),
        _ => None,
    }
}

/// Serve A queries until the process ends (each answer on a thread of
/// its own, so a slow one delays nobody else). Once per process.
pub fn start() -> std::io::Result<()> {
    static STARTED: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut started = STARTED.lock().unwrap_or_else(|e| e.into_inner());
    if *started {
        return Ok(());
    }
    let sock = UdpSocket::bind(ADDR)?;
    *started = true;
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let Some((reply, delay)) = reply(&buf[..n]) else {
                continue;
            };
            let Ok(s) = sock.try_clone() else { continue };
            std::thread::spawn(move || {
                std::thread::sleep(delay);
                let _ = s.send_to(&reply, from);
            });
        }
    });
    Ok(())
}

/// The reverse name the server knows (1.2.3.4's) and its PTR answer.
pub const PTR: (&str, &str) = ("4.3.2.1.in-addr.arpa", "ptr.weft.test");

/// A response to one query: the A record (TTL 60) of a known name,
/// NOERROR with no answer for other types, NXDOMAIN for other names;
/// the PTR record of [`PTR`].
fn reply(q: &[u8]) -> Option<(Vec<u8>, Duration)> {
    let (labels, end) = weft_testnet::dns::question(q)?;
    let labels: Vec<String> = labels.iter().map(|l| l.to_ascii_lowercase()).collect();
    let qtype = u16::from_be_bytes([q[end - 4], q[end - 3]]);
    let question = &q[12..end];
    if labels.join(".") == PTR.0 && qtype == 12 {
        let mut r = q[..2].to_vec();
        r.extend_from_slice(&[0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]);
        r.extend_from_slice(question);
        let mut name = Vec::new();
        for l in PTR.1.split('.') {
            name.push(l.len() as u8);
            name.extend_from_slice(l.as_bytes());
        }
        name.push(0);
        r.extend_from_slice(&[0xC0, 12, 0, 12, 0, 1, 0, 0, 0, 60]);
        r.extend_from_slice(&(name.len() as u16).to_be_bytes());
        r.extend_from_slice(&name);
        return Some((r, Duration::ZERO));
    }
    if labels.join(".") == SILENT {
        return None;
    }
    let found = answer_for(&labels.join("."));
    let delay = found.map_or(Duration::ZERO, |(_, d)| d);
    Some((
        weft_testnet::dns::a_response(q, end, found.map(|(ip, _)| ip)),
        delay,
    ))
}
