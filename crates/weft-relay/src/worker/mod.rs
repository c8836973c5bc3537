//! A worker: one thread with its own event loop, owning the connections the
//! controller hands it. It is two parts (the thesis's worker, split the way
//! quinn splits quinn-proto from quinn):
//!
//! * the **driver** — this module, [`conn`] (sockets, TLS, the link
//!   handshake), [`io`] (reading and writing bytes), [`inbox`] (messages
//!   from the controller and other workers), [`stream_io`] (exit streams'
//!   sockets) and [`report`] (counters): a mio loop that owns everything
//!   that does I/O or reads a clock;
//! * the **circuit core** — the folder [`core`], and nothing else: its
//!   state is private to it (the compiler keeps the driver out), the
//!   driver calls its fourteen entry points. Its modules are
//!   `core::dispatch` (what a cell does), `core::handoff` (between the
//!   halves of a circuit, locally or over a ring), `core::extend`,
//!   `core::onion` (introduction and rendezvous points), `core::streams`
//!   (exit streams, with their flow control, directory answers and
//!   pumping), `core::conflux`, `core::migrate`, `core::sched` (EWMA mux,
//!   what goes out next), `core::limits`, `core::timers`, `core::origin`
//!   (our own self-test circuits) and `core::half` (the half table):
//!   sans-IO state machines, unit-tested in `core::tests` without threads
//!   or sockets.
//!
//! The hot path of a relayed cell never leaves the workers: read on
//! connection X (TLS plaintext into X's buffer), handed in place to the core,
//! which removes the onion layer and passes it to the peer half — into its
//! queue if that half is on this worker, else as a [`RingMsg`] on the ring to
//! its worker, published once per round with at most one wake-up. The
//! receiving worker queues it on the half, and its writer fills the
//! connection's write buffer from the active circuits and hands it to TLS in
//! large writes. No lock, no controller step, and no allocation per cell in
//! steady state (pool slots, rings and buffers are reused).
//!
//! A round ([`Worker::turn`]): readiness events, the inbox (control before
//! cells: a DESTROY overtakes queued cells), the inbound rings, stalled
//! cells and ordered messages waiting for ring room, reading, writing, publishing the outbound
//! rings, and once a second the report to the controller. The protocol's
//! timers (handshake deadlines, idle connections, keepalives) are the
//! core's ([`timers`]); the driver wakes when [`Circuits::poll_timeout`]
//! says. Between rounds the
//! worker sleeps in epoll; with cells waiting for its next KIST run it
//! sleeps until that run in a poll that only wake-ups end (the run reads
//! what the sockets brought in the meantime).

pub(crate) mod conn;
pub(crate) mod core;
pub(crate) mod inbox;
pub(crate) mod io;
pub(crate) mod report;
pub(crate) mod stream_io;

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token};
use slab::Slab;
use tokio::sync::mpsc::UnboundedSender;
use tracing::{debug, info};

use self::conn::Conn;
use self::core::core_event::CoreEvent;
use self::core::{Circuits, CoreLimits, Effect, ReadFrom};
use self::report::Counters;
use crate::bucket::TokenBucket;
use crate::context::SharedContext;
use crate::kist;
use crate::messages::{ConnId, ControllerMsg, RingMsg};
use crate::ring::{Consumer, Notifier, Producer};
use weft_proto::cell::CELL_LEN;

pub(crate) use self::core::core_msg::CoreMsg;
pub(crate) use self::inbox::WorkerMsg;

/// Token of the cross-thread waker.
const WAKER: Token = Token(usize::MAX);
/// C Tor's default `circ_max_cell_queue_size`: a circuit with this many
/// cells waiting is closed (RESOURCELIMIT). [C relay.c]
pub const DEFAULT_MAX_CIRCUIT_QUEUE: usize = 2500;
/// Most messages unread on a cross-worker ring (about 536 bytes each: 270
/// KiB). Its room is allocated by blocks of 64 as it fills and reused
/// warm, so a ring its consumer keeps up with costs one or two blocks
/// ([`crate::ring`]). What the ring refuses waits in its circuit's own
/// queue ([`core::crossing`]) while its connection reads on. 4096 served the circuits that
/// cross workers better on the scale bench when two workers share cores
/// with other work (a turn of the other worker's absence fits), but cost
/// 13% more CPU per GiB with two workers on one core, where a ring that
/// large is written out of cache before it is read; 512 cost 1.007
/// (docs/perf.md, issue 51).
pub const RING_CAPACITY: usize = 512;

