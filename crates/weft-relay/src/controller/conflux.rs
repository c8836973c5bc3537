//! Where the legs of a conflux set meet: the controller's table of set
//! nonces and the worker that is each set's home (the worker of the leg
//! whose LINK came first). Only LINKs pass here (one per leg); the set's
//! cells go leg worker → home over the rings. [docs/architecture.md,
//! "Conflux at the exit"]

use std::collections::HashMap;

use tracing::debug;

use crate::messages::ControllerMsg;
use crate::worker::CoreMsg;

/// The controller's conflux table. Sans-IO as [`super::onion::OnionTables`]:
/// messages in, (worker, message) out.
#[derive(Default)]
pub(crate) struct ConfluxTable {
    /// Home worker by set nonce.
    home: HashMap<[u8; 32], u16>,
}

impl ConfluxTable {
    /// Handle `m` if it is a conflux message from a worker (it is taken;
    /// what it causes goes to `out`); anything else is left in place.
    pub(crate) fn on_msg(
        &mut self,
        m: &mut Option<ControllerMsg>,
        out: &mut impl FnMut(usize, CoreMsg),
    ) {
        match m.take() {
            Some(ControllerMsg::ConfluxLink { leg, link }) => {
                let home = *self.home.entry(link.nonce).or_insert(leg.worker);
                debug!("conflux LINK on {leg:?}: set home is worker {home}");
                out(usize::from(home), CoreMsg::ConfluxJoin { leg, link });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::HalfRef;
    use weft_proto::circuit::conflux::Link;

    #[test]
    fn the_first_legs_worker_is_home_until_the_set_is_gone() {
        let mut t = ConfluxTable::default();
        let link = Link {
            nonce: [3; 32],
            last_seqno_sent: 0,
            last_seqno_recv: 0,
            desired_ux: 0,
        };
        let leg = |worker| HalfRef {
            worker,
            slot: 1,
            gen: 1,
        };
        let mut feed = |m: ControllerMsg| {
            let mut out = Vec::new();
            let mut m = Some(m);
            t.on_msg(&mut m, &mut |w, msg| out.push((w, msg)));
            assert!(m.is_none());
            out.into_iter().map(|(w, _)| w).collect::<Vec<_>>()
        };
        assert_eq!(feed(ControllerMsg::ConfluxLink { leg: leg(1), link }), [1]);
        assert_eq!(feed(ControllerMsg::ConfluxLink { leg: leg(0), link }), [1]);
        // A goodbye from a worker that is not home changes nothing.
        feed(ControllerMsg::ConfluxSetGone {
            nonce: link.nonce,
            worker: 0,
        });
        assert_eq!(feed(ControllerMsg::ConfluxLink { leg: leg(0), link }), [1]);
        feed(ControllerMsg::ConfluxSetGone {
            nonce: link.nonce,
            worker: 1,
        });
        assert_eq!(feed(ControllerMsg::ConfluxLink { leg: leg(0), link }), [0]);
    }
}
