//! The load at scale (`weft-bench scale`): thousands of generator
//! connections, each from its own 127.x.y.z source address, carrying an
//! uneven number of circuits, of which a few carry bulk traffic and the
//! rest stay idle but for one cell every `ping_period`.
//!
//! Unlike the saturation load ([`super::run_thread`]), which visits every
//! connection and every circuit on every round, this one is driven by
//! readiness: a round touches the connections mio reported, the bulk
//! circuits, and the idle circuits whose cell is due, so its cost follows
//! what moves, not what is open. Connections are opened a window at a time
//! (`connecting` TLS and link handshakes in flight per load thread) and so
//! are circuits (`in_flight` builds).
//!
//! A circuit costs the load one ntor handshake, the same as it costs the
//! target: CREATE2 to the target is real, but the second hop (a sink) is
//! named in a real EXTEND2 with a filler handshake (a random X; the sink
//! answers with a random CREATED2), because the target only passes it on
//! and the load never uses the second hop's layer (bulk cells carry the
//! target's layer only, as in the saturation load). Idle cells are noise
//! the target cannot recognize, so it passes them to the sink, which
//! counts them.

use weft_proto::relay::{encode_extend2, Extend2};

use super::*;

mod traffic;

use traffic::build_order;

/// Phases of a scale load, set by the coordinator: connections open.
pub const MANY_CONNECT: u8 = 0;
/// Circuits are built (a window at a time).
pub const MANY_BUILD: u8 = 1;
/// Idle circuits send their cell every `ping_period`.
pub const MANY_IDLE: u8 = 2;
/// Bulk circuits also send, within their window, both ways.
pub const MANY_ACTIVE: u8 = 3;
/// As `MANY_ACTIVE`, and marked cells' delays are recorded.
pub const MANY_MEASURE: u8 = 4;
/// Threads stop.
pub const MANY_STOP: u8 = 5;

/// A load thread gives up after this long whatever the coordinator says.
const MAX_LIFETIME: Duration = Duration::from_secs(3 * 3600);
/// Most idle cells sent in one round.
const MAX_PINGS_PER_ROUND: u64 = 4096;
/// Cells queued per bulk circuit and direction before moving to the next.
const BULK_BURST: u32 = 32;

const SINK_BASE: usize = 1 << 24;
const LISTEN_BASE: usize = 1 << 30;

/// What every load thread of a scale run does.
#[derive(Debug, Clone)]
pub struct ManyConfig {
    /// The target's ORPort and identities.
    pub target: HopTarget,
    /// Cells in flight per bulk circuit and direction.
    pub window: u64,
    /// Every n-th bulk cell carries a stamp.
    pub mark_every: u64,
    /// Circuit builds in flight per load thread.
    pub in_flight: usize,
    /// Connection handshakes in flight per load thread.
    pub connecting: usize,
    /// Each idle circuit sends one cell this often.
    pub ping_period: Duration,
}

/// One generator connection of a load thread.
pub struct ManyGen {
    /// Its relay identity (shared by several connections).
    pub ident: Arc<Identity>,
    /// The loopback address it connects from.
    pub source: Ipv4Addr,
    /// Circuits it builds.
    pub circuits: usize,
    /// Of them, how many (the first) carry bulk traffic.
    pub bulk: usize,
}

/// One sink relay of a load thread.
pub struct ManySink {
    /// Its relay identity.
    pub ident: Arc<Identity>,
    /// What EXTEND2 names (its listener's address included).
    pub hop: HopTarget,
}

pub use super::many_report::{BulkShare, ManyCounters, ManyReport};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    Queued,
    Creating,
    Extending,
    Ready,
    Failed,
}

/// Sent and received cells of one direction of a bulk circuit.
#[derive(Debug, Default, Clone, Copy)]
struct Window {
    sent: u64,
    recv: u64,
}

/// The target's keystreams of a bulk circuit.
struct BulkKeys {
    kf: Aes128Ctr,
    kb: Aes128Ctr,
}

const NO_CONN: u32 = u32::MAX;

