//! The controller: the main thread's event loop. It owns the listener, the
//! registry of open connections by relay identity (facts and handles, never
//! the connection objects), extend routing (find or open the canonical
//! connection for an EXTEND2), worker assignment, bandwidth accounting, key
//! and TLS-context rotation, and the directory duties (descriptor upload,
//! consensus fetch). No relayed cell passes through here.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc::unbounded_channel;
use tracing::{debug, error, info, warn};
use weft_crypto::keys::{LinkKeys, RelayKeys, TLS_CONTEXT_LIFETIME};
use weft_proto::cell::destroy_reason;
use weft_proto::link::PeerKind;
use weft_proto::origin::HopTarget;
use weft_proto::relay::Extend2;

use crate::bwhist::{self, BandwidthHistory};
use crate::context::{RelayConfig, SchedParams, SharedContext};
use crate::directory::{DirEvent, DirState};
use crate::messages::{ConnId, ControllerMsg, HalfRef, WorkerMsg, WorkerReport};
use crate::metrics::{self, MetricsSnapshot, WorkerTotals};
use crate::worker::{self, Worker, WorkerConfig, WorkerHandle};
use weft_dir::consensus::NetParams;

/// Onion key rotation period when no consensus says otherwise.
const DEFAULT_ONION_ROTATION: Duration = Duration::from_secs(28 * 86400);

/// Facts the controller keeps about one open connection.
struct ConnFacts {
    conn_id: ConnId,
    worker: usize,
    peer: PeerKind,
    canonical: bool,
    addr: SocketAddr,
    opened: Instant,
}

/// Circuits waiting for a connection to a relay that is being opened.
struct PendingConnect {
    conn_id: ConnId,
    waiters: Vec<Waiter>,
}

/// What waits for a connection to a relay.
enum Waiter {
    /// A keyed half's EXTEND2: send CREATE2 and link.
    Extend(HalfRef, Vec<u8>),
    /// A bandwidth self-test circuit through `rest`.
    SelfTest(HopTarget, Vec<HopTarget>),
}

struct Controller {
    cfg: RelayConfig,
    keys: RelayKeys,
    ctx: Arc<SharedContext>,
    link: LinkKeys,
    link_created: SystemTime,
    workers: Vec<WorkerHandle>,
    worker_load: Vec<WorkerReport>,
    worker_cpu_ns: Vec<u64>,
    worker_totals: Vec<WorkerTotals>,
    /// Each worker's current BandwidthRate share.
    shares: Vec<u64>,
    /// Connections moved between workers.
    migrations: u64,
    /// EWMA of each worker's busy fraction.
    load: Vec<f64>,
    /// Seconds each worker has been the busiest by a margin (balancing).
    imbalance_secs: u32,
    next_worker: usize,
    next_conn_id: ConnId,
    conns: HashMap<ConnId, ConnFacts>,
    by_identity: HashMap<[u8; 20], Vec<ConnId>>,
    /// Connections being opened, by (relay identity, worker to avoid).
    pending: HashMap<([u8; 20], Option<usize>), PendingConnect>,
    bw: BandwidthHistory,
    extends_same_worker: u64,
    extends_cross_worker: u64,
    started: Instant,
}

/// Run the relay until SIGINT/SIGTERM. Must be called on the main thread.
pub fn run_relay(cfg: RelayConfig) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, run_controller(cfg))
}

/// Scheduling parameters: torrc where set, else the consensus (C Tor's
/// `CircuitPriorityHalflifeMsec`, `KISTSchedRunInterval`), else defaults.
fn sched_params(cfg: &RelayConfig, p: &NetParams) -> SchedParams {
    let halflife_s = cfg.circuit_priority_halflife.unwrap_or_else(|| {
        f64::from(p.get_clamped("CircuitPriorityHalflifeMsec", 30_000, -1, i32::MAX)) / 1000.0
    });
    let kist_ms = cfg
        .kist_run_interval_ms
        .unwrap_or_else(|| p.get_clamped("KISTSchedRunInterval", 2, 0, 100) as u64);
    SchedParams {
        allow_nonearly_extend: p.allow_nonearly_extend(),
        halflife_s,
        kist_interval: Duration::from_millis(kist_ms),
        kist_factor: cfg.kist_sock_buf_factor,
    }
}

