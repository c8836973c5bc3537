//! The messages that connect the controller, the workers and the circuit
//! halves: the one place every runtime piece shares, and it depends on
//! nothing above it (only weft-proto and the leaf [`crate::worker_report`],
//! whose once-a-second counters it re-exports).
//!
//! * A circuit half is addressed by a [`HalfRef`]: its worker, its slot in
//!   that worker's half table and the slot's generation (a stale reference
//!   to a freed and reused slot is detected and ignored). The two halves of a
//!   circuit know each other only by such references.
//! * Between workers, cells and the messages that must stay in order with
//!   them ([`RingMsg`]: cells, "linked", "created2", migration markers)
//!   travel through the bounded cross-worker rings, in batches.
//! * Everything else reaches a worker through its inbox
//!   (`worker::WorkerMsg`, defined with the worker because it carries a
//!   connection when one migrates), drained before the rings in every round:
//!   so a DESTROY overtakes the cells queued before it, as the design asks.
//! * Workers tell the controller about connections, extends, onion-service
//!   rendezvous and counters through [`ControllerMsg`].

use std::net::SocketAddr;

use weft_proto::cell::BODY_LEN;
use weft_proto::link::PeerKind;
use weft_proto::relay::Extend2;

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

/// The global address of a conflux set: its home worker, its slot in that
/// worker's set table and the slot's generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SetRef {
    /// The home worker.
    pub worker: u16,
    /// Slot in the home's set table.
    pub slot: u32,
    /// Generation of the slot.
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
    /// Migration (`worker::migrate`): the sending worker will send nothing
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
    /// Onion service: relay `body[..len]` (an INTRODUCE1's data) as
    /// INTRODUCE2 on the service's introduction circuit `to`; the client's
    /// half `from` gets the INTRODUCE_ACK. (It travels on a ring only when
    /// `to` moved to another worker: its old slot forwards it.)
    Introduce2 {
        /// The service's introduction half.
        to: HalfRef,
        /// The client's half.
        from: HalfRef,
        /// Bytes used in `body`.
        len: u16,
        /// The INTRODUCE1 data.
        body: [u8; BODY_LEN],
    },
    /// Onion service: send INTRODUCE_ACK with `status` on client half `to`.
    IntroduceAck {
        /// The client's half.
        to: HalfRef,
        /// The status (`weft_proto::onion::ack_status`).
        status: u16,
    },
    /// Conflux, leg → home: a decrypted multiplexed message or SWITCH
    /// (`body`) that arrived on leg `leg` of `set`. (No read time: a ring
    /// slot stays the size of a cell's.)
    ConfluxCell {
        /// The set.
        set: SetRef,
        /// The leg it came on.
        leg: HalfRef,
        /// The decrypted message, its header parsed by the leg's keyed
        /// half.
        msg: weft_proto::relay::RelayMsg,
    },
    /// Conflux, leg → home: leg `leg`'s congestion state (after LINKED,
    /// LINKED_ACK and every circuit SENDME).
    ConfluxLegState {
        /// The set.
        set: SetRef,
        /// The leg.
        leg: HalfRef,
        /// Its state.
        state: weft_proto::circuit::conflux::LegState,
    },
    /// Conflux, leg → home: leg `leg` closed.
    ConfluxLegGone {
        /// The set.
        set: SetRef,
        /// The leg.
        leg: HalfRef,
    },
    /// Conflux, home → leg: `to` is a leg of `set`; send it LINKED.
    ConfluxLinked {
        /// The leg.
        to: HalfRef,
        /// Its set.
        set: SetRef,
        /// The LINKED to send.
        linked: weft_proto::circuit::conflux::Link,
    },
    /// Conflux, home → leg: originate this message on leg `to` (DATA is
    /// counted in the leg's congestion window).
    ConfluxSend {
        /// The leg.
        to: HalfRef,
        /// The relay command.
        command: u8,
        /// Its stream.
        stream_id: u16,
        /// Bytes used in `data`.
        len: u16,
        /// The message's data.
        data: [u8; weft_proto::relay::RELAY_DATA_MAX],
    },
}

