//! What a directory event changes outside the directory state
//! ([`super::directory::DirState`]): a consensus requiring a protocol we
//! lack stops weft (C's `networkstatus_check_required_protocols`); new
//! network parameters rebuild the workers' context; a new relay list
//! renews an exit's re-entry set and the address book extends are
//! completed from (`registry.rs`); a self-test's keys launch its circuits;
//! then the next self-test is considered.

use super::directory::{DirEvent, DirState};

impl super::Controller {
    /// Handle `ev`; returns why weft must stop, if it must.
    pub(super) fn on_dir_event(&mut self, dir: &mut DirState, ev: DirEvent) -> Option<String> {
        let out = dir.on_event(ev);
        if out.stop.is_some() {
            // C: log_err and exit(1).
            return out.stop;
        }
        if out.params_changed {
            self.params_changed(dir);
        } else if out.relays_changed && self.resolver.is_some() {
            // An exit's re-entry set follows the consensus.
            self.rebuild_context(dir);
        }
        if out.relays_changed {
            self.note_relays(dir.consensus());
        }
        if let Some((a, b, purpose)) = out.selftest {
            self.launch_selftest(a, b, purpose);
        }
        if let Some((seen, authority)) = out.your_address {
            self.note_your_address(seen, authority);
        }
        dir.maybe_selftest(self.bw.observed(), &|fp| self.connected_to(fp));
        None
    }
}
