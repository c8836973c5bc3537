//! The controller: the main thread's event loop. It owns the ORPort listeners (IPv4, IPv6), the
//! registry of open connections by relay identity (facts and handles, never
//! the connection objects), extend routing (find or open the canonical
//! connection for an EXTEND2), worker assignment, bandwidth accounting, key
//! and TLS-context rotation, and the directory duties (descriptor upload,
//! consensus fetch). No relayed cell passes through here.
//!
//! Split by concern: [`registry`] (connections by identity, extend routing,
//! the self-test's first hops), [`balance`] (worker choice, migration,
//! bandwidth shares), [`limits`] (DoS table, ConnLimit, file descriptors,
//! MaxMemInQueues), [`local`] (`ConnectionThreads 0`), [`directory`]
//! (descriptor upload, consensus fetch), `hs_dir` (the HSDir's descriptor
//! store), [`metrics`] (MetricsPort),
//! [`control_port`] and `control_info` (ControlPort sockets, sessions,
//! events; what GETINFO reads) and `signals` (reload, heartbeat, dump).

mod address_change;
mod balance;
pub(crate) mod conflux;
mod control_info;
pub mod control_port;
pub mod dir_cache;
mod dir_events;
pub mod directory;
mod each_second;
mod exit_metrics;
mod extra_stats;
mod hibernate;
pub mod hs_dir;
mod limits;
mod local;
pub mod metrics;
pub mod metrics_http;
pub(crate) mod onion;
pub mod protocols;
mod reachability;
mod registry;
mod relay_context;
mod second_timer;
mod signals;
mod tor_metrics;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tracing::{debug, error, info, warn};
use weft_crypto::keys::{LinkKeys, RelayKeys, TLS_CONTEXT_LIFETIME};
use weft_proto::link::PeerKind;
use weft_proto::origin::HopTarget;

use self::directory::{DirEvent, DirState};
use self::metrics::WorkerTotals;
use self::relay_context::{exit_settings, our_addrs, sched_params};
use crate::bwhist::BandwidthHistory;
use crate::context::{RelayConfig, SharedContext};
use crate::messages::{ConnId, ControllerMsg, HalfRef, WorkerReport};
use crate::resolver::Resolver;
use crate::worker::{self, CoreMsg, Worker, WorkerConfig, WorkerHandle, WorkerMsg};

pub use self::registry::is_private;
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
    /// We opened it (else the peer did).
    outbound: bool,
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
    /// A connection to an authority whose NETINFO tells us our address
    /// (`address_change.rs`); nothing to send.
    LearnAddress,
}

struct Controller {
    /// The workers' once-a-second reports ([`ControllerMsg::WorkerStats`]),
    /// read when the controller wakes anyway (its tick, a metrics or
    /// control request, the stop), never polled: a report does not wake
    /// it ([`Controller::take_reports`]).
    reports: UnboundedReceiver<ControllerMsg>,
    cfg: RelayConfig,
    keys: RelayKeys,
    ctx: Arc<SharedContext>,
    /// The exit's resolver (kept for rebuilt contexts).
    resolver: Option<Resolver>,
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
    /// The move in flight: the next starts only when its workers say it
    /// is over ([`ControllerMsg::MigrationDone`]) or after a timeout.
    moves: balance::MoveGate,
    next_worker: usize,
    next_conn_id: ConnId,
    conns: HashMap<ConnId, ConnFacts>,
    by_identity: HashMap<[u8; 20], Vec<ConnId>>,
    /// The consensus's ORPorts by RSA identity, to complete an extend's
    /// addresses ([`registry`]).
    relay_book: HashMap<[u8; 20], registry::BookEntry>,
    /// What the authorities said of our address.
    address: address_change::AddressSuggestions,
    /// Connections being opened, by (relay identity, worker to avoid).
    pending: HashMap<([u8; 20], Option<usize>), PendingConnect>,
    bw: BandwidthHistory,
    /// The extra-info's statistics (byte histories, overload lines).
    stats: crate::stats::RelayStats,
    extends_same_worker: u64,
    extends_cross_worker: u64,
    /// Introduction circuits by auth key, rendezvous circuits by cookie.
    onion: onion::OnionTables,
    conflux: conflux::ConfluxTable,
    /// DoS table, connection count, the global memory limit.
    limits: limits::Limits,
    started: Instant,
    /// systemd's readiness protocol (nothing without NOTIFY_SOCKET).
    notify: crate::service_notify::ServiceNotify,
    /// The ORPorts, IPv4 and IPv6 (none while hibernating or shutting
    /// down).
    or_listeners: Vec<tokio::net::TcpListener>,
    /// AccountingMax: the interval's bytes and the hibernation state.
    accounting: Option<crate::accounting::Accounting>,
    /// Shutting down after SIGINT / SIGNAL SHUTDOWN: when to exit.
    exiting_at: Option<tokio::time::Instant>,
    /// Connection counts for C Tor's MetricsPort families.
    conn_stats: tor_metrics::ConnStats,
    /// The HSDir's descriptor store.
    hs_dir: hs_dir::HsDirState,
}

