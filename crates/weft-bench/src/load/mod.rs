//! The load: generator connections and sink relays, run by one or more load
//! threads (each its own mio event loop, pinned to the load CPUs).
//!
//! * A **generator** connection authenticates to the target as a relay, builds
//!   `circuits` circuits on it (CREATE2/ntor to the target, then EXTEND2 to one
//!   of the sinks, which the target must reach on its own), and sends RELAY
//!   cells through them.
//! * A **sink** is a relay identity with its own listener. It accepts the
//!   target's authenticated connection, answers CREATE2, counts the cells
//!   that arrive and sends cells back for the downstream direction.
//!
//! The target does the whole job of a middle relay on every cell (TLS in,
//! one onion layer, circuit lookup, queueing, scheduling, TLS out). The load
//! side does as little as possible per cell: cell bodies are a fixed random
//! block (to the target they are ciphertext it decrypts into noise that it
//! does not recognize, so it forwards it); only every `mark_every`-th cell
//! carries a plaintext stamp, encrypted at its exact position in the target's
//! AES-CTR keystream (which the generator knows from the handshake). A marked
//! cell that arrives with a bad magic means the target lost, duplicated or
//! reordered cells; it is counted as corruption.
//!
//! Flow control is closed-loop inside this process: a circuit sends at most
//! `window` cells beyond what its other end has received, per direction, so
//! the target's queues stay bounded (C Tor closes circuits whose queue
//! exceeds 2500 cells).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use aes::Aes128;
use anyhow::{Context, Result};
use cipher::{KeyIvInit, StreamCipher, StreamCipherSeek};
use hdrhistogram::Histogram;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use openssl::ssl::{SslAcceptor, SslConnector};
use weft_proto::cell::{cmd, BODY_LEN};
use weft_proto::circuit::HandshakeKeys;
use weft_proto::link::LinkIdentity;
use weft_proto::origin::{HopTarget, OriginCircuit};
use weft_proto::relay::relay_cmd;
use weft_relay::link_io::{CellFlow, CellIn, IoState, LinkConn};
use weft_relay::tls::TlsLink;

mod gen;
pub mod many;
pub mod many_report;
mod sink;

type Aes128Ctr = ctr::Ctr128BE<Aes128>;

/// Phases, set by the coordinator (0: circuits are being built).
/// Data flows; samples are recorded.
pub const PHASE_RUN: u8 = 1;
/// Data flows; TTFB/TTLB/delay samples are kept.
pub const PHASE_MEASURE: u8 = 2;
/// Threads stop.
pub const PHASE_STOP: u8 = 3;

/// Offsets in a marked plaintext body.
const MARK_MAGIC: &[u8; 8] = b"WEFTBNCH";
const OFF_MAGIC: usize = 3;
const OFF_INDEX: usize = 11;
const OFF_STAMP: usize = 19;

/// Largest amount of cells queued into one connection's write buffer per
/// round.
const WRITE_BATCH: usize = 64 * 1024;
/// Read at most this much from one connection per round (fairness).
const READ_BUDGET: usize = 256 * 1024;

/// One relay identity of the load side (generator connection or sink).
pub struct Identity {
    /// Link-authentication material.
    pub link: Arc<LinkIdentity>,
    /// Keys for answering CREATE2 (sinks).
    pub handshake: HandshakeKeys,
    /// TLS server context (sinks).
    pub acceptor: SslAcceptor,
    /// TLS client context (generators).
    pub connector: SslConnector,
}

/// A sink as the generator describes it in EXTEND2, plus its listener.
pub struct SinkSpec {
    /// The identity.
    pub ident: Identity,
    /// Where it listens.
    pub addr: SocketAddrV4,
    /// What EXTEND2 names.
    pub hop: HopTarget,
}

