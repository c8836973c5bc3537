//! One OR connection as a worker owns it: the link (TLS, handshake, buffers),
//! its table of circuit IDs → circuit halves, and its state flags for the
//! event loop. The worker ([`crate::worker`]) drives it; scheduling state
//! that other connections' cells touch lives beside it in [`ConnSched`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Instant;

use weft_proto::link::PeerKind;

use crate::link_io::LinkConn;
use crate::messages::{ConnId, RingMsg};
use crate::pool::CellQueue;

/// Where a connection is in its life.
pub enum ConnState {
    /// Outbound TCP connect in progress.
    Connecting,
    /// TLS and link handshake in progress.
    Handshaking,
    /// Open: cells flow.
    Open {
        /// Who the peer is.
        peer: PeerKind,
    },
}

/// One connection owned by a worker.
pub struct Conn {
    /// Controller-assigned identifier.
    pub id: ConnId,
    /// TLS + link handshake + buffers.
    pub link: LinkConn,
    /// Lifecycle.
    pub state: ConnState,
    /// TCP peer.
    pub peer_addr: SocketAddr,
    /// We opened the TCP connection (we set the top bit of circuit IDs we
    /// allocate). [tor-spec §5.1.1]
    pub we_initiated: bool,
    /// Circuit ID → slot of the half in the worker's half table. A std
    /// HashMap (SipHash with a random key): the peer chooses these IDs.
    pub circuits: HashMap<u32, u32>,
    /// Deadline of the handshake.
    pub handshake_deadline: Instant,
    /// The socket said readable and we have not yet read until EAGAIN.
    pub readable: bool,
    /// The socket may take more bytes (no EAGAIN since the last writable
    /// event).
    pub writable: bool,
    /// Reading is paused: a cell waits for space in the ring to `worker`.
    pub stalled: Option<(usize, RingMsg)>,
    /// When a cell was last read or written (idle timeouts).
    pub last_active: Instant,
    /// When something was last written (keepalive).
    pub last_write: Instant,
    /// Close at the end of this round, with this reason.
    pub closing: Option<String>,
    /// Bytes read and written since the last report (load balancing).
    pub bytes_recent: u64,
}

impl Conn {
    /// A connection that starts with the given link.
    pub fn new(
        id: ConnId,
        link: LinkConn,
        state: ConnState,
        peer_addr: SocketAddr,
        we_initiated: bool,
        deadline: Instant,
    ) -> Self {
        let now = Instant::now();
        Conn {
            id,
            link,
            state,
            peer_addr,
            we_initiated,
            circuits: HashMap::new(),
            handshake_deadline: deadline,
            readable: true,
            writable: true,
            stalled: None,
            last_active: now,
            last_write: now,
            closing: None,
            bytes_recent: 0,
        }
    }

    /// True once the link handshake is done.
    pub fn is_open(&self) -> bool {
        matches!(self.state, ConnState::Open { .. })
    }

    /// A fresh circuit ID for a circuit we open on this connection: the top
    /// bit set if we opened the TLS connection, never 0, not in use.
    /// [tor-spec §5.1.1]
    pub fn allocate_circ_id(&self) -> Option<u32> {
        for _ in 0..64 {
            let r = u32::from_be_bytes(weft_crypto::random_array());
            let id = if self.we_initiated {
                r | 0x8000_0000
            } else {
                r & 0x7fff_ffff
            };
            if id != 0 && id != 0x8000_0000 && !self.circuits.contains_key(&id) {
                return Some(id);
            }
        }
        None
    }

    /// The peer, once open.
    pub fn peer(&self) -> Option<&PeerKind> {
        match &self.state {
            ConnState::Open { peer } => Some(peer),
            _ => None,
        }
    }
}

/// The part of a connection that cells from *other* connections touch:
/// which of its circuits have cells to write, its urgent cells (CREATED2,
/// DESTROY...), and whether it is on the worker's list of connections with
/// output. Kept beside the connection table so that a cell read on one
/// connection can be queued for another without borrowing both.
#[derive(Default)]
pub struct ConnSched {
    /// Half slots with queued cells, in EWMA order (or round robin).
    pub mux: crate::ewma::EwmaMux,
    /// Connection-level cells (circ_id in the slot) written before any
    /// circuit's cells.
    pub urgent: CellQueue,
    /// On the worker's pending list.
    pub pending: bool,
    /// Cells queued on this connection's circuits.
    pub queued: usize,
}