pub use self::signals::Reloader;

/// What the binary gives the relay beyond its configuration.
#[derive(Default)]
pub struct RelayHooks {
    /// Log lines for the ControlPort's log events.
    pub log_feed: Option<control_port::LogFeed>,
    /// Re-reads the torrc on SIGHUP / SIGNAL RELOAD (none: reload is
    /// refused with a warning).
    pub reloader: Option<Reloader>,
}

/// Run the relay until SIGINT/SIGTERM. Must be called on the main thread.
pub fn run_relay(cfg: RelayConfig) -> anyhow::Result<()> {
    run_relay_with(cfg, RelayHooks::default())
}

/// [`run_relay`] with the binary's hooks (log feed, reload).
pub fn run_relay_with(cfg: RelayConfig, hooks: RelayHooks) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, run_controller(cfg, hooks))
}

async fn run_controller(cfg: RelayConfig, mut hooks: RelayHooks) -> anyhow::Result<()> {
    // Before anything answers: a SIGTERM from then on is a clean stop.
    use tokio::signal::unix::{signal, SignalKind};
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sighup = signal(SignalKind::hangup())?;
    let mut sigusr1 = signal(SignalKind::user_defined1())?;
    if let (Some(u), 0) = (&cfg.user, crate::privileges::effective_uid()?) {
        crate::privileges::prepare_data_dir(u, &cfg.data_dir)?;
    }
    let now = SystemTime::now();
    let keys = RelayKeys::load_or_create_with(
        &cfg.data_dir,
        &cfg.nickname,
        DEFAULT_ONION_ROTATION,
        cfg.signing_key_lifetime,
        now,
    )?;
    let family_dir = (cfg.family_key_dir.clone()).unwrap_or_else(|| cfg.data_dir.join("keys"));
    let family_keys = weft_crypto::family_keys::load(&family_dir, &cfg.family_ids)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if !family_keys.is_empty() {
        info!("Found {} family ID keys", family_keys.len());
    }
    info!(
        "weft {} starting: nickname {}, fingerprint {}, Ed25519 identity {}",
        env!("CARGO_PKG_VERSION"),
        cfg.nickname,
        keys.fingerprint_hex(),
        keys.ed_id_base64()
    );
    let link = LinkKeys::generate(&keys, now)?;
    // An exit looks names up on a resolver thread of its own, started
    // once the workers it answers exist.
    let (resolver, dns_requests) = if cfg.exit_policy.is_reject_star() {
        (None, None)
    } else {
        let (r, q) = crate::resolver::channel();
        (Some(r), Some(q))
    };
    let ctx = Arc::new(
        SharedContext::build(
            &keys,
            &link,
            our_addrs(&cfg),
            &sched_params(&cfg, &NetParams::default()),
        )?
        .with_exit(exit_settings(&cfg, None), resolver.clone())
        .with_dir_cache(dir_cache::should_be_cache(&cfg))
        .with_outbound(cfg.outbound),
    );

    let listeners = hibernate::bind_or_ports(&cfg)?;

    let fd_limit = limits::raise_fd_limit(cfg.conn_limit)?;
    let max_mem = limits::max_mem_in_queues(cfg.max_mem_in_queues);
    info!(
        "MaxMemInQueues {} MiB; up to {} connections (file descriptors {fd_limit})",
        max_mem >> 20,
        fd_limit.saturating_sub(limits::ULIMIT_BUFFER)
    );

    let (tx, mut rx) = unbounded_channel();
    let (reports_tx, reports) = unbounded_channel();
    let n = cfg.connection_threads;
    let (parts, workers) = worker::build(n.max(1))?;
    let nw = n.max(1) as u64;
    let wcfg = WorkerConfig {
        alloc_probe: cfg.alloc_probe,
        heap_trim: cfg.heap_trim,
        rate_share: (cfg.bandwidth_rate / nw).max(1),
        burst_share: (cfg.bandwidth_burst / nw).max(1),
        refill: cfg.token_bucket_refill,
        max_mem_in_queues: max_mem,
        // A backstop per worker (a full pool closes the circuit whose cell
        // does not fit), above the global limit so that the OOM handler,
        // which closes the circuits with the oldest cells, acts first.
        max_pool_cells: (2 * max_mem / crate::oom::CELL_COST) as usize,
        ..WorkerConfig::default()
    };
    let mut local_worker = None;
    for p in parts {
        let w = Worker::new(
            p,
            workers.clone(),
            ctx.clone(),
            (tx.clone(), reports_tx.clone()),
            wcfg,
        );
        if n == 0 {
            local_worker = Some(w);
        } else {
            worker::spawn_thread(w, cfg.worker_sched_slice)?;
        }
    }
    let dns_usable = match dns_requests {
        Some(q) => relay_context::start_resolver(&cfg, q, workers.clone(), tx.clone())?,
        None => true,
    };
    if let Some(w) = local_worker {
        tokio::task::spawn_local(local::drive_local_worker(w));
        info!("ConnectionThreads 0: connections run on the main thread");
    } else {
        info!("started {n} worker threads");
    }

    let state_path = cfg.data_dir.join("state");
    let metrics_port = match cfg.metrics_port {
        Some(addr) => Some(
            metrics_http::MetricsPort::open(addr, &cfg.data_dir, cfg.metrics_policy.as_deref())
                .await?,
        ),
        None => None,
    };
    let log_wanted = hooks
        .log_feed
        .as_ref()
        .map(|f| f.wanted())
        .unwrap_or_default();
    let notify = crate::service_notify::ServiceNotify::from_env();
    let mut control =
        control_port::ControlPorts::open(&cfg.control, &cfg.data_dir, log_wanted).await?;
    let mut log_feed = hooks.log_feed.take();
    if let Some(u) = &cfg.user {
        crate::privileges::run_as(u, &cfg.data_dir)?;
    }
    let (dir_tx, mut dir_rx) = unbounded_channel::<DirEvent>();
    let mut dir = DirState::new(&cfg, dir_tx, ctx.dir_cache);
    if !dns_usable {
        warn!("DNS does not work: not claiming to be an exit (the descriptor says reject *:*) until a reload or the retry every 10 minutes finds usable name servers, as C Tor");
        dir.set_dns(crate::resolver::DnsStatus {
            init_failed: true,
            broken: false,
        });
    }
    dir.set_family_keys(family_keys);
    let (cache_tx, mut cache_rx) = unbounded_channel::<dir_cache::CacheEvent>();
    let mut cache = dir_cache::DirCacheState::new(&cfg, cache_tx, ctx.dir_cache);
    let accounting = hibernate::start_accounting(&cfg, keys.fingerprint, &state_path);
    let (hs_tx, mut hs_rx) = unbounded_channel::<hs_dir::Checked>();
    let hs_dir = hs_dir::HsDirState::new(hs_tx, cfg.testing_tor_network);
    let bw = BandwidthHistory::load(&state_path); // before the slow GeoIP files
    let stats = extra_stats::load_stats(&cfg, &state_path);
    let mut c = Controller {
        reports,
        limits: limits::Limits::new(
            sched_params(&cfg, &NetParams::default()).dos,
            max_mem,
            fd_limit.saturating_sub(limits::ULIMIT_BUFFER),
            workers.len(),
        ),
        worker_load: vec![WorkerReport::default(); workers.len()],
        worker_cpu_ns: vec![0; workers.len()],
        worker_totals: vec![WorkerTotals::default(); workers.len()],
        shares: vec![0; workers.len()],
        migrations: 0,
        imbalance_secs: 0,
        moves: Default::default(),
        load: vec![0.0; workers.len()],
        cfg,
        keys,
        ctx,
        resolver,
        link,
        link_created: now,
        workers,
        next_worker: 0,
        next_conn_id: 1,
        conns: HashMap::new(),
        by_identity: HashMap::new(),
        relay_book: HashMap::new(),
        address: Default::default(),
        pending: HashMap::new(),
        bw,
        stats,
        extends_same_worker: 0,
        extends_cross_worker: 0,
        onion: onion::OnionTables::default(),
        conflux: conflux::ConfluxTable::default(),
        started: Instant::now(),
        notify,
        exiting_at: None,
        or_listeners: listeners,
        accounting,
        conn_stats: tor_metrics::ConnStats::default(),
        hs_dir,
    };
    c.note_or_listeners();
    if let Some(a) = metrics_port.as_ref().and_then(|m| m.local_addr()) {
        c.conn_stats.metrics_listeners[tor_metrics::family_of(&a)] += 1;
    }
    // The ORPort answers now, so the authorities' reachability test that
    // follows the upload can succeed. [protocol-notes §10.3, §15.12]
    if dir.exit_withdrawn() {
        // DNS could not be set up: no stream is admitted either.
        c.rebuild_context(&dir);
    }
    dir.set_extra_stats(c.extra_info_chunks());
    if c.cfg.advertised.ip().is_unspecified() {
        c.check_address(&mut dir);
    }
    dir.start(&c.keys, c.started, c.bw.observed());
    c.notify_ready();

    let mut fatal: Option<String> = None;
    let mut tick = second_timer::SecondTimer::new(Duration::from_secs(1));
    let mut secs: u64 = 0;
    // sd_notify's watchdog: pinged from this loop, so a stuck controller
    // is noticed (an interval that never fires without one).
    let watchdog = c.notify.watchdog_interval();
    let mut watchdog_tick =
        tokio::time::interval(watchdog.unwrap_or(Duration::from_secs(86_400 * 365)));
    loop {
        tokio::select! {
            a = hibernate::accept_any(&c.or_listeners), if !c.limits.accept_paused() => match a {
                Ok((stream, peer)) => c.accept(stream, peer),
                Err(e) => c.accept_failed(&e),
            },
            _ = tokio::time::sleep(Duration::from_millis(50)), if c.limits.accept_paused_until.is_some() => {}
            Some(m) = rx.recv() => match m {
                ControllerMsg::WorkerFailed { worker, why } => {
                    fatal = Some(format!("worker {worker}: event loop failed: {why}"));
                    break;
                }
                ControllerMsg::Dns(s) => c.on_dns(s, &mut dir),
                ControllerMsg::CreateReachedUs { peer } => {
                    dir.on_create_reached_us(peer, c.cfg.extend_allow_private)
                }
                m => c.on_msg(m),
            },
            a = metrics_http::MetricsPort::accept(&metrics_port) => {
                if let (Ok((stream, peer)), Some(m)) = (a, &metrics_port) {
                    c.conn_stats.metrics_created[tor_metrics::family_of(&peer)] += 1;
                    // Refused before the page is rendered: closed unanswered.
                    if m.admits(peer) {
                        c.take_reports();
                        c.conn_stats.metrics_open = m.serving() + 1;
                        let mut snap = c.metrics_snapshot();
                        snap.dir_diffs = cache.diff_metrics(snap.exit.dir.consensus_diffs);
                        let body = metrics::render(&snap, &c.tor_snapshot(&dir));
                        m.serve(stream, peer, body);
                    }
                }
            }
            Some(ev) = dir_rx.recv() => {
                fatal = c.on_dir_event(&mut dir, ev);
                if fatal.is_some() {
                    break;
                }
            }
            Some(done) = hs_rx.recv() => {
                if let Some(key) = c.hs_dir.on_checked(done, &c.workers) {
                    c.note_onion_seen(key);
                }
                c.check_memory();
            }
            Some(ev) = cache_rx.recv() => {
                if let Some(docs) = cache.on_event(ev) {
                    for w in &c.workers {
                        w.send(CoreMsg::DirDocuments(docs.clone()));
                    }
                }
            }
            m = control_port::next_control(&mut control) => {
                c.take_reports();
                if c.on_control(control.as_mut(), m, &mut dir, &mut hooks.reloader) {
                    break;
                }
            }
            l = control_port::next_log(&mut log_feed) => {
                if let Some(cp) = control.as_mut() {
                    cp.log(&l);
                }
            }
            _ = sighup.recv() => {
                info!("SIGHUP: re-reading the torrc");
                c.reload_now(&mut hooks.reloader, &mut dir);
                if let Some(cp) = control.as_mut() {
                    cp.signal_done(crate::control::Signal::Reload);
                }
            }
            _ = sigusr1.recv() => c.log_dump(),
            _ = watchdog_tick.tick(), if watchdog.is_some() => c.notify.watchdog_ping(),
            _ = tick.tick() => {
                secs += 1;
                c.each_second(secs, &mut dir, &mut cache, control.as_mut(), &state_path);
            }
            _ = sigint.recv() => {
                if c.begin_shutdown(&dir) {
                    break;
                }
            }
            _ = sigterm.recv() => { info!("SIGTERM: shutting down"); break; }
            _ = tokio::time::sleep_until(c.exiting_at.unwrap_or_else(far_future)), if c.exiting_at.is_some() => {
                info!("ShutdownWaitLength has passed: exiting");
                break;
            }
        }
    }
    c.stop(&mut rx, &state_path).await;
    match fatal {
        Some(why) => Err(anyhow::anyhow!(why)),
        None => Ok(()),
    }
}