/// What the load does.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// The target's ORPort and identities (None: direct mode, generators
    /// talk to the sinks themselves, for the loopback floor).
    pub target: Option<HopTarget>,
    /// Circuits per generator connection.
    pub circuits: usize,
    /// Cells in flight per circuit and direction.
    pub window: u64,
    /// Cells per transfer (TTFB/TTLB unit).
    pub transfer_cells: u64,
    /// Send toward the sinks.
    pub up: bool,
    /// Send from the sinks.
    pub down: bool,
    /// Every n-th cell carries a stamp.
    pub mark_every: u64,
    /// CPUs to pin load threads to.
    pub cpus: Vec<usize>,
    /// Of `circuits` per connection, how many are "web" circuits: idle, then
    /// fetching `web_cells` from the sink after a random think time (Tang &
    /// Goldberg's interactive clients); the rest are bulk.
    pub web_circuits: usize,
    /// Cells per web fetch (87 KB ≈ 179 cells of 498 bytes).
    pub web_cells: u64,
    /// Mean think time between a web circuit's fetches, ms (exponential).
    pub web_think_ms: u64,
    /// Read at most this many bytes/s per generator connection (the slow
    /// client-side link that makes cells queue inside the target).
    pub read_rate: Option<u64>,
    /// Report a bulk circuit into which nothing arrived for this long
    /// (in a direction that sends) when the load stops, as an error.
    pub stall_after: Option<Duration>,
    /// Spread each generator connection's circuits over every sink of its
    /// load thread (circuit i of a connection whose own sink is k goes to
    /// sink k + i): the target's inbound and outbound connections then
    /// share circuits many-to-many, as on a real relay, and with N workers
    /// about (N − 1)/N of the cells cross workers. Off: all of a
    /// connection's circuits go to its own sink.
    pub spread: bool,
    /// Ask the target (the first hop) for CGO relay crypto, with
    /// congestion control, in an ntor-v3 CREATE2 (else tor1 over ntor).
    /// Every cell toward it then costs the load a CGO layer (its tag
    /// chains to the one before), the cells back only the ones it reads.
    pub cgo: bool,
}

/// Live counters a load thread publishes for the coordinator.
#[derive(Debug, Default)]
pub struct Counters {
    /// Cells received by sinks (upstream) since start.
    pub up_cells: AtomicU64,
    /// Cells received by generators (downstream) since start.
    pub down_cells: AtomicU64,
    /// Cells sent by generators since start.
    pub up_sent: AtomicU64,
    /// Cells sent by sinks since start.
    pub down_sent: AtomicU64,
    /// Circuits ready for data.
    pub circuits_ready: AtomicU64,
    /// Circuits that failed (DESTROY, handshake error, connection loss).
    pub circuits_failed: AtomicU64,
    /// Marked cells that arrived with a bad magic or index.
    pub corrupt: AtomicU64,
    /// CPU time of the thread (ns), updated every round.
    pub cpu_ns: AtomicU64,
}

/// Shared between the coordinator and the load threads.
#[derive(Debug, Default)]
pub struct Shared {
    /// One of the PHASE_* values.
    pub phase: AtomicU8,
    /// Scale loads: the share of each thread's circuits built, in
    /// thousandths; 0 (the default) builds them all.
    pub build_share: std::sync::atomic::AtomicU32,
}

/// What a load thread reports when it stops.
#[derive(Debug)]
pub struct ThreadReport {
    /// Node delay of marked cells, upstream (ns).
    pub delay_up: Histogram<u64>,
    /// Node delay of marked cells, downstream (ns).
    pub delay_down: Histogram<u64>,
    /// Time to first byte of each transfer completed in the measure phase (ms).
    pub ttfb_ms: Vec<f64>,
    /// Time to last byte of each transfer completed in the measure phase (ms).
    pub ttlb_ms: Vec<f64>,
    /// Circuit build times (CREATE2 sent → ready), ms.
    pub build_ms: Vec<f64>,
    /// Web fetches completed in the measure phase: time from the request to
    /// the last cell, ms.
    pub web_ttlb_ms: Vec<f64>,
    /// Cells received by generators on bulk circuits in the measure phase.
    pub bulk_cells_measured: u64,
    /// First errors, for the report.
    pub errors: Vec<String>,
}

fn histogram() -> Histogram<u64> {
    // 1 µs .. 100 s, 3 significant digits.
    Histogram::new_with_bounds(1_000, 100_000_000_000, 3).expect("histogram bounds")
}

/// Thread CPU time in ns.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Pin the calling thread to `cpus` (no-op when empty).
pub fn pin_current_thread(cpus: &[usize]) {
    if cpus.is_empty() {
        return;
    }
    // SAFETY: cpu_set_t is plain data; CPU_SET writes within it for indices
    // below CPU_SETSIZE, which we check; sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            if c < libc::CPU_SETSIZE as usize {
                libc::CPU_SET(c, &mut set);
            }
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// A per-circuit direction: the sender side and the receiver side live in
/// the same thread, so the window is exact.
#[derive(Debug, Default)]
struct Flow {
    sent: u64,
    recv: u64,
    /// When the current transfer's first cell was sent (index sent/T*T).
    transfer_start: Vec<(u64, Instant)>,
    first_seen: Option<Instant>,
    /// When its last cell arrived.
    last_seen: Option<Instant>,
}

