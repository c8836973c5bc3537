//! The circuit core of a worker: every decision about circuits, with no
//! I/O. It owns the circuit halves ([`crate::worker::core::half`]), the cell pool, each
//! connection's circuit table and output queues, and the producer ends of
//! the rings to the other workers (in-memory queues: pushing is not I/O;
//! publishing and waking the other worker is the driver's). It never
//! touches a socket, the poll, a clock, a thread or the controller: time
//! comes in as arguments, and what the driver must do comes out as
//! [`Effect`]s and lists it drains.
//!
//! The API, as in quinn-proto's `Connection` (the driver calls nothing
//! else; `tests/core_types.rs` checks it), twelve entry points:
//!
//! * inputs — [`Circuits::on_cell`] (one cell read from a connection,
//!   [`crate::worker::core::dispatch`]; no cell stops its connection's
//!   reading: one the ring to its peer's worker cannot take waits in its
//!   circuit's crossing queue, [`crate::worker::core::crossing`]),
//!   [`Circuits::on_ring_msg`] (a message from another worker's ring,
//!   [`crate::worker::core::handoff`]) and [`Circuits::handle_event`] (a
//!   [`crate::worker::core::core_event::CoreEvent`]: a round began — the
//!   clock, the core's own timers ([`crate::worker::core::timers`]) —, a
//!   connection started, opened, closed or adopted, the rings drained, a
//!   stream socket connected or failed, or a
//!   [`crate::worker::core::core_msg::CoreMsg`] from the controller or
//!   another core);
//! * outputs — [`Circuits::poll_effect`] (messages for the controller and
//!   other cores, lookups, stream sockets to open, close or pump,
//!   connections with cells to write or to close),
//!   [`Circuits::poll_timeout`] (when to wake it), [`Circuits::fill`]
//!   (cells for one connection's write buffer,
//!   [`crate::worker::core::sched`]), [`Circuits::pump_stream`] (an exit
//!   stream's bytes through its socket,
//!   [`crate::worker::core::streams::pump`]), [`Circuits::end_round`]
//!   (what waits on the lanes placed, the rings published), [`Circuits::report`] (the counters; once a
//!   second, when a quiet pool also gives chunks back),
//!   [`Circuits::circuits_on`] (a connection's circuit count, which the
//!   balancer's candidates are filtered by) and [`Circuits::read_budget`]
//!   (how much to read from a connection this round,
//!   [`crate::worker::core::read_share`]);
//! * the first step of a move, [`Circuits::detach`] (the connection's
//!   circuits given up, or `None` while it cannot move).
//!
//! After any input, drain `poll_effect`; after a round, `end_round`.
//! Every module in this folder is part of this core and may not use
//! sockets, mio, clocks or threads (`tests/module_layers.rs`); the driver
//! is the worker's folder around it.

pub(crate) mod circpad;
pub(crate) mod conflux;
pub(crate) mod core_event;
pub(crate) mod core_msg;
pub(crate) mod crossing;
pub(crate) mod dispatch;
pub(crate) mod extend;
pub(crate) mod half;
pub(crate) mod handoff;
pub(crate) mod limits;
pub(crate) mod migrate;
pub(crate) mod move_state;
pub(crate) mod onion;
pub(crate) mod origin;
pub(crate) mod read_share;
pub(crate) mod sched;
pub(crate) mod streams;
#[cfg(test)]
mod tests;
pub(crate) mod timers;
pub(crate) mod walks;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;

use rand::CryptoRng;
use tracing::info;
use weft_proto::cell::{cmd, destroy_reason};
use weft_proto::circuit::ForwardCtx;

use crate::context::CircuitContext;
use crate::histogram::DelayHistogram;
use crate::messages::{ConnId, ControllerMsg, HalfRef, RingMsg};
use crate::pool::CellPool;
use crate::ring::Producer;
use crate::worker::core::core_msg::CoreMsg;
use crate::worker::core::half::{Half, HalfTable};
use crate::worker::core::sched::ConnSched;

pub(crate) use crate::worker::core::read_share::ReadFrom;

