//! Moving a connection from one worker to another under traffic, without
//! losing, duplicating or reordering a cell.
//!
//! The connection X leaves worker A for worker B with everything it owns:
//! its link (socket, TLS, buffers), its circuit halves with their queued
//! cells. The halves' peers — on any worker C — still address the old
//! references, and cells are in flight on the rings. Order is kept by
//! markers that travel *in* the rings, which are FIFO per pair of workers:
//!
//! 1. **A detaches X.** Each old half slot becomes a [`Forwarder`]. For
//!    every peer p not on A, A puts `SourceDone{to: p}` on the ring A→C(p):
//!    after it, A sends nothing more to p.
//! 2. **B adopts X** (a [`MovedConn`] in its inbox), gives each half a new
//!    reference, tells A `Installed{old, new}` (ring B→A) and each peer's
//!    worker `PeerMoved{to: p, peer: new, old: A}` (ring B→C, before any of
//!    B's cells for p). If p is not on A, B holds cells for the new half
//!    that do not come through A until A's marker (step 4).
//! 3. **C (p's worker)** sets p's peer to the new reference; unless A's
//!    `SourceDone{to: p}` already came, p holds cells that do not come from
//!    A (they are B's, newer) until it does. C puts `Switched{old}` on the
//!    ring C→A: after it, C sends nothing more to the old reference.
//! 4. **A** forwards everything that arrives for an old reference to B (in
//!    arrival order, buffering until `Installed`), and after `Switched`
//!    sends `SourceDone{to: new}` to B, which releases the held cells.
//!
//! Held cells are kept without the keyed half's onion layer and encrypted
//! when released, so the AES-CTR keystream follows the final order. A
//! forwarder stays for [`FORWARDER_LIFETIME`] after its marker passed, for
//! late control messages (DESTROY, a pending extend's answer).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use weft_proto::cell::BODY_LEN;

use crate::conn::Conn;
use crate::ewma::CircuitEwma;
use crate::half::HalfRole;
use crate::messages::{HalfRef, RingMsg};

/// How long an old half slot keeps forwarding after its migration finished.
pub const FORWARDER_LIFETIME: Duration = Duration::from_secs(300);

/// What an old half slot does after its half moved.
pub struct Forwarder {
    /// The half's new reference, once B installed it.
    pub new: Option<HalfRef>,
    /// Messages for the old reference not yet passed on (before `Installed`,
    /// or while the ring to B is full), in arrival order.
    pub buf: VecDeque<RingMsg>,
    /// The peer's worker said it switched to the new reference.
    pub switched: bool,
    /// `SourceDone` went to B.
    pub done_sent: bool,
    /// A DESTROY (reason) for the old reference, to pass on once installed.
    pub destroy: Option<u8>,
    /// When the migration started.
    pub since: Instant,
}

impl Forwarder {
    /// A forwarder for a half that is leaving now.
    pub fn new(now: Instant) -> Self {
        Forwarder {
            new: None,
            buf: VecDeque::new(),
            switched: false,
            done_sent: false,
            destroy: None,
            since: now,
        }
    }
}

/// A queued cell travelling with its half.
#[derive(Clone, Copy)]
pub struct MovedCell {
    /// RELAY or RELAY_EARLY (or a connection-level command for urgent
    /// cells).
    pub command: u8,
    /// Circuit ID (urgent cells).
    pub circ_id: u32,
    /// Read stamp.
    pub stamp_ns: u64,
    /// Body.
    pub body: [u8; BODY_LEN],
}

/// One circuit half on its way to another worker.
pub struct MovedHalf {
    /// Its reference on the old worker.
    pub old: HalfRef,
    /// Circuit ID on the connection.
    pub circ_id: u32,
    /// Keys and state.
    pub role: HalfRole,
    /// Its peer.
    pub peer: Option<HalfRef>,
    /// EWMA state.
    pub ewma: CircuitEwma,
    /// Queued cells, oldest first.
    pub cells: Vec<MovedCell>,
    /// Hold state (an earlier migration of its peer still settling).
    pub hold_from: Option<u16>,
    /// Held cells.
    pub held: Vec<MovedCell>,
    /// Early marker.
    pub done_from: Option<u16>,
}

/// A connection on its way to another worker.
pub struct MovedConn {
    /// The connection (its circuit table is rebuilt by the new worker).
    pub conn: Conn,
    /// Its halves.
    pub halves: Vec<MovedHalf>,
    /// Its connection-level cells.
    pub urgent: Vec<MovedCell>,
    /// The worker it comes from.
    pub from: u16,
}

impl RingMsg {
    /// The half this message is for.
    pub fn target(&self) -> HalfRef {
        match *self {
            RingMsg::Cell { to, .. }
            | RingMsg::Linked { to, .. }
            | RingMsg::Created2 { to, .. }
            | RingMsg::SourceDone { to }
            | RingMsg::PeerMoved { to, .. } => to,
            RingMsg::Switched { old } | RingMsg::Installed { old, .. } => old,
        }
    }

    /// The same message for another half.
    pub fn retarget(mut self, new: HalfRef) -> RingMsg {
        match &mut self {
            RingMsg::Cell { to, .. }
            | RingMsg::Linked { to, .. }
            | RingMsg::Created2 { to, .. }
            | RingMsg::SourceDone { to }
            | RingMsg::PeerMoved { to, .. } => *to = new,
            RingMsg::Switched { old } | RingMsg::Installed { old, .. } => *old = new,
        }
        self
    }
}

impl std::fmt::Debug for MovedConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MovedConn")
            .field("conn", &self.conn.id)
            .field("halves", &self.halves.len())
            .field("from", &self.from)
            .finish()
    }
}
