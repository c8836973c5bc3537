//! The way to the other workers, in the circuit core: one [`Lane`] per
//! other worker, and each circuit half's own queue of cells waiting to
//! cross ([`HalfCrossing`]).
//!
//! A lane is the producer end of the ring to that worker, its *ordered
//! line* and its *waiting circuits*:
//!
//! * A cell a half hands to a peer on another worker goes straight into
//!   the ring when the ring has room and nothing of that lane waits. Else
//!   it waits in the half's own crossing queue (pool slots, like every
//!   queued cell: counted in MaxMemInQueues, listed for the memory
//!   limit's choice of victims, bounded per circuit as C's circuit queues
//!   are), and the connection it was read from goes on reading the cells
//!   of its other circuits: no circuit waits behind another's at a full
//!   ring. (A connection every circuit of which has cells waiting reads
//!   nothing more until one has none:
//!   [`crate::worker::core::Circuits::read_paused`].)
//! * The halves with waiting cells are the lane's waiting circuits, in
//!   EWMA order ([`crate::ewma`], as C's `circuitmux_ewma` orders a
//!   channel's circuits): ring room goes to the quietest first, one cell at
//!   a time. A cell that went straight through is charged to its circuit
//!   all the same, so a bulk circuit that starts to wait does not look
//!   quiet. Each half's count for its lane is its own (the direction
//!   toward its peer), apart from the count of its connection's mux (the
//!   direction it writes).
//! * Messages that keep their order with the cells around them but are no
//!   cell a half read for its peer — links, CREATED2, migration markers,
//!   onion-service and conflux messages — go through the ordered line,
//!   which is placed before any waiting circuit, and while it is not empty
//!   no cell goes straight to the ring. So a message sent after a
//!   circuit's cells for that ring does not overtake any of them that went
//!   straight through, and a cell sent after a message never overtakes it.
//!   (Only a circuit's *waiting* cells can be overtaken by a later
//!   message, and no message concerns a circuit's waiting cells: a peer
//!   that moves takes them along — [`crate::worker::core::migrate`].)
//!
//! The lanes are served ([`crate::worker::core::Circuits::serve_lanes`])
//! after the inbound rings are read each round and before the outbound
//! ones are published.

use std::collections::VecDeque;

use crate::ewma::{CircuitEwma, EwmaMux};
use crate::messages::RingMsg;
use crate::pool::CellQueue;
use crate::ring::Producer;

/// No lane.
pub(crate) const NO_LANE: u16 = u16::MAX;

/// Entries (536 bytes each) an empty ordered line keeps allocated.
const ORDERED_KEPT: usize = 64;
/// Blocks of room a ring keeps beside those in use
/// ([`crate::ring::Producer::shrink`]).
const RING_BLOCKS_KEPT: usize = 2;
/// Once-a-second passes without growth before a ring gives blocks back.
const RING_QUIET_PASSES: u32 = 10;

/// A half's cells waiting for room on the ring to its peer's worker, and
/// its EWMA count on that ring. Boxed in the half and made at its first
/// cell for another worker (most halves never cross, and a half's slot
/// stays small).
pub(crate) struct HalfCrossing {
    /// Cells for the peer, oldest first (without the peer's layer: the
    /// keyed half adds it where it queues them).
    pub(crate) queue: CellQueue,
    /// Its count on its lane's mux.
    pub(crate) ewma: CircuitEwma,
    /// The lane whose waiting circuits list it, while cells wait
    /// ([`NO_LANE`] when none do).
    pub(crate) lane: u16,
    /// Its conflux messages waiting in an ordered line for its set's home
    /// (a leg's cells are messages to the set, not cells for a peer):
    /// bounded by the circuit queue limit like its crossing queue.
    pub(crate) ordered: u32,
}

impl HalfCrossing {
    /// Nothing waiting, nothing counted.
    pub(crate) fn new() -> HalfCrossing {
        HalfCrossing {
            queue: CellQueue::default(),
            ewma: CircuitEwma::default(),
            lane: NO_LANE,
            ordered: 0,
        }
    }
}