/// What the core knows of one open connection.
pub(crate) struct ConnCircuits {
    /// Controller-assigned identifier.
    id: ConnId,
    /// TCP peer (for logs).
    peer_addr: SocketAddr,
    /// We opened the TCP connection: we set the top bit of circuit IDs we
    /// allocate. [tor-spec §5.1.1]
    we_initiated: bool,
    /// The peer did not authenticate as a relay (a client, or a bridge
    /// user): it may not open streams or introduce through us.
    client: bool,
    /// The RSA identity the peer authenticated with, if a relay (an
    /// exit's `refuseunknownexits` asks whether the consensus lists it).
    peer_rsa: Option<[u8; 20]>,
    /// Circuit ID → slot of the half. A std HashMap (SipHash with a random
    /// key): the peer chooses these IDs.
    circuits: HashMap<u32, u32>,
    /// Output scheduling: active circuits and urgent cells.
    sched: ConnSched,
    /// The last circuit a cell was read for: (circuit ID, slot).
    last: (u32, u32),
    /// The circuits it read for lately (its read budget's share,
    /// [`crate::worker::core::read_share`]).
    reads: crate::worker::core::read_share::ConnReads,
    /// Its idle and keepalive clocks ([`crate::worker::core::timers`]).
    times: crate::worker::core::timers::ConnTimes,
    /// Link protocol version.
    link_version: u16,
    /// Connection padding ([`weft_proto::padding`]).
    padding: weft_proto::padding::ConnPadding,
    /// An inbound connection whose NETINFO gave our address (of its
    /// family): the first CREATE answered on it proves that ORPort
    /// reachable (told to the controller once,
    /// `controller/reachability.rs`).
    proves_reachable: bool,
}

/// What a connection brings besides its identity when it opens (or
/// arrives from another worker).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnLink {
    /// Link protocol version.
    pub(crate) version: u16,
    /// Its idle timeout, drawn when it opened ([`crate::worker::core::timers`]).
    pub(crate) idle_timeout_ns: u64,
    /// Its padding state.
    pub(crate) padding: weft_proto::padding::ConnPadding,
    /// See [`ConnCircuits`]'s field of that name.
    pub(crate) proves_reachable: bool,
}

impl ConnLink {
    /// A connection that just opened with link protocol `version`.
    pub(crate) fn opened(version: u16, idle_timeout_ns: u64) -> ConnLink {
        ConnLink {
            version,
            idle_timeout_ns,
            padding: weft_proto::padding::ConnPadding::new(version),
            proves_reachable: false,
        }
    }
}

