//! The controller's side of the resource limits: the DoS table of client
//! addresses (connections refused at accept, addresses whose CREATE cells
//! the workers refuse), `ConnLimit` and file-descriptor exhaustion at
//! accept, and the global memory limit: the workers' queued bytes added up,
//! and over `MaxMemInQueues` an OOM round — every worker lists its circuits
//! by the age of their oldest queued cell, one cutoff is chosen over all of
//! them ([`crate::oom::cutoff_age`]) and every worker closes its circuits
//! at least that old. Also the `overload-general` time for the descriptor.
//! [C dos.c, circuitlist.c circuits_handle_oom(), connection.c,
//! rephist.c rep_hist_note_overload()]

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant, SystemTime};

use tracing::{info, warn};

use crate::dos::{AcceptVerdict, ClientTable, DosParams};
use crate::messages::ConnId;
use crate::oom;
use crate::worker::{CoreMsg, WorkerHandle};

/// Pause accepting this long after the process ran out of file
/// descriptors (keeps the old connections, refuses new ones).
const FD_EXHAUSTED_PAUSE: Duration = Duration::from_millis(250);
/// File descriptors kept free of connections (C Tor's `ULIMIT_BUFFER`).
pub(super) const ULIMIT_BUFFER: u64 = 32;
/// An OOM round not answered by every worker within this is abandoned.
const OOM_ROUND_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the descriptor says `overload-general` after an overload.
const OVERLOAD_LINE_FOR: Duration = Duration::from_secs(72 * 3600);

/// An OOM round in progress.
struct OomRound {
    round: u64,
    started: Instant,
    waiting: usize,
    to_recover: u64,
    circuits: Vec<(u64, u64)>,
}

/// The controller's limits (see the module docs).
pub(super) struct Limits {
    /// DoS parameters in force.
    pub(super) dos: DosParams,
    /// The client-address table.
    pub(super) clients: ClientTable,
    /// Accepted connections and their address (for the concurrent count).
    accepted: HashMap<ConnId, IpAddr>,
    /// Connections open or being opened, accepted and ours.
    pub(super) open_conns: u64,
    /// Most connections we may hold (file descriptors minus a buffer).
    pub(super) max_conns: u64,
    /// Accepting is paused until then (file descriptors exhausted).
    pub(super) accept_paused_until: Option<Instant>,
    /// The last time we said we were out of file descriptors.
    fd_warned: Option<Instant>,
    /// MaxMemInQueues.
    pub(super) max_mem: u64,
    /// Queued bytes per worker, as last reported.
    queued: Vec<u64>,
    /// Bytes of the HSDir's descriptor cache (counted with the queues, as
    /// C's `cell_queues_check_size` counts `hs_cache_get_total_allocation`).
    pub(super) hs_dir_bytes: u64,
    oom: Option<OomRound>,
    next_round: u64,
    /// OOM rounds that closed circuits.
    pub(super) oom_rounds: u64,
    /// When we were last overloaded, at the start of its hour (for the
    /// descriptor's `overload-general`).
    pub(super) overloaded_at: Option<SystemTime>,
    /// CREATE2 handshakes (requested, dropped) in the current assessment
    /// period, and when it ends.
    onionskins: (u64, u64, Option<Instant>),
}

/// C Tor's onionskin overload assessment: over 6 h, at least 1000
/// requests of which 1% or more dropped. [C rephist.c
/// overload_general_onionskin_assessment()]
const ONIONSKIN_PERIOD: Duration = Duration::from_secs(6 * 3600);
const ONIONSKIN_MIN_REQUESTS: u64 = 1000;
const ONIONSKIN_DROP_FRACTION: f64 = 0.01;

impl Limits {
    pub(super) fn new(dos: DosParams, max_mem: u64, max_conns: u64, workers: usize) -> Self {
        Limits {
            dos,
            clients: ClientTable::default(),
            accepted: HashMap::new(),
            open_conns: 0,
            max_conns,
            accept_paused_until: None,
            fd_warned: None,
            max_mem,
            queued: vec![0; workers],
            hs_dir_bytes: 0,
            oom: None,
            next_round: 1,
            oom_rounds: 0,
            overloaded_at: None,
            onionskins: (0, 0, None),
        }
    }