fn our_addrs(cfg: &RelayConfig) -> Vec<IpAddr> {
    vec![cfg.advertised.ip()]
}

async fn run_controller(cfg: RelayConfig) -> anyhow::Result<()> {
    let now = SystemTime::now();
    let keys =
        RelayKeys::load_or_create(&cfg.data_dir, &cfg.nickname, DEFAULT_ONION_ROTATION, now)?;
    info!(
        "weft {} starting: nickname {}, fingerprint {}, Ed25519 identity {}",
        env!("CARGO_PKG_VERSION"),
        cfg.nickname,
        keys.fingerprint_hex(),
        keys.ed_id_base64()
    );
    let link = LinkKeys::generate(&keys, now)?;
    let ctx = Arc::new(SharedContext::build(
        &keys,
        &link,
        our_addrs(&cfg),
        &sched_params(&cfg, &NetParams::default()),
    )?);

    let listener = std::net::TcpListener::bind(cfg.or_listen)
        .map_err(|e| anyhow::anyhow!("cannot listen on ORPort {}: {e}", cfg.or_listen))?;
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    info!("ORPort listening on {}", cfg.or_listen);

    let (tx, mut rx) = unbounded_channel();
    let n = cfg.connection_threads;
    let (parts, workers) = worker::build(n.max(1))?;
    let nw = n.max(1) as u64;
    let wcfg = WorkerConfig {
        alloc_probe: cfg.alloc_probe,
        rate_share: (cfg.bandwidth_rate / nw).max(1),
        burst_share: (cfg.bandwidth_burst / nw).max(1),
        refill: cfg.token_bucket_refill,
        ..WorkerConfig::default()
    };
    let mut local_worker = None;
    for p in parts {
        let w = Worker::new(p, workers.clone(), ctx.clone(), tx.clone(), wcfg);
        if n == 0 {
            local_worker = Some(w);
        } else {
            worker::spawn_thread(w, cfg.worker_sched_slice)?;
        }
    }
    if let Some(w) = local_worker {
        tokio::task::spawn_local(drive_local_worker(w));
        info!("ConnectionThreads 0: connections run on the main thread");
    } else {
        info!("started {n} worker threads");
    }

    let state_path = cfg.data_dir.join("state");
    let metrics_listener = match cfg.metrics_port {
        Some(addr) => {
            let (cookie, token) = metrics::write_cookie(&cfg.data_dir)?;
            let l = metrics::listen(addr)
                .await
                .map_err(|e| anyhow::anyhow!("cannot listen on MetricsPort {addr}: {e}"))?;
            info!("MetricsPort token in {}", cookie.display());
            Some((l, token))
        }
        None => None,
    };
    let (dir_tx, mut dir_rx) = unbounded_channel::<DirEvent>();
    let mut dir = DirState::new(&cfg, dir_tx);
    let mut c = Controller {
        worker_load: vec![WorkerReport::default(); workers.len()],
        worker_cpu_ns: vec![0; workers.len()],
        worker_totals: vec![WorkerTotals::default(); workers.len()],
        shares: vec![0; workers.len()],
        migrations: 0,
        imbalance_secs: 0,
        load: vec![0.0; workers.len()],
        cfg,
        keys,
        ctx,
        link,
        link_created: now,
        workers,
        next_worker: 0,
        next_conn_id: 1,
        conns: HashMap::new(),
        by_identity: HashMap::new(),
        pending: HashMap::new(),
        bw: load_bwhist(&state_path),
        extends_same_worker: 0,
        extends_cross_worker: 0,
        started: Instant::now(),
    };
    // The ORPort answers now, so the authorities' reachability test that
    // follows the upload can succeed. [protocol-notes §10.3, §15.12]
    dir.start(&c.keys, c.started, c.bw.observed());

    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut secs: u64 = 0;
    loop {
        tokio::select! {
            a = listener.accept() => match a {
                Ok((stream, peer)) => c.accept(stream, peer),
                Err(e) => warn!("accept failed: {e}"),
            },
            Some(m) = rx.recv() => c.on_msg(m),
            a = accept_metrics(&metrics_listener) => {
                if let (Ok((stream, peer)), Some((_, token))) = (a, &metrics_listener) {
                    let body = metrics::render(&c.metrics_snapshot());
                    let token = token.clone();
                    tokio::task::spawn_local(async move {
                        metrics::serve_one(stream, peer, &token, move || body).await;
                    });
                }
            }
            Some(ev) = dir_rx.recv() => {
                let out = dir.on_event(ev);
                if out.params_changed {
                    c.params_changed(&dir);
                }
                if let Some((a, b)) = out.selftest {
                    c.launch_selftest(a, b);
                }
                dir.maybe_selftest(c.bw.observed());
            }
            _ = tick.tick() => {
                secs += 1;
                c.bw.tick(bwhist::today());
                dir.maybe_fetch_consensus();
                c.rebalance_bandwidth();
                c.balance(secs);
                if secs.is_multiple_of(10) {
                    dir.maybe_republish(&c.keys, c.started, c.bw.observed());
                }
                if secs.is_multiple_of(60) {
                    save_bwhist(&state_path, &c.bw);
                    c.log_heartbeat();
                    c.rotate_if_due(&mut dir);
                }
            }
            _ = tokio::signal::ctrl_c() => { info!("interrupt: shutting down"); break; }
            _ = sigterm.recv() => { info!("SIGTERM: shutting down"); break; }
        }
    }
    for w in &c.workers {
        w.send(WorkerMsg::Shutdown);
    }
    // Collect the workers' last counters (bounded: a stuck worker must not
    // keep the process alive).
    let mut running = c.workers.len();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while running > 0 {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(ControllerMsg::WorkerStopped { .. })) => running -= 1,
            Ok(Some(m @ ControllerMsg::WorkerStats { .. })) => c.on_msg(m),
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    save_bwhist(&state_path, &c.bw);
    info!(
        "stopped after {}s: relayed {} cells, read {} B, written {} B, extends {} same-worker / {} cross-worker",
        c.started.elapsed().as_secs(),
        c.bw.total_cells,
        c.bw.total_read,
        c.bw.total_written,
        c.extends_same_worker,
        c.extends_cross_worker
    );
    Ok(())
}

