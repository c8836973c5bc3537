//! The messages that connect the controller, the workers and the circuit
//! halves.
//!
//! * A circuit half is addressed by a [`HalfRef`]: its worker, its slot in
//!   that worker's half table and the slot's generation (a stale reference
//!   to a freed and reused slot is detected and ignored). The two halves of a
//!   circuit know each other only by such references.
//! * Between workers, cells and the messages that must stay in order with
//!   them ([`RingMsg`]: cells, "linked", "created2") travel through the
//!   bounded cross-worker rings, in batches.
//! * Everything else reaches a worker through its inbox ([`WorkerMsg`]),
//!   which it drains before the rings in every round: so a DESTROY overtakes
//!   the cells queued before it, as the design asks.
//! * Workers tell the controller about connections, extends and counters
//!   through [`ControllerMsg`].

use std::net::SocketAddr;
use std::sync::Arc;

use weft_proto::cell::BODY_LEN;
use weft_proto::link::PeerKind;
use weft_proto::relay::Extend2;

use crate::context::SharedContext;

/// Controller-assigned connection identifier (unique for the process).
pub type ConnId = u64;

/// The global address of a circuit half.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HalfRef {
    /// Owning worker.
    pub worker: u16,
    /// Slot in the worker's half table.
    pub slot: u32,
    /// Generation of the slot when the half was created.
    pub gen: u32,
}

/// A message on a cross-worker ring: fixed size, no heap data.
#[derive(Clone, Copy)]
pub enum RingMsg {
    /// A relay cell for half `to`, read at `stamp_ns` (worker clock).
    Cell {
        /// Destination half.
        to: HalfRef,
        /// RELAY or RELAY_EARLY.
        command: u8,
        /// When it was read from its socket.
        stamp_ns: u64,
        /// The body (already without our onion layer, or toward the
        /// client: not yet with it).
        body: [u8; BODY_LEN],
    },
    /// The keyed half `to` now has `peer` (the relabel half toward the next
    /// relay).
    Linked {
        /// The keyed half.
        to: HalfRef,
        /// The new relabel half.
        peer: HalfRef,
    },
    /// The next hop answered our CREATE2 with this CREATED2 body (HLEN |
    /// HDATA, `len` bytes): keyed half `to` sends EXTENDED2.
    Created2 {
        /// The keyed half.
        to: HalfRef,
        /// Bytes used in `body`.
        len: u16,
        /// CREATED2 body.
        body: [u8; BODY_LEN],
    },
    /// Migration ([`crate::migrate`]): the sending worker will send nothing
    /// more to `to` for the half that moved away from it.
    SourceDone {
        /// The half on the receiving worker.
        to: HalfRef,
    },
    /// Migration: `to`'s peer is now `peer`; cells for `to` from workers
    /// other than `old` wait for `old`'s `SourceDone`.
    PeerMoved {
        /// The half whose peer moved.
        to: HalfRef,
        /// The peer's new reference.
        peer: HalfRef,
        /// The worker the peer left.
        old: u16,
    },
    /// Migration: the sender switched to the new reference of `old`.
    Switched {
        /// The old reference (on the receiving worker).
        old: HalfRef,
    },
    /// Migration: the half that was `old` (on the receiving worker) is now
    /// `new`.
    Installed {
        /// Old reference.
        old: HalfRef,
        /// New reference.
        new: HalfRef,
    },
}

/// Messages into a worker's inbox.
#[derive(Debug)]
pub enum WorkerMsg {
    /// Take over an accepted TCP connection.
    Accept {
        /// Its identifier.
        conn_id: ConnId,
        /// The socket.
        stream: std::net::TcpStream,
        /// Peer address.
        peer: SocketAddr,
    },
    /// Open a connection to a relay and authenticate.
    Connect {
        /// Its identifier.
        conn_id: ConnId,
        /// Where.
        addr: SocketAddr,
        /// Expected RSA identity.
        rsa_id: [u8; 20],
        /// Expected Ed25519 identity, if known.
        ed_id: Option<[u8; 32]>,
    },
    /// Create a relabel half on connection `conn_id` toward the next relay,
    /// send CREATE2 with `create2` (HTYPE | HLEN | HDATA), and link it with
    /// the keyed half `prev`.
    CreateOutbound {
        /// The connection (owned by this worker).
        conn_id: ConnId,
        /// The keyed half that asked.
        prev: HalfRef,
        /// CREATE2 body.
        create2: Vec<u8>,
    },
    /// The extend of keyed half `half` failed: close its circuit.
    ExtendFailed {
        /// The keyed half.
        half: HalfRef,
        /// DESTROY reason.
        reason: u8,
        /// For the log.
        why: String,
    },
    /// The peer of `half` is gone: tear `half` down and send DESTROY with
    /// `reason` on its connection.
    Destroy {
        /// The half on this worker.
        half: HalfRef,
        /// DESTROY reason.
        reason: u8,
    },
    /// Launch a bandwidth self-test circuit on connection `conn_id` to
    /// `first`, extending through `rest` (the last hop is ourselves), and
    /// send `cells` DROP cells over it.
    SelfTest {
        /// The connection to the first hop (owned by this worker).
        conn_id: ConnId,
        /// The first hop.
        first: weft_proto::origin::HopTarget,
        /// The other hops.
        rest: Vec<weft_proto::origin::HopTarget>,
        /// DROP cells to send.
        cells: u32,
    },
    /// Move connection `conn_id` to worker `to` (controller's balancing, or
    /// TestingMigrateEvery).
    Migrate {
        /// The connection.
        conn_id: ConnId,
        /// Destination worker.
        to: usize,
    },
    /// Take over a connection another worker moved here.
    Adopt(Box<crate::migrate::MovedConn>),
    /// This worker's share of BandwidthRate / BandwidthBurst (bytes/s,
    /// bytes; each direction).
    BandwidthShare {
        /// Rate.
        rate: u64,
        /// Burst.
        burst: u64,
    },
    /// New immutable context (keys rotated, parameters changed).
    NewContext(Arc<SharedContext>),
    /// Send the last counters and stop.
    Shutdown,
}