    /// A worker's handshake counters: at the end of each period, a drop
    /// share of 1% or more of enough requests is a general overload.
    pub(super) fn note_onionskins(&mut self, r: &crate::messages::LimitReport) {
        let now = Instant::now();
        let (req, drop, end) = &mut self.onionskins;
        let end = *end.get_or_insert(now + ONIONSKIN_PERIOD);
        if now >= end {
            let (q, d) = (*req, *drop);
            if q >= ONIONSKIN_MIN_REQUESTS && d as f64 / q as f64 >= ONIONSKIN_DROP_FRACTION {
                warn!("general overload: {d} of {q} CREATE2 handshakes dropped in the last 6 h");
                self.note_overload();
            }
            self.onionskins = (0, 0, Some(now + ONIONSKIN_PERIOD));
        }
        let (req, drop, _) = &mut self.onionskins;
        let dropped: u64 = r.onionskins_dropped.iter().sum();
        *req += r.onionskins_processed.iter().sum::<u64>() + dropped;
        *drop += dropped;
    }

    /// Queued bytes over all workers.
    pub(super) fn queued_total(&self) -> u64 {
        self.queued.iter().sum()
    }

    /// A connection from `ip` arrived: take it (and count it) or refuse it.
    pub(super) fn admit(&mut self, conn_id: ConnId, ip: IpAddr, now_s: u64) -> bool {
        if self.open_conns >= self.max_conns {
            warn!(
                "refusing a connection from {ip}: we have {} connections already (ConnLimit and the file descriptors allow {})",
                self.open_conns, self.max_conns
            );
            return false;
        }
        match self.clients.on_accept(&self.dos, ip, now_s, rand::random()) {
            AcceptVerdict::Accept => {
                self.accepted.insert(conn_id, ip);
                self.open_conns += 1;
                true
            }
            v => {
                tracing::debug!("DoS: refusing a connection from {ip}: {v:?}");
                false
            }
        }
    }

    /// A connection we open ourselves (an extend, the self-test).
    pub(super) fn outbound_opening(&mut self) -> bool {
        if self.open_conns >= self.max_conns {
            return false;
        }
        self.open_conns += 1;
        true
    }

    /// Connection `conn_id` closed (or failed to open).
    pub(super) fn closed(&mut self, conn_id: ConnId) {
        self.open_conns = self.open_conns.saturating_sub(1);
        if let Some(ip) = self.accepted.remove(&conn_id) {
            self.clients.on_close(ip);
        }
    }

