//! The controller's side of the extra-info statistics ([`crate::stats`]):
//! the workers' once-a-second reports feed the byte histories and the
//! rate-limit overloads, the ORPort's accept failures the descriptor
//! exhaustion, the directory streams' consensus requests the
//! directory-request statistics (with C's GeoIP files only, written to
//! `DataDirectory/stats/dirreq-stats` once a day as C does), the cells
//! `padding-counts`, rendezvous cells and stored onion-service
//! descriptors the `hidserv-v3-*` lines (`stats/hidserv-v3-stats`, once a
//! day from the next 12:00 UTC), and the
//! directory duties get the statistics' lines for each extra-info they
//! build.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use tracing::{info, warn};

use super::{unix_secs, Controller};
use crate::context::RelayConfig;
use crate::messages::WorkerReport;
use crate::stats::dirreq::NsResponse;
use crate::stats::geoip::{GeoIp, GeoIpTable};
use crate::stats::hidserv::HsStats;
use crate::stats::padding::PaddingStats;
use crate::stats::{ByteCounts, RelayStats};

fn dirreq_file(data_dir: &Path) -> PathBuf {
    data_dir.join("stats").join("dirreq-stats")
}

fn hidserv_file(data_dir: &Path) -> PathBuf {
    data_dir.join("stats").join("hidserv-v3-stats")
}

/// Write a statistics file (C's `write_to_data_subdir("stats", ...)`).
fn write_stats_file(path: &Path, text: &str) {
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(path, text));
    if let Err(e) = written {
        warn!("cannot write {}: {e}", path.display());
    }
}

/// The statistics at start-up: the byte histories from the state file;
/// with `DirReqStatistics` and the IPv4 GeoIP file (`GeoIPFile`, by
/// default where Debian's tor-geoipdb puts it), directory requests are
/// counted from now (and a `stats/dirreq-stats` a previous run wrote goes
/// into the extra-info while fresh), as C's `options_act_relay_stats`
/// does.
pub(super) fn load_stats(cfg: &RelayConfig, state_path: &Path) -> RelayStats {
    let now = unix_secs();
    let mut stats = RelayStats::load(state_path, now);
    let o = &cfg.stats;
    stats.padding = PaddingStats::new(now, o.padding_interval, o.padding);
    if o.hidserv {
        // C starts counting at the next time period (12:00 UTC); the file
        // a previous run wrote goes into the extra-info while fresh.
        stats.hidserv = Some(HsStats::new(now));
        stats.hidserv_written = std::fs::read_to_string(hidserv_file(&cfg.data_dir)).ok();
    }
    if !o.dirreq {
        return stats;
    }
    let Ok(v4) = std::fs::read_to_string(&o.geoip_file) else {
        info!(
            "no GeoIP file at {}: no directory request statistics (as C Tor without one)",
            o.geoip_file.display()
        );
        return stats;
    };
    let (v4, bad) = GeoIpTable::parse_v4(&v4);
    let v6 = std::fs::read_to_string(&o.geoip6_file)
        .ok()
        .map(|t| GeoIpTable::parse_v6(&t).0);
    info!(
        "GeoIP: {} IPv4 ranges ({bad} lines skipped), {} IPv6 ranges; counting directory requests",
        v4.len(),
        v6.as_ref().map_or(0, GeoIpTable::len)
    );
    let written = std::fs::read_to_string(dirreq_file(&cfg.data_dir)).ok();
    stats.enable_dirreq(GeoIp { v4: Some(v4), v6 }, now, written);
    stats
}

impl Controller {
    /// Read the workers' reports that came since the last call (they do
    /// not wake the controller: an idle relay's workers report once a
    /// second each, and a wake-up for each was most of its context
    /// switches, issue 53).
    pub(super) fn take_reports(&mut self) {
        while let Ok(m) = self.reports.try_recv() {
            self.on_msg(m);
        }
    }