impl ConnCircuits {
    /// A fresh circuit ID for a circuit we open on this connection: the top
    /// bit set if we opened the TLS connection, never 0, not in use.
    /// [tor-spec §5.1.1]
    fn allocate_circ_id(&self, rng: &mut dyn CryptoRng) -> Option<u32> {
        for _ in 0..64 {
            let r = rng.next_u32();
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
}

/// What the driver must do for the core.
// Effects carry a controller message by value (its largest variant, the
// worker's once-a-second report, holds two histograms): no allocation, and
// effects are rare (control plane only).
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Effect {
    /// Send this to the controller.
    Controller(ControllerMsg),
    /// Put this in worker `w`'s inbox (and wake it).
    Worker(usize, CoreMsg),
    /// Ask the resolver thread for a lookup.
    Resolve(crate::resolver::DnsQuery),
    /// Open or close an exit stream's socket.
    Stream(crate::worker::core::streams::StreamIo),
    /// Exit stream `key` may have bytes to write to its socket or room to
    /// read from it: pump it ([`Circuits::pump_stream`]).
    PumpStream(usize),
    /// Connection `idx` has cells to write: the driver puts it on its
    /// writing list and calls [`Circuits::fill`] for it until nothing is
    /// left (it comes again only after new cells).
    Write(usize),
    /// Close connection `idx` (a protocol timer, [`crate::worker::core::timers`]).
    CloseConn {
        /// The driver's slot.
        idx: usize,
        /// For the log.
        why: String,
    },
    /// The core's once-a-second tick ran this round: the driver's own
    /// once-a-second work (its report) rides on it, so an idle worker
    /// wakes once a second, not once for each.
    Tick,
}

/// Counters the core keeps (the driver adds its own for the report).
#[derive(Default, Clone, Copy)]
pub(crate) struct CoreCounters {
    /// Relay cells handed from one half to another.
    pub(crate) cells: u64,
    /// Of those, handed to another worker.
    pub(crate) cross: u64,
    /// Circuits created (CREATE2/CREATE_FAST answered).
    pub(crate) created: u64,
    /// Of those, hops running CGO (relay cell format V1).
    pub(crate) cgo_created: u64,
    /// Connections moved away.
    pub(crate) migrations: u64,
    /// Node-based delay of the cells written (read → write buffer).
    pub(crate) delay: DelayHistogram,
    /// Time cells waited in their circuit queue on the writing worker.
    pub(crate) queue_wait: DelayHistogram,
    /// Introduction and rendezvous points.
    pub(crate) onion: crate::messages::OnionCounters,
    /// DESTROY cells received.
    pub(crate) destroy_cells: u64,
    /// Relay DROP cells received at their hop.
    pub(crate) drop_cells: u64,
    /// Connection padding.
    pub(crate) padding: crate::worker_report::PaddingCounters,
    /// Circuits closed for a protocol violation.
    pub(crate) protocol_closes: u64,
}

/// The core's side of the worker's once-a-second report: its counters (as
/// totals; the driver makes the deltas) and its sizes now.
#[derive(Clone, Copy)]
pub(crate) struct CoreReport {
    pub(crate) counters: CoreCounters,
    pub(crate) limits: crate::worker::core::limits::LimitCounters,
    /// The stream room's counters; `open` and `cfx` filled in.
    pub(crate) exit: crate::messages::ExitCounters,
    /// Circuits open (the halves that end a circuit).
    pub(crate) circuits_open: u64,
    /// Circuit halves.
    pub(crate) halves: u64,
    pub(crate) queued_cells: u64,
    pub(crate) queued_bytes: u64,
    pub(crate) pool_slots: u64,
    /// Exit streams opened, and refused or failed, since the start.
    pub(crate) streams_opened: u64,
    pub(crate) streams_refused: u64,
}

/// Limits of the core.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CoreLimits {
    /// Close a circuit whose queue reaches this many cells.
    pub(crate) max_circuit_queue: usize,
    /// Hard cap on the cells the pool holds.
    pub(crate) max_pool_cells: usize,
    /// Tell the controller at once when the queued bytes moved by this
    /// much since it last heard (an eighth of this worker's share of
    /// MaxMemInQueues), so the memory limit acts within a round.
    pub(crate) queue_report_step: u64,
}

/// The core's randomness: circuit IDs, the server's handshake keys. On a
/// relay ChaCha12 reseeded from the operating system every 64 KiB (as
/// `rand`'s thread generator); seeded in tests, so a run repeats.
pub(crate) type CoreRng = Box<dyn CryptoRng + Send>;

/// The generator a relay's core uses (see [`CoreRng`]).
pub(crate) fn os_seeded_rng() -> CoreRng {
    let rng =
        rand::rngs::ReseedingRng::<rand_chacha::ChaCha12Core, _>::new(64 * 1024, rand::rngs::OsRng)
            .expect("the operating system's random source");
    Box::new(rng)
}

/// The circuit core of one worker (see the module docs).
pub(crate) struct Circuits {
    /// This worker's index.
    me: usize,
    limits: CoreLimits,
    /// Keys and parameters (immutable snapshot; replaced on rotation).
    ctx: Arc<CircuitContext>,
    halves: HalfTable,
    pool: CellPool,
    /// Open connections by the driver's slot index.
    conns: Vec<Option<ConnCircuits>>,
    /// The slot index of each open connection by its identifier.
    conn_ids: HashMap<ConnId, usize>,
    /// Connections with output to write.
    pending: VecDeque<usize>,
    /// The way to each other worker: its ring's producer end, its
    /// ordered line and the circuits whose cells wait for ring room
    /// ([`crate::worker::core::crossing`]).
    lanes: crate::worker::core::crossing::Lanes,
    /// Halves to tear down after the current step (peer, reason).
    destroy_later: Vec<(HalfRef, u8)>,
    /// Old half slots forwarding for halves that moved away.
    forwarders: Vec<u32>,
    /// Connections adopted from another worker whose halves (new
    /// references) are not yet done with the move
    /// ([`Circuits::tend_adopted`]).
    adopted: Vec<(ConnId, Vec<HalfRef>)>,
    /// Our bandwidth self-test circuits.
    selftests: Vec<HalfRef>,
    effects: VecDeque<Effect>,
    counters: CoreCounters,
    /// The driver's clock at the start of this round (ns on the workers'
    /// shared epoch): read once per round, passed in ([`Circuits::set_now`]).
    now_ns: u64,
    /// When the core's once-a-second timers run next ([`Circuits::begin_round`]).
    next_tick_ns: u64,
    /// Connections with a PADDING cell due within the second: (when, the
    /// driver's slot) ([`crate::worker::core::timers`]).
    pad_due: std::collections::BinaryHeap<std::cmp::Reverse<(u64, usize)>>,
    /// Circuit padding's timers ([`crate::worker::core::circpad`]).
    circpad: crate::worker::core::circpad::CircPadRoom,
    /// Connections in their link handshake ([`crate::worker::core::timers`]).
    handshakes: crate::worker::core::timers::Handshakes,
    /// The queued bytes the controller last heard of.
    reported_queue_bytes: u64,
    /// Wall-clock time at `now_ns == 0` (the driver sets it; the
    /// directory cache's HTTP dates and consensus liveness use it).
    wall_epoch: std::time::SystemTime,
    /// DoS marks, the handshake queue (see [`crate::worker::core::limits`]).
    guards: crate::worker::core::limits::Guards,
    /// Counters of the resource limits.
    limit_counters: crate::worker::core::limits::LimitCounters,
    /// What every keyed half needs to know of its surroundings (consensus
    /// parameters, the second), kept current by `set_now` and
    /// `set_context` so the per-cell path builds nothing.
    fctx: ForwardCtx,
    /// Randomness ([`CoreRng`]), injected.
    rng: CoreRng,
    /// Read budgets shared out by busy circuits
    /// ([`crate::worker::core::read_share`]).
    read_shares: crate::worker::core::read_share::ReadShares,
    /// The circuits each inbound ring carried lately (by source worker):
    /// a ring's cells are read like a connection's, by share.
    ring_reads: Vec<crate::worker::core::read_share::ConnReads>,
    /// The exit's streams ([`crate::worker::core::streams`]).
    streams: crate::worker::core::streams::Streams,
    /// Conflux legs and home sets ([`crate::worker::core::conflux`]).
    conflux: crate::worker::core::conflux::ConfluxRoom,
}

impl Circuits {
    /// A core for worker `me` of `workers`, with the ring producers `outs`,
    /// the generator `rng`, and the wall-clock time at the driver's clock's
    /// zero (`wall_epoch`).
    pub(crate) fn new(
        me: usize,
        limits: CoreLimits,
        ctx: Arc<CircuitContext>,
        outs: Vec<Option<Producer<RingMsg>>>,
        rng: CoreRng,
        wall_epoch: std::time::SystemTime,
    ) -> Circuits {
        let n = outs.len();
        Circuits {
            me,
            limits,
            halves: HalfTable::new(me as u16),
            pool: CellPool::new(1024, limits.max_pool_cells),
            conns: Vec::new(),
            conn_ids: HashMap::new(),
            pending: VecDeque::new(),
            lanes: crate::worker::core::crossing::Lanes::new(outs, ctx.halflife_s),
            destroy_later: Vec::new(),
            forwarders: Vec::new(),
            adopted: Vec::new(),
            selftests: Vec::new(),
            effects: VecDeque::new(),
            counters: CoreCounters::default(),
            now_ns: 0,
            next_tick_ns: 0,
            pad_due: Default::default(),
            circpad: Default::default(),
            handshakes: Default::default(),
            reported_queue_bytes: 0,
            wall_epoch,
            guards: Default::default(),
            limit_counters: Default::default(),
            fctx: ForwardCtx {
                allow_nonearly_extend: ctx.allow_nonearly_extend,
                intro_dos: ctx.intro_dos,
                refuse_single_hop_rend: ctx.dos.refuse_single_hop_rend,
                now_s: 0,
                exit: ctx.exit.is_some(),
                dir_cache: ctx.dir_cache,
            },
            ctx,
            rng,
            read_shares: Default::default(),
            ring_reads: vec![Default::default(); n],
            streams: Default::default(),
            conflux: Default::default(),
        }
    }