impl Controller {
    /// The worker for a new connection: the least loaded by measured load
    /// (EWMA of busy time), then by connections; ties round robin.
    /// `TestingPlaceOnWorker` overrides it (tests of the balancer).
    fn pick_worker(&mut self) -> usize {
        let n = self.workers.len();
        if let Some(w) = self.cfg.testing_place_on_worker.filter(|w| *w < n) {
            return w;
        }
        let start = self.next_worker;
        self.next_worker = (self.next_worker + 1) % n;
        let score = |w: usize| self.load[w] + 0.01 * self.worker_load[w].connections as f64;
        (0..n)
            .map(|i| (start + i) % n)
            .min_by(|&a, &b| score(a).total_cmp(&score(b)))
            .unwrap_or(0)
    }

    /// Once a second: update the load EWMAs; when one worker has been
    /// busier than another by more than 20% of a core for 3 seconds, move
    /// one of its connections there (the one whose traffic is closest to
    /// half the difference). With `TestingMigrateEvery`, also move some
    /// connection every that many seconds, whatever the load.
    fn balance(&mut self, secs: u64) {
        let n = self.workers.len();
        if n < 2 {
            return;
        }
        for w in 0..n {
            let busy = self.worker_load[w].busy_ns as f64 / 1e9;
            self.load[w] = 0.5 * self.load[w] + 0.5 * busy;
        }
        if let Some(every) = self.cfg.testing_migrate_every.filter(|e| *e > 0) {
            if secs.is_multiple_of(every) && !self.conns.is_empty() {
                let ids: Vec<ConnId> = self.conns.keys().copied().collect();
                let id = ids[rand::random_range(0..ids.len())];
                if let Some(f) = self.conns.get(&id) {
                    let to = (f.worker + 1) % n;
                    debug!(
                        "TestingMigrateEvery: moving connection {id} from worker {} to {to}",
                        f.worker
                    );
                    self.workers[f.worker].send(WorkerMsg::Migrate { conn_id: id, to });
                }
            }
            return;
        }
        let (hi, lo) = (0..n).fold((0, 0), |(hi, lo), w| {
            (
                if self.load[w] > self.load[hi] { w } else { hi },
                if self.load[w] < self.load[lo] { w } else { lo },
            )
        });
        let gap = self.load[hi] - self.load[lo];
        if gap > 0.2 && self.load[hi] > 0.3 {
            self.imbalance_secs += 1;
        } else {
            self.imbalance_secs = 0;
        }
        if self.imbalance_secs < 3 {
            return;
        }
        self.imbalance_secs = 0;
        let r = &self.worker_load[hi];
        let bytes = (r.read_bytes + r.written_bytes).max(1) as f64;
        let want = bytes * (gap / 2.0) / self.load[hi].max(1e-9);
        let pick = r
            .top_conns
            .iter()
            .filter(|(id, b)| *id != 0 && (*b as f64) < 0.9 * bytes && self.conns.contains_key(id))
            .min_by(|a, b| {
                (a.1 as f64 - want)
                    .abs()
                    .total_cmp(&(b.1 as f64 - want).abs())
            });
        if let Some(&(conn_id, b)) = pick {
            info!(
                "balancing: worker {hi} at {:.0}% vs worker {lo} at {:.0}%; moving connection {conn_id} ({} KiB/s)",
                self.load[hi] * 100.0,
                self.load[lo] * 100.0,
                b / 1024
            );
            self.workers[hi].send(WorkerMsg::Migrate { conn_id, to: lo });
            // Pretend the move happened so the next decision waits for data.
            self.load[hi] -= gap / 2.0;
            self.load[lo] += gap / 2.0;
        }
    }

