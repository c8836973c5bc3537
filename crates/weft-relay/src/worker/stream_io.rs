//! The driver's side of exit streams: their TCP sockets, registered in the
//! worker's own poll (tokens from [`STREAM_TOKEN_BASE`]), connected,
//! read and written as the stream room ([`super::streams`]) asks. Bytes
//! read go to the core in chunks its windows allow; bytes for the
//! destination are written from the core's buffer. Nothing here decides
//! about streams.

use std::io::{ErrorKind, Read, Write};

use mio::{Interest, Token};
use tracing::debug;
use weft_proto::circuit::flow::DATA_MAX;

use super::streams::StreamIo;
use super::Worker;

/// Poll tokens of stream sockets start here (connections use their slab
/// index, far below).
pub(crate) const STREAM_TOKEN_BASE: usize = 1 << 40;
/// Most bytes read from one stream's socket per round (others get a turn).
const STREAM_READ_BUDGET: usize = 64 * 1024;
/// Bytes read per read call (whole DATA cells).
const STREAM_CHUNK: usize = 16 * DATA_MAX;

/// One stream's socket.
pub(crate) struct StreamSock {
    sock: mio::net::TcpStream,
    connected: bool,
    readable: bool,
    writable: bool,
    /// Index of its address family in the counters (0 IPv4, 1 IPv6).
    family: usize,
}

/// Socket state of every stream, by the core's stream key.
#[derive(Default)]
pub(crate) struct StreamSockets {
    socks: Vec<Option<StreamSock>>,
    /// Readiness seen this round: (key, readable, writable).
    events: Vec<(usize, bool, bool)>,
    /// Streams to read next round (their budget ran out with bytes left).
    readers: Vec<usize>,
    /// Streams whose socket became writable.
    writers: Vec<usize>,
    /// Reused lists.
    list: Vec<usize>,
    buf: Vec<u8>,
    /// Exit connections opened (a socket made), by family (0 IPv4, 1 IPv6).
    pub(crate) created: [u64; 2],
    /// Exit connections open now, by family.
    pub(crate) open: [u64; 2],
    /// Connects refused for want of a local port (EADDRNOTAVAIL), as C
    /// Tor's `rep_hist_note_tcp_exhaustion`.
    pub(crate) tcp_exhaustion: u64,
}

impl StreamSockets {
    /// Readiness of a stream socket (from the round's events).
    pub(crate) fn note_event(&mut self, token: Token, readable: bool, writable: bool) {
        if let Some(key) = token.0.checked_sub(STREAM_TOKEN_BASE) {
            self.events.push((key, readable, writable));
        }
    }

    /// Streams with bytes left to read.
    pub(crate) fn has_work(&self) -> bool {
        !self.readers.is_empty()
    }
}

impl Worker {
    /// The round's stream work: readiness, connects and closes the core
    /// asked for, bytes to the destinations, bytes from them.
    pub(crate) fn stream_round(&mut self) {
        if self.core.stream_counts().0 == 0 && self.streams.events.is_empty() {
            self.stream_io();
            return;
        }
        self.stream_events();
        self.stream_io();
        self.write_streams();
        self.read_streams();
        self.stream_io();
        self.apply_effects();
    }

    /// Readiness seen by the poll: connects that completed or failed,
    /// sockets that may be read or written.
    fn stream_events(&mut self) {
        let events = std::mem::take(&mut self.streams.events);
        for &(key, r, w) in &events {
            let Some(Some(s)) = self.streams.socks.get_mut(key) else {
                continue;
            };
            s.readable |= r;
            s.writable |= w;
            if !s.connected {
                if !(r || w) {
                    continue;
                }
                let outcome = match s.sock.take_error() {
                    Ok(Some(e)) | Err(e) => Err(e),
                    Ok(None) => s.sock.peer_addr().map(|_| ()),
                };
                match outcome {
                    Ok(()) => {
                        s.connected = true;
                        self.core.stream_connected(key);
                    }
                    Err(e) if e.kind() == ErrorKind::NotConnected => {
                        // Still connecting (a spurious wake-up).
                        s.writable = false;
                    }
                    Err(e) => self.core.stream_failed(key, &e),
                }
                continue;
            }
            if r {
                self.streams.readers.push(key);
            }
            if w {
                self.streams.writers.push(key);
            }
        }
        let mut events = events;
        events.clear();
        self.streams.events = events;
    }

