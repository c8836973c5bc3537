//! The controller's side of the extra-info statistics ([`crate::stats`]):
//! the workers' once-a-second reports feed the byte histories and the
//! rate-limit overloads, the ORPort's accept failures the descriptor
//! exhaustion, and the directory duties get the statistics' lines for
//! each extra-info they build.

use super::{unix_secs, Controller};
use crate::messages::WorkerReport;
use crate::stats::ByteCounts;

impl Controller {
    /// A worker's report: its bytes into the histories (relay connections
    /// and exit streams, as C counts every rate-limited connection), its
    /// empty token buckets into `overload-ratelimits`.
    pub(super) fn note_extra_stats(&mut self, r: &WorkerReport) {
        let now = unix_secs();
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
    }

    /// The ORPort's accept failed: out of file descriptors is noted for
    /// `overload-fd-exhausted` (C's `socket_failed_from_fd_exhaustion`).
    pub(super) fn accept_failed(&mut self, e: &std::io::Error) {
        if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
            self.stats.overload.note_fd_exhausted(unix_secs());
        }
        self.limits.accept_failed(e);
    }

    /// The statistics chunks of the next extra-info.
    pub(super) fn extra_info_chunks(&self) -> Vec<String> {
        self.stats.extra_info_chunks(
            unix_secs(),
            self.cfg.bandwidth_rate,
            self.cfg.bandwidth_burst,
        )
    }
}
