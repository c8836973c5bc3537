//! Where the legs of a conflux set meet: the controller's table of set
//! nonces and the worker that is each set's home (the worker of the leg
//! whose LINK came first). Only LINKs pass here (one per leg); the set's
//! cells go leg worker → home over the rings. [docs/architecture.md,
//! "Conflux at the exit"]

use std::collections::HashMap;

use tracing::debug;

use crate::messages::ControllerMsg;
use crate::worker::{WorkerHandle, WorkerMsg};

/// The controller's conflux table.
#[derive(Default)]
pub(super) struct ConfluxTable {
    /// Home worker by set nonce.
    home: HashMap<[u8; 32], u16>,
}

impl ConfluxTable {
    /// Handle `m` if it is a conflux message from a worker (it is taken);
    /// anything else is left in place.
    pub(super) fn on_msg(&mut self, m: &mut Option<ControllerMsg>, workers: &[WorkerHandle]) {
        match m.take() {
            Some(ControllerMsg::ConfluxLink { leg, link }) => {
                let home = *self.home.entry(link.nonce).or_insert(leg.worker);
                debug!("conflux LINK on {leg:?}: set home is worker {home}");
                if let Some(w) = workers.get(usize::from(home)) {
                    w.send(WorkerMsg::ConfluxJoin { leg, link });
                }
            }
            Some(ControllerMsg::ConfluxSetGone { nonce, worker }) => {
                if self.home.get(&nonce) == Some(&worker) {
                    self.home.remove(&nonce);
                }
            }
            other => *m = other,
        }
    }
}