struct Circ {
    gen: u32,
    gen_circ_id: u32,
    sink: u16,
    bulk: bool,
    state: St,
    sink_conn: u32,
    sink_circ_id: u32,
    origin: Option<Box<OriginCircuit>>,
    keys: Option<Box<BulkKeys>>,
    up: Window,
    down: Window,
}

struct Gen {
    link: LinkConn,
    open: bool,
    dead: bool,
    base: usize,
    count: usize,
    queued: bool,
    dirty: bool,
}

struct Sink {
    link: LinkConn,
    open: bool,
    dead: bool,
    by_id: HashMap<u32, usize>,
    circs: Vec<usize>,
    queued: bool,
    dirty: bool,
}

#[derive(Debug, Clone, Copy)]
enum Conn {
    Gen(usize),
    Sink(usize),
}

/// Local counts, published to [`ManyCounters`] once a round.
#[derive(Debug, Default)]
struct Counts {
    gens_open: u64,
    gens_dead: u64,
    built: u64,
    failed: u64,
    pings_sent: u64,
    pings_received: u64,
    up_cells: u64,
    down_cells: u64,
    corrupt: u64,
}

struct Many<'a> {
    cfg: &'a ManyConfig,
    epoch: Instant,
    noise: [u8; BODY_LEN],
    specs: Vec<ManyGen>,
    sinks: Vec<ManySink>,
    listeners: Vec<TcpListener>,
    gens: Vec<Gen>,
    sink_conns: Vec<Sink>,
    circs: Vec<Circ>,
    by_x: HashMap<[u8; 32], usize>,
    /// Circuits in the order they are built (interleaved over connections).
    order: Vec<u32>,
    next_issue: usize,
    in_flight: usize,
    connecting: usize,
    bulk: Vec<usize>,
    ready: Vec<Conn>,
    dirty: Vec<Conn>,
    ping_start: Option<Instant>,
    ping_cursor: usize,
    /// The bulk circuit served first in the next round.
    bulk_rr: usize,
    pings_issued: u64,
    n: Counts,
    errors: Vec<String>,
    delay_up: Histogram<u64>,
    delay_down: Histogram<u64>,
    /// Each bulk circuit's cells received (up, down) when the measured
    /// phase began.
    measure_base: Option<Vec<(u64, u64)>>,
}

/// A non-blocking TCP connection to `to` from `source` (bound first, so
/// that the target sees many peers).
fn connect_from(source: Ipv4Addr, to: SocketAddr) -> Result<TcpStream> {
    let s = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    s.bind(&SocketAddr::V4(SocketAddrV4::new(source, 0)).into())
        .with_context(|| format!("binding to {source}"))?;
    s.set_nonblocking(true)?;
    s.set_tcp_nodelay(true)?;
    match s.connect(&to.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e).with_context(|| format!("connecting {source} → {to}")),
    }
    Ok(TcpStream::from_std(s.into()))
}

