//! The HSDir's store, owned by the controller (C Tor's `hs_cache.c` "as
//! dir"): uploads arrive from the workers' directory streams
//! (`ControllerMsg::HsDescPost`), are checked on tokio's blocking pool
//! (outer layer, certificate and signature: weft-dir's
//! `hs_cache::check_descriptor`; a few at a time, the rest wait in a
//! bounded line), then stored here (the revision counter decides) and the
//! status goes back to the stream's worker (`CoreMsg::HsDescPosted`).
//! Every change goes to every worker as an `HsDirUpdate`, so fetches are
//! answered on the workers from their own copies, with no message per
//! request. Expired descriptors are removed every minute
//! (`cache_clean_v3_as_dir`); under memory pressure the oldest go first
//! (`hs_cache_handle_oom`, called from the memory limit's check).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::mpsc::UnboundedSender;
use tracing::{debug, info};
use weft_dir::hs_cache::http::PostAnswer;
use weft_dir::hs_cache::parse::REFUSED_LABELS;
use weft_dir::hs_cache::{
    check_descriptor, CheckedDescriptor, HsDirCache, HsDirUpdate, Refused, OOM_STEP_SECS,
    OOM_STEP_SECS_TESTING,
};

use crate::worker::{CoreMsg, WorkerHandle};

/// Uploads checked at once on the blocking pool.
const MAX_CHECKING: usize = 4;
/// Uploads waiting for a check; beyond this (or [`MAX_WAITING_BYTES`]) an
/// upload is answered 503 at once (C Tor checks each upload as it
/// arrives, on its only thread; weft bounds what waits).
const MAX_WAITING: usize = 256;
/// Bytes of uploads waiting for a check.
const MAX_WAITING_BYTES: usize = 16 << 20;

/// Where an upload's answer goes.
#[derive(Debug, Clone, Copy)]
struct ReplyTo {
    worker: usize,
    stream: usize,
    tag: u64,
}

/// A check done on the blocking pool.
#[derive(Debug)]
pub(super) struct Checked {
    reply: ReplyTo,
    result: Result<CheckedDescriptor, Refused>,
}

/// The HSDir's counters for the MetricsPort.
#[derive(Debug, Default, Clone, Copy)]
pub struct HsDirMetrics {
    /// Uploads stored.
    pub stored: u64,
    /// Uploads refused after their check, by
    /// [`weft_dir::hs_cache::parse::REFUSED_LABELS`].
    pub refused: [u64; 6],
    /// Uploads answered 503 because too many waited.
    pub busy: u64,
    /// Descriptors held.
    pub descriptors: u64,
    /// Bytes counted in MaxMemInQueues.
    pub bytes: u64,
    /// Descriptors removed: expired, and freed under memory pressure.
    pub expired: u64,
    /// See `expired`.
    pub oom_removed: u64,
}