impl Controller {
    fn new_conn_id(&mut self) -> ConnId {
        let id = self.next_conn_id;
        self.next_conn_id += 1;
        id
    }

    fn accept(&mut self, stream: tokio::net::TcpStream, peer: SocketAddr) {
        let Ok(std) = stream.into_std() else { return };
        let conn_id = self.new_conn_id();
        let family = tor_metrics::family_of(&peer);
        if !self.limits.admit(conn_id, peer.ip(), unix_secs()) {
            self.conn_stats.or_rejected[family] += 1;
            return; // dropping the socket closes it
        }
        self.conn_stats.or_created[0][family] += 1;
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
        let mut m = Some(m);
        let workers = &self.workers;
        let mut to_worker = |w: usize, msg: CoreMsg| {
            if let Some(h) = workers.get(w) {
                h.send(msg);
            }
        };
        self.onion.on_msg(&mut m, &mut to_worker);
        self.conflux.on_msg(&mut m, &mut to_worker);
        let Some(m) = m else { return };
        match m {
            // Handled in the controller's loop (the directory's state, the
            // end of the process).
            ControllerMsg::Dns(_)
            | ControllerMsg::CreateReachedUs { .. }
            | ControllerMsg::WorkerFailed { .. } => {}
            // Handled by the onion-service tables above.
            ControllerMsg::IntroEstablished { .. }
            | ControllerMsg::IntroMoved { .. }
            | ControllerMsg::IntroGone { .. }
            | ControllerMsg::Introduce1 { .. }
            | ControllerMsg::EstablishRendezvous { .. }
            | ControllerMsg::RendezvousGone { .. }
            | ControllerMsg::Rendezvous1 { .. }
            | ControllerMsg::ConfluxLink { .. }
            | ControllerMsg::ConfluxSetGone { .. } => {}
            ControllerMsg::ClientCreate { ip } => {
                self.limits.client_create(ip, unix_secs(), &self.workers)
            }
            ControllerMsg::DirRequest {
                id,
                ip,
                response,
                size,
            } => self.note_dir_request(id, ip, response, size),
            ControllerMsg::DirRequestDone { id } => self.note_dir_request_done(id),
            ControllerMsg::QueueBytes { worker, bytes } => {
                self.limits.set_queued(worker, bytes);
                self.check_memory();
            }
            ControllerMsg::HsDescPost {
                worker,
                stream,
                tag,
                body,
            } => {
                let max = self.ctx.hs_max_desc_size;
                self.hs_dir
                    .on_post(worker, stream, tag, body, max, &self.workers)
            }
            ControllerMsg::OomCandidates {
                round, circuits, ..
            } => self.limits.oom_candidates(round, circuits, &self.workers),
            ControllerMsg::ConnOpened {
                conn_id,
                worker,
                peer,
                canonical,
                outbound,
                addr,
                our_addr_seen,
            } => {
                self.note_address_suggestion(our_addr_seen, &peer, addr);
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
                        outbound,
                        opened: Instant::now(),
                    },
                );
            }
            ControllerMsg::ConnFailed {
                conn_id,
                reason,
                why,
            } => {
                self.limits.closed(conn_id);
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
                                Waiter::LearnAddress => {
                                    info!("cannot reach an authority to learn our address: {why}")
                                }
                            }
                        }
                    }
                }
            }
            ControllerMsg::ConnClosed { conn_id } => {
                self.limits.closed(conn_id);
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
            ControllerMsg::MigrationDone { conn_id, moved } => {
                if self.moves.over(conn_id, moved) {
                    debug!("migration of connection {conn_id} over (moved: {moved})");
                }
            }
            ControllerMsg::WorkerStopped { worker } => {
                warn!("worker {worker} stopped unexpectedly");
            }
            ControllerMsg::WorkerStats {
                worker,
                report,
                cpu_ns,
            } => self.on_worker_stats(worker, &report, cpu_ns),
        }
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
    /// The exit's DNS changed: as C's router.c, `reject *:*` while
    /// `has_dns_init_failed()` or `dns_seems_to_be_broken()`, the torrc's
    /// policy once it works; the workers' admission follows.
    fn on_dns(&mut self, s: crate::resolver::DnsStatus, dir: &mut DirState) {
        if !dir.set_dns(s) {
            return;
        }
        if s.usable() {
            info!("DNS works again (dns resolvers back): the descriptor says the torrc's exit policy again");
        } else if s.broken {
            warn!("DNS is useless: the descriptor says reject *:* and no new stream is admitted until a reload reads a changed name-server configuration");
        } else {
            warn!("DNS does not work (dns resolvers failed): the descriptor says reject *:* and no new stream is admitted until a reload or the retry finds usable name servers");
        }
        self.rebuild_context(dir);
    }

    fn rebuild_context(&mut self, dir: &DirState) -> bool {
        match SharedContext::build(
            &self.keys,
            &self.link,
            our_addrs(&self.cfg),
            &sched_params(&self.cfg, &dir.params),
        ) {
            Ok(ctx) => {
                self.ctx = Arc::new(
                    ctx.with_exit(exit_settings(&self.cfg, Some(dir)), self.resolver.clone())
                        .with_dir_cache(self.ctx.dir_cache)
                        .with_outbound(self.cfg.outbound)
                        .with_hibernating(self.hibernating()),
                );
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
        self.limits.dos = sched_params(&self.cfg, &dir.params).dos;
        if let Some(r) = &self.resolver {
            r.set_params(crate::resolver::DnsParams::from_consensus(&dir.params));
        }
        self.rebuild_context(dir);
    }
}

/// Seconds since the epoch (the DoS table's clock).
fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(86400 * 365)
}