    /// How much busier worker `w` is than the idlest worker (load EWMA,
    /// fraction of a core).
    fn load_gap(&self, w: usize) -> f64 {
        let min = self.load.iter().copied().fold(f64::INFINITY, f64::min);
        self.load.get(w).map_or(f64::INFINITY, |l| l - min)
    }

    fn new_conn_id(&mut self) -> ConnId {
        let id = self.next_conn_id;
        self.next_conn_id += 1;
        id
    }

    fn accept(&mut self, stream: tokio::net::TcpStream, peer: SocketAddr) {
        let Ok(std) = stream.into_std() else { return };
        let conn_id = self.new_conn_id();
        let w = self.pick_worker();
        // Count it now so a burst of accepts spreads over the workers.
        self.worker_load[w].connections += 1;
        debug!("accepted connection {conn_id} from {peer} → worker {w}");
        self.workers[w].send(WorkerMsg::Accept {
            conn_id,
            stream: std,
            peer,
        });
    }

    fn on_msg(&mut self, m: ControllerMsg) {
        match m {
            ControllerMsg::ConnOpened {
                conn_id,
                worker,
                peer,
                canonical,
                outbound,
                addr,
            } => {
                if let PeerKind::Relay { rsa_fp, .. } = &peer {
                    self.by_identity.entry(*rsa_fp).or_default().push(conn_id);
                    let key = self
                        .pending
                        .iter()
                        .find(|(_, p)| p.conn_id == conn_id)
                        .map(|(k, _)| *k);
                    if let Some(p) = key.and_then(|k| self.pending.remove(&k)) {
                        for w in p.waiters {
                            self.dispatch(w, worker, conn_id);
                        }
                    }
                }
                debug!(
                    "connection {conn_id} open on worker {worker} ({}, {peer:?})",
                    if outbound { "outbound" } else { "inbound" }
                );
                self.conns.insert(
                    conn_id,
                    ConnFacts {
                        conn_id,
                        worker,
                        peer,
                        canonical,
                        addr,
                        opened: Instant::now(),
                    },
                );
            }
            ControllerMsg::ConnFailed {
                conn_id,
                reason,
                why,
            } => {
                let key = self
                    .pending
                    .iter()
                    .find(|(_, p)| p.conn_id == conn_id)
                    .map(|(k, _)| *k);
                if let Some(k) = key {
                    if let Some(p) = self.pending.remove(&k) {
                        for w in p.waiters {
                            match w {
                                Waiter::Extend(from, _) => {
                                    self.fail_extend(&from, reason, why.clone())
                                }
                                Waiter::SelfTest(..) => info!(
                                    "bandwidth self-test: cannot connect to its first hop: {why}"
                                ),
                            }
                        }
                    }
                }
            }
            ControllerMsg::ConnClosed { conn_id } => {
                if let Some(f) = self.conns.remove(&conn_id) {
                    if let PeerKind::Relay { rsa_fp, .. } = f.peer {
                        if let Some(v) = self.by_identity.get_mut(&rsa_fp) {
                            v.retain(|c| *c != conn_id);
                            if v.is_empty() {
                                self.by_identity.remove(&rsa_fp);
                            }
                        }
                    }
                }
            }
            ControllerMsg::Extend {
                from,
                from_conn,
                req,
            } => self.on_extend(from, from_conn, *req),
            ControllerMsg::ConnMoved { conn_id, worker } => {
                if let Some(f) = self.conns.get_mut(&conn_id) {
                    f.worker = worker;
                }
                self.migrations += 1;
            }
            ControllerMsg::WorkerStopped { worker } => {
                warn!("worker {worker} stopped unexpectedly");
            }
            ControllerMsg::WorkerStats {
                worker,
                report,
                cpu_ns,
            } => {
                self.bw.add(report.read_bytes, report.written_bytes);
                self.bw.total_cells += report.cells_relayed;
                if let Some(l) = self.worker_load.get_mut(worker) {
                    *l = report;
                }
                if let Some(c) = self.worker_cpu_ns.get_mut(worker) {
                    *c = cpu_ns;
                }
                if let Some(t) = self.worker_totals.get_mut(worker) {
                    t.add(&report, cpu_ns);
                }
            }
        }
    }