    /// A new seeded generator (the tests).
    #[cfg(test)]
    pub(crate) fn reseed(&mut self, seed: u64) {
        self.rng = Box::new(<rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(
            seed,
        ));
    }

    /// The clock of this round (ns on the workers' shared epoch).
    pub(crate) fn set_now(&mut self, now_ns: u64) {
        self.now_ns = now_ns;
        self.fctx.now_s = now_ns / 1_000_000_000;
    }

    // ----- connections ------------------------------------------------------

    /// Connection `idx` (the driver's slot) is open; `peer_rsa`: the RSA
    /// identity the peer authenticated with (None: a client).
    pub(super) fn add_conn(
        &mut self,
        idx: usize,
        id: ConnId,
        peer_addr: SocketAddr,
        we_initiated: bool,
        peer_rsa: Option<[u8; 20]>,
        link: ConnLink,
    ) {
        if self.conns.len() <= idx {
            self.conns.resize_with(idx + 1, || None);
        }
        self.conn_ids.insert(id, idx);
        self.conns[idx] = Some(ConnCircuits {
            id,
            peer_addr,
            we_initiated,
            client: peer_rsa.is_none(),
            peer_rsa,
            circuits: HashMap::new(),
            sched: ConnSched::new(self.ctx.halflife_s),
            last: (0, 0),
            reads: Default::default(),
            times: crate::worker::core::timers::ConnTimes::new(self.now_ns, link.idle_timeout_ns),
            link_version: link.version,
            padding: link.padding,
            proves_reachable: link.proves_reachable,
        });
    }

