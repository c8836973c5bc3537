//! The controller's directory-cache duties: whether weft is a cache (C
//! Tor's rules: `DirCache 1`, the default, and an effective bandwidth rate
//! of at least 50 KB/s; a warning under 300 MB of memory), filling it from
//! an authority after each new consensus (weft-dir `cache::fetch`, on the
//! controller's runtime; the snapshot is built and written to
//! DataDirectory on the blocking pool), loading it from disk at start, and
//! handing each snapshot to every worker (`CoreMsg::DirDocuments`, an
//! `Arc` of immutable documents: no lock on any worker). Consensus diffs
//! (`DirCache=2`): when a snapshot serves consensuses the current diffs do
//! not lead to, weft-dir's `cache::diff_store` stores them and makes or
//! loads the diffs to them on the blocking pool; the finished set is put
//! into a copy of the current snapshot and sent to the workers again.
//! [C relay_config.c have_enough_mem_for_dircache(); router.c
//! router_should_be_dirserver(); routermode.c dir_server_mode();
//! consdiffmgr.c consdiffmgr_rescan()]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc::UnboundedSender;
use tracing::{info, warn};
use weft_dir::cache::diff_store::{self, Limits, Report, Target};
use weft_dir::cache::diffs::DiffSet;
use weft_dir::cache::{fetch::fetch_inputs, store, CacheInputs, DirDocuments};
use weft_dir::consensus::{ConsensusFlavor, ConsensusSummary};

use crate::context::{DirAuthority, RelayConfig};

/// C's `MIN_BW_TO_ADVERTISE_DIRSERVER` (bytes/s).
pub const MIN_BW_TO_BE_CACHE: u64 = 51_200;
/// C's `DIRCACHE_MIN_MEM_BYTES`.
const MIN_MEM: u64 = 300 << 20;

/// Whether we serve BEGIN_DIR and say so (`tunnelled-dir-server`), as C
/// Tor decides it: not with accounting that could make us hibernate (our
/// rate would spend AccountingMax before the interval ends), nor under
/// 50 KB/s. Logs C Tor's notices. [C router.c router_should_be_dirserver()]
pub fn should_be_cache(cfg: &RelayConfig) -> bool {
    if !cfg.dir_cache {
        if total_memory().is_some_and(|m| m >= MIN_MEM) {
            warn!("DirCache is disabled and we are configured as a relay. We will not become a Guard.");
        }
        return false;
    }
    let effective = cfg
        .bandwidth_rate
        .min(cfg.max_advertised_bandwidth.unwrap_or(u64::MAX));
    if let Some(a) = cfg
        .accounting
        .filter(|a| a.rule != crate::accounting::Rule::In)
    {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let (start, end) = a.start.period_containing(now);
        let length = (end - start).max(1);
        let budget = if a.rule == crate::accounting::Rule::Sum {
            a.max / 2
        } else {
            a.max
        };
        if effective >= budget / length {
            info!("Not advertising Directory Service support (Reason: AccountingMax enabled)");
            return false;
        }
    }
    if effective < MIN_BW_TO_BE_CACHE {
        info!("Not advertising Directory Service support (Reason: BandwidthRate under 50KB)");
        return false;
    }
    if total_memory().is_some_and(|m| m < MIN_MEM) {
        warn!(
            "Being a directory cache (default) with less than 300 MB of memory is not \
             recommended and may consume most of the available resources. Consider \
             disabling this functionality by setting the DirCache option to 0."
        );
    }
    true
}