/// How the controller (and other workers) reach a worker.
#[derive(Clone, Debug)]
pub struct WorkerHandle {
    /// Worker index.
    pub id: usize,
    tx: Sender<WorkerMsg>,
    notifier: Arc<Notifier>,
}

impl WorkerHandle {
    /// Send a control message and wake the worker.
    pub(crate) fn send(&self, m: impl Into<WorkerMsg>) {
        if self.tx.send(m.into()).is_ok() {
            self.notifier.wake();
        }
    }
}

/// Limits and settings of a worker.
#[derive(Debug, Clone, Copy)]
pub struct WorkerConfig {
    /// Close a circuit whose queue reaches this many cells.
    pub max_circuit_queue: usize,
    /// Hard cap on the cells a worker keeps queued (its pool).
    pub max_pool_cells: usize,
    /// Heap allocations made on the calling thread so far, if the binary
    /// counts them.
    pub alloc_probe: Option<fn() -> u64>,
    /// Gives free heap pages back to the kernel (see
    /// [`crate::context::RelayConfig::heap_trim`]).
    pub heap_trim: Option<fn() -> bool>,
    /// This worker's share of BandwidthRate, bytes/s (each direction).
    pub rate_share: u64,
    /// Its share of BandwidthBurst.
    pub burst_share: u64,
    /// TokenBucketRefillInterval.
    pub refill: Duration,
    /// MaxMemInQueues (the whole relay's), bytes.
    pub max_mem_in_queues: u64,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            max_circuit_queue: DEFAULT_MAX_CIRCUIT_QUEUE,
            // 512 Ki cells ≈ 270 MB per worker.
            max_pool_cells: 512 * 1024,
            alloc_probe: None,
            heap_trim: None,
            rate_share: 1 << 30,
            burst_share: 1 << 30,
            refill: Duration::from_millis(100),
            max_mem_in_queues: crate::oom::MAX_DEFAULT_LIMIT,
        }
    }
}

/// Everything needed to run one worker; made by [`build`].
pub struct WorkerParts {
    id: usize,
    /// The clock origin shared by all workers (cell stamps cross workers).
    epoch: Instant,
    poll: Poll,
    /// A poll with only a waker: a busy worker's sleep until its KIST run
    /// ([`Worker::turn`]).
    quiet_poll: Poll,
    notifier: Arc<Notifier>,
    inbox: Receiver<WorkerMsg>,
    outs: Vec<Option<Producer<RingMsg>>>,
    ins: Vec<Option<Consumer<RingMsg>>>,
}

/// Make `n` workers' parts and handles, with a ring for every ordered pair.
pub fn build(n: usize) -> std::io::Result<(Vec<WorkerParts>, Vec<WorkerHandle>)> {
    let mut parts = Vec::new();
    let mut handles = Vec::new();
    let epoch = Instant::now();
    for id in 0..n {
        let poll = Poll::new()?;
        let waker = mio::Waker::new(poll.registry(), WAKER)?;
        let quiet_poll = Poll::new()?;
        let quiet = mio::Waker::new(quiet_poll.registry(), WAKER)?;
        let notifier = Arc::new(Notifier::with_quiet(waker, quiet));
        let (tx, rx) = std::sync::mpsc::channel();
        handles.push(WorkerHandle {
            id,
            tx,
            notifier: notifier.clone(),
        });
        parts.push(WorkerParts {
            id,
            epoch,
            poll,
            quiet_poll,
            notifier,
            inbox: rx,
            outs: (0..n).map(|_| None).collect(),
            ins: (0..n).map(|_| None).collect(),
        });
    }
    for a in 0..n {
        for b in 0..n {
            if a != b {
                let (p, c) = crate::ring::ring(RING_CAPACITY);
                parts[a].outs[b] = Some(p);
                parts[b].ins[a] = Some(c);
            }
        }
    }
    Ok((parts, handles))
}