    /// Connection `idx` closed: every circuit on it goes, its peers get
    /// DESTROY (CHANNEL_CLOSED). [protocol-notes §6.4]
    pub(super) fn remove_conn(&mut self, idx: usize) {
        let Some(mut c) = self.conns.get_mut(idx).and_then(Option::take) else {
            return;
        };
        Self::fold_cell_counts(&mut self.counters.padding, &mut c);
        self.conn_ids.remove(&c.id);
        for (_, slot) in c.circuits.drain() {
            if let Some(h) = self.drop_half(slot) {
                if let Some(p) = h.peer {
                    self.destroy_later.push((p, destroy_reason::CHANNEL_CLOSED));
                }
            }
        }
        c.sched.urgent.clear(&mut self.pool);
        self.forget_pending_creates(idx);
        self.pending.retain(|&p| p != idx);
        self.flush_destroys();
    }

    /// A fresh circuit ID for a circuit we open on connection `idx`.
    pub(crate) fn fresh_circ_id(&mut self, idx: usize) -> Option<u32> {
        let c = self.conns.get(idx)?.as_ref()?;
        c.allocate_circ_id(&mut *self.rng)
    }

    /// The slot index of open connection `id`.
    pub(crate) fn conn_index(&self, id: ConnId) -> Option<usize> {
        self.conn_ids.get(&id).copied()
    }

    /// Circuit halves on connection `idx` (0 if it is not open here).
    pub(crate) fn circuits_on(&self, idx: usize) -> usize {
        self.conn(idx).map_or(0, |c| c.circuits.len())
    }

    pub(crate) fn conn(&self, idx: usize) -> Option<&ConnCircuits> {
        self.conns.get(idx).and_then(Option::as_ref)
    }

    pub(crate) fn conn_mut(&mut self, idx: usize) -> Option<&mut ConnCircuits> {
        self.conns.get_mut(idx).and_then(Option::as_mut)
    }

    /// Number of circuits on connection `idx` (the tests).
    #[cfg(test)]
    pub(crate) fn circuit_count(&self, idx: usize) -> usize {
        self.conn(idx).map_or(0, |c| c.circuits.len())
    }

    /// Cells the half at `slot` has waiting for room on a ring (the tests).
    #[cfg(test)]
    pub(crate) fn crossing_len(&self, slot: u32) -> usize {
        self.halves
            .at(slot)
            .and_then(|h| h.cross.as_ref())
            .map_or(0, |x| x.queue.len())
    }

    /// A new immutable context (keys rotated, parameters changed).
    pub(crate) fn set_context(&mut self, ctx: Arc<CircuitContext>) {
        if ctx.halflife_s != self.ctx.halflife_s {
            walks::visit(self.conns.len());
            for c in self.conns.iter_mut().flatten() {
                c.sched.mux.set_halflife(ctx.halflife_s);
            }
            self.lanes.set_halflife(ctx.halflife_s);
        }
        self.fctx.allow_nonearly_extend = ctx.allow_nonearly_extend;
        self.fctx.intro_dos = ctx.intro_dos;
        self.fctx.refuse_single_hop_rend = ctx.dos.refuse_single_hop_rend;
        self.fctx.exit = ctx.exit.is_some();
        self.fctx.dir_cache = ctx.dir_cache;
        self.ctx = ctx;
    }

    // ----- outputs ------------------------------------------------------------