    /// The listener failed: out of file descriptors pauses accepting (old
    /// connections go on); anything else is logged.
    pub(super) fn accept_failed(&mut self, e: &std::io::Error) {
        let now = Instant::now();
        let exhausted = matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
        if exhausted {
            // C Tor counts this as `overload-fd-exhausted` (extra-info),
            // not as a general overload.
            self.accept_paused_until = Some(now + FD_EXHAUSTED_PAUSE);
            if self
                .fd_warned
                .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(60))
            {
                self.fd_warned = Some(now);
                warn!(
                    "out of file descriptors ({e}): refusing new connections for now, keeping the {} open ones; raise `ulimit -n`",
                    self.open_conns
                );
            }
        } else {
            warn!("accept failed: {e}");
        }
    }

    /// True while accepting is paused.
    pub(super) fn accept_paused(&mut self) -> bool {
        match self.accept_paused_until {
            Some(t) if Instant::now() < t => true,
            Some(_) => {
                self.accept_paused_until = None;
                false
            }
            None => false,
        }
    }

    /// A CREATE from a client connection of `ip`: mark the address on
    /// every worker if it is newly exhausted.
    pub(super) fn client_create(&mut self, ip: IpAddr, now_s: u64, workers: &[WorkerHandle]) {
        if let Some(secs) = self.clients.on_create(&self.dos, ip, now_s, rand::random()) {
            info!("DoS: {ip} creates circuits too fast; its CREATE cells are refused for {secs}s");
            for w in workers {
                w.send(CoreMsg::DosMark { ip, secs });
            }
        }
    }

    /// Worker `w` reports `bytes` queued (then [`Limits::check`]).
    pub(super) fn set_queued(&mut self, w: usize, bytes: u64) {
        if let Some(q) = self.queued.get_mut(w) {
            *q = bytes;
        }
    }

    /// Over the limit (queues and descriptors), start an OOM round.
    pub(super) fn check(&mut self, workers: &[WorkerHandle]) {
        let total = self.queued_total() + self.hs_dir_bytes;
        let to_recover = oom::to_recover(total, self.max_mem);
        // A round whose answers never all came (a worker stopped) gives way.
        if self
            .oom
            .as_ref()
            .is_some_and(|r| r.started.elapsed() > OOM_ROUND_TIMEOUT)
        {
            self.oom = None;
        }
        if to_recover == 0 || self.oom.is_some() {
            return;
        }
        self.note_overload();
        warn!(
            "we're low on memory: cell queues and onion-service descriptors hold {} MiB, MaxMemInQueues is {} MiB; closing the circuits with the oldest queued cells",
            total >> 20,
            self.max_mem >> 20
        );
        let round = self.next_round;
        self.next_round += 1;
        self.oom = Some(OomRound {
            round,
            started: Instant::now(),
            waiting: workers.len(),
            to_recover,
            circuits: Vec::new(),
        });
        for w in workers {
            w.send(CoreMsg::OomQuery { round });
        }
    }

    /// A worker's answer to an OOM round; once all answered, pick the
    /// cutoff and have every worker close its circuits at least that old.
    pub(super) fn oom_candidates(
        &mut self,
        round: u64,
        circuits: Vec<(u64, u64)>,
        workers: &[WorkerHandle],
    ) {
        let Some(r) = self.oom.as_mut().filter(|r| r.round == round) else {
            return;
        };
        r.circuits.extend(circuits);
        r.waiting = r.waiting.saturating_sub(1);
        if r.waiting > 0 {
            return;
        }
        let Some(mut r) = self.oom.take() else { return };
        if let Some(min_age_ns) = oom::cutoff_age(&mut r.circuits, r.to_recover) {
            self.oom_rounds += 1;
            for w in workers {
                w.send(CoreMsg::OomKill { min_age_ns });
            }
        }
    }

    /// Note an overload (for `overload-general`): at the start of the hour,
    /// as C Tor.
    pub(super) fn note_overload(&mut self) {
        let now = SystemTime::now();
        let secs = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        self.overloaded_at = Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs - secs % 3600));
    }

    /// The `overload-general` time to publish, if within the last 72 h.
    pub(super) fn overload_line(&self) -> Option<SystemTime> {
        self.overloaded_at
            .filter(|t| t.elapsed().map(|e| e < OVERLOAD_LINE_FOR).unwrap_or(true))
    }
}

/// MaxMemInQueues in force: the configured value (at least 64 MiB), or C
/// Tor's default for this machine's memory.
pub(super) fn max_mem_in_queues(configured: Option<u64>) -> u64 {
    match configured {
        Some(v) => oom::configured_limit(v),
        None => {
            let ram = std::fs::read_to_string("/proc/meminfo")
                .ok()
                .and_then(|t| oom::total_ram_from_meminfo(&t));
            oom::default_limit(ram)
        }
    }
}

/// Raise the soft file-descriptor limit to the hard one, as C Tor does, and
/// check `ConnLimit` against it. Returns the limit.
pub(super) fn raise_fd_limit(conn_limit: u64) -> anyhow::Result<u64> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write/read the rlimit we own; the
    // resource is a valid constant. Exercised by every start of weft
    // (tests/faults.rs checks the ConnLimit refusal).
    let limit = unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) != 0 {
            return Ok(conn_limit.max(1024));
        }
        if rl.rlim_cur < rl.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: rl.rlim_max,
                rlim_max: rl.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                rl.rlim_cur = rl.rlim_max;
            }
        }
        rl.rlim_cur
    };
    if limit < conn_limit {
        anyhow::bail!(
            "we need {conn_limit} file descriptors available (ConnLimit), and we're limited to {limit}; please change your ulimit -n"
        );
    }
    Ok(limit)
}
