//! Pumping an exit stream through an in-memory socket, as the driver has
//! the core pump a TCP socket: bytes from the client reach the
//! destination, the destination's bytes come back as DATA within the
//! round's share, EOF and a socket error end the stream with C Tor's END
//! reasons, and a socket that takes nothing stops the writes.

use std::collections::VecDeque;
use std::io::{Error, ErrorKind};

use super::streams::{circuit, exit_net, open_stream, read, send};
use super::*;
use crate::worker::core::streams::pump::{StreamSocket, STREAM_READ_BUDGET};
use crate::worker::core::streams::StreamIo;
use weft_proto::relay::end_reason;

/// A destination in memory.
#[derive(Default)]
struct Pipe {
    /// What the destination sends (the core reads it).
    from_dest: VecDeque<u8>,
    /// The destination closed its side after `from_dest`.
    eof: bool,
    /// What the core wrote to the destination.
    to_dest: Vec<u8>,
    /// Bytes the socket still takes (then WouldBlock).
    room: usize,
    /// Fail the next write with this.
    fail: Option<ErrorKind>,
}

impl StreamSocket for Pipe {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.from_dest.is_empty() {
            return if self.eof {
                Ok(0)
            } else {
                Err(ErrorKind::WouldBlock.into())
            };
        }
        let n = buf.len().min(self.from_dest.len());
        for (b, x) in buf.iter_mut().zip(self.from_dest.drain(..n)) {
            *b = x;
        }
        Ok(n)
    }

    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Some(k) = self.fail.take() {
            return Err(Error::from(k));
        }
        if self.room == 0 {
            return Err(ErrorKind::WouldBlock.into());
        }
        let n = buf.len().min(self.room);
        self.room -= n;
        self.to_dest.extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

/// The streams the core asked to have pumped since the last call.
fn pumps(net: &mut Net) -> Vec<usize> {
    net.collect(0);
    std::mem::take(&mut net.pumps[0])
}

#[test]
fn bytes_flow_both_ways_through_the_pump() {
    let mut net = exit_net();
    let mut c = circuit(&mut net, 1, 1);
    let key = open_stream(&mut net, 1, 1, &mut c, 4);
    let _ = pumps(&mut net);
    send(
        &mut net,
        1,
        1,
        &mut c,
        relay_cmd::DATA,
        4,
        b"GET / HTTP/1.0\r\n\r\n",
    );
    assert!(pumps(&mut net).contains(&key), "bytes for the destination");
    let mut sock = Pipe {
        room: 1 << 20,
        ..Pipe::default()
    };
    sock.from_dest.extend(b"HTTP/1.0 200 OK\r\n\r\nhello");
    let p = net.cores[0].pump_stream(key, &mut sock, true, true);
    assert_eq!(sock.to_dest, b"GET / HTTP/1.0\r\n\r\n");
    assert_eq!((p.written, p.read), (18, 24));
    assert!(p.read_blocked && !p.write_blocked && !p.again);
    let (msgs, _) = read(&mut net, 1, 1, &mut c);
    assert_eq!(msgs.len(), 1);
    assert_eq!((msgs[0].0, msgs[0].1), (relay_cmd::DATA, 4));
    assert_eq!(msgs[0].2, b"HTTP/1.0 200 OK\r\n\r\nhello");
    // A socket that takes nothing now: the bytes wait, the flag says so.
    sock.room = 0;
    send(&mut net, 1, 1, &mut c, relay_cmd::DATA, 4, b"more");
    let p = net.cores[0].pump_stream(key, &mut sock, false, true);
    assert!(p.write_blocked);
    assert_eq!(p.written, 0);
    sock.room = 2;
    let p = net.cores[0].pump_stream(key, &mut sock, false, true);
    assert_eq!(p.written, 2);
    sock.room = 10;
    net.cores[0].pump_stream(key, &mut sock, false, true);
    assert!(sock.to_dest.ends_with(b"more"));
}

#[test]
fn a_round_reads_at_most_its_share_then_asks_again() {
    let mut net = exit_net();
    let mut c = circuit(&mut net, 1, 1);
    let key = open_stream(&mut net, 1, 1, &mut c, 4);
    let mut sock = Pipe::default();
    sock.from_dest
        .extend(std::iter::repeat_n(7u8, 3 * STREAM_READ_BUDGET));
    let p = net.cores[0].pump_stream(key, &mut sock, true, false);
    assert!(p.again, "bytes left after the round's share");
    assert!(p.read as usize <= STREAM_READ_BUDGET);
    assert!(p.read as usize > STREAM_READ_BUDGET - 498);
}

#[test]
fn eof_ends_done_and_an_error_ends_with_c_tors_reason() {
    let mut net = exit_net();
    let mut c = circuit(&mut net, 1, 1);
    let a = open_stream(&mut net, 1, 1, &mut c, 4);
    let b = open_stream(&mut net, 1, 1, &mut c, 5);
    let mut sock = Pipe {
        eof: true,
        ..Pipe::default()
    };
    net.cores[0].pump_stream(a, &mut sock, true, true);
    assert_eq!(net.poll_stream_io(0), Some(StreamIo::Close { key: a }));
    send(&mut net, 1, 1, &mut c, relay_cmd::DATA, 5, b"x");
    let mut sock = Pipe {
        fail: Some(ErrorKind::ConnectionReset),
        room: 10,
        ..Pipe::default()
    };
    net.cores[0].pump_stream(b, &mut sock, true, true);
    assert_eq!(net.poll_stream_io(0), Some(StreamIo::Close { key: b }));
    let (msgs, destroyed) = read(&mut net, 1, 1, &mut c);
    assert!(!destroyed, "only the streams end");
    let ends: Vec<(u16, Vec<u8>)> = msgs
        .iter()
        .filter(|m| m.0 == relay_cmd::END)
        .map(|m| (m.1, m.2.clone()))
        .collect();
    assert_eq!(
        ends,
        vec![
            (4, vec![end_reason::DONE]),
            (5, vec![end_reason::CONNRESET])
        ]
    );
}
