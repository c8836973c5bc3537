//! A worker: one event loop (mio) that owns the connections the controller
//! hands it, their circuit halves, a cell pool, and its ends of the
//! cross-worker rings. With `ConnectionThreads 0` the same worker runs on
//! the main thread, driven by the controller's runtime (see
//! [`Worker::turn`]).
//!
//! The hot path of a relayed cell never leaves the workers: read on
//! connection X (TLS plaintext into X's buffer), onion layer removed in
//! place, then handed to the peer half — into its queue directly if that
//! half is on this worker, else as a [`RingMsg`] on the ring to its worker,
//! published once per round with at most one wake-up. The receiving worker
//! queues it on the half, and its writer fills the connection's write buffer
//! from the active circuits and hands it to TLS in large writes. No lock, no
//! controller step, and no allocation per cell in steady state (pool slots,
//! rings and buffers are reused).
//!
//! A round ([`Worker::turn`]): readiness events, the inbox (control before
//! cells: a DESTROY overtakes queued cells), the inbound rings, connections
//! that wait for ring space, reading, writing, publishing the outbound rings,
//! and once a second the housekeeping (counters to the controller,
//! handshake deadlines, idle connections, keepalives).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use slab::Slab;
use tokio::sync::mpsc::UnboundedSender;
use tracing::{debug, info};
use weft_proto::cell::{self, cmd, destroy_reason, BODY_LEN};
use weft_proto::circuit::{self, ForwardAction, NextHop};

use crate::bucket::TokenBucket;
use crate::conn::{Conn, ConnSched, ConnState};
use crate::context::SharedContext;
use crate::half::{Half, HalfRole, HalfTable};
use crate::link_io::{CellFlow, CellIn, IoState, LinkConn};
use crate::messages::{ConnId, ControllerMsg, HalfRef, RingMsg, WorkerMsg, WorkerReport};
use crate::metrics::DelayHistogram;
use crate::migrate::{Forwarder, MovedCell, MovedConn, MovedHalf};
use crate::pool::{CellPool, CellQueue};
use crate::ring::{Consumer, Notifier, Producer};
use crate::selftest::{SelfTestCircuit, TestStep};
use crate::tls::TlsLink;
use weft_proto::origin::HopTarget;

/// How long a link handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(60);
/// Bytes read from one connection per round before others get a turn.
const READ_BUDGET: u64 = 128 * 1024;
/// Bytes of cells staged for one connection per round.
const WRITE_BATCH: usize = 64 * 1024;
/// Most bytes staged for one connection per KIST run.
const MAX_KIST_BATCH: usize = 1 << 20;
/// Token of the cross-thread waker.
const WAKER: Token = Token(usize::MAX);
/// C Tor's default `circ_max_cell_queue_size`: a circuit with this many
/// cells waiting is closed (RESOURCELIMIT). [C relay.c]
pub const DEFAULT_MAX_CIRCUIT_QUEUE: usize = 2500;
/// Cells per cross-worker ring.
pub const RING_CAPACITY: usize = 1024;
/// Client and non-canonical channels without circuits are closed after
/// this long (C Tor: 3–4.5 min). [protocol-notes §2.7]
const IDLE_CLIENT: Duration = Duration::from_secs(180);
/// Canonical relay channels without circuits (C Tor: 45–75 min).
const IDLE_RELAY: Duration = Duration::from_secs(45 * 60);
/// Send a PADDING cell when nothing was written for this long
/// (`KeepalivePeriod`).
const KEEPALIVE: Duration = Duration::from_secs(5 * 60);

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
    pub fn send(&self, m: WorkerMsg) {
        if self.tx.send(m).is_ok() {
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
    /// This worker's share of BandwidthRate, bytes/s (each direction).
    pub rate_share: u64,
    /// Its share of BandwidthBurst.
    pub burst_share: u64,
    /// TokenBucketRefillInterval.
    pub refill: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            max_circuit_queue: DEFAULT_MAX_CIRCUIT_QUEUE,
            // 512 Ki cells ≈ 270 MB per worker.
            max_pool_cells: 512 * 1024,
            alloc_probe: None,
            rate_share: 1 << 30,
            burst_share: 1 << 30,
            refill: Duration::from_millis(100),
        }
    }
}