fn total_memory() -> Option<u64> {
    let t = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = t
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// A finished fill or load.
#[derive(Debug)]
pub enum CacheEvent {
    /// A snapshot was built (from a fetch, or from disk at start), or the
    /// fetch failed.
    Built(Result<Arc<DirDocuments>, String>),
    /// Consensus diffs were made or loaded for a snapshot's consensuses,
    /// or the store failed.
    Diffs(Result<DiffsMade, String>),
}

/// A finished diff job.
#[derive(Debug)]
pub struct DiffsMade {
    /// The snapshot the diffs lead to.
    based_on: Arc<DirDocuments>,
    /// A copy of it that serves them (made on the blocking pool).
    with_diffs: Arc<DirDocuments>,
    report: Report,
}

/// The consensus diffs' figures for the metrics page.
#[derive(Debug, Default, Clone)]
pub struct DiffMetrics {
    /// Diffs answered, `ns` and `microdesc` (the workers' shared count).
    pub served: [u64; 2],
    /// Diffs offered now, `ns` and `microdesc`.
    pub available: [usize; 2],
    /// Bytes of diffs in memory (every compressed form).
    pub memory_bytes: usize,
    /// Bytes in DataDirectory/diff-cache.
    pub disk_bytes: u64,
    /// The limits in force.
    pub limits: Option<Limits>,
}

/// Whether `set` leads to every consensus `docs` serves.
fn diffs_match(set: &DiffSet, docs: &DirDocuments) -> bool {
    [ConsensusFlavor::Plain, ConsensusFlavor::Microdesc]
        .into_iter()
        .all(|f| {
            docs.consensus(f)
                .is_none_or(|c| set.flavor(f).target_as_signed == c.sha3_as_signed)
        })
}

/// The cache's state on the controller.
pub struct DirCacheState {
    on: bool,
    authorities: Vec<DirAuthority>,
    data_dir: PathBuf,
    tx: UnboundedSender<CacheEvent>,
    docs: Option<Arc<DirDocuments>>,
    busy: bool,
    /// The consensus (valid-after) and own descriptor the last fill used.
    filled_for: Option<(SystemTime, Option<String>)>,
    next_try: Instant,
    testing: bool,
    /// The diffs the current snapshot serves (or will, once put in it).
    diffs: DiffSet,
    /// A diff job runs on the blocking pool.
    diff_busy: bool,
    /// The last diff job's report.
    diff_report: Report,
    diff_limits: Limits,
}

impl DirCacheState {
    /// The cache per `cfg`, `on` as [`should_be_cache`] decided; a cache on
    /// disk is loaded in the background.
    pub fn new(cfg: &RelayConfig, tx: UnboundedSender<CacheEvent>, on: bool) -> Self {
        let s = DirCacheState {
            on,
            authorities: cfg.authorities.clone(),
            data_dir: cfg.data_dir.clone(),
            tx,
            docs: None,
            busy: on,
            filled_for: None,
            next_try: Instant::now(),
            testing: cfg.testing_tor_network,
            diffs: DiffSet::default(),
            diff_busy: false,
            diff_report: Report::default(),
            diff_limits: Limits::default(),
        };
        if on {
            let (dir, trusted, tx) = (s.data_dir.clone(), s.trusted(), s.tx.clone());
            tokio::task::spawn_blocking(move || {
                let built = store::load(&dir, &trusted, SystemTime::now()).map(CacheInputs::build);
                let r = built
                    .map(Arc::new)
                    .ok_or_else(|| "no usable cache on disk".to_owned());
                let _ = tx.send(CacheEvent::Built(r));
            });
        }
        s
    }

    /// We serve BEGIN_DIR.
    pub fn is_on(&self) -> bool {
        self.on
    }

    /// The current snapshot.
    pub fn documents(&self) -> Option<&Arc<DirDocuments>> {
        self.docs.as_ref()
    }

    fn trusted(&self) -> Vec<[u8; 20]> {
        self.authorities.iter().filter_map(|a| a.v3ident).collect()
    }

    /// Fill the cache if the controller has a newer consensus than the
    /// snapshot, or our descriptor changed (called every second).
    pub fn maybe_fill(&mut self, latest: Option<&ConsensusSummary>, own: Option<(String, String)>) {
        if !self.on || self.busy || Instant::now() < self.next_try || self.authorities.is_empty() {
            return;
        }
        let Some(c) = latest else { return };
        let own_desc = own.as_ref().map(|(d, _)| d.clone());
        if self
            .filled_for
            .as_ref()
            .is_some_and(|(va, d)| *va >= c.valid_after && *d == own_desc)
        {
            return;
        }
        let a = &self.authorities[rand::random_range(0..self.authorities.len())];
        let (addr, name) = (a.dir_addr, a.nickname.clone());
        let (trusted, prev, tx) = (self.trusted(), self.docs.clone(), self.tx.clone());
        let dir = self.data_dir.clone();
        self.busy = true;
        self.filled_for = Some((c.valid_after, own_desc));
        tokio::task::spawn_local(async move {
            let now = SystemTime::now();
            let fetched = fetch_inputs(
                addr,
                &trusted,
                prev.as_deref(),
                own,
                now,
                Duration::from_secs(60),
            )
            .await
            .map_err(|e| format!("directory cache fill from {name}: {e}"));
            let r = match fetched {
                Ok(inputs) => tokio::task::spawn_blocking(move || {
                    let docs = inputs.build();
                    if let Err(e) = store::save(&dir, &docs) {
                        warn!("cannot write the directory cache to {}: {e}", dir.display());
                    }
                    Arc::new(docs)
                })
                .await
                .map_err(|e| e.to_string()),
                Err(e) => Err(e),
            };
            let _ = tx.send(CacheEvent::Built(r));
        });
    }

    /// The consensus diffs' figures; `served`: the workers' counts (ns,
    /// microdesc).
    pub fn diff_metrics(&self, served: [u64; 2]) -> DiffMetrics {
        let fl = [ConsensusFlavor::Plain, ConsensusFlavor::Microdesc];
        DiffMetrics {
            served,
            available: fl.map(|f| self.diffs.flavor(f).by_base.len()),
            memory_bytes: self.diffs.size(),
            disk_bytes: self.diff_report.disk_bytes,
            limits: self.on.then_some(self.diff_limits),
        }
    }

    /// Make the diffs to the snapshot's consensuses on the blocking pool,
    /// unless the current ones lead there or a job runs.
    fn maybe_make_diffs(&mut self) {
        let Some(docs) = self.docs.clone() else {
            return;
        };
        if self.diff_busy || diffs_match(&self.diffs, &docs) {
            return;
        }
        self.diff_busy = true;
        let dir = self.data_dir.join(diff_store::DIR_NAME);
        let (limits, tx) = (self.diff_limits, self.tx.clone());
        tokio::task::spawn_blocking(move || {
            let mut texts = Vec::new();
            for f in [ConsensusFlavor::Plain, ConsensusFlavor::Microdesc] {
                if let Some(c) = docs.consensus(f) {
                    match std::str::from_utf8(c.text()) {
                        Ok(t) => texts.push((f, t, c.valid_after)),
                        Err(_) => warn!("a {f:?} consensus is not UTF-8: no diffs to it"),
                    }
                }
            }
            let targets: Vec<Target<'_>> = texts
                .iter()
                .map(|&(flavor, text, valid_after)| Target {
                    flavor,
                    text,
                    valid_after,
                })
                .collect();
            let r = diff_store::update(&dir, &targets, &limits, SystemTime::now())
                .map(|(set, report)| {
                    let mut next = (*docs).clone();
                    next.diffs = set;
                    DiffsMade {
                        based_on: docs.clone(),
                        with_diffs: Arc::new(next),
                        report,
                    }
                })
                .map_err(|e| format!("consensus diffs in {}: {e}", dir.display()));
            let _ = tx.send(CacheEvent::Diffs(r));
        });
    }

    /// A fill or load finished: the new snapshot for the workers, if any.
    pub fn on_event(&mut self, ev: CacheEvent) -> Option<Arc<DirDocuments>> {
        let r = match ev {
            CacheEvent::Built(r) => r,
            CacheEvent::Diffs(r) => return self.on_diffs(r),
        };
        self.busy = false;
        match r {
            Ok(mut docs) => {
                let newer = match (&self.docs, docs.consensus(ConsensusFlavor::Microdesc)) {
                    (Some(old), Some(new)) => old
                        .consensus(ConsensusFlavor::Microdesc)
                        .is_none_or(|o| o.valid_after <= new.valid_after),
                    (_, None) => self.docs.is_none(),
                    (None, Some(_)) => true,
                };
                if !newer {
                    return None;
                }
                info!(
                    "directory cache: {} consensus flavours, {} microdescriptors, {} server \
                     descriptors, {} certificates ({} KB; served as {})",
                    docs.consensus.iter().flatten().count(),
                    docs.microdescs.len(),
                    docs.descs.len(),
                    docs.certs.len(),
                    docs.size() / 1024,
                    store::methods()
                );
                // The same consensuses (our descriptor changed): the
                // diffs stay.
                if diffs_match(&self.diffs, &docs) {
                    Arc::make_mut(&mut docs).diffs = self.diffs.clone();
                }
                self.docs = Some(docs.clone());
                self.maybe_make_diffs();
                Some(docs)
            }
            Err(e) => {
                info!("{e}");
                // Try again soon (a young network has no consensus yet).
                self.filled_for = None;
                self.next_try =
                    Instant::now() + Duration::from_secs(if self.testing { 5 } else { 60 });
                None
            }
        }
    }

    /// A diff job finished: the current snapshot with its diffs, if they
    /// still lead to its consensuses (else a new job starts).
    fn on_diffs(&mut self, r: Result<DiffsMade, String>) -> Option<Arc<DirDocuments>> {
        self.diff_busy = false;
        let made = match r {
            Ok(x) => x,
            Err(e) => {
                warn!("{e}");
                return None;
            }
        };
        self.diff_report = made.report;
        let docs = self.docs.clone()?;
        let set = &made.with_diffs.diffs;
        if !diffs_match(set, &docs) {
            self.maybe_make_diffs();
            return None;
        }
        let report = made.report;
        info!(
            "consensus diffs: {} ns and {} microdesc offered ({} made, {} loaded from disk, \
             {} could not be made; {} KB in memory, {} KB on disk)",
            set.flavor(ConsensusFlavor::Plain).by_base.len(),
            set.flavor(ConsensusFlavor::Microdesc).by_base.len(),
            report.made,
            report.loaded,
            report.failed,
            set.size() / 1024,
            report.disk_bytes / 1024
        );
        self.diffs = set.clone();
        let next = if Arc::ptr_eq(&docs, &made.based_on) {
            made.with_diffs
        } else {
            // Another snapshot of the same consensuses came meanwhile
            // (our descriptor changed): a shallow copy of it.
            let mut next = (*docs).clone();
            next.diffs = self.diffs.clone();
            Arc::new(next)
        };
        self.docs = Some(next.clone());
        Some(next)
    }
}

/// The consensus diffs on the metrics page (weft's names: C Tor exports
/// none for its diff cache).
pub(super) fn render_diffs(o: &mut String, d: &DiffMetrics) {
    use std::fmt::Write as _;

    use super::metrics::family;
    const FLAVORS: [&str; 2] = ["ns", "microdesc"];
    family(
        o,
        "weft_dir_consensus_diffs_served_total",
        "counter",
        "Consensus diffs answered over BEGIN_DIR, by flavor.",
    );
    for (f, v) in FLAVORS.iter().zip(d.served) {
        let _ = writeln!(
            o,
            "weft_dir_consensus_diffs_served_total{{flavor=\"{f}\"}} {v}"
        );
    }
    family(
        o,
        "weft_dir_consensus_diffs",
        "gauge",
        "Consensus diffs offered now (one per older consensus kept), by flavor.",
    );
    for (f, v) in FLAVORS.iter().zip(d.available) {
        let _ = writeln!(o, "weft_dir_consensus_diffs{{flavor=\"{f}\"}} {v}");
    }
    family(
        o,
        "weft_dir_consensus_diff_bytes",
        "gauge",
        "Bytes of consensus diffs held (memory: every compressed form; disk: the diff-cache folder) and their limits.",
    );
    let limits = d.limits.unwrap_or_default();
    for (store, v, max) in [
        ("memory", d.memory_bytes as u64, limits.max_memory as u64),
        ("disk", d.disk_bytes, limits.max_disk),
    ] {
        let _ = writeln!(o, "weft_dir_consensus_diff_bytes{{store=\"{store}\"}} {v}");
        let _ = writeln!(
            o,
            "weft_dir_consensus_diff_bytes{{store=\"{store}_limit\"}} {max}"
        );
    }
}
