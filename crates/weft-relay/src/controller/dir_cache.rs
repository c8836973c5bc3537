//! The controller's directory-cache duties: whether weft is a cache (C
//! Tor's rules: `DirCache 1`, the default, and an effective bandwidth rate
//! of at least 50 KB/s; a warning under 300 MB of memory), filling it from
//! an authority after each new consensus (weft-dir `cache::fetch`, on the
//! controller's runtime; the snapshot is built and written to
//! DataDirectory on the blocking pool), loading it from disk at start, and
//! handing each snapshot to every worker (`CoreMsg::DirDocuments`, an
//! `Arc` of immutable documents: no lock on any worker).
//! [C relay_config.c have_enough_mem_for_dircache(); router.c
//! router_should_be_dirserver(); routermode.c dir_server_mode()]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc::UnboundedSender;
use tracing::{info, warn};
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

    /// A fill or load finished: the new snapshot for the workers, if any.
    pub fn on_event(&mut self, ev: CacheEvent) -> Option<Arc<DirDocuments>> {
        let CacheEvent::Built(r) = ev;
        self.busy = false;
        match r {
            Ok(docs) => {
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
                self.docs = Some(docs.clone());
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
}