/// One worker: the driver of its circuit core (see the module docs).
pub struct Worker {
    id: usize,
    poll: Poll,
    events: Events,
    /// Sleeps until the KIST run, ended early only by a wake-up
    /// ([`Worker::turn`]).
    quiet_poll: Poll,
    quiet_events: Events,
    notifier: Arc<Notifier>,
    inbox: Receiver<WorkerMsg>,
    peers: Vec<WorkerHandle>,
    ins: Vec<Option<Consumer<RingMsg>>>,
    controller: UnboundedSender<ControllerMsg>,
    /// Where the once-a-second report goes: read by the controller when it
    /// wakes anyway, so a report does not wake it.
    reports: UnboundedSender<ControllerMsg>,
    ctx: Arc<SharedContext>,
    cfg: WorkerConfig,
    conns: Slab<Conn>,
    by_id: HashMap<ConnId, usize>,
    /// The sans-IO circuit core.
    core: Circuits,
    /// Open connections with bytes to read (readable, not stalled).
    to_read: Vec<usize>,
    /// Connections in their handshake that had an event.
    to_handshake: Vec<usize>,
    /// Connections marked closing.
    to_close: Vec<usize>,
    /// Reused list (no allocation per round).
    scratch: Vec<usize>,
    /// The connections with cells to write, as the core handed them
    /// ([`io`]; each once: [`conn::Conn::writing`]).
    writing: Vec<usize>,
    /// BandwidthRate share: reading.
    read_bucket: TokenBucket,
    /// BandwidthRate share: writing.
    write_bucket: TokenBucket,
    /// Readable connections waiting for read tokens.
    starved: Vec<usize>,
    /// Readable connections every circuit of which has cells waiting to
    /// cross ([`Circuits::read_paused`]): asked again at the round's end
    /// ([`Worker::unpause_reads`]) and in the next round's reads.
    paused: Vec<usize>,
    epoch: Instant,
    /// The clock at the start of this round (ns since `epoch`).
    round_ns: u64,
    /// The read time cells read this round are stamped with: the round's
    /// start, or after a quiet sleep the start of the round before it
    /// (the kernel does not say when, in between, bytes arrived; the
    /// in-relay delay may come out up to one KIST interval high, never
    /// low).
    read_stamp_ns: u64,
    /// The same as an Instant.
    round_start: Instant,
    counters: Counters,
    reported: Counters,
    /// When the report is due if the core's tick does not bring it first
    /// ([`Effect::Tick`]; the core ticks only while it has connections).
    next_housekeeping: Instant,
    /// The core's tick ran this round: the report goes out with it.
    tick_seen: bool,
    /// The last report went out while the worker was idle
    /// ([`Worker::housekeeping_due`]).
    idle_reported: bool,
    /// When the heap is trimmed next ([`WorkerConfig::heap_trim`], in the
    /// once-a-second pass).
    trim: report::TrimPacer,
    /// When the KIST scheduler runs next.
    next_sched_run: Instant,
    stopping: bool,
    /// A move asked for while its connection was busy: connection, worker,
    /// retried until ([`Worker::retry_move`]).
    move_asked: Option<(ConnId, usize, Instant)>,
    /// Exit streams' sockets ([`stream_io`]).
    streams: stream_io::StreamSockets,
    /// Messages each inbound ring may still hand over this round (its
    /// share, [`Circuits::read_budget`]).
    ring_left: Vec<u64>,
}

