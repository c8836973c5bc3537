//! The controller's once-a-second work, run on its tick
//! ([`super::second_timer`]): the workers' reports read, bandwidth
//! history and accounting, the directory's fetches, self-test and
//! republication, the cache's fill, the workers' bandwidth shares and
//! balance, the heartbeat, and the once-a-minute chores (onion-service
//! descriptors' expiry, the DoS table, the state file, key rotation, the
//! address check).

use std::path::Path;

use super::control_port::ControlPorts;
use super::dir_cache::DirCacheState;
use super::directory::DirState;
use super::{unix_secs, Controller};
use crate::bwhist;

impl Controller {
    /// Second `secs` since the start has come.
    pub(super) fn each_second(
        &mut self,
        secs: u64,
        dir: &mut DirState,
        cache: &mut DirCacheState,
        control: Option<&mut ControlPorts>,
        state_path: &Path,
    ) {
        self.take_reports();
        self.bw.tick(bwhist::today());
        self.account(dir);
        if let Some(cp) = control {
            cp.tick(self.bw.total_read, self.bw.total_written);
        }
        dir.maybe_fetch_consensus();
        dir.maybe_selftest(self.bw.observed(), &|fp| self.connected_to(fp));
        cache.maybe_fill(dir.consensus(), dir.own_documents());
        self.rebalance_bandwidth();
        self.balance(secs);
        if secs.is_multiple_of(10) {
            dir.set_overload(self.limits.overload_line());
            dir.set_extra_stats(self.extra_info_chunks());
            dir.maybe_republish(&self.keys, self.started, self.bw.observed());
        }
        if self
            .cfg
            .heartbeat_period
            .is_some_and(|p| secs.is_multiple_of(p.as_secs().max(1)))
        {
            self.log_heartbeat();
        }
        if secs.is_multiple_of(60) {
            self.hs_dir.clean(&self.workers);
            self.limits.clients.expire(unix_secs());
            self.save_state(state_path);
            self.rotate_if_due(dir);
            self.check_address(dir);
        }
    }
}