    /// Count and log where the two halves of an extended circuit live.
    fn note_link(&mut self, from: &HalfRef, next_worker: usize) {
        if usize::from(from.worker) == next_worker {
            self.extends_same_worker += 1;
            debug!(
                "extend: half {} linked on worker {next_worker} (same-worker)",
                from.slot
            );
        } else {
            self.extends_cross_worker += 1;
            debug!(
                "extend: half {} linked across workers {} -> {next_worker} (cross-worker)",
                from.slot, from.worker
            );
        }
    }

    fn fail_extend(&self, from: &HalfRef, reason: u8, why: String) {
        if let Some(w) = self.workers.get(usize::from(from.worker)) {
            w.send(WorkerMsg::ExtendFailed {
                half: *from,
                reason,
                why,
            });
        }
    }

    /// Find or open the connection for an EXTEND2. [tor-spec §5.3.1;
    /// protocol-notes §6.1]
    fn on_extend(&mut self, from: HalfRef, from_conn: ConnId, req: Extend2) {
        if let Some(f) = self.conns.get(&from_conn) {
            if let PeerKind::Relay { rsa_fp, ed_id } = &f.peer {
                if *rsa_fp == req.rsa_id || Some(*ed_id) == req.ed_id {
                    return self.fail_extend(
                        &from,
                        destroy_reason::PROTOCOL,
                        "extend back to the previous hop".into(),
                    );
                }
            }
        }
        if req.rsa_id == self.keys.fingerprint {
            return self.fail_extend(
                &from,
                destroy_reason::PROTOCOL,
                "extend to ourselves".into(),
            );
        }
        let Some(v4) = req.ipv4 else {
            return self.fail_extend(
                &from,
                destroy_reason::CONNECTFAILED,
                "IPv6-only extend; no IPv6 ORPort".into(),
            );
        };
        let addr = SocketAddr::V4(v4);
        if !self.cfg.extend_allow_private && is_private(addr.ip()) {
            return self.fail_extend(
                &from,
                destroy_reason::CONNECTFAILED,
                format!("extend to private address {addr} refused"),
            );
        }
        if v4.port() == 0 || v4.ip().is_unspecified() {
            return self.fail_extend(
                &from,
                destroy_reason::CONNECTFAILED,
                "extend to port 0 or 0.0.0.0".into(),
            );
        }
        // TestingCrossWorkerExtends: the next hop's connection must be on
        // another worker than the keyed half (reuse one there, or open one).
        let avoid = (self.cfg.testing_cross_worker && self.workers.len() > 1)
            .then_some(usize::from(from.worker));
        self.with_connection(
            req.rsa_id,
            req.ed_id,
            addr,
            avoid,
            Waiter::Extend(from, req.create2),
        );
    }