/// The way to one other worker (see the module docs).
pub(crate) struct Lane {
    /// The ring's producer end (None: no ring, this is us).
    pub(crate) ring: Option<Producer<RingMsg>>,
    /// Ordered messages the ring could not take yet, in order.
    pub(crate) ordered: VecDeque<RingMsg>,
    /// Half slots with cells in their crossing queue, in EWMA order.
    pub(crate) waiting: EwmaMux,
    /// This round's EWMA weight of a cell ([`EwmaMux::weight`]).
    pub(crate) weight: f64,
    /// The ring's blocks at the last once-a-second pass, and the passes
    /// since it last grew.
    ring_blocks: usize,
    ring_quiet: u32,
}

impl Lane {
    /// Nothing waits.
    pub(crate) fn is_idle(&self) -> bool {
        self.ordered.is_empty() && self.waiting.is_empty()
    }
}

/// Every lane of a worker (indexed by the other worker) and the cells
/// waiting in the halves' crossing queues.
pub(crate) struct Lanes {
    pub(crate) lanes: Vec<Lane>,
    /// Cells in crossing queues, all halves.
    pub(crate) cells: usize,
}

impl Lanes {
    /// One lane per ring producer (`None` where there is no ring), with
    /// EWMA half-life `halflife_s` (≤ 0: round robin).
    pub(crate) fn new(outs: Vec<Option<Producer<RingMsg>>>, halflife_s: f64) -> Lanes {
        Lanes {
            lanes: outs
                .into_iter()
                .map(|ring| Lane {
                    ring,
                    ordered: VecDeque::new(),
                    waiting: EwmaMux::new(halflife_s),
                    weight: 1.0,
                    ring_blocks: 0,
                    ring_quiet: 0,
                })
                .collect(),
            cells: 0,
        }
    }

    /// A round begins at `now_s`: each lane's EWMA weight for it (one
    /// clock reading, passed in; every lane and every worker renormalises
    /// at the same times, so counts stay comparable when a half changes
    /// lanes).
    pub(crate) fn begin_round(&mut self, now_s: f64) {
        for l in &mut self.lanes {
            l.weight = l.waiting.weight(now_s);
        }
    }

    /// A new EWMA half-life.
    pub(crate) fn set_halflife(&mut self, halflife_s: f64) {
        for l in &mut self.lanes {
            l.waiting.set_halflife(halflife_s);
        }
    }

    /// Something waits on lane `w` (its worker must drain its ring now).
    pub(crate) fn busy(&self, w: usize) -> bool {
        self.lanes.get(w).is_some_and(|l| !l.is_idle())
    }

    /// Messages in the ordered lines (the tests).
    #[cfg(test)]
    pub(crate) fn ordered_len(&self) -> usize {
        self.lanes.iter().map(|l| l.ordered.len()).sum()
    }

    /// Once a second: an ordered line that a burst grew (a connection's
    /// move sends messages per circuit) and that is empty now gives that
    /// room back. Not where the line empties: a busy ring's line empties
    /// and regrows many times a second, and shrinking it each time put
    /// allocations on the data path. Likewise a ring that has not grown
    /// for ten passes gives back the blocks a burst needed.
    pub(crate) fn shrink(&mut self) {
        for l in &mut self.lanes {
            if l.ordered.is_empty() && l.ordered.capacity() > ORDERED_KEPT {
                l.ordered.shrink_to(ORDERED_KEPT);
            }
            let Some(ring) = l.ring.as_mut() else {
                continue;
            };
            let blocks = ring.blocks();
            if blocks > l.ring_blocks {
                l.ring_quiet = 0;
            } else {
                l.ring_quiet = l.ring_quiet.saturating_add(1);
                if l.ring_quiet >= RING_QUIET_PASSES {
                    ring.shrink(RING_BLOCKS_KEPT);
                }
            }
            l.ring_blocks = ring.blocks();
        }
    }

    /// Bytes the ordered lines hold (counted in the queues' memory).
    pub(crate) fn ordered_bytes(&self) -> u64 {
        let n: usize = self.lanes.iter().map(|l| l.ordered.len()).sum();
        (n * std::mem::size_of::<RingMsg>()) as u64
    }
}