    /// Queue `m` for the controller ([`Effect::Controller`]).
    pub(crate) fn tell_controller(&mut self, m: ControllerMsg) {
        self.effects.push_back(Effect::Controller(m));
    }

    /// The next thing the driver must do for the core.
    /// Halves torn down during the last inputs are finished first (their
    /// peers told, DESTROY queued).
    pub(crate) fn poll_effect(&mut self) -> Option<Effect> {
        loop {
            if !self.destroy_later.is_empty() {
                self.flush_destroys();
            }
            if let Some(e) = self.effects.pop_front() {
                return Some(e);
            }
            if let Some(e) = self.streams.next_effect() {
                return Some(e);
            }
            if let Some(idx) = self.take_pending() {
                return Some(Effect::Write(idx));
            }
            if !self.streams.has_dir_ready() {
                return None;
            }
            // Serving makes cells and may end streams: poll again.
            self.serve_dir_ready();
        }
    }

    /// The round is over: what waits on the lanes goes into the room the
    /// rings have, every ring with new messages is published, and the
    /// controller hears the queued bytes if they moved by a step
    /// ([`CoreLimits::queue_report_step`]). `wake(w, urgent)` is called
    /// for each worker that may need waking (its notifier decides):
    /// `urgent` if something here waits for room on its ring: a full ring
    /// is drained now, not at the consumer's next KIST run, even if
    /// nothing new was published this round (else the waiting circuits
    /// wait for that run).
    pub(crate) fn end_round(&mut self, mut wake: impl FnMut(usize, bool)) {
        self.serve_lanes();
        for w in 0..self.lanes.lanes.len() {
            let urgent = self.lanes.busy(w);
            if let Some(p) = self.lanes.lanes[w].ring.as_mut() {
                if p.publish() || urgent {
                    wake(w, urgent);
                }
            }
        }
        self.report_queue_change();
    }

    /// Tell the controller the queued bytes if they moved by a step since
    /// it last heard ([`CoreLimits::queue_report_step`]).
    pub(crate) fn report_queue_change(&mut self) {
        let now = self.queued_bytes();
        if now.abs_diff(self.reported_queue_bytes) >= self.limits.queue_report_step {
            self.reported_queue_bytes = now;
            self.tell_controller(ControllerMsg::QueueBytes {
                worker: self.me,
                bytes: now,
            });
        }
    }

    /// Cells queued on circuits, to write or to cross to another worker
    /// (the report's gauge).
    pub(crate) fn queued_cells(&self) -> usize {
        walks::visit(self.conns.len());
        self.conns
            .iter()
            .flatten()
            .map(|c| c.sched.queued)
            .sum::<usize>()
            + self.lanes.cells
    }

    // ----- tearing down ---------------------------------------------------------

    /// Remove the half at `slot`: release its queued and held cells, take
    /// it off its connection's list of active circuits (a later half in
    /// the same slot must not inherit the entry). Returns it for its peer
    /// and circuit ID. Does not touch its connection's circuit table.
    pub(crate) fn drop_half(&mut self, slot: u32) -> Option<Half> {
        let r = self.halves.reference(slot)?;
        let mut h = self.halves.remove(slot)?;
        self.forget_onion_role(r, &h);
        self.conflux_half_dropped(slot, r);
        self.forget_streams(crate::worker::core::streams::StreamOwner::circuit(
            h.conn, slot,
        ));
        if let Some(Some(c)) = self.conns.get_mut(h.conn) {
            c.sched.queued = c.sched.queued.saturating_sub(h.queue.len());
            c.sched.mux.remove(slot, &mut h.ewma);
        }
        h.queue.clear(&mut self.pool);
        // Cells held for a migration's ordering marker go back too, and
        // those that waited to cross to another worker.
        h.held.clear(&mut self.pool);
        if let Some(x) = h.cross.as_deref_mut() {
            if let Some(l) = self.lanes.lanes.get_mut(usize::from(x.lane)) {
                l.waiting.remove(slot, &mut x.ewma);
            }
            let n = x.queue.len();
            self.lanes.cells -= n;
            x.queue.clear(&mut self.pool);
        }
        Some(h)
    }