/// Per-worker counters reported to the controller every second.
#[derive(Debug, Default, Clone, Copy)]
pub struct WorkerReport {
    /// Heap allocations on the worker thread (when the binary counts them).
    pub allocations: u64,
    /// Node-based delay of the cells written (read → hand-over to TLS).
    pub delay: crate::metrics::DelayHistogram,
    /// Of that, time spent in the circuit queue of the writing worker.
    pub queue_wait: crate::metrics::DelayHistogram,
    /// Kernel send-queue sizes seen by the scheduler (bytes).
    pub outq: crate::metrics::DelayHistogram,
    /// Bytes read from sockets (TLS plaintext).
    pub read_bytes: u64,
    /// Bytes written to sockets (TLS plaintext).
    pub written_bytes: u64,
    /// Relay cells forwarded between halves.
    pub cells_relayed: u64,
    /// Of those, handed to a half on another worker.
    pub cells_cross_worker: u64,
    /// Open connections.
    pub connections: u64,
    /// Circuit halves.
    pub circuits: u64,
    /// Circuits created (CREATE2 answered).
    pub circuits_created: u64,
    /// Cells waiting in circuit queues.
    pub queued_cells: u64,
    /// Cells in the pool (queued or free).
    pub pool_slots: u64,
    /// Wake-ups sent to other workers.
    pub wakeups_sent: u64,
    /// Event-loop rounds.
    pub rounds: u64,
    /// Time spent doing work (not blocked in poll), ns.
    pub busy_ns: u64,
    /// Connections moved away from this worker.
    pub migrations: u64,
    /// The busiest connections of the last second: (id, bytes read +
    /// written), busiest first; id 0 = none.
    pub top_conns: [(ConnId, u64); 4],
}

/// Messages to the controller.
// WorkerStats carries two fixed histograms by value so that a worker's
// once-a-second report does not allocate; the size is fine for a control
// channel.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum ControllerMsg {
    /// A connection finished its link handshake.
    ConnOpened {
        /// Its identifier.
        conn_id: ConnId,
        /// Owning worker.
        worker: usize,
        /// Who is on the other side.
        peer: PeerKind,
        /// NETINFO said the peer's address is the TCP address.
        canonical: bool,
        /// We initiated it.
        outbound: bool,
        /// TCP peer.
        addr: SocketAddr,
    },
    /// An outbound connection failed before opening.
    ConnFailed {
        /// Its identifier.
        conn_id: ConnId,
        /// DESTROY reason for waiting circuits.
        reason: u8,
        /// For the log.
        why: String,
    },
    /// A connection closed.
    ConnClosed {
        /// Its identifier.
        conn_id: ConnId,
    },
    /// A keyed half wants an extend.
    Extend {
        /// The keyed half.
        from: HalfRef,
        /// Its connection (to refuse extending back to the previous hop).
        from_conn: ConnId,
        /// The request.
        req: Box<Extend2>,
    },
    /// A connection moved to another worker.
    ConnMoved {
        /// Its identifier.
        conn_id: ConnId,
        /// Its new worker.
        worker: usize,
    },
    /// A worker has sent its last report and stopped.
    WorkerStopped {
        /// Which worker.
        worker: usize,
    },
    /// Counters since the last report.
    WorkerStats {
        /// Which worker.
        worker: usize,
        /// Deltas (bytes, cells, rounds, busy) and gauges (connections,
        /// circuits, queue).
        report: WorkerReport,
        /// CPU time of the worker thread so far, in nanoseconds.
        cpu_ns: u64,
    },
}