    /// Hand `waiter` to the open connection `conn_id` on worker `worker`.
    fn dispatch(&mut self, waiter: Waiter, worker: usize, conn_id: ConnId) {
        match waiter {
            Waiter::Extend(from, create2) => {
                self.note_link(&from, worker);
                self.workers[worker].send(WorkerMsg::CreateOutbound {
                    conn_id,
                    prev: from,
                    create2,
                });
            }
            Waiter::SelfTest(first, rest) => self.workers[worker].send(WorkerMsg::SelfTest {
                conn_id,
                first,
                rest,
                cells: crate::selftest::TOTAL_CELLS / crate::selftest::CIRCUITS as u32,
            }),
        }
    }

    /// Find the connection to use for relay `rsa_id` (ed), or open one
    /// (deduplicating concurrent opens), and give it `waiter`. Reuse rule as
    /// C Tor's `channel_get_for_extend`: canonical first, then one to the
    /// requested address; the oldest. [protocol-notes §6.1]
    fn with_connection(
        &mut self,
        rsa_id: [u8; 20],
        ed: Option<[u8; 32]>,
        addr: SocketAddr,
        avoid_worker: Option<usize>,
        waiter: Waiter,
    ) {
        let best = self.by_identity.get(&rsa_id).and_then(|ids| {
            ids.iter()
                .filter_map(|id| self.conns.get(id))
                .filter(|f| Some(f.worker) != avoid_worker)
                .filter(|f| match (&f.peer, ed) {
                    (PeerKind::Relay { ed_id, .. }, Some(want)) => *ed_id == want,
                    _ => true,
                })
                .filter(|f| f.canonical || f.addr == addr)
                .min_by_key(|f| (!f.canonical, f.opened))
                .map(|f| (f.worker, f.conn_id))
        });
        if let Some((w, conn_id)) = best {
            return self.dispatch(waiter, w, conn_id);
        }
        let key = (rsa_id, avoid_worker);
        if let Some(p) = self.pending.get_mut(&key) {
            p.waiters.push(waiter);
            return;
        }
        let conn_id = self.new_conn_id();
        let w = match (avoid_worker, &waiter) {
            (Some(a), _) => (a + 1) % self.workers.len(),
            // An extend's new connection goes to the extending half's worker
            // unless that worker is clearly busier than the idlest: then the
            // circuit's cells stay on one worker (no hand-off, no wake-up),
            // and the balancer still moves connections when load skews.
            (None, Waiter::Extend(from, _))
                if self.cfg.testing_place_on_worker.is_none()
                    && self.load_gap(usize::from(from.worker)) < 0.2 =>
            {
                usize::from(from.worker)
            }
            _ => self.pick_worker(),
        };
        self.worker_load[w].connections += 1;
        debug!(
            "opening connection {conn_id} to {addr} ({}) on worker {w}",
            hex::encode_upper(rsa_id)
        );
        self.workers[w].send(WorkerMsg::Connect {
            conn_id,
            addr,
            rsa_id,
            ed_id: ed,
        });
        self.pending.insert(
            key,
            PendingConnect {
                conn_id,
                waiters: vec![waiter],
            },
        );
    }

    /// Launch the bandwidth self-test circuits: us → a → b → us.
    fn launch_selftest(&mut self, a: HopTarget, b: HopTarget) {
        let me = HopTarget {
            rsa_id: self.keys.fingerprint,
            ed_id: Some(self.keys.ed_id),
            ntor_key: self.keys.onion.ntor.public,
            addr: match self.cfg.advertised {
                SocketAddr::V4(v4) => v4,
                SocketAddr::V6(_) => return,
            },
        };
        info!(
            "bandwidth self-test: {} circuits through {} and {}",
            crate::selftest::CIRCUITS,
            hex::encode_upper(a.rsa_id),
            hex::encode_upper(b.rsa_id)
        );
        for _ in 0..crate::selftest::CIRCUITS {
            let addr = SocketAddr::V4(a.addr);
            self.with_connection(
                a.rsa_id,
                a.ed_id,
                addr,
                None,
                Waiter::SelfTest(a.clone(), vec![b.clone(), me.clone()]),
            );
        }
    }