pub use crate::worker_report::{
    CcCounters, ConfluxCounters, DirCounters, ExitCounters, LimitReport, OnionCounters,
    RelayCounters, WorkerReport, OOO_DEPTH_BOUNDS,
};

/// Messages to the controller.
// WorkerStats carries two fixed histograms by value so that a worker's
// once-a-second report does not allocate; the size is fine for a control
// channel.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum ControllerMsg {
    /// A worker's event loop failed and its thread ended: the relay can no
    /// longer carry that worker's connections, so the process exits with
    /// the reason (a supervisor restarts it) rather than live on half dead.
    WorkerFailed {
        /// The worker.
        worker: usize,
        /// What failed.
        why: String,
    },
    /// The exit's DNS changed: its name servers could (not) be
    /// configured, or they redirect most test addresses
    /// ([`crate::dns_honesty`]); unusable DNS withdraws the exit.
    Dns(crate::resolver::DnsStatus),
    /// A CREATE was answered on an inbound connection whose NETINFO gave
    /// our address of the connection's family: that ORPort is reachable
    /// from `peer` (`controller/reachability.rs`; once per such
    /// connection).
    CreateReachedUs {
        /// The TCP peer.
        peer: SocketAddr,
    },
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
        /// Our address as the peer's NETINFO gave it (a suggestion when
        /// the peer is an authority: `controller/address_change.rs`).
        our_addr_seen: Option<std::net::IpAddr>,
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
    /// Onion service: keyed half `half` became the introduction point of
    /// `auth_key` (a previous circuit with that key is closed).
    IntroEstablished {
        /// The introduction circuit's half.
        half: HalfRef,
        /// The service's auth key.
        auth_key: [u8; 32],
    },
    /// Onion service: the introduction circuit of `auth_key` moved from
    /// `old` to `new` with its connection.
    IntroMoved {
        /// The auth key.
        auth_key: [u8; 32],
        /// Its old reference.
        old: HalfRef,
        /// Its new reference.
        new: HalfRef,
    },
    /// Onion service: the introduction circuit `half` of `auth_key` closed.
    IntroGone {
        /// The half.
        half: HalfRef,
        /// The auth key.
        auth_key: [u8; 32],
    },
    /// Onion service: client half `from` sent INTRODUCE1 for `auth_key`.
    Introduce1 {
        /// The client's half.
        from: HalfRef,
        /// The auth key it names.
        auth_key: [u8; 32],
        /// The INTRODUCE1 data (becomes INTRODUCE2's).
        payload: Vec<u8>,
    },
    /// Onion service: client half `half` asks to wait for a rendezvous on
    /// `cookie`.
    EstablishRendezvous {
        /// The client's rendezvous half.
        half: HalfRef,
        /// The cookie.
        cookie: [u8; 20],
    },
    /// Onion service: the rendezvous circuit `half` waiting on `cookie`
    /// closed.
    RendezvousGone {
        /// The half.
        half: HalfRef,
        /// The cookie.
        cookie: [u8; 20],
    },
    /// Onion service: the service's half `half` sent RENDEZVOUS1 for
    /// `cookie`; `payload` goes to the client as RENDEZVOUS2.
    Rendezvous1 {
        /// The service's rendezvous half.
        half: HalfRef,
        /// The cookie.
        cookie: [u8; 20],
        /// The rest of RENDEZVOUS1 (the handshake for the client).
        payload: Vec<u8>,
    },
    /// Conflux: a LINK on keyed half `leg` (checked there): which worker
    /// is the home of its nonce's set?
    ConfluxLink {
        /// The leg.
        leg: HalfRef,
        /// The LINK.
        link: weft_proto::circuit::conflux::Link,
    },
    /// Conflux: the set of `nonce` on worker `worker` ended.
    ConfluxSetGone {
        /// Its nonce.
        nonce: [u8; 32],
        /// Its home.
        worker: u16,
    },
    /// HSDir: an onion-service descriptor upload on directory stream
    /// `stream` of worker `worker` (over a multi-hop circuit, body
    /// complete): check it, store it, answer with `CoreMsg::HsDescPosted`.
    HsDescPost {
        /// Which worker.
        worker: usize,
        /// The stream's key there.
        stream: usize,
        /// The stream's tag.
        tag: u64,
        /// The request body (the descriptor).
        body: Vec<u8>,
    },
    /// Directory statistics: a consensus request over BEGIN_DIR was
    /// answered (C's `handle_get_current_consensus` notes).
    DirRequest {
        /// The request (worker and stream), for [`Self::DirRequestDone`].
        id: u64,
        /// The connection's peer (C's address of the directory request).
        ip: Option<std::net::IpAddr>,
        /// How it was answered.
        response: crate::stats::dirreq::NsResponse,
        /// Bytes of the answer.
        size: u64,
    },
    /// Directory statistics: the consensus of request `id` was sent whole.
    DirRequestDone {
        /// As in [`Self::DirRequest`].
        id: u64,
    },
    /// DoS: a CREATE cell came on a client connection from `ip`.
    ClientCreate {
        /// The client's address.
        ip: std::net::IpAddr,
    },
    /// Memory: worker `worker`'s queues hold `bytes` now (sent when they
    /// grew or shrank by a step since the last report).
    QueueBytes {
        /// Which worker.
        worker: usize,
        /// Bytes queued.
        bytes: u64,
    },
    /// Memory: worker `worker`'s circuits by (oldest queued cell's age in
    /// ns, bytes queued), for OOM round `round`.
    OomCandidates {
        /// Which worker.
        worker: usize,
        /// The round it answers.
        round: u64,
        /// (age, bytes) per circuit half with queued cells.
        circuits: Vec<(u64, u64)>,
    },
    /// A connection moved to another worker.
    ConnMoved {
        /// Its identifier.
        conn_id: ConnId,
        /// Its new worker.
        worker: usize,
    },
    /// The migration of connection `conn_id` is over: it moved and every
    /// circuit's ends are done with the markers (from the new worker), or
    /// it did not move (from the old worker, or the new one if adoption
    /// failed). The controller starts the next move only after this.
    MigrationDone {
        /// Its identifier.
        conn_id: ConnId,
        /// It moved.
        moved: bool,
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

impl RingMsg {
    /// The half this message is for.
    pub fn target(&self) -> HalfRef {
        match *self {
            RingMsg::Cell { to, .. }
            | RingMsg::Linked { to, .. }
            | RingMsg::Created2 { to, .. }
            | RingMsg::SourceDone { to }
            | RingMsg::PeerMoved { to, .. }
            | RingMsg::Introduce2 { to, .. }
            | RingMsg::IntroduceAck { to, .. }
            | RingMsg::ConfluxLinked { to, .. }
            | RingMsg::ConfluxSend { to, .. } => to,
            RingMsg::Switched { old } | RingMsg::Installed { old, .. } => old,
            // Addressed to a set, not a half: no half slot matches.
            RingMsg::ConfluxCell { set, .. }
            | RingMsg::ConfluxLegState { set, .. }
            | RingMsg::ConfluxLegGone { set, .. } => HalfRef {
                worker: set.worker,
                slot: u32::MAX,
                gen: u32::MAX,
            },
        }
    }

    /// The same message for another half.
    pub fn retarget(mut self, new: HalfRef) -> RingMsg {
        match &mut self {
            RingMsg::Cell { to, .. }
            | RingMsg::Linked { to, .. }
            | RingMsg::Created2 { to, .. }
            | RingMsg::SourceDone { to }
            | RingMsg::PeerMoved { to, .. }
            | RingMsg::Introduce2 { to, .. }
            | RingMsg::IntroduceAck { to, .. }
            | RingMsg::ConfluxLinked { to, .. }
            | RingMsg::ConfluxSend { to, .. } => *to = new,
            RingMsg::Switched { old } | RingMsg::Installed { old, .. } => *old = new,
            RingMsg::ConfluxCell { .. }
            | RingMsg::ConfluxLegState { .. }
            | RingMsg::ConfluxLegGone { .. } => {}
        }
        self
    }
}
/// A ring slot is a cell and its address: a conflux message that carries
/// its parsed header ([`weft_proto::relay::RelayMsg`]) makes it no bigger.
#[test]
fn a_ring_message_is_a_cell_and_its_address() {
    assert!(
        std::mem::size_of::<RingMsg>() <= 536,
        "{}",
        std::mem::size_of::<RingMsg>()
    );
}