impl Worker {
    /// A worker from its parts.
    pub fn new(
        parts: WorkerParts,
        peers: Vec<WorkerHandle>,
        ctx: Arc<SharedContext>,
        (controller, reports): (
            UnboundedSender<ControllerMsg>,
            UnboundedSender<ControllerMsg>,
        ),
        cfg: WorkerConfig,
    ) -> Worker {
        let now = Instant::now();
        let n_workers = peers.len().max(1);
        let limits = CoreLimits {
            max_circuit_queue: cfg.max_circuit_queue,
            max_pool_cells: cfg.max_pool_cells,
            queue_report_step: (cfg.max_mem_in_queues / (8 * n_workers as u64)).max(1 << 20),
        };
        Worker {
            id: parts.id,
            poll: parts.poll,
            events: Events::with_capacity(1024),
            quiet_poll: parts.quiet_poll,
            quiet_events: Events::with_capacity(4),
            notifier: parts.notifier,
            inbox: parts.inbox,
            peers,
            ins: parts.ins,
            controller,
            reports,
            core: Circuits::new(
                parts.id,
                limits,
                ctx.circuits.clone(),
                parts.outs,
                self::core::os_seeded_rng(),
                std::time::SystemTime::now() - parts.epoch.elapsed(),
            ),
            ctx,
            cfg,
            conns: Slab::new(),
            by_id: HashMap::new(),
            to_read: Vec::new(),
            to_handshake: Vec::new(),
            to_close: Vec::new(),
            scratch: Vec::new(),
            writing: Vec::new(),
            read_bucket: TokenBucket::new(cfg.rate_share, cfg.burst_share, cfg.refill, now),
            write_bucket: TokenBucket::new(cfg.rate_share, cfg.burst_share, cfg.refill, now),
            starved: Vec::new(),
            paused: Vec::new(),
            epoch: parts.epoch,
            round_ns: 0,
            read_stamp_ns: 0,
            round_start: now,
            counters: Counters::default(),
            reported: Counters::default(),
            next_housekeeping: now + Duration::from_secs(1),
            tick_seen: false,
            idle_reported: false,
            trim: report::TrimPacer::new(now),
            next_sched_run: now,
            stopping: false,
            move_asked: None,
            streams: Default::default(),
            ring_left: vec![0; n_workers],
        }
    }

