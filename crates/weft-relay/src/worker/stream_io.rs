//! The driver's side of exit streams: their TCP sockets, registered in the
//! worker's own poll (tokens from [`STREAM_TOKEN_BASE`]), opened and
//! closed as the core asks ([`Effect::Stream`](super::core::Effect)),
//! and handed to the core to pump ([`super::core::streams::pump`]) when it asks or
//! their readiness says. Nothing here decides about streams.

use std::io::{ErrorKind, Read, Write};

use mio::{Interest, Token};
use tracing::debug;

use super::core::core_event::CoreEvent;
use super::core::streams::pump::StreamSocket;
use super::core::streams::StreamIo;
use super::Worker;

/// Poll tokens of stream sockets start here (connections use their slab
/// index, far below).
pub(crate) const STREAM_TOKEN_BASE: usize = 1 << 40;

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
    /// Streams to pump this round (the core asked, or readiness).
    to_pump: Vec<usize>,
    /// Streams to pump next round (their share ran out with bytes left).
    again: Vec<usize>,
    /// Reused list.
    list: Vec<usize>,
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

    /// The core asked for stream `key` to be pumped.
    pub(crate) fn pump_later(&mut self, key: usize) {
        self.to_pump.push(key);
    }

    /// Streams with bytes left to read.
    pub(crate) fn has_work(&self) -> bool {
        !self.again.is_empty()
    }
}

/// The core reads and writes a stream's TCP socket through this.
impl StreamSocket for mio::net::TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        Read::read(self, buf)
    }

    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Write::write(self, buf)
    }
}

impl Worker {
    /// The round's stream work: readiness (connects that completed or
    /// failed, sockets that may be read or written), then every stream the
    /// core or readiness named is pumped by the core.
    pub(crate) fn stream_round(&mut self) {
        self.apply_effects();
        if self.streams.events.is_empty()
            && self.streams.to_pump.is_empty()
            && self.streams.again.is_empty()
        {
            return;
        }
        self.stream_events();
        self.pump_streams();
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
                        self.core.handle_event(CoreEvent::StreamConnected { key });
                    }
                    Err(e) if e.kind() == ErrorKind::NotConnected => {
                        // Still connecting (a spurious wake-up).
                        s.writable = false;
                    }
                    Err(e) => self
                        .core
                        .handle_event(CoreEvent::StreamFailed { key, error: &e }),
                }
                continue;
            }
            if r || w {
                self.streams.to_pump.push(key);
            }
        }
        let mut events = events;
        events.clear();
        self.streams.events = events;
        // What the connects caused (CONNECTED; streams to pump).
        self.apply_effects();
    }

    /// Open or close a stream's socket, as the core asked.
    pub(crate) fn stream_socket(&mut self, io: StreamIo) {
        match io {
            StreamIo::Connect { key, addr } => {
                let source = self
                    .ctx
                    .outbound
                    .source_for(crate::outbound::Purpose::Exit, &addr);
                match crate::outbound::connect(addr, source) {
                    Ok(mut sock) => {
                        let family = usize::from(addr.is_ipv6());
                        self.streams.created[family] += 1;
                        let token = Token(STREAM_TOKEN_BASE + key);
                        if let Err(e) = self.poll.registry().register(
                            &mut sock,
                            token,
                            Interest::READABLE | Interest::WRITABLE,
                        ) {
                            self.core
                                .handle_event(CoreEvent::StreamFailed { key, error: &e });
                            return;
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
                        if e.kind() == ErrorKind::AddrNotAvailable {
                            self.streams.tcp_exhaustion += 1;
                        }
                        self.core
                            .handle_event(CoreEvent::StreamFailed { key, error: &e })
                    }
                }
            }
            StreamIo::Close { key } => {
                if let Some(mut s) = self.streams.socks.get_mut(key).and_then(Option::take) {
                    self.streams.open[s.family] -= 1;
                    let _ = self.poll.registry().deregister(&mut s.sock);
                    debug!("worker {}: stream socket {key} closed", self.id);
                }
            }
        }
    }

    /// Let the core pump every listed stream whose socket is connected,
    /// with the readiness we know of.
    fn pump_streams(&mut self) {
        let mut list = std::mem::take(&mut self.streams.list);
        list.clear();
        list.append(&mut self.streams.to_pump);
        list.append(&mut self.streams.again);
        list.sort_unstable();
        list.dedup();
        for &key in &list {
            let Some(Some(s)) = self.streams.socks.get_mut(key) else {
                continue;
            };
            if !s.connected || !(s.readable || s.writable) {
                continue;
            }
            let p = self
                .core
                .pump_stream(key, &mut s.sock, s.readable, s.writable);
            if p.read_blocked {
                s.readable = false;
            }
            if p.write_blocked {
                s.writable = false;
            }
            if p.again {
                self.streams.again.push(key);
            }
            self.counters.stream_read += p.read;
            self.counters.stream_written += p.written;
            if s.family == 1 {
                self.counters.read_v6 += p.read;
                self.counters.written_v6 += p.written;
            }
        }
        list.clear();
        self.streams.list = list;
    }
}