    /// A worker's once-a-second report: the byte counts, its load and
    /// totals, its queues for the memory limit, and the statistics.
    pub(super) fn on_worker_stats(&mut self, worker: usize, report: &WorkerReport, cpu_ns: u64) {
        self.bw.add(report.read_bytes, report.written_bytes);
        self.bw.total_cells += report.cells_relayed;
        if let Some(l) = self.worker_load.get_mut(worker) {
            *l = *report;
        }
        self.note_extra_stats(report);
        if let Some(c) = self.worker_cpu_ns.get_mut(worker) {
            *c = cpu_ns;
        }
        if let Some(t) = self.worker_totals.get_mut(worker) {
            t.add(report, cpu_ns);
        }
        self.limits.set_queued(worker, report.limits.queued_bytes);
        self.check_memory();
        self.limits.note_onionskins(&report.limits);
    }

    /// A worker's report (already in `worker_load`): its bytes into the
    /// histories (relay connections and exit streams, as C counts every
    /// rate-limited connection), its empty token buckets into
    /// `overload-ratelimits`, its cells into `padding-counts` (with the
    /// padding timers pending on all workers now).
    pub(super) fn note_extra_stats(&mut self, r: &WorkerReport) {
        let now = unix_secs();
        let padding = &mut self.stats.padding;
        padding.add(&r.relay.padding.cell_counts(r.relay.drop_cells));
        padding.note_timers(
            self.worker_load
                .iter()
                .map(|w| w.relay.padding.timers_pending)
                .sum(),
        );
        padding.rotate(now);
        self.stats.add_bytes(
            now,
            &ByteCounts {
                read: r.read_bytes + r.exit.bytes_from_dest,
                written: r.written_bytes + r.exit.bytes_to_dest,
                read_v6: r.read_v6_bytes,
                written_v6: r.written_v6_bytes,
                dir_read: r.exit.dir.request_bytes,
                dir_written: r.exit.dir.bytes,
            },
        );
        let [read, write] = r.relay.rate_limit_reached;
        if read > 0 || write > 0 {
            self.stats
                .overload
                .note_rate_limited(now, read > 0, write > 0);
        }
        if let Some(text) = self.stats.dirreq_due(now, self.millis()) {
            write_stats_file(&dirreq_file(&self.cfg.data_dir), &text);
        }
        if let Some(h) = self.stats.hidserv.as_mut() {
            h.note_rend_cells(r.onion.rend_cells, now);
            if let Some(text) = h.due(now) {
                write_stats_file(&hidserv_file(&self.cfg.data_dir), &text);
                self.stats.hidserv_written = Some(text);
            }
        }
    }

    /// The HSDir stored a descriptor for blinded key `key`.
    pub(super) fn note_onion_seen(&mut self, key: [u8; 32]) {
        if let Some(h) = self.stats.hidserv.as_mut() {
            h.note_onion(key, unix_secs());
        }
    }

    /// Milliseconds since the controller started (the directory
    /// downloads' clock).
    fn millis(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// A worker answered a consensus request over BEGIN_DIR.
    pub(super) fn note_dir_request(
        &mut self,
        id: u64,
        ip: Option<IpAddr>,
        response: NsResponse,
        size: u64,
    ) {
        let now = self.millis();
        self.stats.note_dir_request(id, ip, response, size, now);
    }

    /// The consensus of request `id` was sent whole.
    pub(super) fn note_dir_request_done(&mut self, id: u64) {
        let now = self.millis();
        self.stats.note_dir_request_done(id, now);
    }

    /// The ORPort's accept failed: out of file descriptors is noted for
    /// `overload-fd-exhausted` (C's `socket_failed_from_fd_exhaustion`).
    pub(super) fn accept_failed(&mut self, e: &std::io::Error) {
        if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
            self.stats.overload.note_fd_exhausted(unix_secs());
        }
        self.limits.accept_failed(e);
    }

    /// The statistics chunks of the next extra-info (none with
    /// `ExtraInfoStatistics 0`).
    pub(super) fn extra_info_chunks(&self) -> Vec<String> {
        if !self.cfg.stats.extra_info {
            return Vec::new();
        }
        self.stats.extra_info_chunks(
            unix_secs(),
            self.cfg.bandwidth_rate,
            self.cfg.bandwidth_burst,
        )
    }
}
