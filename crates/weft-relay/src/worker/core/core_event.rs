//! What the driver tells the circuit core, other than the cells it reads
//! and the rings' messages: a round began (the clock), a connection
//! started, opened, closed or arrived from another worker, a move that
//! failed, the rings drained, an exit stream's socket connected or
//! failed, and a message for the core from the controller or another
//! worker ([`CoreMsg`]). One input, [`Circuits::handle_event`], beside
//! the hot path's two (`on_cell`, `on_ring_msg`); plain data with no
//! socket inside. What an event causes comes out of
//! [`Circuits::poll_effect`] and the connections' output.

use std::net::SocketAddr;

use crate::messages::ConnId;
use crate::worker::core::core_msg::CoreMsg;
use crate::worker::core::migrate::MovedCircuits;
use crate::worker::core::Circuits;

/// Something that happened to one of the driver's sockets.
#[derive(Debug)]
pub(crate) enum CoreEvent<'a> {
    /// A round begins at `now_ns` (the driver's clock, read once per
    /// round): time passes for the core's timers
    /// ([`Circuits::begin_round`]).
    RoundBegins {
        /// Nanoseconds on the driver's monotonic clock.
        now_ns: u64,
    },
    /// Connection `idx` (the driver's slot) began its TCP connect or TLS
    /// handshake: its handshake deadline runs.
    ConnStarted {
        /// The driver's slot.
        idx: usize,
    },
    /// Connection `idx`'s link handshake is done: its circuits may start.
    ConnOpened {
        /// The driver's slot.
        idx: usize,
        /// Controller-assigned identifier.
        id: ConnId,
        /// TCP peer.
        peer_addr: SocketAddr,
        /// We opened the TCP connection.
        we_initiated: bool,
        /// The RSA identity the peer authenticated with (None: a client).
        peer_rsa: Option<[u8; 20]>,
        /// The peer is the relay at the address the consensus lists for it
        /// (C's canonical connection): its idle timeout is a relay's.
        canonical: bool,
        /// The link protocol version negotiated (5 and up pad).
        link_version: u16,
        /// Inbound over IPv6, and the peer's NETINFO gave our IPv6
        /// address (`controller/reachability.rs`).
        proves_reachable: bool,
    },
    /// Connection `idx` closed (or never opened): its circuits end.
    ConnClosed {
        /// The driver's slot.
        idx: usize,
    },
    /// A connection worker `from` moved here is on slot `idx`: install its
    /// circuits (step 2 of a move, [`crate::worker::core::migrate`]).
    ConnAdopted {
        /// The driver's slot.
        idx: usize,
        /// Its circuits as the other core gave them up.
        circuits: MovedCircuits,
        /// The worker it came from.
        from: u16,
    },
    /// A moved connection could not be installed here: its circuits end.
    AdoptionFailed {
        /// Its circuits.
        circuits: MovedCircuits,
    },
    /// Every ring's messages of this round were handed in.
    RingsDrained,
    /// Exit stream `key`'s socket connected.
    StreamConnected {
        /// The stream.
        key: usize,
    },
    /// Exit stream `key`'s socket failed (to connect, register, read or
    /// write).
    StreamFailed {
        /// The stream.
        key: usize,
        /// What failed.
        error: &'a std::io::Error,
    },
    /// A message from the controller or another worker's core.
    Msg(CoreMsg),
}

impl Circuits {
    /// One event of the driver's sockets (see [`CoreEvent`]).
    pub(crate) fn handle_event(&mut self, e: CoreEvent<'_>) {
        match e {
            CoreEvent::RoundBegins { now_ns } => self.begin_round(now_ns),
            CoreEvent::ConnStarted { idx } => self.handshakes.start(idx, self.now_ns),
            CoreEvent::ConnOpened {
                idx,
                id,
                peer_addr,
                we_initiated,
                peer_rsa,
                canonical,
                link_version,
                proves_reachable,
            } => {
                self.handshakes.end(idx);
                let idle = self.idle_timeout_ns(peer_rsa.is_none(), canonical);
                let link = super::ConnLink {
                    proves_reachable,
                    ..super::ConnLink::opened(link_version, idle)
                };
                // The handshake's cells, for `padding-counts` as C counts
                // them: VERSIONS, CERTS and AUTH_CHALLENGE or AUTHENTICATE
                // written (padding not yet on), NETINFO written and read
                // (on from link protocol 5).
                let on = usize::from(link.padding.enabled());
                let p = &mut self.counters.padding;
                p.cells_written[0] += 3;
                p.cells_written[on] += 1;
                p.cells_read[on] += 1;
                self.add_conn(idx, id, peer_addr, we_initiated, peer_rsa, link);
            }
            CoreEvent::ConnClosed { idx } => {
                self.handshakes.end(idx);
                self.remove_conn(idx);
            }
            CoreEvent::ConnAdopted {
                idx,
                circuits,
                from,
            } => self.attach(idx, circuits, from),
            CoreEvent::AdoptionFailed { circuits } => self.abandon(circuits),
            CoreEvent::RingsDrained => self.rings_drained(),
            CoreEvent::StreamConnected { key } => self.stream_connected(key),
            CoreEvent::StreamFailed { key, error } => self.stream_failed(key, error),
            CoreEvent::Msg(m) => self.handle_msg(m),
        }
    }
}