/// Run one scale load thread until the phase becomes [`MANY_STOP`].
pub fn run_many(
    cfg: &ManyConfig,
    shared: &Shared,
    counters: &ManyCounters,
    specs: Vec<ManyGen>,
    sinks: Vec<ManySink>,
    epoch: Instant,
) -> Result<ManyReport> {
    let mut poll = Poll::new()?;
    let counts: Vec<usize> = specs.iter().map(|s| s.circuits).collect();
    let order = build_order(&counts);
    let mut circs = Vec::with_capacity(order.len());
    let mut bulk = Vec::new();
    let ns = sinks.len().max(1);
    for (g, s) in specs.iter().enumerate() {
        for k in 0..s.circuits {
            let c = circs.len();
            if k < s.bulk {
                bulk.push(c);
            }
            circs.push(Circ {
                gen: g as u32,
                gen_circ_id: 0x8000_0000 | (k as u32 + 1),
                sink: (c % ns) as u16,
                bulk: k < s.bulk,
                state: St::Queued,
                sink_conn: NO_CONN,
                sink_circ_id: 0,
                origin: None,
                keys: None,
                up: Window::default(),
                down: Window::default(),
            });
        }
    }
    let mut t = Many {
        cfg,
        epoch,
        noise: weft_crypto::random_array(),
        specs,
        sinks,
        listeners: Vec::new(),
        gens: Vec::new(),
        sink_conns: Vec::new(),
        circs,
        by_x: HashMap::new(),
        order,
        next_issue: 0,
        in_flight: 0,
        connecting: 0,
        bulk,
        ready: Vec::new(),
        dirty: Vec::new(),
        ping_start: None,
        ping_cursor: 0,
        bulk_rr: 0,
        pings_issued: 0,
        n: Counts::default(),
        errors: Vec::new(),
        delay_up: histogram(),
        delay_down: histogram(),
        measure_base: None,
    };
    for (i, s) in t.sinks.iter().enumerate() {
        let mut l = TcpListener::bind(s.hop.addr)
            .with_context(|| format!("sink listener {}", s.hop.addr))?;
        poll.registry()
            .register(&mut l, Token(LISTEN_BASE + i), Interest::READABLE)?;
        t.listeners.push(l);
    }
    let mut events = Events::with_capacity(4096);
    let started = Instant::now();
    let mut busy = true;
    loop {
        let phase = shared.phase.load(Ordering::Relaxed);
        if phase >= MANY_STOP {
            break;
        }
        if started.elapsed() > MAX_LIFETIME {
            note(&mut t.errors, "load thread ran out of time".into());
            break;
        }
        t.start_connections(&poll)?;
        let timeout = if busy || !t.ready.is_empty() {
            Duration::ZERO
        } else {
            t.idle_timeout(phase)
        };
        match poll.poll(&mut events, Some(timeout)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        }
        for ev in events.iter() {
            let tok = ev.token().0;
            if tok >= LISTEN_BASE {
                t.accept(&poll, tok - LISTEN_BASE)?;
            } else if tok >= SINK_BASE {
                t.wake(Conn::Sink(tok - SINK_BASE));
            } else {
                t.wake(Conn::Gen(tok));
            }
        }
        let mut moved = t.service_ready(phase);
        let limit = match shared.build_share.load(Ordering::Relaxed) {
            0 => t.order.len(),
            share => t.order.len() * (share.min(1000) as usize) / 1000,
        };
        if phase >= MANY_BUILD {
            moved |= t.issue_creates(limit);
        }
        counters.building.store(
            u64::from(t.next_issue < limit || t.in_flight > 0),
            Ordering::Relaxed,
        );
        if phase >= MANY_IDLE {
            moved |= t.pings();
        }
        if phase >= MANY_ACTIVE {
            moved |= t.bulk_send();
        }
        if phase >= MANY_MEASURE && t.measure_base.is_none() {
            t.measure_base = Some(t.bulk_received());
        }
        t.flush_dirty();
        busy = moved;
        t.publish(counters);
    }
    let now = t.bulk_received();
    let per_circuit = match &t.measure_base {
        Some(base) => now
            .iter()
            .zip(base)
            .zip(&t.bulk)
            .map(|((n, b), &c)| BulkShare {
                gen: t.circs[c].gen,
                sink: t.circs[c].sink,
                gen_source: t.specs[t.circs[c].gen as usize].source,
                sink_port: t.sinks[usize::from(t.circs[c].sink)].hop.addr.port(),
                up: n.0 - b.0,
                down: n.1 - b.1,
            })
            .collect(),
        None => Vec::new(),
    };
    Ok(ManyReport {
        delay_up: t.delay_up,
        delay_down: t.delay_down,
        per_circuit,
        errors: t.errors,
    })
}

