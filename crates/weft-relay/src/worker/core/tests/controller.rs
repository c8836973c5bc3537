//! The controller's part in the core tests: its real onion-service tables
//! (auth key → introduction circuit, cookie → rendezvous circuit) and
//! conflux table (nonce → home worker), fed [`Net`]'s messages; what they
//! send goes into the in-memory inboxes.

use super::*;

impl Net {
    /// Give the controller's onion-service and conflux tables their
    /// messages out of `controller`; put what they answer in the inboxes.
    /// True if there were any.
    pub(super) fn onion_controller(&mut self) -> bool {
        let msgs = std::mem::take(&mut self.controller);
        let mut moved = false;
        let inbox = &mut self.inbox;
        let mut to_worker = |w: usize, m: CoreMsg| inbox[w].push(m);
        for m in msgs {
            let mut m = Some(m);
            self.onion.on_msg(&mut m, &mut to_worker);
            self.conflux.on_msg(&mut m, &mut to_worker);
            match m {
                Some(other) => self.controller.push(other),
                None => moved = true,
            }
        }
        moved
    }
}