    /// The peer of `half` is gone: drop `half` and send DESTROY with
    /// `reason` on its connection.
    pub(crate) fn destroy_half(&mut self, half: HalfRef, reason: u8) {
        if self.is_forwarder(half) {
            return self.forward_destroy(half, reason);
        }
        let Some(h) = self.halves.get(half) else {
            return;
        };
        let (conn, circ_id) = (h.conn, h.circ_id);
        self.drop_half(half.slot);
        if let Some(c) = self.conn_mut(conn) {
            c.circuits.remove(&circ_id);
        }
        self.queue_urgent(conn, circ_id, cmd::DESTROY, &[reason]);
    }

    /// Tear down the halves queued in `destroy_later`: here, or through the
    /// inbox of their worker.
    pub(crate) fn flush_destroys(&mut self) {
        while let Some((r, reason)) = self.destroy_later.pop() {
            let w = usize::from(r.worker);
            if w == self.me {
                self.destroy_half(r, reason);
            } else {
                self.effects
                    .push_back(Effect::Worker(w, CoreMsg::Destroy { half: r, reason }));
            }
        }
    }

    /// Close one circuit ourselves: DESTROY here with `reason`, and the
    /// peer half told to send DESTROY with the same reason.
    pub(crate) fn close_circuit(&mut self, conn: usize, slot: u32, reason: u8, why: &str) {
        if reason == destroy_reason::PROTOCOL {
            self.counters.protocol_closes += 1;
        }
        let Some(h) = self.drop_half(slot) else {
            return;
        };
        if let Some(c) = self.conn_mut(conn) {
            info!(
                "connection {} ({}): closing circuit {:#x}: {why}",
                c.id, c.peer_addr, h.circ_id
            );
            c.circuits.remove(&h.circ_id);
            c.last = (0, 0);
        }
        if let Some(p) = h.peer {
            self.destroy_later.push((p, reason));
        }
        self.queue_urgent(conn, h.circ_id, cmd::DESTROY, &[reason]);
    }

    /// The pool is at its hard cap and a cell of this circuit has nowhere
    /// to go: dropping it would corrupt the circuit, so close it.
    pub(crate) fn close_pool_exhausted(&mut self, conn: usize, slot: u32) {
        self.close_circuit(
            conn,
            slot,
            destroy_reason::RESOURCELIMIT,
            "worker cell pool exhausted",
        );
    }

    /// The core's side of the report (see [`CoreReport`]); the queued
    /// bytes in it are what the controller last heard. The driver asks
    /// once a second, which is also when a quiet cell pool gives its empty
    /// trailing chunks back ([`CellPool::shrink`]) before its gauge is read,
    /// and an emptied ordered line the room a burst grew
    /// ([`crate::worker::core::crossing::Lanes::shrink`]).
    pub(crate) fn report(&mut self) -> CoreReport {
        let freed = self.pool.shrink();
        if freed > 0 {
            tracing::debug!("cell pool gave back {freed} slots");
        }
        self.lanes.shrink();
        let (mut exit, opened, refused) = self.streams.report();
        exit.cfx = self.conflux.report();
        CoreReport {
            counters: self.counters,
            limits: self.limit_counters,
            exit,
            circuits_open: self.halves.circuits() as u64,
            halves: self.halves.len() as u64,
            queued_cells: self.queued_cells() as u64,
            queued_bytes: {
                self.reported_queue_bytes = self.queued_bytes();
                self.reported_queue_bytes
            },
            pool_slots: self.pool.capacity() as u64,
            streams_opened: opened,
            streams_refused: refused,
        }
    }

    /// A round begins at `now_ns` (the driver's clock, read once): the
    /// core's clock moves; once a second its own timers run (expired
    /// self-test circuits close); the handshake budget is fresh and spent
    /// first on the CREATE2 cells that wait.
    pub(crate) fn begin_round(&mut self, now_ns: u64) {
        self.set_now(now_ns);
        self.lanes.begin_round(now_ns as f64 / 1e9);
        self.read_shares.begin_round();
        if now_ns >= self.next_tick_ns {
            self.next_tick_ns = now_ns + 1_000_000_000;
            self.expire_selftests();
            self.run_conn_timers();
            self.effects.push_back(Effect::Tick);
        }
        self.send_due_padding();
        self.run_circpad_timers();
        self.streams.dir_round();
        self.streams.rate_round(now_ns);
        self.run_pending_creates();
    }

    /// The rings' messages of this round are in: what the forwarders of
    /// moved halves hold passes on, what waited for ring room goes out.
    pub(crate) fn rings_drained(&mut self) {
        self.flush_destroys();
        self.tend_forwarders();
        self.serve_lanes();
        self.flush_destroys();
    }
}