    /// The epoll file descriptor (for driving the worker from another event
    /// loop: it is readable when the worker has something to do).
    pub fn poll_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.poll.as_raw_fd()
    }

    /// The worker's notifier (set before blocking, cleared after).
    pub fn notifier(&self) -> &Arc<Notifier> {
        &self.notifier
    }

    /// The event loop failed with `e`: log it and tell the controller,
    /// which ends the process ([`ControllerMsg::WorkerFailed`]).
    pub fn failed(&self, e: &std::io::Error) {
        tracing::error!("worker {}: event loop failed: {e}", self.id);
        let _ = self.controller.send(ControllerMsg::WorkerFailed {
            worker: self.id,
            why: e.to_string(),
        });
    }

    /// Run on the current thread until shutdown.
    pub fn run(mut self) {
        debug!("worker {} running", self.id);
        while !self.stopping {
            let timeout = self.sleep_time();
            if let Err(e) = self.turn(timeout) {
                self.failed(&e);
                break;
            }
        }
        let r = self.core.report();
        let (open, opened, refused) = (r.exit.open, r.streams_opened, r.streams_refused);
        if opened + refused > 0 {
            info!(
                "worker {}: exit streams: {opened} opened, {refused} refused or failed, {open} open at exit",
                self.id
            );
        }
        debug!("worker {} stopped", self.id);
    }

    /// How long the next poll may block: zero if work is waiting, else until
    /// the next thing that is due (the KIST run while the cadence is live or
    /// cells wait for it, the write bucket's refill for connections with
    /// cells to write, housekeeping); the notifier is set so producers wake
    /// us earlier.
    pub fn sleep_time(&self) -> Option<Duration> {
        if self.has_work() {
            return Some(Duration::ZERO);
        }
        let now = Instant::now();
        let mut until = self.housekeeping_due();
        if let Some(t) = self.next_write() {
            until = Some(until.map_or(t, |u| u.min(t)));
        }
        if kist::cadence_live(self.ctx.kist_interval, self.next_sched_run, now) {
            until = Some(until.map_or(self.next_sched_run, |u| u.min(self.next_sched_run)));
        }
        let Some(until) = until else {
            // Idle: nothing is due until a message or a connection wakes
            // us (the notifier is told we sleep for ever).
            self.notifier.going_to_sleep_until(u64::MAX);
            if self.ins.iter().flatten().any(|c| c.has_pending()) {
                self.notifier.awake();
                return Some(Duration::ZERO);
            }
            return None;
        };
        if until <= now {
            return Some(Duration::ZERO);
        }
        // Producers need not wake us for cells that can wait for the run
        // we wake for anyway ([`Notifier::notify_unless_due`]).
        let wakes_at_ns = until.saturating_duration_since(self.epoch).as_nanos() as u64;
        self.notifier.going_to_sleep_until(wakes_at_ns);
        // What the rings hold can wait for a sleep no longer than a KIST
        // interval (their cells are written at that run at the earliest;
        // a producer that needs the room wakes us, urgently): a new round
        // for every batch another worker publishes cost two workers on one
        // core three times the rounds per cell.
        let short = !self.ctx.kist_interval.is_zero() && until - now <= self.ctx.kist_interval;
        if !short && self.ins.iter().flatten().any(|c| c.has_pending()) {
            self.notifier.awake();
            return Some(Duration::ZERO);
        }
        Some(until - now)
    }

    /// When the core's next timer is due ([`Circuits::poll_timeout`]);
    /// None if it has none.
    fn core_due(&self) -> Option<Instant> {
        match self.core.poll_timeout() {
            u64::MAX => None,
            ns => Some(self.epoch + Duration::from_nanos(ns)),
        }
    }

    /// When the worker must next wake for itself (the once-a-second
    /// report, the core's timers); None when it is idle — no connection,
    /// no stream socket — and has reported so since: an idle worker
    /// sleeps without a timer (issue 37) until a message wakes it.
    fn housekeeping_due(&self) -> Option<Instant> {
        let idle = self.idle_reported && self.is_idle();
        let own = (!idle).then_some(self.next_housekeeping);
        match (own, self.core_due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// No connection and no stream socket.
    pub(crate) fn is_idle(&self) -> bool {
        self.conns.is_empty() && self.streams.open == [0, 0]
    }

    /// True if the worker has work that does not wait for an event or a
    /// timer.
    pub fn has_work(&self) -> bool {
        !self.to_read.is_empty() || !self.to_close.is_empty() || self.streams.has_work()
    }

    /// When the writer can next do something for a connection with cells
    /// waiting: at once without KIST, else at the next KIST run; never before
    /// the write bucket has tokens. None if nothing waits to be written.
    fn next_write(&self) -> Option<Instant> {
        let waiting = self
            .writing
            .iter()
            .any(|&c| self.conns.get(c).is_some_and(|c| c.writable));
        if !waiting {
            return None;
        }
        let mut t = if self.ctx.kist_interval.is_zero() {
            self.round_start
        } else {
            self.next_sched_run
        };
        if self.write_bucket.available() == 0 {
            t = t.max(self.write_bucket.next_refill());
        }
        Some(t)
    }

    /// True if the coming sleep (`timeout`) ends at the KIST run and
    /// socket readiness may wait for it ([`Worker::turn`],
    /// [`kist::sleeps_to_run`]).
    fn waits_for_kist_run(&self, timeout: Option<Duration>) -> bool {
        kist::sleeps_to_run(&kist::SleepPlan {
            interval: self.ctx.kist_interval,
            timeout,
            now: self.round_start,
            next_run: self.next_sched_run,
            next_write: self.next_write(),
            next_housekeeping: self
                .housekeeping_due()
                .unwrap_or(self.round_start + Duration::from_secs(3600)),
        })
    }

    /// True once a shutdown was requested and handled.
    pub fn stopped(&self) -> bool {
        self.stopping
    }

    /// One round (see the module docs). `timeout` bounds the wait for
    /// readiness.
    pub fn turn(&mut self, timeout: Option<Duration>) -> std::io::Result<()> {
        let quiet = self.waits_for_kist_run(timeout);
        if quiet {
            // Busy: what the sockets bring waits in the kernel until the
            // KIST run, which reads it and writes it out in the same round
            // (a cell read earlier would wait for that run in our queue
            // anyway). Only a wake-up (the inbox, an urgent ring) ends the
            // sleep early; then the sockets' readiness, without waiting.
            poll_events(&mut self.quiet_poll, &mut self.quiet_events, timeout)?;
            poll_events(&mut self.poll, &mut self.events, Some(Duration::ZERO))?;
        } else {
            poll_events(&mut self.poll, &mut self.events, timeout)?;
        }
        self.notifier.awake();
        let t0 = Instant::now();
        let before = self.round_ns;
        self.round_ns = t0.saturating_duration_since(self.epoch).as_nanos() as u64;
        self.read_stamp_ns = if quiet { before } else { self.round_ns };
        self.round_start = t0;
        self.core.handle_event(CoreEvent::RoundBegins {
            now_ns: self.round_ns,
        });
        for w in 0..self.ring_left.len() {
            if self.ins.get(w).is_some_and(Option::is_some) {
                let share = self.core.read_budget(ReadFrom::Ring(w));
                self.ring_left[w] = (share / CELL_LEN as u64).max(1);
            }
        }
        if self.read_bucket.refill(t0) {
            self.to_read.append(&mut self.starved);
        }
        // Paused connections first (a connection that read its round's
        // share would otherwise come first again and take the room that
        // freed on a ring), the one paused longest at their head: those
        // held for a full ring take its room in turns.
        if !self.paused.is_empty() {
            self.paused.rotate_left(1);
            self.paused.append(&mut self.to_read);
            std::mem::swap(&mut self.paused, &mut self.to_read);
        }
        self.write_bucket.refill(t0);
        self.counters.rounds += 1;
        for ev in self.events.iter() {
            let t = ev.token();
            if t == WAKER {
                continue;
            }
            if let Some(c) = self.conns.get_mut(t.0) {
                if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                    if !c.readable && c.is_open() {
                        self.to_read.push(t.0);
                    }
                    c.readable = true;
                }
                if ev.is_writable() || ev.is_write_closed() || ev.is_error() {
                    c.writable = true;
                }
                if !c.is_open() {
                    self.to_handshake.push(t.0);
                }
            } else {
                let r = ev.is_readable() || ev.is_read_closed() || ev.is_error();
                let w = ev.is_writable() || ev.is_write_closed() || ev.is_error();
                self.streams.note_event(t, r, w);
            }
        }
        while let Some(c) = self.to_handshake.pop() {
            self.advance_handshake(c);
        }
        self.drain_inbox();
        self.drain_rings();
        self.retry_move();
        self.read_all();
        self.stream_round();
        self.write_all();
        self.end_round();
        self.reap();
        // Also puts what the last steps queued (a DESTROY for a peer of a
        // closed connection) on the writing list before the worker sleeps.
        self.apply_effects();
        if std::mem::take(&mut self.tick_seen) || t0 >= self.next_housekeeping {
            self.housekeeping();
        }
        self.counters.busy_ns += t0.elapsed().as_nanos() as u64;
        Ok(())
    }

    /// Hand the messages waiting on the inbound rings to the core, each
    /// ring up to what is left of its share of the round
    /// ([`Circuits::read_budget`]); wake a producer that waits for room.
    fn drain_rings(&mut self) {
        for w in 0..self.ins.len() {
            let Some(mut c) = self.ins[w].take() else {
                continue;
            };
            let core = &mut self.core;
            let left = &mut self.ring_left[w];
            while *left > 0 && c.pop_with(|m| core.on_ring_msg(m, w as u16)).is_some() {
                *left -= 1;
            }
            if c.release() {
                self.peers[w].notifier.wake();
            }
            self.ins[w] = Some(c);
        }
        self.core.handle_event(CoreEvent::RingsDrained);
        self.apply_effects();
    }

    /// Between two connections' reads: take what the other workers put on
    /// our rings and give them what waits for theirs, so that a ring's room
    /// follows the work as it is done, not once a round (a round that reads
    /// many connections would otherwise leave the circuits that cross
    /// workers one ring's worth per round while the others go on).
    pub(crate) fn exchange_rings(&mut self) {
        self.drain_rings();
        self.publish_rings(false);
    }

    /// The round is over: the core publishes its rings (waking the
    /// workers that need it) and reports its queues if they moved.
    fn end_round(&mut self) {
        self.publish_rings(true);
        self.unpause_reads();
    }

    /// The core places what waits on its lanes and publishes its rings,
    /// waking the workers that need it: at the round's end a worker with
    /// circuits waiting for room on a ring (`urgent`) is woken at once if
    /// it sleeps; between two connections' reads (`urgent_wakes` false)
    /// none is woken before its own next KIST run (a worker that shares
    /// the core with us would otherwise take it over after every
    /// connection, and both would run rounds of a few dozen cells).
    fn publish_rings(&mut self, urgent_wakes: bool) {
        let Worker {
            core,
            peers,
            counters,
            ctx,
            round_ns,
            ..
        } = self;
        // A ring batch may wait for the peer's next KIST run (it writes
        // them then at the earliest) if the peer sleeps until then anyway.
        // The round's clock, no new read: an earlier `now` only wakes the
        // peer more readily.
        let now_ns = *round_ns;
        let defer_ns = ctx.kist_interval.as_nanos() as u64;
        core.end_round(|w, urgent| {
            let n = &peers[w].notifier;
            let woke = if urgent && urgent_wakes {
                n.notify()
            } else {
                n.notify_unless_due(now_ns, defer_ns)
            };
            if woke {
                counters.wakeups += 1;
            }
        });
    }

    /// Carry out what the core asked for: messages to the controller and to
    /// other workers' inboxes, lookups, stream sockets to open, close or
    /// pump, connections that may read again or must close.
    fn apply_effects(&mut self) {
        while let Some(e) = self.core.poll_effect() {
            match e {
                Effect::Controller(m) => {
                    let _ = self.controller.send(m);
                }
                Effect::Worker(w, m) => {
                    if let Some(p) = self.peers.get(w) {
                        p.send(m);
                    }
                }
                Effect::Resolve(q) => {
                    let sent = self
                        .ctx
                        .resolver
                        .as_ref()
                        .is_some_and(|r| r.query(q.clone()));
                    if !sent {
                        let failed = CoreMsg::Resolved(crate::resolver::DnsAnswer::failed(
                            q.key, q.tag, false,
                        ));
                        self.core.handle_event(CoreEvent::Msg(failed));
                    }
                }
                Effect::Stream(io) => self.stream_socket(io),
                Effect::PumpStream(key) => self.streams.pump_later(key),
                Effect::Write(idx) => self.add_writing(idx),
                Effect::CloseConn { idx, why } => self.close_later(idx, why),
                Effect::Tick => self.tick_seen = true,
            }
        }
    }
}