    /// Carry out the core's socket requests.
    fn stream_io(&mut self) {
        while let Some(io) = self.core.poll_stream_io() {
            match io {
                StreamIo::Connect { key, addr } => match crate::outbound::connect(
                    addr,
                    self.ctx
                        .outbound
                        .source_for(crate::outbound::Purpose::Exit, &addr),
                ) {
                    Ok(mut sock) => {
                        let family = usize::from(addr.is_ipv6());
                        self.streams.created[family] += 1;
                        let token = Token(STREAM_TOKEN_BASE + key);
                        if let Err(e) = self.poll.registry().register(
                            &mut sock,
                            token,
                            Interest::READABLE | Interest::WRITABLE,
                        ) {
                            self.core.stream_failed(key, &e);
                            continue;
                        }
                        let socks = &mut self.streams.socks;
                        if socks.len() <= key {
                            socks.resize_with(key + 1, || None);
                        }
                        self.streams.open[family] += 1;
                        socks[key] = Some(StreamSock {
                            sock,
                            connected: false,
                            readable: false,
                            writable: false,
                            family,
                        });
                    }
                    Err(e) => {
                        if e.kind() == std::io::ErrorKind::AddrNotAvailable {
                            self.streams.tcp_exhaustion += 1;
                        }
                        self.core.stream_failed(key, &e)
                    }
                },
                StreamIo::Close { key } => {
                    if let Some(mut s) = self.streams.socks.get_mut(key).and_then(Option::take) {
                        self.streams.open[s.family] -= 1;
                        let _ = self.poll.registry().deregister(&mut s.sock);
                        debug!("worker {}: stream socket {key} closed", self.id);
                    }
                }
            }
        }
    }

    /// Write what the core holds for each stream with bytes and a
    /// writable socket.
    fn write_streams(&mut self) {
        let mut list = std::mem::take(&mut self.streams.list);
        list.clear();
        self.core.take_stream_writers(&mut list);
        list.append(&mut self.streams.writers);
        list.sort_unstable();
        list.dedup();
        for &key in &list {
            let Some(Some(s)) = self.streams.socks.get_mut(key) else {
                continue;
            };
            if !s.connected || !s.writable {
                continue;
            }
            let mut failed = None;
            while let Some(out) = self.core.stream_output(key) {
                let (front, _) = out.as_slices();
                if front.is_empty() {
                    break;
                }
                match s.sock.write(front) {
                    Ok(n) => {
                        out.drain(..n);
                        self.counters.stream_written += n as u64;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        s.writable = false;
                        break;
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            match failed {
                Some(e) => self.core.stream_failed(key, &e),
                None => self.core.stream_wrote(key),
            }
        }
        list.clear();
        self.streams.list = list;
    }

    /// Read each readable stream as far as its windows allow (and the
    /// round's share), handing the bytes to the core as DATA cells.
    fn read_streams(&mut self) {
        let mut list = std::mem::take(&mut self.streams.list);
        list.clear();
        self.core.take_stream_readers(&mut list);
        list.append(&mut self.streams.readers);
        list.sort_unstable();
        list.dedup();
        let mut buf = std::mem::take(&mut self.streams.buf);
        buf.resize(STREAM_CHUNK, 0);
        for &key in &list {
            if self.core.is_dir_stream(key) {
                // No socket: the answer comes from the directory cache.
                if self.core.serve_dir(key, STREAM_READ_BUDGET) {
                    self.streams.readers.push(key);
                }
                continue;
            }
            let mut round = STREAM_READ_BUDGET;
            while let Some(Some(s)) = self.streams.socks.get_mut(key) {
                if !s.connected || !s.readable {
                    break;
                }
                if round == 0 {
                    self.streams.readers.push(key);
                    break;
                }
                let budget = self.core.stream_read_budget(key).min(round).min(buf.len());
                if budget == 0 {
                    // A window or the circuit's queue is full: the core
                    // lists the stream again when that changes.
                    break;
                }
                match s.sock.read(&mut buf[..budget]) {
                    Ok(0) => {
                        self.core.stream_eof(key);
                        break;
                    }
                    Ok(n) => {
                        round -= n.min(round);
                        self.counters.stream_read += n as u64;
                        self.core.stream_data_read(key, &buf[..n]);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        s.readable = false;
                        break;
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        self.core.stream_failed(key, &e);
                        break;
                    }
                }
            }
        }
        self.streams.buf = buf;
        list.clear();
        self.streams.list = list;
    }
}