impl Many<'_> {
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn publish(&self, c: &ManyCounters) {
        let n = &self.n;
        c.gens_open.store(n.gens_open, Ordering::Relaxed);
        c.gens_dead.store(n.gens_dead, Ordering::Relaxed);
        c.built.store(n.built, Ordering::Relaxed);
        c.failed.store(n.failed, Ordering::Relaxed);
        c.pings_sent.store(n.pings_sent, Ordering::Relaxed);
        c.pings_received.store(n.pings_received, Ordering::Relaxed);
        c.up_cells.store(n.up_cells, Ordering::Relaxed);
        c.down_cells.store(n.down_cells, Ordering::Relaxed);
        c.corrupt.store(n.corrupt, Ordering::Relaxed);
        c.cpu_ns.store(thread_cpu_ns(), Ordering::Relaxed);
    }

    /// How long to wait for events when nothing is moving: until the next
    /// idle cell is due, at most 5 ms (so phase changes are seen).
    fn idle_timeout(&self, phase: u8) -> Duration {
        let max = Duration::from_millis(5);
        match (self.ping_start, phase >= MANY_IDLE) {
            (Some(start), true) if !self.circs.is_empty() => {
                let per = self.cfg.ping_period.as_secs_f64() / self.circs.len() as f64;
                let next = start + Duration::from_secs_f64(per * (self.pings_issued + 1) as f64);
                next.saturating_duration_since(Instant::now()).min(max)
            }
            _ => max,
        }
    }

    fn wake(&mut self, c: Conn) {
        let q = match c {
            Conn::Gen(g) => match self.gens.get_mut(g) {
                Some(x) => &mut x.queued,
                None => return,
            },
            Conn::Sink(s) => match self.sink_conns.get_mut(s) {
                Some(x) => &mut x.queued,
                None => return,
            },
        };
        if !*q {
            *q = true;
            self.ready.push(c);
        }
    }

    fn mark_dirty(&mut self, c: Conn) {
        let d = match c {
            Conn::Gen(g) => &mut self.gens[g].dirty,
            Conn::Sink(s) => &mut self.sink_conns[s].dirty,
        };
        if !*d {
            *d = true;
            self.dirty.push(c);
        }
    }

    fn flush_dirty(&mut self) {
        for c in std::mem::take(&mut self.dirty) {
            match c {
                Conn::Gen(g) => {
                    self.gens[g].dirty = false;
                    if !self.gens[g].dead {
                        if let Err(e) = self.gens[g].link.flush() {
                            self.gen_dead(g, format!("generator write: {e}"));
                        }
                    }
                }
                Conn::Sink(s) => {
                    self.sink_conns[s].dirty = false;
                    if !self.sink_conns[s].dead {
                        if let Err(e) = self.sink_conns[s].link.flush() {
                            self.sink_dead(s, format!("sink write: {e}"));
                        }
                    }
                }
            }
        }
    }

    /// Open generator connections until `connecting` handshakes are in
    /// flight or all are open.
    fn start_connections(&mut self, poll: &Poll) -> Result<()> {
        let mut base = self.gens.iter().map(|g| g.count).sum::<usize>();
        while self.connecting < self.cfg.connecting && self.gens.len() < self.specs.len() {
            let g = self.gens.len();
            let spec = &self.specs[g];
            let mut tcp = connect_from(spec.source, self.cfg.target.addr)?;
            poll.registry().register(
                &mut tcp,
                Token(g),
                Interest::READABLE | Interest::WRITABLE,
            )?;
            let tls = TlsLink::connect(&spec.ident.connector, tcp)?;
            let link = LinkConn::outbound(
                tls,
                spec.ident.link.clone(),
                self.cfg.target.addr.ip(),
                vec![IpAddr::V4(spec.source)],
                Some(self.cfg.target.rsa_id),
                self.cfg.target.ed_id,
            );
            self.gens.push(Gen {
                link,
                open: false,
                dead: false,
                base,
                count: spec.circuits,
                queued: false,
                dirty: false,
            });
            base += spec.circuits;
            self.connecting += 1;
            self.wake(Conn::Gen(g));
        }
        Ok(())
    }

    fn accept(&mut self, poll: &Poll, sink: usize) -> Result<()> {
        // Bounded: the target opens one connection per sink (a few more
        // if it retries).
        for _ in 0..1024 {
            match self.listeners[sink].accept() {
                Ok((tcp, peer)) => {
                    let idx = self.sink_conns.len();
                    let s = &self.sinks[sink];
                    let token = Token(SINK_BASE + idx);
                    let IpAddr::V4(addr) = s.hop.addr.ip() else {
                        anyhow::bail!("the scale bench sinks listen on IPv4");
                    };
                    let link = super::accept_link(poll, tcp, peer, token, &s.ident, addr)?;
                    self.sink_conns.push(Sink {
                        link,
                        open: false,
                        dead: false,
                        by_id: HashMap::new(),
                        circs: Vec::new(),
                        queued: false,
                        dirty: false,
                    });
                    self.wake(Conn::Sink(idx));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Serve the connections that had events (or work left over).
    fn service_ready(&mut self, phase: u8) -> bool {
        let list = std::mem::take(&mut self.ready);
        let moved = !list.is_empty();
        for c in list {
            let more = match c {
                Conn::Gen(g) => {
                    self.gens[g].queued = false;
                    self.service_gen(g, phase)
                }
                Conn::Sink(s) => {
                    self.sink_conns[s].queued = false;
                    self.service_sink(s, phase)
                }
            };
            if more {
                self.wake(c);
            }
        }
        moved
    }

    fn fail_circ(&mut self, c: usize, why: String) {
        let circ = &mut self.circs[c];
        match circ.state {
            St::Failed => return,
            St::Creating | St::Extending => self.in_flight = self.in_flight.saturating_sub(1),
            St::Queued | St::Ready => {}
        }
        circ.state = St::Failed;
        circ.origin = None;
        circ.keys = None;
        self.n.failed += 1;
        note(&mut self.errors, why);
    }

    fn gen_dead(&mut self, g: usize, why: String) {
        let gen = &mut self.gens[g];
        if gen.dead {
            return;
        }
        gen.dead = true;
        if !gen.open {
            self.connecting = self.connecting.saturating_sub(1);
        }
        self.n.gens_dead += 1;
        note(&mut self.errors, why.clone());
        let (base, count) = (gen.base, gen.count);
        for c in base..base + count {
            if self.circs[c].state != St::Failed {
                self.fail_circ(c, format!("{why} (circuit lost)"));
            }
        }
    }

    fn sink_dead(&mut self, s: usize, why: String) {
        if self.sink_conns[s].dead {
            return;
        }
        self.sink_conns[s].dead = true;
        note(&mut self.errors, why.clone());
        for c in std::mem::take(&mut self.sink_conns[s].circs) {
            self.fail_circ(c, format!("{why} (circuit lost)"));
        }
    }

    /// Handshake, read and process; true if the read budget ran out with
    /// more to read.
    fn service_gen(&mut self, g: usize, phase: u8) -> bool {
        if self.gens[g].dead {
            return false;
        }
        if !self.gens[g].open {
            match self.gens[g].link.advance_handshake(SystemTime::now()) {
                Ok(Some(_)) => {
                    self.gens[g].open = true;
                    self.connecting = self.connecting.saturating_sub(1);
                    self.n.gens_open += 1;
                }
                Ok(None) => return false,
                Err(e) => {
                    self.gen_dead(g, format!("generator link: {e}"));
                    return false;
                }
            }
        }
        let mut budget = READ_BUDGET;
        let mut more = false;
        loop {
            if let Err(e) = self.gen_cells(g, phase) {
                self.gen_dead(g, e);
                return false;
            }
            if budget == 0 {
                more = true;
                break;
            }
            let before = self.gens[g].link.read_total;
            match self.gens[g].link.fill() {
                Ok(IoState::Progress) => {
                    let n = (self.gens[g].link.read_total - before) as usize;
                    budget = budget.saturating_sub(n.max(1));
                }
                Ok(IoState::WouldBlock) => break,
                Ok(IoState::Closed) | Err(_) => {
                    self.gen_dead(g, "generator connection closed by the target".into());
                    return false;
                }
            }
        }
        self.mark_dirty(Conn::Gen(g));
        more
    }

    fn service_sink(&mut self, s: usize, phase: u8) -> bool {
        if self.sink_conns[s].dead {
            return false;
        }
        if !self.sink_conns[s].open {
            match self.sink_conns[s].link.advance_handshake(SystemTime::now()) {
                Ok(Some(_)) => self.sink_conns[s].open = true,
                Ok(None) => return false,
                Err(e) => {
                    self.sink_dead(s, format!("sink link: {e}"));
                    return false;
                }
            }
        }
        let mut budget = READ_BUDGET;
        let mut more = false;
        loop {
            if let Err(e) = self.sink_cells(s, phase) {
                self.sink_dead(s, e);
                return false;
            }
            if budget == 0 {
                more = true;
                break;
            }
            let before = self.sink_conns[s].link.read_total;
            match self.sink_conns[s].link.fill() {
                Ok(IoState::Progress) => {
                    let n = (self.sink_conns[s].link.read_total - before) as usize;
                    budget = budget.saturating_sub(n.max(1));
                }
                Ok(IoState::WouldBlock) => break,
                Ok(IoState::Closed) | Err(_) => {
                    self.sink_dead(s, "sink connection closed by the target".into());
                    return false;
                }
            }
        }
        self.mark_dirty(Conn::Sink(s));
        more
    }
}

/// The load threads of one scale run and their live counters.
pub struct ManyRun {
    shared: Arc<Shared>,
    /// Live counters, one per load thread.
    pub counters: Vec<Arc<ManyCounters>>,
    threads: Vec<std::thread::JoinHandle<Result<ManyReport>>>,
}

impl ManyRun {
    /// Start one load thread per element of `per_thread` (its generator
    /// connections and sinks).
    pub fn start(cfg: &ManyConfig, per_thread: Vec<(Vec<ManyGen>, Vec<ManySink>)>) -> Result<Self> {
        let shared = Arc::new(Shared::default());
        let epoch = Instant::now();
        let mut counters = Vec::new();
        let mut threads = Vec::new();
        for (i, (gens, sinks)) in per_thread.into_iter().enumerate() {
            let cnt = Arc::new(ManyCounters::default());
            counters.push(cnt.clone());
            let (sh, cfg) = (shared.clone(), cfg.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("bench-scale-{i}"))
                    .spawn(move || run_many(&cfg, &sh, &cnt, gens, sinks, epoch))?,
            );
        }
        Ok(ManyRun {
            shared,
            counters,
            threads,
        })
    }

    /// Sum a counter over the load threads.
    pub fn sum(&self, f: impl Fn(&ManyCounters) -> &AtomicU64) -> u64 {
        self.counters
            .iter()
            .map(|c| f(c).load(Ordering::Relaxed))
            .sum()
    }

    /// The load threads' CPU time so far, ns each.
    pub fn cpu_ns(&self) -> Vec<u64> {
        self.counters
            .iter()
            .map(|c| c.cpu_ns.load(Ordering::Relaxed))
            .collect()
    }

    /// Move every load thread to phase `p` (MANY_*).
    pub fn set_phase(&self, p: u8) {
        self.shared.phase.store(p, Ordering::Relaxed);
    }

    /// Build only `per_mille` thousandths of each thread's circuits (in
    /// their build order) until set higher; 0 or 1000: all.
    pub fn set_build_share(&self, per_mille: u32) {
        self.shared.build_share.store(per_mille, Ordering::Relaxed);
    }

    /// True while a load thread still builds within the build share.
    pub fn building(&self) -> bool {
        self.sum(|c| &c.building) > 0
    }

    /// True if a load thread has ended (an error).
    pub fn any_ended(&self) -> bool {
        self.threads.iter().any(|t| t.is_finished())
    }

    /// Stop the load threads and collect their reports.
    pub fn finish(self) -> Result<Vec<ManyReport>> {
        self.set_phase(MANY_STOP);
        let mut out = Vec::new();
        for t in self.threads {
            out.push(
                t.join()
                    .map_err(|_| anyhow::anyhow!("load thread panicked"))??,
            );
        }
        Ok(out)
    }
}