/// The controller's HSDir state (see the module docs).
pub(super) struct HsDirState {
    cache: HsDirCache,
    checking: usize,
    waiting: VecDeque<(ReplyTo, Vec<u8>, usize)>,
    waiting_bytes: usize,
    done: UnboundedSender<Checked>,
    testing: bool,
    metrics: HsDirMetrics,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl HsDirState {
    /// A new, empty store; checks report on `done`.
    pub(super) fn new(done: UnboundedSender<Checked>, testing: bool) -> Self {
        HsDirState {
            cache: HsDirCache::default(),
            checking: 0,
            waiting: VecDeque::new(),
            waiting_bytes: 0,
            done,
            testing,
            metrics: HsDirMetrics::default(),
        }
    }

    /// Bytes the store holds (counted in MaxMemInQueues).
    pub(super) fn bytes(&self) -> u64 {
        self.cache.bytes()
    }

    /// The MetricsPort's figures.
    pub(super) fn metrics(&self) -> HsDirMetrics {
        HsDirMetrics {
            descriptors: self.cache.len() as u64,
            bytes: self.cache.bytes(),
            ..self.metrics
        }
    }

    /// An upload from a worker's stream, with the size limit in force.
    pub(super) fn on_post(
        &mut self,
        worker: usize,
        stream: usize,
        tag: u64,
        body: Vec<u8>,
        max_len: usize,
        workers: &[WorkerHandle],
    ) {
        let reply = ReplyTo {
            worker,
            stream,
            tag,
        };
        if self.waiting.len() >= MAX_WAITING || self.waiting_bytes + body.len() > MAX_WAITING_BYTES
        {
            self.metrics.busy += 1;
            return answer(workers, reply, PostAnswer::Busy);
        }
        self.waiting_bytes += body.len();
        self.waiting.push_back((reply, body, max_len));
        self.start_checks();
    }

    fn start_checks(&mut self) {
        while self.checking < MAX_CHECKING {
            let Some((reply, body, max_len)) = self.waiting.pop_front() else {
                return;
            };
            self.waiting_bytes -= body.len();
            self.checking += 1;
            let done = self.done.clone();
            tokio::task::spawn_blocking(move || {
                let result = check_descriptor(&body, max_len, SystemTime::now());
                let _ = done.send(Checked { reply, result });
            });
        }
    }

    /// A check finished: store the descriptor (if its revision counter is
    /// above the cached one's), answer the stream, tell every worker.
    /// Returns the blinded key of a descriptor stored (for the
    /// `hidserv-dir-v3-onions-seen` statistics).
    pub(super) fn on_checked(&mut self, c: Checked, workers: &[WorkerHandle]) -> Option<[u8; 32]> {
        self.checking = self.checking.saturating_sub(1);
        self.start_checks();
        let result = c.result.and_then(|d| self.cache.store(d, unix_now()));
        match result {
            Ok(update) => {
                self.metrics.stored += 1;
                let mut stored = None;
                if let HsDirUpdate::Stored { key, .. } = &update {
                    info!(
                        "Publish request for HS descriptor handled successfully ({})",
                        key_b64(key)
                    );
                    stored = Some(*key);
                }
                broadcast(workers, update);
                answer(workers, c.reply, PostAnswer::Stored);
                stored
            }
            Err(why) => {
                info!("HS descriptor upload refused: {why}");
                if let Some(i) = REFUSED_LABELS.iter().position(|l| *l == why.label()) {
                    self.metrics.refused[i] += 1;
                }
                answer(workers, c.reply, PostAnswer::Refused);
                None
            }
        }
    }

    /// Remove the descriptors whose lifetime has passed (every minute; C
    /// does it every half hour, and serves nothing expired either way:
    /// each worker checks the expiry as it answers).
    pub(super) fn clean(&mut self, workers: &[WorkerHandle]) {
        let (_, update) = self.cache.clean(unix_now(), None);
        if let Some(u) = update {
            if let HsDirUpdate::Removed(keys) = &u {
                self.metrics.expired += keys.len() as u64;
                debug!(
                    "removed {} expired v3 descriptors from the HSDir cache",
                    keys.len()
                );
            }
            broadcast(workers, u);
        }
    }

    /// C's `cell_queues_check_size`: with the process over MaxMemInQueues
    /// and more than a fifth of it in descriptors, free them, oldest first,
    /// down to a tenth. Returns the bytes freed.
    pub(super) fn handle_oom(&mut self, max_mem: u64, workers: &[WorkerHandle]) -> u64 {
        let held = self.cache.bytes();
        if held <= max_mem / 5 {
            return 0;
        }
        let step = if self.testing {
            OOM_STEP_SECS_TESTING
        } else {
            OOM_STEP_SECS
        };
        let (freed, keys) = self.cache.handle_oom(unix_now(), held - max_mem / 10, step);
        if !keys.is_empty() {
            info!(
                "low on memory: removed {} v3 descriptors ({} KB) from the HSDir cache",
                keys.len(),
                freed >> 10
            );
            self.metrics.oom_removed += keys.len() as u64;
            broadcast(workers, HsDirUpdate::Removed(keys));
        }
        freed
    }
}

impl super::Controller {
    /// The memory limit's check (C's `cell_queues_check_size`): the
    /// workers' queues and the HSDir's descriptors together; over the
    /// limit, descriptors go first if they hold more than a fifth of it,
    /// then circuits.
    pub(super) fn check_memory(&mut self) {
        let max = self.limits.max_mem;
        if self.limits.queued_total() + self.hs_dir.bytes() >= max {
            self.hs_dir.handle_oom(max, &self.workers);
        }
        self.limits.hs_dir_bytes = self.hs_dir.bytes();
        self.limits.check(&self.workers);
    }
}

fn answer(workers: &[WorkerHandle], r: ReplyTo, answer: PostAnswer) {
    if let Some(w) = workers.get(r.worker) {
        w.send(CoreMsg::HsDescPosted {
            stream: r.stream,
            tag: r.tag,
            answer,
        });
    }
}

fn broadcast(workers: &[WorkerHandle], u: HsDirUpdate) {
    let u = Arc::new(u);
    for w in workers {
        w.send(CoreMsg::HsDirUpdate(u.clone()));
    }
}

fn key_b64(key: &[u8; 32]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD_NO_PAD.encode(key)
}

/// The HSDir's MetricsPort families: the controller's store and the
/// workers' fetch counters.
pub(super) fn render(o: &mut String, m: &HsDirMetrics, dir: &crate::messages::DirCounters) {
    use std::fmt::Write as _;

    use super::metrics::family;
    family(
        o,
        "weft_hsdir_stores_total",
        "counter",
        "Onion-service descriptor uploads (v3), by result.",
    );
    let _ = writeln!(
        o,
        "weft_hsdir_stores_total{{result=\"stored\"}} {}",
        m.stored
    );
    for (label, v) in REFUSED_LABELS.iter().zip(m.refused) {
        let _ = writeln!(o, "weft_hsdir_stores_total{{result=\"{label}\"}} {v}");
    }
    let _ = writeln!(o, "weft_hsdir_stores_total{{result=\"busy\"}} {}", m.busy);
    let at_worker = ["single_hop", "too_large_announced", "bad_url"];
    for (label, v) in at_worker.iter().zip(dir.hs_posts_refused) {
        let _ = writeln!(o, "weft_hsdir_stores_total{{result=\"{label}\"}} {v}");
    }
    family(
        o,
        "weft_hsdir_fetches_total",
        "counter",
        "Onion-service descriptor fetches (v3), by result.",
    );
    for (label, v) in ["hit", "miss", "single_hop"].iter().zip(dir.hs_fetches) {
        let _ = writeln!(o, "weft_hsdir_fetches_total{{result=\"{label}\"}} {v}");
    }
    family(
        o,
        "weft_hsdir_descriptors",
        "gauge",
        "Onion-service descriptors held.",
    );
    let _ = writeln!(o, "weft_hsdir_descriptors {}", m.descriptors);
    family(
        o,
        "weft_hsdir_cache_bytes",
        "gauge",
        "Bytes of the onion-service descriptor cache, counted in MaxMemInQueues.",
    );
    let _ = writeln!(o, "weft_hsdir_cache_bytes {}", m.bytes);
    family(
        o,
        "weft_hsdir_removed_total",
        "counter",
        "Onion-service descriptors removed, by reason.",
    );
    let _ = writeln!(
        o,
        "weft_hsdir_removed_total{{reason=\"expired\"}} {}",
        m.expired
    );
    let _ = writeln!(
        o,
        "weft_hsdir_removed_total{{reason=\"oom\"}} {}",
        m.oom_removed
    );
}