    /// Split BandwidthRate/Burst between workers by recent demand: a
    /// quarter evenly, the rest in proportion to the bytes each moved in
    /// the last second. Sent only when a share moves by more than 10%.
    fn rebalance_bandwidth(&mut self) {
        let n = self.workers.len();
        if n < 2 {
            return;
        }
        let demand: Vec<u64> = self
            .worker_load
            .iter()
            .map(|r| r.read_bytes + r.written_bytes)
            .collect();
        let total: u64 = demand.iter().sum();
        if total == 0 {
            return;
        }
        for (w, d) in demand.iter().enumerate() {
            let frac = 0.25 / n as f64 + 0.75 * *d as f64 / total as f64;
            let rate = ((self.cfg.bandwidth_rate as f64 * frac) as u64).max(1);
            let burst = ((self.cfg.bandwidth_burst as f64 * frac) as u64).max(1);
            let old = self.shares.get(w).copied().unwrap_or(0);
            if old == 0 || rate.abs_diff(old) * 10 > old {
                if let Some(s) = self.shares.get_mut(w) {
                    *s = rate;
                }
                self.workers[w].send(WorkerMsg::BandwidthShare { rate, burst });
            }
        }
    }

    fn metrics_snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            workers: self.worker_totals.clone(),
            main_cpu_s: worker::thread_cpu_ns() as f64 / 1e9,
            connections: self.conns.len(),
            observed_bandwidth: self.bw.observed(),
            extends: (self.extends_same_worker, self.extends_cross_worker),
            uptime_s: self.started.elapsed().as_secs(),
        }
    }

    fn log_heartbeat(&self) {
        let circuits: u64 = self.worker_load.iter().map(|w| w.circuits).sum();
        let conns = self.conns.len();
        let main_cpu = worker::thread_cpu_ns();
        let worker_cpu: u64 = self.worker_cpu_ns.iter().sum();
        info!(
            "heartbeat: uptime {}s, {conns} connections, {} circuit halves, read {} B, written {} B, observed {} B/s, extends {} same-worker / {} cross-worker, main thread CPU {:.2}s, worker CPU {:.2}s",
            self.started.elapsed().as_secs(),
            circuits,
            self.bw.total_read,
            self.bw.total_written,
            self.bw.observed(),
            self.extends_same_worker,
            self.extends_cross_worker,
            main_cpu as f64 / 1e9,
            worker_cpu as f64 / 1e9,
        );
    }

    /// Regenerate the TLS context every 2 hours, rotate onion keys and the
    /// signing key when due, and hand workers the new snapshot.
    fn rotate_if_due(&mut self, dir: &mut DirState) {
        let now = SystemTime::now();
        let mut changed = false;
        match self.keys.rotate_onion_keys_if_due(
            now,
            dir.params.onion_key_rotation(),
            dir.params.onion_key_grace_period(),
        ) {
            Ok(c) => changed |= c,
            Err(e) => error!("onion key rotation failed: {e}"),
        }
        match self.keys.renew_signing_key_if_due(now) {
            Ok(c) => changed |= c,
            Err(e) => error!("signing key renewal failed: {e}"),
        }
        let tls_due =
            now.duration_since(self.link_created).unwrap_or_default() >= TLS_CONTEXT_LIFETIME;
        if !(changed || tls_due) {
            return;
        }
        match LinkKeys::generate(&self.keys, now).map_err(|e| e.to_string()) {
            Ok(link) => {
                self.link = link;
                self.link_created = now;
                if self.rebuild_context(dir) {
                    info!("rotated TLS link context");
                }
            }
            Err(e) => error!("TLS context rotation failed: {e}"),
        }
        if changed {
            dir.keys_changed();
        }
    }

    /// Build a new immutable context from the current keys, link keys and
    /// network parameters, and hand it to every worker (new connections use
    /// it; open ones keep theirs).
    fn rebuild_context(&mut self, dir: &DirState) -> bool {
        match SharedContext::build(
            &self.keys,
            &self.link,
            our_addrs(&self.cfg),
            &sched_params(&self.cfg, &dir.params),
        ) {
            Ok(ctx) => {
                self.ctx = Arc::new(ctx);
                for w in &self.workers {
                    w.send(WorkerMsg::NewContext(self.ctx.clone()));
                }
                true
            }
            Err(e) => {
                error!("cannot build a new relay context: {e}");
                false
            }
        }
    }

    /// The consensus brought new network parameters.
    fn params_changed(&mut self, dir: &DirState) {
        info!(
            "network parameters: {:?}",
            dir.params.iter().collect::<Vec<_>>()
        );
        self.rebuild_context(dir);
    }
}