impl Flow {
    fn can_send(&self, window: u64) -> bool {
        self.sent - self.recv < window
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CircState {
    Creating,
    Extending,
    Ready,
    Failed,
}

struct Circ {
    gen_circ_id: u32,
    /// The sink (index in the thread's `sinks`) this circuit extends to.
    sink: usize,
    sink_conn: Option<usize>,
    sink_circ_id: u32,
    state: CircState,
    origin: OriginCircuit,
    started: Instant,
    /// Target forward / backward keystreams (None in direct mode).
    kf: Option<Aes128Ctr>,
    kb: Option<Aes128Ctr>,
    up: Flow,
    down: Flow,
    /// A web (interactive) circuit.
    web: bool,
    /// When its next fetch starts.
    next_fetch: Instant,
    /// The fetch in progress: when it started and the down.sent count at
    /// which it is complete.
    fetch: Option<(Instant, u64)>,
    /// Cells the sink may send (web circuits: up to the end of the fetch).
    down_limit: u64,
}

struct Gen {
    /// Read tokens (bytes) when the connection's read rate is limited.
    tokens: f64,
    last_refill: Instant,
    link: LinkConn,
    circs: Vec<usize>,
    by_id: HashMap<u32, usize>,
    open: bool,
    dead: bool,
    sink: usize,
    rr: usize,
}

struct SinkConn {
    link: LinkConn,
    by_id: HashMap<u32, usize>,
    circs: Vec<usize>,
    open: bool,
    dead: bool,
    sink: usize,
    rr: usize,
}

/// One load thread's state.
struct LoadThread<'a> {
    cfg: &'a LoadConfig,
    shared: &'a Shared,
    epoch: Instant,
    noise: [u8; BODY_LEN],
    sinks: Vec<SinkSpec>,
    listeners: Vec<TcpListener>,
    gens: Vec<Gen>,
    sink_conns: Vec<SinkConn>,
    circs: Vec<Circ>,
    /// Client ephemeral key (X) of a pending CREATE2 at a sink → circuit.
    by_x: HashMap<[u8; 32], usize>,
    report: ThreadReport,
    ready: u64,
    failed: u64,
    up_total: u64,
    down_total: u64,
    up_sent: u64,
    down_sent: u64,
    corrupt: u64,
}

const GEN_TOKEN: usize = 0;
const SINK_TOKEN: usize = 1 << 20;
const LISTEN_TOKEN: usize = 1 << 30;

/// Run one load thread until the phase becomes [`PHASE_STOP`].
/// `gens` are (identity, which local sink its circuits extend to).
pub fn run_thread(
    cfg: &LoadConfig,
    shared: &Shared,
    counters: &Counters,
    gens: Vec<(Identity, usize)>,
    sinks: Vec<SinkSpec>,
    epoch: Instant,
) -> Result<ThreadReport> {
    pin_current_thread(&cfg.cpus);
    let mut poll = Poll::new()?;
    let mut t = LoadThread {
        cfg,
        shared,
        epoch,
        noise: weft_crypto::random_array(),
        listeners: Vec::new(),
        sinks,
        gens: Vec::new(),
        sink_conns: Vec::new(),
        circs: Vec::new(),
        by_x: HashMap::new(),
        report: ThreadReport {
            delay_up: histogram(),
            delay_down: histogram(),
            ttfb_ms: Vec::new(),
            ttlb_ms: Vec::new(),
            build_ms: Vec::new(),
            web_ttlb_ms: Vec::new(),
            bulk_cells_measured: 0,
            errors: Vec::new(),
        },
        ready: 0,
        failed: 0,
        up_total: 0,
        down_total: 0,
        up_sent: 0,
        down_sent: 0,
        corrupt: 0,
    };
    // Noise must never look recognized to the target after decryption;
    // it is random, so that happens with probability 2^-16 per cell and the
    // digest check then fails: the cell is forwarded anyway.
    for (i, s) in t.sinks.iter().enumerate() {
        let mut l = TcpListener::bind(SocketAddr::V4(s.addr))
            .with_context(|| format!("sink listener {}", s.addr))?;
        poll.registry()
            .register(&mut l, Token(LISTEN_TOKEN + i), Interest::READABLE)?;
        t.listeners.push(l);
    }
    for (ident, sink) in gens {
        let (addr, hop) = match &cfg.target {
            Some(h) => (h.addr, h.clone()),
            None => (
                SocketAddr::V4(t.sinks[sink].addr),
                t.sinks[sink].hop.clone(),
            ),
        };
        let mut tcp = if cfg.read_rate.is_some() {
            slow_link_socket(addr)?
        } else {
            TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?
        };
        tcp.set_nodelay(true)?;
        let idx = t.gens.len();
        poll.registry().register(
            &mut tcp,
            Token(GEN_TOKEN + idx),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        let tls = TlsLink::connect(&ident.connector, tcp)?;
        let link = LinkConn::outbound(
            tls,
            ident.link.clone(),
            addr.ip(),
            vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
            Some(hop.rsa_id),
            hop.ed_id,
        );
        t.gens.push(Gen {
            tokens: 0.0,
            last_refill: Instant::now(),
            link,
            circs: Vec::new(),
            by_id: HashMap::new(),
            open: false,
            dead: false,
            sink,
            rr: 0,
        });
    }
    let mut events = Events::with_capacity(1024);
    let mut idle = false;
    loop {
        let phase = shared.phase.load(Ordering::Relaxed);
        if phase == PHASE_STOP {
            t.report_stalls();
            break;
        }
        let timeout = if idle {
            Some(Duration::from_millis(5))
        } else {
            Some(Duration::ZERO)
        };
        poll.poll(&mut events, timeout)?;
        for ev in events.iter() {
            let tok = ev.token().0;
            if tok >= LISTEN_TOKEN {
                t.accept(&poll, tok - LISTEN_TOKEN)?;
            }
        }
        let progressed = t.round(phase);
        idle = !progressed;
        counters.up_cells.store(t.up_total, Ordering::Relaxed);
        counters.down_cells.store(t.down_total, Ordering::Relaxed);
        counters.up_sent.store(t.up_sent, Ordering::Relaxed);
        counters.down_sent.store(t.down_sent, Ordering::Relaxed);
        counters.circuits_ready.store(t.ready, Ordering::Relaxed);
        counters.circuits_failed.store(t.failed, Ordering::Relaxed);
        counters.corrupt.store(t.corrupt, Ordering::Relaxed);
        counters.cpu_ns.store(thread_cpu_ns(), Ordering::Relaxed);
    }
    Ok(t.report)
}

impl LoadThread<'_> {
    /// With `stall_after`: note each ready bulk circuit into which nothing
    /// arrived for that long, per direction that sends.
    fn report_stalls(&mut self) {
        let Some(limit) = self.cfg.stall_after else {
            return;
        };
        let now = Instant::now();
        for (c, circ) in self.circs.iter().enumerate() {
            if circ.state != CircState::Ready || circ.web {
                continue;
            }
            for (dir, flow, on) in [
                ("up", &circ.up, self.cfg.up),
                ("down", &circ.down, self.cfg.down),
            ] {
                let since = now.saturating_duration_since(flow.last_seen.unwrap_or(circ.started));
                if on && since > limit {
                    note(
                        &mut self.report.errors,
                        format!(
                            "circuit {c} stalled ({dir}): nothing arrived for {:.1} s; {} of {} cells sent arrived",
                            since.as_secs_f64(),
                            flow.recv,
                            flow.sent
                        ),
                    );
                }
            }
        }
    }
}

fn note(errors: &mut Vec<String>, e: String) {
    if errors.len() < 20 {
        errors.push(e);
    }
}

/// The sink's side of a connection the target opened: TCP_NODELAY,
/// registered under `token`, TLS accepted with the sink's identity, its
/// link handshake to come.
pub(crate) fn accept_link(
    poll: &Poll,
    mut tcp: TcpStream,
    peer: SocketAddr,
    token: Token,
    ident: &Identity,
    addr: Ipv4Addr,
) -> Result<LinkConn> {
    tcp.set_nodelay(true)?;
    poll.registry()
        .register(&mut tcp, token, Interest::READABLE | Interest::WRITABLE)?;
    let tls = TlsLink::accept(&ident.acceptor, tcp)?;
    Ok(LinkConn::inbound(
        tls,
        ident.link.clone(),
        peer.ip(),
        vec![IpAddr::V4(addr)],
    ))
}

impl LoadThread<'_> {
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn accept(&mut self, poll: &Poll, sink: usize) -> Result<()> {
        loop {
            match self.listeners[sink].accept() {
                Ok((tcp, peer)) => {
                    let idx = self.sink_conns.len();
                    let s = &self.sinks[sink];
                    let token = Token(SINK_TOKEN + idx);
                    let link = accept_link(poll, tcp, peer, token, &s.ident, *s.addr.ip())?;
                    self.sink_conns.push(SinkConn {
                        link,
                        by_id: HashMap::new(),
                        circs: Vec::new(),
                        open: false,
                        dead: false,
                        sink,
                        rr: 0,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn fail_circ(&mut self, c: usize, why: String) {
        if self.circs[c].state != CircState::Failed {
            self.circs[c].state = CircState::Failed;
            self.failed += 1;
            note(&mut self.report.errors, why);
        }
    }

    /// One pass over every connection; true if anything moved.
    fn round(&mut self, phase: u8) -> bool {
        let mut moved = false;
        for g in 0..self.gens.len() {
            moved |= self.gen_round(g, phase);
        }
        for s in 0..self.sink_conns.len() {
            moved |= self.sink_round(s, phase);
        }
        moved
    }
}

/// A client-side link that behaves like a real one on loopback: an
/// Ethernet-sized MSS (loopback's is 64 KiB, which lets the sender's
/// congestion window, and so KIST's allowance, cover megabytes) and a small
/// receive buffer, so that when the client reads slowly the backlog stays
/// at the sender — the relay — where its scheduler can act on it.
fn slow_link_socket(addr: SocketAddr) -> Result<TcpStream> {
    let s = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    s.set_tcp_mss(1448)?;
    s.set_recv_buffer_size(64 * 1024)?;
    s.set_nonblocking(true)?;
    match s.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e).with_context(|| format!("connecting to {addr}")),
    }
    Ok(TcpStream::from_std(s.into()))
}

/// A think time with exponential distribution and mean `mean_ms`.
fn think(mean_ms: u64) -> Duration {
    let u: f64 =
        (f64::from(u32::from_be_bytes(weft_crypto::random_array())) + 1.0) / 4_294_967_297.0;
    Duration::from_secs_f64(-u.ln() * mean_ms as f64 / 1000.0)
}

fn fill_marked(body: &mut [u8; BODY_LEN], index: u64, stamp_ns: u64) {
    body[0] = relay_cmd::DATA;
    // Never "recognized" by the target.
    body[1] = 0xff;
    body[2] = 0xff;
    body[OFF_MAGIC..OFF_MAGIC + 8].copy_from_slice(MARK_MAGIC);
    body[OFF_INDEX..OFF_INDEX + 8].copy_from_slice(&index.to_be_bytes());
    body[OFF_STAMP..OFF_STAMP + 8].copy_from_slice(&stamp_ns.to_be_bytes());
}

fn record_marked(
    body: &[u8; BODY_LEN],
    j: u64,
    now_ns: u64,
    measure: bool,
    h: &mut Histogram<u64>,
    corrupt: &mut u64,
    what: (&str, usize),
) {
    let magic_ok = &body[OFF_MAGIC..OFF_MAGIC + 8] == MARK_MAGIC;
    let idx = u64::from_be_bytes(body[OFF_INDEX..OFF_INDEX + 8].try_into().unwrap_or([0; 8]));
    if !magic_ok || idx != j {
        // Rare (a failure): the first few, then one in a hundred, say
        // where so that a reader can tell loss from reordering.
        if *corrupt < 8 || (*corrupt).is_multiple_of(100) {
            eprintln!(
                "load: wrong stamp {} on circuit {} ({}): cell {j} carries {}",
                *corrupt + 1,
                what.1,
                what.0,
                if magic_ok {
                    idx.to_string()
                } else {
                    "no stamp".into()
                }
            );
        }
        *corrupt += 1;
        return;
    }
    if measure {
        let stamp = u64::from_be_bytes(body[OFF_STAMP..OFF_STAMP + 8].try_into().unwrap_or([0; 8]));
        let _ = h.record(now_ns.saturating_sub(stamp).max(1_000));
    }
}

fn transfer_progress(flow: &mut Flow, j: u64, t: u64, measure: bool, report: &mut ThreadReport) {
    let now = Instant::now();
    flow.last_seen = Some(now);
    if j.is_multiple_of(t) {
        flow.first_seen = Some(now);
    }
    if j % t == t - 1 {
        let start = j - (t - 1);
        if let Some(pos) = flow.transfer_start.iter().position(|(k, _)| *k == start) {
            let (_, t0) = flow.transfer_start.swap_remove(pos);
            if measure {
                if let Some(first) = flow.first_seen {
                    report.ttfb_ms.push((first - t0).as_secs_f64() * 1e3);
                }
                report.ttlb_ms.push((now - t0).as_secs_f64() * 1e3);
            }
        }
        // Drop starts that can no longer complete in order (bounded list).
        flow.transfer_start.retain(|(k, _)| *k > start);
    }
}