/// CPU time (user + system) of the calling thread, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; the clock id is
    // a valid constant. Tested by `thread_cpu_time_advances`.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return 0;
    }
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// Wait for readiness on `poll`. `epoll_wait` fails with EINTR when the
/// process is stopped and continued (SIGSTOP or SIGTSTP then SIGCONT: a
/// debugger attaching, job control, a cgroup freezer), even with no signal
/// handler installed: that is a wake-up with no events, not a failure of
/// the event loop (it used to end every worker's thread, and the relay
/// stopped relaying while its process lived on).
fn poll_events(
    poll: &mut Poll,
    events: &mut Events,
    timeout: Option<Duration>,
) -> std::io::Result<()> {
    match poll.poll(events, timeout) {
        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
            events.clear();
            Ok(())
        }
        r => r,
    }
}

/// Start a worker on its own OS thread.
///
/// With `slice` the thread first asks the kernel for that scheduler time
/// slice (`WorkerSchedSlice`, see [`crate::sched_slice`]); worker 0 logs
/// the outcome.
pub fn spawn_thread(
    worker: Worker,
    slice: Option<Duration>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let id = worker.id;
    std::thread::Builder::new()
        .name(format!("weft-worker-{id}"))
        .spawn(move || {
            if let Some(s) = slice {
                request_slice(id, s);
            }
            worker.run()
        })
}

/// Ask for the scheduler slice `s` on the calling worker thread and log
/// what became of it (once, from worker 0).
fn request_slice(id: usize, s: Duration) {
    use crate::sched_slice::{request, SliceOutcome};
    let outcome = request(s);
    if id != 0 {
        debug!("worker {id}: scheduler slice request: {outcome:?}");
        return;
    }
    match outcome {
        Ok(SliceOutcome::Set) => info!("worker threads run with a {s:?} scheduler slice"),
        Ok(SliceOutcome::Unsupported) => info!(
            "WorkerSchedSlice: this kernel has no per-thread time slices (they need Linux 6.12 or later); workers use its default slice"
        ),
        Ok(SliceOutcome::NotFairClass) => info!(
            "WorkerSchedSlice: worker threads run under a real-time or deadline policy; slice left alone"
        ),
        Err(e) => info!("WorkerSchedSlice: cannot set the scheduler slice: {e}"),
    }
}