/// Accept on the MetricsPort, or never when there is none.
async fn accept_metrics(
    l: &Option<(tokio::net::TcpListener, String)>,
) -> std::io::Result<(tokio::net::TcpStream, SocketAddr)> {
    match l {
        Some((l, _)) => l.accept().await,
        None => std::future::pending().await,
    }
}

/// The bandwidth history saved by the last run, if any (a bad file is
/// reported and ignored: it holds no secret and no identity).
fn load_bwhist(path: &std::path::Path) -> BandwidthHistory {
    match std::fs::read_to_string(path) {
        Ok(t) => match BandwidthHistory::from_state(&t, bwhist::today()) {
            Ok(h) => {
                info!("bandwidth history loaded: observed {} B/s", h.observed());
                h
            }
            Err(e) => {
                warn!("{}: {e}; starting a new bandwidth history", path.display());
                BandwidthHistory::default()
            }
        },
        Err(_) => BandwidthHistory::default(),
    }
}

fn save_bwhist(path: &std::path::Path, h: &BandwidthHistory) {
    if let Err(e) = weft_crypto::keys::write_private_file(path, h.to_state().as_bytes()) {
        warn!("cannot save the bandwidth history: {e}");
    }
}

/// The raw epoll descriptor of a worker, for tokio's reactor.
struct PollFd(std::os::fd::RawFd);

impl std::os::fd::AsRawFd for PollFd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0
    }
}

/// `ConnectionThreads 0`: run the worker on the main thread, inside the
/// controller's runtime. Its epoll descriptor is readable whenever it has
/// events (sockets, or a wake-up from another thread), so the runtime
/// watches that descriptor and runs a round of the worker when it fires, or
/// at once while the worker has work, or when its housekeeping is due.
async fn drive_local_worker(mut w: Worker) {
    // SAFETY: the descriptor is the worker's epoll instance, owned by `w`,
    // which stays alive (and never replaces its Poll) for as long as `fd`:
    // `fd` is a local of this function and is dropped before the parameter
    // `w`. Exercised by every ConnectionThreads 0 test (stock_network.rs
    // connection_threads_0, bad_input.rs).
    let registered = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(
            PollFd(w.poll_fd()),
            tokio::io::Interest::READABLE,
        )
    };
    let fd = match registered {
        Ok(fd) => fd,
        Err(e) => {
            error!("cannot watch the worker's event loop: {e}");
            return;
        }
    };
    while !w.stopped() {
        if let Err(e) = w.turn(Some(Duration::ZERO)) {
            error!("worker 0: event loop failed: {e}");
            break;
        }
        match w.sleep_time() {
            Some(d) if d.is_zero() => tokio::task::yield_now().await,
            d => {
                tokio::select! {
                    g = fd.readable() => {
                        if let Ok(mut g) = g {
                            g.clear_ready();
                        }
                    }
                    _ = tokio::time::sleep(d.unwrap_or(Duration::from_secs(1))) => {}
                }
            }
        }
    }
}

/// RFC 1918, loopback, link-local and other internal addresses.
pub fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            a.is_private()
                || a.is_loopback()
                || a.is_link_local()
                || a.is_unspecified()
                || a.octets()[0] == 0
        }
        IpAddr::V6(a) => {
            a.is_loopback()
                || a.is_unspecified()
                || (a.segments()[0] & 0xfe00) == 0xfc00
                || (a.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_addresses() {
        assert!(is_private("127.0.0.1".parse().unwrap()));
        assert!(is_private("10.1.2.3".parse().unwrap()));
        assert!(is_private("192.168.1.1".parse().unwrap()));
        assert!(!is_private("8.8.8.8".parse().unwrap()));
        assert!(is_private("::1".parse().unwrap()));
    }
}