/// Everything needed to run one worker; made by [`build`].
pub struct WorkerParts {
    id: usize,
    /// The clock origin shared by all workers (cell stamps cross workers).
    epoch: Instant,
    poll: Poll,
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
        let notifier = Arc::new(Notifier::new(waker));
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

/// Plain counters, touched only by the worker's thread.
#[derive(Default, Clone, Copy)]
struct Counters {
    allocations: u64,
    delay: DelayHistogram,
    queue_wait: DelayHistogram,
    outq: DelayHistogram,
    outq_tick: u32,
    migrations: u64,
    read: u64,
    written: u64,
    cells: u64,
    cross: u64,
    created: u64,
    wakeups: u64,
    rounds: u64,
    busy_ns: u64,
}

/// One worker.
pub struct Worker {
    id: usize,
    poll: Poll,
    events: Events,
    notifier: Arc<Notifier>,
    inbox: Receiver<WorkerMsg>,
    peers: Vec<WorkerHandle>,
    outs: Vec<Option<Producer<RingMsg>>>,
    ins: Vec<Option<Consumer<RingMsg>>>,
    controller: UnboundedSender<ControllerMsg>,
    ctx: Arc<SharedContext>,
    cfg: WorkerConfig,
    conns: Slab<Conn>,
    sched: Vec<ConnSched>,
    by_id: HashMap<ConnId, usize>,
    halves: HalfTable,
    pool: CellPool,
    /// Connections with output to write.
    pending: Vec<usize>,
    /// Connections paused on a full ring, by destination worker.
    stalled: Vec<Vec<usize>>,
    /// Halves of other connections to tear down after the current step.
    destroy_later: Vec<(HalfRef, u8)>,
    /// Open connections with bytes to read (readable, not stalled).
    to_read: Vec<usize>,
    /// Connections in their handshake that had an event.
    to_handshake: Vec<usize>,
    /// Connections marked closing.
    to_close: Vec<usize>,
    /// Reused list (no allocation per round).
    scratch: Vec<usize>,
    /// Our bandwidth self-test circuits (closed after their lifetime).
    selftests: Vec<HalfRef>,
    /// BandwidthRate share: reading.
    read_bucket: TokenBucket,
    /// BandwidthRate share: writing.
    write_bucket: TokenBucket,
    /// Readable connections waiting for read tokens.
    starved: Vec<usize>,
    /// Old half slots forwarding for halves that moved away.
    forwarders: Vec<u32>,
    epoch: Instant,
    /// The clock at the start of this round (ns since `epoch`).
    round_ns: u64,
    /// The same as an Instant.
    round_start: Instant,
    counters: Counters,
    reported: Counters,
    next_housekeeping: Instant,
    /// When the KIST scheduler runs next.
    next_sched_run: Instant,
    stopping: bool,
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

/// What process_cells found that needs the whole worker.
enum Fatal {
    /// Close the connection.
    Close(String),
}

impl Worker {
    /// A worker from its parts.
    pub fn new(
        parts: WorkerParts,
        peers: Vec<WorkerHandle>,
        ctx: Arc<SharedContext>,
        controller: UnboundedSender<ControllerMsg>,
        cfg: WorkerConfig,
    ) -> Worker {
        let n = peers.len();
        Worker {
            id: parts.id,
            poll: parts.poll,
            events: Events::with_capacity(1024),
            notifier: parts.notifier,
            inbox: parts.inbox,
            peers,
            outs: parts.outs,
            ins: parts.ins,
            controller,
            ctx,
            cfg,
            conns: Slab::new(),
            sched: Vec::new(),
            by_id: HashMap::new(),
            halves: HalfTable::new(parts.id as u16),
            pool: CellPool::new(1024, cfg.max_pool_cells),
            pending: Vec::new(),
            stalled: (0..n).map(|_| Vec::new()).collect(),
            destroy_later: Vec::new(),
            to_read: Vec::new(),
            to_handshake: Vec::new(),
            to_close: Vec::new(),
            scratch: Vec::new(),
            selftests: Vec::new(),
            read_bucket: TokenBucket::new(
                cfg.rate_share,
                cfg.burst_share,
                cfg.refill,
                Instant::now(),
            ),
            write_bucket: TokenBucket::new(
                cfg.rate_share,
                cfg.burst_share,
                cfg.refill,
                Instant::now(),
            ),
            starved: Vec::new(),
            forwarders: Vec::new(),
            epoch: parts.epoch,
            round_ns: 0,
            round_start: Instant::now(),
            counters: Counters::default(),
            reported: Counters::default(),
            next_housekeeping: Instant::now() + Duration::from_secs(1),
            next_sched_run: Instant::now(),
            stopping: false,
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

    /// Run on the current thread until shutdown.
    pub fn run(mut self) {
        debug!("worker {} running", self.id);
        while !self.stopping {
            let timeout = self.sleep_time();
            if let Err(e) = self.turn(timeout) {
                tracing::error!("worker {}: event loop failed: {e}", self.id);
                break;
            }
        }
        debug!("worker {} stopped", self.id);
    }

    /// How long the next poll may block: zero if work is waiting, else until
    /// the next thing that is due (the KIST run or the write bucket's refill
    /// for connections with cells to write, housekeeping); the notifier is
    /// set so producers wake us earlier.
    pub fn sleep_time(&self) -> Option<Duration> {
        if self.has_work() {
            return Some(Duration::ZERO);
        }
        let mut until = self.next_housekeeping;
        if let Some(t) = self.next_write() {
            until = until.min(t);
        }
        let now = Instant::now();
        if until <= now {
            return Some(Duration::ZERO);
        }
        self.notifier.going_to_sleep();
        if self.ins.iter().flatten().any(|c| c.has_pending()) {
            self.notifier.awake();
            return Some(Duration::ZERO);
        }
        Some(until - now)
    }

    /// True if the worker has work that does not wait for an event or a
    /// timer.
    pub fn has_work(&self) -> bool {
        !self.to_read.is_empty() || !self.to_close.is_empty()
    }

    /// When the writer can next do something for a connection with cells
    /// waiting: at once without KIST, else at the next KIST run; never before
    /// the write bucket has tokens. None if nothing waits to be written.
    fn next_write(&self) -> Option<Instant> {
        let waiting = self
            .pending
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

    /// True once a shutdown was requested and handled.
    pub fn stopped(&self) -> bool {
        self.stopping
    }

    /// One round (see the module docs). `timeout` bounds the wait for
    /// readiness.
    pub fn turn(&mut self, timeout: Option<Duration>) -> std::io::Result<()> {
        self.poll.poll(&mut self.events, timeout)?;
        self.notifier.awake();
        let t0 = Instant::now();
        self.round_ns = t0.saturating_duration_since(self.epoch).as_nanos() as u64;
        self.round_start = t0;
        if self.read_bucket.refill(t0) {
            self.to_read.append(&mut self.starved);
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
                    if !c.readable && c.is_open() && c.stalled.is_none() {
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
            }
        }
        while let Some(c) = self.to_handshake.pop() {
            self.advance_handshake(c);
        }
        self.drain_inbox();
        self.drain_rings();
        self.tend_forwarders();
        self.retry_stalled();
        self.read_all();
        self.write_all();
        self.publish_rings();
        self.reap();
        if t0 >= self.next_housekeeping {
            self.housekeeping();
        }
        self.counters.busy_ns += t0.elapsed().as_nanos() as u64;
        Ok(())
    }

    // ----- connections: set-up and teardown -------------------------------

    fn add_conn(&mut self, c: Conn) -> Option<usize> {
        let entry = self.conns.vacant_entry();
        let idx = entry.key();
        let id = c.id;
        let conn = entry.insert(c);
        if let Err(e) = self.poll.registry().register(
            conn.link.tls_mut().tcp_mut(),
            Token(idx),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            info!("connection {id}: cannot register socket: {e}");
            self.conns.remove(idx);
            return None;
        }
        if self.sched.len() <= idx {
            self.sched.resize_with(idx + 1, ConnSched::default);
        }
        self.sched[idx] = ConnSched {
            mux: crate::ewma::EwmaMux::new(self.ctx.halflife_s),
            ..ConnSched::default()
        };
        self.by_id.insert(id, idx);
        Some(idx)
    }

    fn accept(&mut self, conn_id: ConnId, stream: std::net::TcpStream, peer: SocketAddr) {
        let r = (|| -> std::io::Result<LinkConn> {
            stream.set_nonblocking(true)?;
            let tcp = TcpStream::from_std(stream);
            let _ = tcp.set_nodelay(true);
            let tls = TlsLink::accept(&self.ctx.acceptor, tcp)?;
            Ok(LinkConn::inbound(
                tls,
                self.ctx.link.clone(),
                peer.ip(),
                self.ctx.our_addrs.clone(),
            ))
        })();
        match r {
            Ok(link) => {
                let c = Conn::new(
                    conn_id,
                    link,
                    ConnState::Handshaking,
                    peer,
                    false,
                    Instant::now() + HANDSHAKE_TIMEOUT,
                );
                if let Some(idx) = self.add_conn(c) {
                    self.advance_handshake(idx);
                }
            }
            Err(e) => info!("connection {conn_id} from {peer}: {e}"),
        }
    }

    fn connect(&mut self, conn_id: ConnId, addr: SocketAddr, rsa: [u8; 20], ed: Option<[u8; 32]>) {
        let r = (|| -> std::io::Result<LinkConn> {
            let tcp = TcpStream::connect(addr)?;
            let _ = tcp.set_nodelay(true);
            let tls = TlsLink::connect(&self.ctx.connector, tcp)?;
            Ok(LinkConn::outbound(
                tls,
                self.ctx.link.clone(),
                addr.ip(),
                self.ctx.our_addrs.clone(),
                Some(rsa),
                ed,
            ))
        })();
        match r {
            Ok(link) => {
                let mut c = Conn::new(
                    conn_id,
                    link,
                    ConnState::Connecting,
                    addr,
                    true,
                    Instant::now() + HANDSHAKE_TIMEOUT,
                );
                c.readable = false;
                c.writable = false;
                self.add_conn(c);
            }
            Err(e) => self.conn_failed(
                conn_id,
                addr,
                destroy_reason::CONNECTFAILED,
                format!("cannot connect: {e}"),
            ),
        }
    }

    fn conn_failed(&self, conn_id: ConnId, addr: SocketAddr, reason: u8, why: String) {
        info!("connection {conn_id} to {addr}: {why}");
        let _ = self.controller.send(ControllerMsg::ConnFailed {
            conn_id,
            reason,
            why,
        });
    }

    fn advance_handshake(&mut self, idx: usize) {
        let Some(c) = self.conns.get_mut(idx) else {
            return;
        };
        if c.closing.is_some() || c.is_open() {
            return;
        }
        if matches!(c.state, ConnState::Connecting) {
            if !c.writable {
                return;
            }
            let tcp = c.link.tls().tcp();
            let failed = match tcp.take_error() {
                Ok(None) => match tcp.peer_addr() {
                    Ok(_) => None,
                    Err(e) if e.kind() == std::io::ErrorKind::NotConnected => return,
                    Err(e) => Some(e),
                },
                Ok(Some(e)) | Err(e) => Some(e),
            };
            if let Some(e) = failed {
                return self.close_later(idx, format!("connect failed: {e}"));
            }
            c.state = ConnState::Handshaking;
        }
        match c.link.advance_handshake(SystemTime::now()) {
            Ok(None) => {}
            Ok(Some(opened)) => {
                debug!(
                    "connection {} with {} open: link {}, peer {:?}, canonical {}",
                    c.id, c.peer_addr, opened.link_version, opened.peer, opened.canonical
                );
                c.state = ConnState::Open {
                    peer: opened.peer.clone(),
                };
                c.readable = true;
                c.last_active = Instant::now();
                let _ = self.controller.send(ControllerMsg::ConnOpened {
                    conn_id: c.id,
                    worker: self.id,
                    peer: opened.peer,
                    canonical: opened.canonical,
                    outbound: c.we_initiated,
                    addr: c.peer_addr,
                });
                // Cells that followed the handshake are already buffered.
                self.to_read.push(idx);
            }
            Err(why) => self.close_later(idx, format!("link handshake failed: {why}")),
        }
    }

    /// Mark connection `idx` for closing at the end of the round.
    fn close_later(&mut self, idx: usize, why: String) {
        if let Some(c) = self.conns.get_mut(idx) {
            if c.closing.is_none() {
                c.closing = Some(why);
                self.to_close.push(idx);
            }
        }
    }

    /// Close connections marked closing: tell every peer half, the
    /// controller, free the slot.
    fn reap(&mut self) {
        while let Some(idx) = self.to_close.pop() {
            if self.conns.get(idx).is_some_and(|c| c.closing.is_some()) {
                self.close_conn(idx);
            }
        }
        self.flush_destroys();
    }

    fn close_conn(&mut self, idx: usize) {
        let mut c = self.conns.remove(idx);
        let why = c.closing.take().unwrap_or_default();
        let _ = self.poll.registry().deregister(c.link.tls_mut().tcp_mut());
        // Best effort: what is already staged (e.g. DESTROY cells).
        let _ = c.link.flush();
        self.by_id.remove(&c.id);
        for (_, slot) in c.circuits.drain() {
            if let Some(h) = drop_half(&mut self.halves, &mut self.pool, &mut self.sched, slot) {
                if let Some(p) = h.peer {
                    self.destroy_later.push((p, destroy_reason::CHANNEL_CLOSED));
                }
            }
        }
        let s = &mut self.sched[idx];
        s.urgent.clear(&mut self.pool);
        s.mux = crate::ewma::EwmaMux::new(self.ctx.halflife_s);
        s.queued = 0;
        s.pending = false;
        self.pending.retain(|&p| p != idx);
        self.to_read.retain(|&p| p != idx);
        self.starved.retain(|&p| p != idx);
        for st in &mut self.stalled {
            st.retain(|&p| p != idx);
        }
        let open = c.is_open();
        if !open && c.we_initiated {
            let reason = if why.contains("identity") {
                destroy_reason::OR_IDENTITY
            } else {
                destroy_reason::CONNECTFAILED
            };
            self.conn_failed(c.id, c.peer_addr, reason, why);
            return;
        }
        if why.contains("peer closed") {
            debug!("connection {} with {} closed: {why}", c.id, c.peer_addr);
        } else {
            info!(
                "connection {} with {} ({:?}) closed: {why}",
                c.id,
                c.peer_addr,
                c.peer()
            );
        }
        if open {
            let _ = self
                .controller
                .send(ControllerMsg::ConnClosed { conn_id: c.id });
        }
    }

    // ----- control messages ------------------------------------------------

    fn drain_inbox(&mut self) {
        while let Ok(m) = self.inbox.try_recv() {
            match m {
                WorkerMsg::Accept {
                    conn_id,
                    stream,
                    peer,
                } => self.accept(conn_id, stream, peer),
                WorkerMsg::Connect {
                    conn_id,
                    addr,
                    rsa_id,
                    ed_id,
                } => self.connect(conn_id, addr, rsa_id, ed_id),
                WorkerMsg::CreateOutbound {
                    conn_id,
                    prev,
                    create2,
                } => self.create_outbound(conn_id, prev, &create2),
                WorkerMsg::ExtendFailed { half, reason, why } => {
                    if self.is_forwarder(half) {
                        self.forward_destroy(half, reason);
                    } else if let Some(h) = self.halves.get(half) {
                        let conn = h.conn;
                        self.close_circuit(
                            conn,
                            half.slot,
                            reason,
                            &format!("extend failed: {why}"),
                        );
                    }
                }
                WorkerMsg::Destroy { half, reason } => self.destroy_half(half, reason),
                WorkerMsg::Migrate { conn_id, to } => self.migrate_out(conn_id, to),
                WorkerMsg::Adopt(m) => self.adopt(*m),
                WorkerMsg::BandwidthShare { rate, burst } => {
                    self.read_bucket.set(rate, burst);
                    self.write_bucket.set(rate, burst);
                }
                WorkerMsg::SelfTest {
                    conn_id,
                    first,
                    rest,
                    cells,
                } => self.start_selftest(conn_id, &first, rest, cells),
                WorkerMsg::NewContext(c) => {
                    if c.halflife_s != self.ctx.halflife_s {
                        for (idx, _) in self.conns.iter() {
                            self.sched[idx].mux.set_halflife(c.halflife_s);
                        }
                    }
                    self.ctx = c;
                }
                WorkerMsg::Shutdown => {
                    self.report();
                    let _ = self
                        .controller
                        .send(ControllerMsg::WorkerStopped { worker: self.id });
                    self.stopping = true;
                }
            }
        }
        self.flush_destroys();
    }

    /// The peer of `half` is gone: drop `half` and send DESTROY on its
    /// connection.
    fn destroy_half(&mut self, half: HalfRef, reason: u8) {
        if self.is_forwarder(half) {
            return self.forward_destroy(half, reason);
        }
        let Some(h) = self.halves.get(half) else {
            return;
        };
        let (conn, circ_id) = (h.conn, h.circ_id);
        drop_half(&mut self.halves, &mut self.pool, &mut self.sched, half.slot);
        if let Some(c) = self.conns.get_mut(conn) {
            c.circuits.remove(&circ_id);
        }
        self.queue_urgent(conn, circ_id, cmd::DESTROY, &[reason]);
    }

    fn flush_destroys(&mut self) {
        while let Some((r, reason)) = self.destroy_later.pop() {
            if usize::from(r.worker) == self.id {
                self.destroy_half(r, reason);
            } else if let Some(p) = self.peers.get(usize::from(r.worker)) {
                p.send(WorkerMsg::Destroy { half: r, reason });
            }
        }
    }

    /// Queue a connection-level cell (CREATED2, DESTROY, CREATE2...) ahead
    /// of circuit cells.
    fn queue_urgent(&mut self, conn: usize, circ_id: u32, command: u8, data: &[u8]) {
        if !self.conns.contains(conn) {
            return;
        }
        let Some(s) = self.pool.alloc() else {
            info!(
                "worker {}: cell pool exhausted; dropping a control cell",
                self.id
            );
            return;
        };
        let slot = self.pool.slot_mut(s);
        slot.circ_id = circ_id;
        slot.command = command;
        slot.stamp_ns = 0;
        let n = data.len().min(BODY_LEN);
        slot.body[..n].copy_from_slice(&data[..n]);
        slot.body[n..].fill(0);
        let sched = &mut self.sched[conn];
        sched.urgent.push(&mut self.pool, s);
        if !sched.pending {
            sched.pending = true;
            self.pending.push(conn);
        }
    }

    /// The worker's cell pool is at its hard cap and a cell of this circuit
    /// has nowhere to go: dropping it would corrupt the circuit, so close it.
    fn close_pool_exhausted(&mut self, conn: usize, slot: u32) {
        self.close_circuit(
            conn,
            slot,
            destroy_reason::RESOURCELIMIT,
            "worker cell pool exhausted",
        );
    }

    /// Close one circuit ourselves: DESTROY here with `reason`, and the peer
    /// half told to send DESTROY with the same reason.
    fn close_circuit(&mut self, conn: usize, slot: u32, reason: u8, why: &str) {
        let Some(h) = drop_half(&mut self.halves, &mut self.pool, &mut self.sched, slot) else {
            return;
        };
        if let Some(c) = self.conns.get_mut(conn) {
            info!(
                "connection {} ({}): closing circuit {:#x}: {why}",
                c.id, c.peer_addr, h.circ_id
            );
            c.circuits.remove(&h.circ_id);
        }
        if let Some(p) = h.peer {
            self.destroy_later.push((p, reason));
        }
        self.queue_urgent(conn, h.circ_id, cmd::DESTROY, &[reason]);
    }

    fn create_outbound(&mut self, conn_id: ConnId, prev: HalfRef, create2: &[u8]) {
        let Some(&idx) = self.by_id.get(&conn_id) else {
            self.destroy_later
                .push((prev, destroy_reason::CHANNEL_CLOSED));
            return;
        };
        let Some(circ_id) = self.conns[idx].allocate_circ_id() else {
            self.destroy_later
                .push((prev, destroy_reason::RESOURCELIMIT));
            return;
        };
        let r = self.halves.insert(Half::new(
            idx,
            circ_id,
            HalfRole::Relabel { created: false },
            Some(prev),
        ));
        self.conns[idx].circuits.insert(circ_id, r.slot);
        self.queue_urgent(idx, circ_id, cmd::CREATE2, create2);
        self.send_ordered(prev, RingMsg::Linked { to: prev, peer: r });
    }

    /// Launch a bandwidth self-test circuit on connection `conn_id` (to
    /// `first`), extending through `rest` back to ourselves.
    fn start_selftest(
        &mut self,
        conn_id: ConnId,
        first: &HopTarget,
        rest: Vec<HopTarget>,
        cells: u32,
    ) {
        let Some(&idx) = self.by_id.get(&conn_id) else {
            return;
        };
        let Some(circ_id) = self.conns[idx].allocate_circ_id() else {
            return;
        };
        let (t, create2) = match SelfTestCircuit::new(first, rest, cells, Instant::now()) {
            Ok(x) => x,
            Err(e) => return info!("self-test circuit: {e}"),
        };
        let r = self
            .halves
            .insert(Half::new(idx, circ_id, HalfRole::Origin(Box::new(t)), None));
        self.conns[idx].circuits.insert(circ_id, r.slot);
        self.selftests.push(r);
        self.queue_urgent(idx, circ_id, cmd::CREATE2, &create2);
    }

    /// Deliver a message that must stay in order with cells: locally, or on
    /// the ring to the half's worker (waiting in the ring's overflow only if
    /// the ring is full, which a control message tolerates).
    fn send_ordered(&mut self, to: HalfRef, msg: RingMsg) {
        let w = usize::from(to.worker);
        if w == self.id {
            self.on_ring_msg(msg, self.id as u16);
            return;
        }
        let Some(Some(p)) = self.outs.get_mut(w) else {
            return;
        };
        let mut m = msg;
        // A full ring: publish and spin briefly; the consumer drains whole
        // batches, so this is short. Control messages are rare.
        for _ in 0..10_000 {
            match p.push(m) {
                Ok(()) => return,
                Err(back) => {
                    m = back;
                    if p.publish() {
                        self.peers[w].notifier.notify();
                    }
                    std::thread::yield_now();
                }
            }
        }
        info!(
            "worker {}: ring to worker {w} stayed full; dropping a control message",
            self.id
        );
    }

    // ----- cells between workers ----------------------------------------------

    fn drain_rings(&mut self) {
        for w in 0..self.ins.len() {
            let Some(mut c) = self.ins[w].take() else {
                continue;
            };
            while let Some(m) = c.pop() {
                self.on_ring_msg(m, w as u16);
            }
            if c.release() {
                self.peers[w].notifier.wake();
            }
            self.ins[w] = Some(c);
        }
        self.flush_destroys();
    }

    fn on_ring_msg(&mut self, m: RingMsg, source: u16) {
        match m {
            RingMsg::Installed { old, new } => return self.forwarder_installed(old, new),
            RingMsg::Switched { old } => return self.forwarder_switched(old),
            _ => {}
        }
        if self.is_forwarder(m.target()) {
            return self.forwarder_push(m.target().slot, m);
        }
        match m {
            RingMsg::Installed { .. } | RingMsg::Switched { .. } => {}
            RingMsg::SourceDone { to } => self.source_done(to, source),
            RingMsg::PeerMoved { to, peer, old } => self.peer_moved(to, peer, old),
            RingMsg::Cell {
                to,
                command,
                stamp_ns,
                body,
            } => {
                let mut body = body;
                self.deliver(to, command, stamp_ns, &mut body, source);
            }
            RingMsg::Linked { to, peer } => match self.halves.get(to) {
                Some(h)
                    if h.peer.is_none()
                        && matches!(&h.role, HalfRole::Keyed(k) if k.next == NextHop::Pending) =>
                {
                    h.peer = Some(peer);
                }
                _ => self.destroy_later.push((peer, destroy_reason::DESTROYED)),
            },
            RingMsg::Created2 { to, len, body } => {
                let Some(h) = self.halves.get(to) else { return };
                let HalfRole::Keyed(k) = &mut h.role else {
                    return;
                };
                let mut cell = [0u8; BODY_LEN];
                k.extended(&mut cell, &body[..usize::from(len).min(BODY_LEN)]);
                let conn = h.conn;
                self.enqueue(conn, to.slot, cmd::RELAY, 0, &cell);
            }
        }
    }

    /// A cell arrived for half `to` on this worker: add our layer if it is
    /// the keyed half (toward the client), queue it.
    fn deliver(
        &mut self,
        to: HalfRef,
        command: u8,
        stamp_ns: u64,
        body: &mut [u8; BODY_LEN],
        source: u16,
    ) {
        let Some(h) = self.halves.get(to) else { return };
        if h.hold_from.is_some_and(|f| f != source) {
            // Newer than what the old source still has in flight: wait
            // (held cells count against the circuit's queue limit).
            let max = self.cfg.max_circuit_queue;
            if h.held.len() + h.queue.len() >= max {
                let why = format!(
                    "{} cells held during a migration, maximum allowed is {max}",
                    h.held.len()
                );
                let conn = h.conn;
                self.close_circuit(conn, to.slot, destroy_reason::RESOURCELIMIT, &why);
                return;
            }
            let Some(s) = self.pool.alloc() else {
                let conn = h.conn;
                return self.close_pool_exhausted(conn, to.slot);
            };
            let c = self.pool.slot_mut(s);
            c.command = command;
            c.stamp_ns = stamp_ns;
            c.queued_ns = stamp_ns;
            c.body = *body;
            h.held.push(&mut self.pool, s);
            return;
        }
        let command = match &mut h.role {
            HalfRole::Keyed(k) => {
                k.on_backward(body);
                cmd::RELAY
            }
            HalfRole::Relabel { .. } => command,
            // An origin half has no peer; nothing is handed to it.
            HalfRole::Origin(_) | HalfRole::Moved(_) => return,
        };
        let conn = h.conn;
        self.enqueue(conn, to.slot, command, stamp_ns, body);
    }

    // ----- migration (see crate::migrate) ------------------------------------

    fn is_forwarder(&mut self, r: HalfRef) -> bool {
        usize::from(r.worker) == self.id
            && matches!(
                self.halves.get(r).map(|h| &h.role),
                Some(HalfRole::Moved(_))
            )
    }

    fn forwarder(&mut self, slot: u32) -> Option<&mut Forwarder> {
        match self.halves.by_slot(slot).map(|h| &mut h.role) {
            Some(HalfRole::Moved(f)) => Some(f),
            _ => None,
        }
    }

    fn forwarder_push(&mut self, slot: u32, m: RingMsg) {
        if let Some(f) = self.forwarder(slot) {
            f.buf.push_back(m);
        }
        self.forwarder_flush(slot);
    }

    fn forwarder_installed(&mut self, old: HalfRef, new: HalfRef) {
        if !self.is_forwarder(old) {
            return;
        }
        if let Some(f) = self.forwarder(old.slot) {
            f.new = Some(new);
        }
        self.forwarder_flush(old.slot);
    }

    fn forwarder_switched(&mut self, old: HalfRef) {
        if !self.is_forwarder(old) {
            return;
        }
        if let Some(f) = self.forwarder(old.slot) {
            f.switched = true;
        }
        self.forwarder_flush(old.slot);
    }

    fn forward_destroy(&mut self, old: HalfRef, reason: u8) {
        if let Some(f) = self.forwarder(old.slot) {
            f.destroy = Some(reason);
        }
        self.forwarder_flush(old.slot);
    }

    /// Pass on what a forwarder holds, in order, as far as the ring takes;
    /// then, once the peer switched, the "source done" marker.
    fn forwarder_flush(&mut self, slot: u32) {
        let me = self.id;
        let Some(HalfRole::Moved(f)) = self.halves.by_slot(slot).map(|h| &mut h.role) else {
            return;
        };
        let Some(new) = f.new else { return };
        let w = usize::from(new.worker);
        let mut local = Vec::new();
        while let Some(m) = f.buf.front().copied() {
            let m = m.retarget(new);
            if w == me {
                local.push(m);
            } else {
                let Some(Some(p)) = self.outs.get_mut(w) else {
                    break;
                };
                if p.push(m).is_err() {
                    break;
                }
            }
            f.buf.pop_front();
        }
        let mut destroy = None;
        if f.buf.is_empty() {
            if let Some(reason) = f.destroy.take() {
                destroy = Some(reason);
            }
            if f.switched && !f.done_sent {
                let marker = RingMsg::SourceDone { to: new };
                if w == me {
                    local.push(marker);
                    f.done_sent = true;
                } else if let Some(Some(p)) = self.outs.get_mut(w) {
                    f.done_sent = p.push(marker).is_ok();
                }
            }
        }
        for m in local {
            self.on_ring_msg(m, me as u16);
        }
        if let Some(reason) = destroy {
            if w == me {
                self.destroy_half(new, reason);
            } else {
                self.peers[w].send(WorkerMsg::Destroy { half: new, reason });
            }
        }
    }

    /// Each round: retry forwarders the ring refused; drop old ones.
    fn tend_forwarders(&mut self) {
        if self.forwarders.is_empty() {
            return;
        }
        let list = std::mem::take(&mut self.forwarders);
        let mut keep = Vec::with_capacity(list.len());
        for slot in list {
            let state = match self.forwarder(slot) {
                Some(f) => Some((f.buf.is_empty(), f.done_sent, f.since.elapsed())),
                None => None,
            };
            match state {
                None => continue,
                Some((empty, done, age)) => {
                    if !empty || !done {
                        self.forwarder_flush(slot);
                    }
                    if done && empty && age >= crate::migrate::FORWARDER_LIFETIME {
                        self.halves.remove(slot);
                    } else {
                        keep.push(slot);
                    }
                }
            }
        }
        self.forwarders = keep;
    }

    /// A "source done" marker from worker `source` for half `to`.
    fn source_done(&mut self, to: HalfRef, source: u16) {
        let Some(h) = self.halves.get(to) else { return };
        if h.hold_from != Some(source) {
            h.done_from = Some(source);
            return;
        }
        h.hold_from = None;
        // Release the held cells in arrival order (the keyed half adds its
        // layer now, in the order they will be written).
        while let Some(s) = {
            let h = self.halves.get(to);
            h.and_then(|h| h.held.front())
        } {
            let Some(h) = self.halves.get(to) else { return };
            h.held.pop(&self.pool);
            let slot = self.pool.slot(s).clone();
            self.pool.release(s);
            let mut body = slot.body;
            let conn = h.conn;
            let command = match &mut h.role {
                HalfRole::Keyed(k) => {
                    k.on_backward(&mut body);
                    cmd::RELAY
                }
                _ => slot.command,
            };
            self.enqueue(conn, to.slot, command, slot.stamp_ns, &body);
        }
    }

    /// Our half `to`'s peer moved from worker `old` to `peer`.
    fn peer_moved(&mut self, to: HalfRef, peer: HalfRef, old: u16) {
        let Some(h) = self.halves.get(to) else {
            return self.destroy_later.push((peer, destroy_reason::DESTROYED));
        };
        let Some(old_ref) = h.peer.replace(peer) else {
            return;
        };
        if h.done_from == Some(old) {
            h.done_from = None;
        } else {
            h.hold_from = Some(old);
        }
        let conn = h.conn;
        // A cell for the old reference may still wait in our connection's
        // stall slot (its ring was full). It is older than anything the
        // half sends from now on, and `Switched` below promises the old
        // worker nothing more: readdress it to the new reference first.
        self.readdress_stalled(conn, old_ref, peer);
        // After this, nothing more from us to the old reference.
        self.send_ordered(old_ref, RingMsg::Switched { old: old_ref });
    }

    /// If connection `conn` is stalled on a cell for `old`, send that cell
    /// to `new` instead (delivered now if `new` is on this worker, else
    /// stalled on the ring to `new`'s worker).
    fn readdress_stalled(&mut self, conn: usize, old: HalfRef, new: HalfRef) {
        let Some(c) = self.conns.get_mut(conn) else {
            return;
        };
        let Some((dw, msg)) = c.stalled.take() else {
            return;
        };
        if msg.target() != old {
            c.stalled = Some((dw, msg));
            return;
        }
        let msg = msg.retarget(new);
        let w = usize::from(new.worker);
        if w == self.id {
            // Unstalled: read again; the cell goes in ahead of anything
            // the connection reads next.
            c.readable = true;
            self.to_read.push(conn);
            self.stalled[dw].retain(|&i| i != conn);
            self.on_ring_msg(msg, self.id as u16);
        } else {
            c.stalled = Some((w, msg));
            if w != dw {
                self.stalled[dw].retain(|&i| i != conn);
                self.stalled[w].push(conn);
            }
        }
    }

    /// Move connection `conn_id` to worker `to` (step 1 of crate::migrate).
    fn migrate_out(&mut self, conn_id: ConnId, to: usize) {
        if to == self.id || to >= self.peers.len() {
            return;
        }
        let Some(&idx) = self.by_id.get(&conn_id) else {
            return;
        };
        let movable = self
            .conns
            .get(idx)
            .is_some_and(|c| c.is_open() && c.stalled.is_none() && c.closing.is_none());
        if !movable {
            return;
        }
        let mut c = self.conns.remove(idx);
        let _ = self.poll.registry().deregister(c.link.tls_mut().tcp_mut());
        self.by_id.remove(&conn_id);
        self.pending.retain(|&p| p != idx);
        self.to_read.retain(|&p| p != idx);
        self.starved.retain(|&p| p != idx);
        for st in &mut self.stalled {
            st.retain(|&p| p != idx);
        }
        let now = Instant::now();
        let take = |q: &mut CellQueue, pool: &mut CellPool| {
            let mut v = Vec::with_capacity(q.len());
            while let Some(s) = q.pop(pool) {
                let c = pool.slot(s);
                v.push(MovedCell {
                    command: c.command,
                    circ_id: c.circ_id,
                    stamp_ns: c.stamp_ns,
                    body: c.body,
                });
                pool.release(s);
            }
            v
        };
        let mut moved = Vec::new();
        let mut markers = Vec::new();
        for (circ_id, slot) in c.circuits.drain() {
            let Some(old) = self.halves.reference(slot) else {
                continue;
            };
            let Some(h) = self.halves.by_slot(slot) else {
                continue;
            };
            let role =
                std::mem::replace(&mut h.role, HalfRole::Moved(Box::new(Forwarder::new(now))));
            let mut ewma = h.ewma;
            ewma.active = false;
            let cells = take(&mut h.queue, &mut self.pool);
            let held = take(&mut h.held, &mut self.pool);
            if let Some(p) = h.peer {
                markers.push(p);
            }
            moved.push(MovedHalf {
                old,
                circ_id,
                role,
                peer: h.peer.take(),
                ewma,
                cells,
                hold_from: h.hold_from.take(),
                held,
                done_from: h.done_from.take(),
            });
            self.forwarders.push(slot);
        }
        let s = &mut self.sched[idx];
        let urgent = take(&mut s.urgent, &mut self.pool);
        *s = ConnSched::default();
        // After these markers we send nothing more to the peers.
        for p in markers {
            self.send_ordered(p, RingMsg::SourceDone { to: p });
        }
        self.counters.migrations += 1;
        info!(
            "connection {conn_id} moves from worker {} to worker {to} with {} circuits",
            self.id,
            moved.len()
        );
        self.peers[to].send(WorkerMsg::Adopt(Box::new(MovedConn {
            conn: c,
            halves: moved,
            urgent,
            from: self.id as u16,
        })));
    }

    /// Take over a connection from another worker (step 2).
    fn adopt(&mut self, m: MovedConn) {
        let MovedConn {
            conn,
            halves,
            urgent,
            from,
        } = m;
        let conn_id = conn.id;
        let Some(idx) = self.add_conn(conn) else {
            return;
        };
        for mh in halves {
            let mut h = Half::new(idx, mh.circ_id, mh.role, mh.peer);
            h.ewma = mh.ewma;
            // Cells that do not come through the old worker wait for its
            // marker (always sent, see crate::migrate).
            h.hold_from = Some(from);
            h.done_from = None;
            let r = self.halves.insert(h);
            if let Some(c) = self.conns.get_mut(idx) {
                c.circuits.insert(mh.circ_id, r.slot);
            }
            for cell in mh.cells {
                self.enqueue(idx, r.slot, cell.command, cell.stamp_ns, &cell.body);
            }
            for cell in mh.held {
                if self.halves.get(r).is_none() {
                    break; // closed while its queue was rebuilt
                }
                let Some(s) = self.pool.alloc() else {
                    self.close_pool_exhausted(idx, r.slot);
                    break;
                };
                let c = self.pool.slot_mut(s);
                c.command = cell.command;
                c.stamp_ns = cell.stamp_ns;
                c.body = cell.body;
                if let Some(h) = self.halves.get(r) {
                    h.held.push(&mut self.pool, s);
                }
            }
            self.send_ordered(
                mh.old,
                RingMsg::Installed {
                    old: mh.old,
                    new: r,
                },
            );
            if let Some(p) = mh.peer {
                self.send_ordered(
                    p,
                    RingMsg::PeerMoved {
                        to: p,
                        peer: r,
                        old: from,
                    },
                );
            }
        }
        for cell in urgent {
            self.queue_urgent(idx, cell.circ_id, cell.command, &cell.body);
        }
        if let Some(c) = self.conns.get_mut(idx) {
            c.readable = true;
            c.writable = true;
        }
        self.to_read.push(idx);
        let sched = &mut self.sched[idx];
        if !sched.pending && (!sched.mux.is_empty() || !sched.urgent.is_empty()) {
            sched.pending = true;
            self.pending.push(idx);
        }
        let _ = self.controller.send(ControllerMsg::ConnMoved {
            conn_id,
            worker: self.id,
        });
    }

    /// Queue a cell on half `slot` (connection `conn`); closes the circuit if
    /// its queue is over the limit or the pool is exhausted.
    fn enqueue(
        &mut self,
        conn: usize,
        slot: u32,
        command: u8,
        stamp_ns: u64,
        body: &[u8; BODY_LEN],
    ) {
        let max = self.cfg.max_circuit_queue;
        let Some(h) = self.halves.by_slot(slot) else {
            return;
        };
        if h.queue.len() >= max {
            let why = format!("{} cells queued, maximum allowed is {max}", h.queue.len());
            self.close_circuit(conn, slot, destroy_reason::RESOURCELIMIT, &why);
            return;
        }
        let Some(s) = self.pool.alloc() else {
            return self.close_pool_exhausted(conn, slot);
        };
        let c = self.pool.slot_mut(s);
        c.command = command;
        c.stamp_ns = stamp_ns;
        c.queued_ns = self.round_ns;
        c.body = *body;
        h.queue.push(&mut self.pool, s);
        let sched = &mut self.sched[conn];
        sched.queued += 1;
        if !h.ewma.active {
            sched.mux.activate(slot, &mut h.ewma);
        }
        if !sched.pending {
            sched.pending = true;
            self.pending.push(conn);
        }
    }

    fn publish_rings(&mut self) {
        for w in 0..self.outs.len() {
            if let Some(p) = self.outs[w].as_mut() {
                if p.publish() && self.peers[w].notifier.notify() {
                    self.counters.wakeups += 1;
                }
            }
        }
    }

    fn retry_stalled(&mut self) {
        for w in 0..self.stalled.len() {
            // Keep the list's allocation: retain in place.
            let mut list = std::mem::take(&mut self.stalled[w]);
            let (conns, outs, to_read) = (&mut self.conns, &mut self.outs, &mut self.to_read);
            list.retain(|&idx| {
                let Some(c) = conns.get_mut(idx) else {
                    return false;
                };
                let Some((dw, msg)) = c.stalled.take() else {
                    return false;
                };
                let Some(Some(p)) = outs.get_mut(dw) else {
                    return false;
                };
                match p.push(msg) {
                    Ok(()) => {
                        // Its buffered cells (and socket) are read again.
                        c.readable = true;
                        to_read.push(idx);
                        false
                    }
                    Err(m) => {
                        c.stalled = Some((dw, m));
                        true
                    }
                }
            });
            self.stalled[w] = list;
        }
    }

    // ----- reading ---------------------------------------------------------

    fn read_all(&mut self) {
        let mut list = std::mem::take(&mut self.scratch);
        list.clear();
        std::mem::swap(&mut list, &mut self.to_read);
        for &idx in &list {
            self.read_conn(idx);
        }
        list.clear();
        self.scratch = list;
        self.flush_destroys();
    }

    /// Read and handle cells of connection `idx` until EAGAIN, a stall or
    /// the round's budget; re-lists it if it still has bytes to read.
    fn read_conn(&mut self, idx: usize) {
        let mut budget = READ_BUDGET.min(self.read_bucket.available());
        loop {
            // Cells already buffered first (also after a stall ends).
            if let Err(Fatal::Close(why)) = self.process_conn_cells(idx) {
                return self.close_later(idx, why);
            }
            let Some(c) = self.conns.get_mut(idx) else {
                return;
            };
            if c.stalled.is_some() || c.closing.is_some() || !c.readable {
                return;
            }
            if budget == 0 {
                // Out of read tokens: wait for the refill; else the round's
                // fair share is used up: again next round.
                if self.read_bucket.available() == 0 {
                    self.starved.push(idx);
                } else {
                    self.to_read.push(idx);
                }
                return;
            }
            let before = c.link.read_total;
            match c.link.fill() {
                Ok(IoState::Progress) => {
                    let n = c.link.read_total - before;
                    self.counters.read += n;
                    c.bytes_recent += n;
                    self.read_bucket.consume(n);
                    budget = budget.saturating_sub(n.max(1));
                    c.last_active = self.round_start;
                }
                Ok(IoState::WouldBlock) => {
                    c.readable = false;
                    return;
                }
                Ok(IoState::Closed) => {
                    return self.close_later(idx, "peer closed the connection".into())
                }
                Err(e) => return self.close_later(idx, format!("read: {e}")),
            }
        }
    }

    /// Handle every complete buffered cell of connection `idx`.
    fn process_conn_cells(&mut self, idx: usize) -> Result<(), Fatal> {
        // Cells are stamped with the round's clock (one read per round).
        let stamp = self.round_ns;
        let me = self.id;
        let allow_nonearly = self.ctx.allow_nonearly_extend;
        let Worker {
            conns,
            halves,
            pool,
            sched,
            pending,
            outs,
            stalled,
            destroy_later,
            counters,
            controller,
            ctx,
            cfg,
            ..
        } = self;
        let Some(conn) = conns.get_mut(idx) else {
            return Ok(());
        };
        let Conn {
            id: conn_id,
            link,
            circuits,
            we_initiated,
            peer_addr,
            stalled: conn_stalled,
            ..
        } = conn;
        let mut fatal: Option<String> = None;
        let mut last: (u32, u32) = (0, 0);
        let mut io = Io {
            idx,
            me,
            halves,
            pool,
            sched,
            pending,
            outs,
            destroy_later,
            counters,
            max_queue: cfg.max_circuit_queue,
            stall: conn_stalled,
        };
        let r = link.process_cells(|cell| {
            let (circ_id, command, body) = match cell {
                CellIn::Var { command, .. } => {
                    // After the handshake: VPADDING is dropped silently; a
                    // late handshake cell or an unknown variable cell is
                    // dropped (C Tor ignores a second VERSIONS too).
                    if command != cmd::VPADDING {
                        debug!("connection {conn_id}: ignoring {} cell (command {command}) after handshake", cell::cmd_name(command));
                    }
                    return CellFlow::Continue;
                }
                CellIn::Fixed { circ_id, command, body } => (circ_id, command, body),
            };
            match command {
                cmd::RELAY | cmd::RELAY_EARLY => {
                    // Consecutive cells mostly belong to the same circuit:
                    // skip the hash lookup then (the cache is cleared by
                    // anything that changes the circuit table).
                    let slot = if circ_id != 0 && circ_id == last.0 {
                        last.1
                    } else {
                        let Some(&slot) = circuits.get(&circ_id) else {
                            debug!("connection {conn_id}: {} on unknown circuit {circ_id:#x} dropped", cell::cmd_name(command));
                            return CellFlow::Continue;
                        };
                        last = (circ_id, slot);
                        slot
                    };
                    match io.relay(slot, command, stamp, body, allow_nonearly) {
                        RelayOutcome::Done => CellFlow::Continue,
                        RelayOutcome::Stalled(w) => {
                            stalled[w].push(idx);
                            CellFlow::Pause
                        }
                        RelayOutcome::Extend(req) => {
                            if let Some(from) = io.halves.reference(slot) {
                                let _ = controller.send(ControllerMsg::Extend {
                                    from,
                                    from_conn: *conn_id,
                                    req,
                                });
                            }
                            CellFlow::Continue
                        }
                        RelayOutcome::Close { reason, why } => {
                            last = (0, 0);
                            io.close_circuit(circuits, *conn_id, *peer_addr, slot, reason, &why);
                            CellFlow::Continue
                        }
                    }
                }
                cmd::PADDING | cmd::PADDING_NEGOTIATE => CellFlow::Continue,
                cmd::CREATE | cmd::CREATE_FAST | cmd::CREATE2 => {
                    last = (0, 0);
                    io.create(circuits, *conn_id, *peer_addr, *we_initiated, circ_id, command, body, ctx);
                    CellFlow::Continue
                }
                cmd::CREATED | cmd::CREATED_FAST | cmd::CREATED2 => {
                    last = (0, 0);
                    match io.created(circuits, *conn_id, *peer_addr, circ_id, command, body) {
                        None => CellFlow::Continue,
                        Some((w, msg)) => {
                            *io.stall = Some((w, msg));
                            stalled[w].push(idx);
                            CellFlow::Pause
                        }
                    }
                }
                cmd::DESTROY => {
                    last = (0, 0);
                    if let Some(slot) = circuits.remove(&circ_id) {
                        if let Some(h) = drop_half(io.halves, io.pool, io.sched, slot) {
                            // Never propagate the received reason.
                            // [protocol-notes §6.4]
                            if let Some(p) = h.peer {
                                io.destroy_later.push((p, destroy_reason::DESTROYED));
                            }
                        }
                    }
                    CellFlow::Continue
                }
                cmd::NETINFO => {
                    debug!("connection {conn_id}: ignoring NETINFO after handshake");
                    CellFlow::Continue
                }
                cmd::VERSIONS => {
                    fatal = Some("fixed-size cell with the VERSIONS command".into());
                    CellFlow::Pause
                }
                _ => {
                    debug!("connection {conn_id}: dropping cell with unknown command {command}");
                    CellFlow::Continue
                }
            }
        });
        if let Err(e) = r {
            return Err(Fatal::Close(e));
        }
        match fatal {
            Some(why) => Err(Fatal::Close(why)),
            None => Ok(()),
        }
    }

    // ----- writing ---------------------------------------------------------

    fn write_all(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        // One clock read per scheduling run (delays, EWMA weight, KIST).
        let now = Instant::now();
        // KIST: the scheduler runs every KISTSchedRunInterval, so that the
        // cells of a run compete by priority; without KIST, every round.
        if !self.ctx.kist_interval.is_zero() {
            if now < self.next_sched_run {
                return;
            }
            // A fixed cadence: a run that starts late (the poll timeout is
            // rounded up to whole milliseconds) does not push the next one.
            let next = self.next_sched_run + self.ctx.kist_interval;
            self.next_sched_run = if next > now {
                next
            } else {
                now + self.ctx.kist_interval
            };
        }
        let now_ns = now.saturating_duration_since(self.epoch).as_nanos() as u64;
        let mut i = 0;
        while i < self.pending.len() {
            let idx = self.pending[i];
            let done = self.write_conn(idx, now, now_ns);
            if done {
                if let Some(s) = self.sched.get_mut(idx) {
                    s.pending = false;
                }
                self.pending.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// Stage up to one batch of cells for connection `idx` and flush.
    /// Returns true when it has nothing left to write.
    fn write_conn(&mut self, idx: usize, now_instant: Instant, now: u64) -> bool {
        let Worker {
            conns,
            halves,
            pool,
            sched,
            counters,
            to_close,
            ctx,
            write_bucket,
            ..
        } = self;
        let Some(c) = conns.get_mut(idx) else {
            return true;
        };
        if !c.is_open() || !c.writable || c.closing.is_some() {
            return false;
        }
        let s = &mut sched[idx];
        // BandwidthRate: at most the write tokens (circuit cells; the few
        // control cells always go).
        let allowed = write_bucket.available() as usize;
        // KIST: write only what the kernel can send now. [crate::kist]
        let budget = if ctx.kist_interval.is_zero() {
            // Without KIST, still sample the kernel queue now and then (for
            // the comparison on the MetricsPort).
            counters.outq_tick = counters.outq_tick.wrapping_add(1);
            if counters.outq_tick % 64 == 0 {
                use std::os::fd::AsRawFd;
                if let Some(st) = crate::kist::socket_state(c.link.tls().tcp().as_raw_fd()) {
                    counters.outq.record_units(u64::from(st.outq));
                }
            }
            WRITE_BATCH
        } else {
            use std::os::fd::AsRawFd;
            match crate::kist::socket_state(c.link.tls().tcp().as_raw_fd()) {
                Some(st) => {
                    counters.outq.record_units(u64::from(st.outq));
                    (crate::kist::limit(&st, ctx.kist_factor) as usize).min(MAX_KIST_BATCH)
                }
                None => WRITE_BATCH,
            }
        };
        while c.link.pending_out() < WRITE_BATCH {
            let Some(u) = s.urgent.pop(pool) else { break };
            let slot = pool.slot(u);
            c.link.queue_cell(slot.circ_id, slot.command, &slot.body);
            pool.release(u);
        }
        // EWMA: one weight per connection and run (one clock read).
        let weight = s.mux.weight(now as f64 / 1e9);
        let start = c.link.pending_out();
        let budget = budget.min(start.saturating_add(allowed));
        while c.link.pending_out() < budget {
            let Some(hs) = s.mux.peek() else { break };
            let Some(h) = halves.by_slot(hs).filter(|h| h.conn == idx) else {
                // Stale entry (the half closed): take it out.
                let mut gone = crate::ewma::CircuitEwma {
                    active: true,
                    ..Default::default()
                };
                s.mux.remove(hs, &mut gone);
                continue;
            };
            let Some(cs) = h.queue.pop(pool) else {
                s.mux.remove(hs, &mut h.ewma);
                continue;
            };
            let slot = pool.slot(cs);
            c.link.queue_cell(h.circ_id, slot.command, &slot.body);
            counters.delay.record(now.saturating_sub(slot.stamp_ns));
            counters
                .queue_wait
                .record(now.saturating_sub(slot.queued_ns));
            pool.release(cs);
            s.queued = s.queued.saturating_sub(1);
            let more = !h.queue.is_empty();
            s.mux.sent(hs, &mut h.ewma, 1, weight, more);
        }
        write_bucket.consume(c.link.pending_out().saturating_sub(start) as u64);
        let before = c.link.written_total;
        let flushed = match c.link.flush() {
            Ok(all) => all,
            Err(e) => {
                c.closing = Some(format!("write: {e}"));
                to_close.push(idx);
                return true;
            }
        };
        let n = c.link.written_total - before;
        if n > 0 {
            counters.written += n;
            c.bytes_recent += n;
            c.last_write = now_instant;
            c.last_active = now_instant;
        }
        if !flushed {
            c.writable = false;
            return false;
        }
        s.urgent.is_empty() && s.mux.is_empty()
    }

    // ----- housekeeping ----------------------------------------------------

    fn report(&mut self) {
        self.counters.allocations = self.cfg.alloc_probe.map_or(0, |f| f());
        let now = self.counters;
        let last = self.reported;
        self.reported = now;
        let queued: usize = self.sched.iter().map(|s| s.queued).sum();
        let report = WorkerReport {
            allocations: now.allocations - last.allocations,
            delay: now.delay.since(&last.delay),
            queue_wait: now.queue_wait.since(&last.queue_wait),
            outq: now.outq.since(&last.outq),
            read_bytes: now.read - last.read,
            written_bytes: now.written - last.written,
            cells_relayed: now.cells - last.cells,
            cells_cross_worker: now.cross - last.cross,
            connections: self.conns.len() as u64,
            circuits: self.halves.len() as u64,
            circuits_created: now.created - last.created,
            queued_cells: queued as u64,
            pool_slots: self.pool.capacity() as u64,
            wakeups_sent: now.wakeups - last.wakeups,
            rounds: now.rounds - last.rounds,
            busy_ns: now.busy_ns - last.busy_ns,
            migrations: now.migrations - last.migrations,
            top_conns: self.top_conns(),
        };
        let _ = self.controller.send(ControllerMsg::WorkerStats {
            worker: self.id,
            report,
            cpu_ns: thread_cpu_ns(),
        });
    }

    /// The four connections that moved the most bytes since the last call
    /// (and reset the counts).
    fn top_conns(&mut self) -> [(ConnId, u64); 4] {
        let mut top = [(0u64, 0u64); 4];
        for (_, c) in self.conns.iter_mut() {
            let b = std::mem::take(&mut c.bytes_recent);
            if let Some(i) = top.iter().position(|t| b > t.1) {
                top[i..].rotate_right(1);
                top[i] = (c.id, b);
            }
        }
        top
    }

    fn housekeeping(&mut self) {
        let now = Instant::now();
        self.next_housekeeping = now + Duration::from_secs(1);
        self.report();
        let mut keepalive = Vec::new();
        let mut close = Vec::new();
        for (idx, c) in self.conns.iter_mut() {
            if c.closing.is_some() {
                continue;
            }
            if !c.is_open() {
                if now >= c.handshake_deadline {
                    close.push((idx, "link handshake timed out".to_string()));
                }
                continue;
            }
            let idle = now.duration_since(c.last_active);
            let limit = match c.peer() {
                Some(weft_proto::link::PeerKind::Relay { .. }) => IDLE_RELAY,
                _ => IDLE_CLIENT,
            };
            if c.circuits.is_empty() && idle >= limit {
                close.push((
                    idx,
                    format!("idle for {}s without circuits", idle.as_secs()),
                ));
            } else if now.duration_since(c.last_write) >= KEEPALIVE {
                keepalive.push(idx);
            }
        }
        for idx in keepalive {
            if let Some(c) = self.conns.get_mut(idx) {
                c.last_write = now;
            }
            self.queue_urgent(idx, 0, cmd::PADDING, &[]);
        }
        for (idx, why) in close {
            self.close_later(idx, why);
        }
        let mut i = 0;
        while i < self.selftests.len() {
            let r = self.selftests[i];
            match self.halves.get(r) {
                Some(h) => {
                    let expired = matches!(&h.role, HalfRole::Origin(t) if t.started.elapsed() >= crate::selftest::LIFETIME);
                    if expired {
                        let conn = h.conn;
                        // The origin gives no reason. [C circuitlist.c]
                        self.close_circuit(
                            conn,
                            r.slot,
                            destroy_reason::NONE,
                            "bandwidth self-test circuit done",
                        );
                        self.selftests.swap_remove(i);
                    } else {
                        i += 1;
                    }
                }
                None => {
                    self.selftests.swap_remove(i);
                }
            }
        }
        self.reap();
    }
}

/// The outcome of a relay cell at its half.
enum RelayOutcome {
    Done,
    /// The ring to this worker is full; the cell waits in the connection's
    /// stall slot.
    Stalled(usize),
    Extend(Box<weft_proto::relay::Extend2>),
    Close {
        reason: u8,
        why: String,
    },
}

/// The parts of a worker that the per-cell path of one connection uses
/// (borrowed apart from the connection itself).
struct Io<'a> {
    idx: usize,
    me: usize,
    halves: &'a mut HalfTable,
    pool: &'a mut CellPool,
    sched: &'a mut Vec<ConnSched>,
    pending: &'a mut Vec<usize>,
    outs: &'a mut Vec<Option<Producer<RingMsg>>>,
    destroy_later: &'a mut Vec<(HalfRef, u8)>,
    counters: &'a mut Counters,
    max_queue: usize,
    /// The connection's stall slot.
    stall: &'a mut Option<(usize, RingMsg)>,
}

impl Io<'_> {
    /// Queue on a local half (same worker).
    fn queue_local(
        &mut self,
        to: HalfRef,
        command: u8,
        stamp_ns: u64,
        body: &[u8; BODY_LEN],
    ) -> bool {
        let max = self.max_queue;
        let Some(h) = self.halves.get(to) else {
            return true;
        };
        if h.queue.len() >= max {
            if let Some(p) = h.peer {
                self.destroy_later.push((p, destroy_reason::RESOURCELIMIT));
            }
            self.destroy_later.push((to, destroy_reason::RESOURCELIMIT));
            info!(
                "circuit {:#x}: {} cells queued, maximum allowed is {max}; closing",
                h.circ_id,
                h.queue.len()
            );
            return true;
        }
        let Some(s) = self.pool.alloc() else {
            self.destroy_later.push((to, destroy_reason::RESOURCELIMIT));
            return true;
        };
        let c = self.pool.slot_mut(s);
        c.command = command;
        c.stamp_ns = stamp_ns;
        c.queued_ns = stamp_ns;
        c.body = *body;
        h.queue.push(self.pool, s);
        let conn = h.conn;
        let sched = &mut self.sched[conn];
        sched.queued += 1;
        if !h.ewma.active {
            sched.mux.activate(to.slot, &mut h.ewma);
        }
        if !sched.pending {
            sched.pending = true;
            self.pending.push(conn);
        }
        true
    }

    /// Hand a cell to `to`: locally or through the ring.
    fn forward(
        &mut self,
        to: HalfRef,
        command: u8,
        stamp_ns: u64,
        body: &mut [u8; BODY_LEN],
    ) -> RelayOutcome {
        self.counters.cells += 1;
        let w = usize::from(to.worker);
        if w == self.me {
            // Toward the client a keyed half adds its layer at enqueue.
            if let Some(h) = self.halves.get(to) {
                if h.hold_from.is_some_and(|f| usize::from(f) != self.me) {
                    // Its peer just moved here: older cells are still on
                    // their way from the old worker. Held cells count
                    // against the circuit's queue limit.
                    if h.held.len() + h.queue.len() >= self.max_queue {
                        info!(
                            "circuit {:#x}: {} cells held during a migration, maximum allowed is {}; closing",
                            h.circ_id,
                            h.held.len(),
                            self.max_queue
                        );
                        if let Some(p) = h.peer {
                            self.destroy_later.push((p, destroy_reason::RESOURCELIMIT));
                        }
                        self.destroy_later.push((to, destroy_reason::RESOURCELIMIT));
                        return RelayOutcome::Done;
                    }
                    let Some(s) = self.pool.alloc() else {
                        // Dropping one cell would corrupt the circuit.
                        if let Some(p) = h.peer {
                            self.destroy_later.push((p, destroy_reason::RESOURCELIMIT));
                        }
                        self.destroy_later.push((to, destroy_reason::RESOURCELIMIT));
                        return RelayOutcome::Done;
                    };
                    let c = self.pool.slot_mut(s);
                    c.command = command;
                    c.stamp_ns = stamp_ns;
                    c.body = *body;
                    h.held.push(self.pool, s);
                    return RelayOutcome::Done;
                }
                let command = match &mut h.role {
                    HalfRole::Keyed(k) => {
                        k.on_backward(body);
                        cmd::RELAY
                    }
                    HalfRole::Relabel { .. } => command,
                    HalfRole::Origin(_) => return RelayOutcome::Done,
                    HalfRole::Moved(f) => {
                        // Moved away: the forwarder passes it on (each round).
                        f.buf.push_back(RingMsg::Cell {
                            to,
                            command,
                            stamp_ns,
                            body: *body,
                        });
                        return RelayOutcome::Done;
                    }
                };
                self.queue_local(to, command, stamp_ns, body);
            }
            return RelayOutcome::Done;
        }
        self.counters.cross += 1;
        let msg = RingMsg::Cell {
            to,
            command,
            stamp_ns,
            body: *body,
        };
        match self.outs.get_mut(w) {
            Some(Some(p)) => match p.push(msg) {
                Ok(()) => RelayOutcome::Done,
                Err(m) => {
                    *self.stall = Some((w, m));
                    RelayOutcome::Stalled(w)
                }
            },
            _ => RelayOutcome::Done,
        }
    }

    /// A RELAY / RELAY_EARLY cell for the half at `slot` of this connection.
    fn relay(
        &mut self,
        slot: u32,
        command: u8,
        stamp_ns: u64,
        body: &mut [u8; BODY_LEN],
        allow_nonearly: bool,
    ) -> RelayOutcome {
        let Some(h) = self.halves.by_slot(slot) else {
            return RelayOutcome::Done;
        };
        match &mut h.role {
            // Not on this connection any more (cannot happen: a moved
            // half's connection left with it).
            HalfRole::Moved(_) => RelayOutcome::Done,
            HalfRole::Relabel { created } => {
                if command == cmd::RELAY_EARLY {
                    return RelayOutcome::Close {
                        reason: destroy_reason::PROTOCOL,
                        why: "RELAY_EARLY toward the client".into(),
                    };
                }
                if !*created {
                    return RelayOutcome::Close {
                        reason: destroy_reason::PROTOCOL,
                        why: "relay cell before CREATED2".into(),
                    };
                }
                match h.peer {
                    Some(p) => self.forward(p, cmd::RELAY, stamp_ns, body),
                    None => RelayOutcome::Done,
                }
            }
            HalfRole::Origin(t) => {
                if command == cmd::RELAY_EARLY {
                    return RelayOutcome::Close {
                        reason: destroy_reason::PROTOCOL,
                        why: "RELAY_EARLY toward the origin".into(),
                    };
                }
                match t.on_relay(body) {
                    Ok(step) => {
                        self.selftest_step(slot, step, stamp_ns);
                        RelayOutcome::Done
                    }
                    Err(e) => RelayOutcome::Close {
                        reason: destroy_reason::NONE,
                        why: format!("bandwidth self-test circuit: {e}"),
                    },
                }
            }
            HalfRole::Keyed(k) => match k.on_forward(command, body, allow_nonearly) {
                ForwardAction::Pass { command } => match h.peer {
                    Some(p) => self.forward(p, command, stamp_ns, body),
                    None => RelayOutcome::Done,
                },
                ForwardAction::Extend(req) => RelayOutcome::Extend(req),
                ForwardAction::Truncate { reason } => {
                    if let Some(p) = h.peer.take() {
                        self.destroy_later.push((p, reason));
                    }
                    let r = self.halves.reference(slot);
                    if let Some(r) = r {
                        self.queue_local(r, cmd::RELAY, stamp_ns, body);
                    }
                    RelayOutcome::Done
                }
                ForwardAction::Reply => {
                    if let Some(r) = self.halves.reference(slot) {
                        self.queue_local(r, cmd::RELAY, stamp_ns, body);
                    }
                    RelayOutcome::Done
                }
                ForwardAction::Drop => RelayOutcome::Done,
                ForwardAction::Close { reason, why } => RelayOutcome::Close { reason, why },
            },
        }
    }

    /// Act on a testing circuit's step: queue the EXTEND2 (RELAY_EARLY), or
    /// once it reaches us, its DROP cells.
    fn selftest_step(&mut self, slot: u32, step: TestStep, stamp_ns: u64) {
        let Some(r) = self.halves.reference(slot) else {
            return;
        };
        match step {
            TestStep::Extend(cell) => {
                self.queue_local(r, cmd::RELAY_EARLY, stamp_ns, &cell);
            }
            TestStep::Built => {
                let mut cell = [0u8; BODY_LEN];
                let n = match self.halves.get(r).map(|h| &mut h.role) {
                    Some(HalfRole::Origin(t)) if !t.done => {
                        t.done = true;
                        t.cells
                    }
                    _ => 0,
                };
                debug!("bandwidth self-test circuit built; sending {n} DROP cells");
                for _ in 0..n {
                    if let Some(HalfRole::Origin(t)) = self.halves.get(r).map(|h| &mut h.role) {
                        t.drop_cell(&mut cell);
                    }
                    self.queue_local(r, cmd::RELAY, stamp_ns, &cell);
                }
            }
            TestStep::Wait => {}
        }
    }

    fn urgent(&mut self, circ_id: u32, command: u8, data: &[u8]) {
        let Some(s) = self.pool.alloc() else { return };
        let slot = self.pool.slot_mut(s);
        slot.circ_id = circ_id;
        slot.command = command;
        slot.stamp_ns = 0;
        let n = data.len().min(BODY_LEN);
        slot.body[..n].copy_from_slice(&data[..n]);
        slot.body[n..].fill(0);
        let sched = &mut self.sched[self.idx];
        sched.urgent.push(self.pool, s);
        if !sched.pending {
            sched.pending = true;
            self.pending.push(self.idx);
        }
    }

    fn close_circuit(
        &mut self,
        circuits: &mut HashMap<u32, u32>,
        conn_id: ConnId,
        peer: SocketAddr,
        slot: u32,
        reason: u8,
        why: &str,
    ) {
        let Some(h) = drop_half(self.halves, self.pool, self.sched, slot) else {
            return;
        };
        info!(
            "connection {conn_id} ({peer}): closing circuit {:#x}: {why}",
            h.circ_id
        );
        circuits.remove(&h.circ_id);
        if let Some(p) = h.peer {
            self.destroy_later.push((p, reason));
        }
        self.urgent(h.circ_id, cmd::DESTROY, &[reason]);
    }

    #[allow(clippy::too_many_arguments)]
    fn create(
        &mut self,
        circuits: &mut HashMap<u32, u32>,
        conn_id: ConnId,
        peer: SocketAddr,
        we_initiated: bool,
        circ_id: u32,
        command: u8,
        body: &[u8; BODY_LEN],
        ctx: &SharedContext,
    ) {
        if circ_id == 0 {
            debug!(
                "connection {conn_id}: {} on circuit 0 dropped",
                cell::cmd_name(command)
            );
            return;
        }
        // The side that opened the TLS connection sets the top bit of the
        // IDs it allocates. [tor-spec §5.1.1]
        let high = circ_id & 0x8000_0000 != 0;
        if high == we_initiated {
            info!(
                "connection {conn_id}: {} with circuit id {circ_id:#x} of the wrong half; refusing",
                cell::cmd_name(command)
            );
            self.urgent(circ_id, cmd::DESTROY, &[destroy_reason::PROTOCOL]);
            return;
        }
        if circuits.contains_key(&circ_id) {
            debug!(
                "connection {conn_id}: {} on circuit {circ_id:#x} in use dropped",
                cell::cmd_name(command)
            );
            return;
        }
        let result = match command {
            cmd::CREATE2 => {
                circuit::answer_create2(&ctx.handshake, body).map(|(r, h, _)| (cmd::CREATED2, r, h))
            }
            cmd::CREATE_FAST => {
                circuit::answer_create_fast(body).map(|(r, h)| (cmd::CREATED_FAST, r, h))
            }
            _ => Err(circuit::CreateError::UnsupportedType(0)),
        };
        match result {
            Ok((reply_cmd, reply, half)) => {
                self.urgent(circ_id, reply_cmd, &reply);
                let r =
                    self.halves
                        .insert(Half::new(self.idx, circ_id, HalfRole::Keyed(half), None));
                circuits.insert(circ_id, r.slot);
                self.counters.created += 1;
            }
            Err(e) => {
                info!(
                    "connection {conn_id} ({peer}): refusing {} on circuit {circ_id:#x}: {e}",
                    cell::cmd_name(command)
                );
                self.urgent(circ_id, cmd::DESTROY, &[destroy_reason::PROTOCOL]);
            }
        }
    }

    /// A CREATED* cell. Returns a message to wait with if the ring to the
    /// keyed half's worker is full.
    fn created(
        &mut self,
        circuits: &mut HashMap<u32, u32>,
        conn_id: ConnId,
        peer: SocketAddr,
        circ_id: u32,
        command: u8,
        body: &[u8; BODY_LEN],
    ) -> Option<(usize, RingMsg)> {
        let Some(&slot) = circuits.get(&circ_id) else {
            debug!(
                "connection {conn_id}: {} for unknown circuit {circ_id:#x}",
                cell::cmd_name(command)
            );
            return None;
        };
        let h = self.halves.by_slot(slot)?;
        if let (HalfRole::Origin(t), cmd::CREATED2) = (&mut h.role, command) {
            let hlen = usize::from(u16::from_be_bytes([body[0], body[1]]));
            let step = t.on_created2(&body[..(hlen + 2).min(BODY_LEN)]);
            match step {
                Ok(step) => self.selftest_step(slot, step, 0),
                Err(e) => {
                    let why = format!("bandwidth self-test circuit: {e}");
                    self.close_circuit(circuits, conn_id, peer, slot, destroy_reason::NONE, &why);
                }
            }
            return None;
        }
        match (&mut h.role, command) {
            (HalfRole::Relabel { created }, cmd::CREATED2) if !*created => {
                *created = true;
                let hlen = usize::from(u16::from_be_bytes([body[0], body[1]]));
                if hlen + 2 > BODY_LEN {
                    self.close_circuit(
                        circuits,
                        conn_id,
                        peer,
                        slot,
                        destroy_reason::PROTOCOL,
                        "CREATED2 with bad length",
                    );
                    return None;
                }
                if let Some(p) = h.peer {
                    let msg = RingMsg::Created2 {
                        to: p,
                        len: (hlen + 2) as u16,
                        body: *body,
                    };
                    if usize::from(p.worker) == self.me {
                        if let Some(k) = self.halves.get(p) {
                            match &mut k.role {
                                HalfRole::Keyed(kh) => {
                                    let mut cell = [0u8; BODY_LEN];
                                    kh.extended(&mut cell, &body[..hlen + 2]);
                                    self.queue_local(p, cmd::RELAY, 0, &cell);
                                }
                                // The keyed half moved: its forwarder passes
                                // the answer on.
                                HalfRole::Moved(f) => f.buf.push_back(msg),
                                _ => {}
                            }
                        }
                    } else if let Some(Some(prod)) = self.outs.get_mut(usize::from(p.worker)) {
                        // In order with the cells that follow it; if the
                        // ring is full this connection waits like for a cell.
                        if let Err(m) = prod.push(msg) {
                            return Some((usize::from(p.worker), m));
                        }
                    }
                }
                None
            }
            _ => {
                let why = format!("unexpected {}", cell::cmd_name(command));
                self.close_circuit(
                    circuits,
                    conn_id,
                    peer,
                    slot,
                    destroy_reason::PROTOCOL,
                    &why,
                );
                None
            }
        }
    }
}

/// Remove the half at `slot`: release its queued cells, take it off its
/// connection's list of active circuits (a later half in the same slot must
/// not inherit the entry). Returns it for its peer and circuit ID.
fn drop_half(
    halves: &mut HalfTable,
    pool: &mut CellPool,
    sched: &mut [ConnSched],
    slot: u32,
) -> Option<Half> {
    let mut h = halves.remove(slot)?;
    if let Some(s) = sched.get_mut(h.conn) {
        s.queued = s.queued.saturating_sub(h.queue.len());
        s.mux.remove(slot, &mut h.ewma);
    }
    h.queue.clear(pool);
    // Cells held for a migration's ordering marker go back too.
    h.held.clear(pool);
    Some(h)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_cpu_time_advances() {
        let a = thread_cpu_ns();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        assert!(thread_cpu_ns() > a);
    }
}
