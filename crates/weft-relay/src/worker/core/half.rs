//! Circuit halves and a worker's table of them (part of the sans-IO
//! circuit core, [`crate::worker::core`]). Owns the half records only; what a half
//! does with a cell is decided in [`crate::worker::core::dispatch`] and
//! [`crate::worker::core::handoff`].
//!
//! A circuit through the relay is two halves, one per OR connection. The
//! *keyed* half (on the connection toward the client, which answered
//! CREATE2) holds this hop's onion keys; the *relabel* half (toward the next
//! relay) only carries cells under its own circuit ID. Each half owns the
//! queue of cells waiting to be written on its connection, and knows its
//! peer only as a [`HalfRef`].
//!
//! Halves live in a slot table per worker; a slot's generation changes when
//! it is freed, so a stale [`HalfRef`] (a message for a circuit that has
//! since closed) is recognised and dropped.

use weft_proto::circuit::KeyedHalf;

use crate::messages::HalfRef;
use crate::pool::CellQueue;
use crate::worker::core::move_state::MoveState;

/// What a half does with cells.
pub(crate) enum HalfRole {
    /// Toward the client: removes / adds our onion layer. Boxed: the keys
    /// are most of a half's size, and the relabel half of every relayed
    /// circuit (half of all halves) has none, so a slot stays small
    /// (issue 37: an idle circuit costs its slots and this box only).
    Keyed(Box<KeyedHalf>),
    /// Toward the next relay: relabels. `created` once CREATED2 came back.
    Relabel {
        /// CREATED2 received from the next hop.
        created: bool,
    },
    /// The origin end of one of our own bandwidth self-test circuits.
    Origin(Box<crate::selftest::SelfTestCircuit>),
    /// The half moved to another worker with its connection; this slot
    /// forwards what still arrives for the old reference (see
    /// [`crate::worker::core::migrate`]).
    Moved(Box<crate::worker::core::migrate::Forwarder>),
}

impl HalfRole {
    /// Keyed or origin: the half where a circuit ends at this relay.
    pub fn ends_circuit(&self) -> bool {
        matches!(self, HalfRole::Keyed(_) | HalfRole::Origin(_))
    }
}

/// One circuit half.
pub(crate) struct Half {
    /// Slot index of its connection in the worker's connection table.
    pub conn: usize,
    /// Its circuit ID on that connection.
    pub circ_id: u32,
    /// Keyed or relabel.
    pub role: HalfRole,
    /// The other half, once known.
    pub peer: Option<HalfRef>,
    /// Cells waiting to be written on this half's connection.
    pub queue: CellQueue,
    /// EWMA priority state (see [`crate::ewma`]); `ewma.active` when it
    /// is in its connection's mux.
    pub ewma: crate::ewma::CircuitEwma,
    /// Its part in a move, its own or its peer's
    /// ([`crate::worker::core::move_state`]).
    pub move_state: MoveState,
    /// Cells held during a move (not yet onion-encrypted), in arrival
    /// order.
    pub held: CellQueue,
    /// Circuit padding negotiated by the client (a keyed half only;
    /// [`crate::worker::core::circpad`]). None, the usual case, costs the
    /// per-cell path one test.
    pub pad: Option<Box<weft_proto::circpad::CircPadding>>,
    /// Cells for a peer on another worker that wait for room on its ring,
    /// and this half's EWMA count there ([`crate::worker::core::crossing`]);
    /// made at its first cell for another worker.
    pub cross: Option<Box<crate::worker::core::crossing::HalfCrossing>>,
}

impl Half {
    /// A new half with no peer, no queue and no hold.
    pub fn new(conn: usize, circ_id: u32, role: HalfRole, peer: Option<HalfRef>) -> Self {
        Half {
            conn,
            circ_id,
            role,
            peer,
            queue: CellQueue::default(),
            ewma: Default::default(),
            move_state: MoveState::default(),
            held: CellQueue::default(),
            pad: None,
            cross: None,
        }
    }

    /// True while the half takes part in a move (its own or its peer's):
    /// it waits for a marker, holds cells, heard a marker before the news
    /// it belongs to, or still owes its old peer `Switched`. Such a half
    /// may not move (it keeps one marker to wait for).
    pub fn in_move(&self) -> bool {
        self.move_state.in_move(!self.held.is_empty())
    }
}

struct Entry {
    gen: u32,
    half: Option<Half>,
}

/// A worker's circuit halves.
pub(crate) struct HalfTable {
    worker: u16,
    entries: Vec<Entry>,
    free: Vec<u32>,
    live: usize,
    /// Live halves that end a circuit here: keyed (toward a client) or
    /// origin; a relayed circuit's other half (relabel) and a moved
    /// half's forwarder are not counted. C Tor's count of circuits.
    circuit_ends: usize,
}

impl HalfTable {
    /// An empty table for worker `worker`.
    pub fn new(worker: u16) -> Self {
        HalfTable {
            worker,
            entries: Vec::new(),
            free: Vec::new(),
            live: 0,
            circuit_ends: 0,
        }
    }

    /// Number of live halves.
    pub fn len(&self) -> usize {
        self.live
    }

    /// Number of slots (live or free); slots are `0..slots()`.
    pub fn slots(&self) -> u32 {
        self.entries.len() as u32
    }

    /// Circuits with a half here that ends them toward a client or at us
    /// (each circuit counted once per relay, as C Tor counts circuits).
    pub fn circuits(&self) -> usize {
        self.circuit_ends
    }

    /// A half that ended a circuit here became a forwarder (its
    /// connection moved to another worker, which counts it now).
    pub fn circuit_end_moved_away(&mut self) {
        self.circuit_ends -= 1;
    }

    /// Store `h`; returns its reference.
    pub fn insert(&mut self, h: Half) -> HalfRef {
        self.live += 1;
        self.circuit_ends += usize::from(h.role.ends_circuit());
        if let Some(slot) = self.free.pop() {
            let e = &mut self.entries[slot as usize];
            e.half = Some(h);
            return HalfRef {
                worker: self.worker,
                slot,
                gen: e.gen,
            };
        }
        let slot = self.entries.len() as u32;
        self.entries.push(Entry {
            gen: 0,
            half: Some(h),
        });
        HalfRef {
            worker: self.worker,
            slot,
            gen: 0,
        }
    }

    /// The half at `slot` whatever its generation (callers that hold a slot
    /// from their own connection's circuit map).
    pub fn by_slot(&mut self, slot: u32) -> Option<&mut Half> {
        self.entries.get_mut(slot as usize)?.half.as_mut()
    }

    /// The live half at `slot`, to read.
    pub fn at(&self, slot: u32) -> Option<&Half> {
        self.entries.get(slot as usize)?.half.as_ref()
    }

    /// The reference of the live half at `slot`.
    pub fn reference(&self, slot: u32) -> Option<HalfRef> {
        let e = self.entries.get(slot as usize)?;
        e.half.as_ref().map(|_| HalfRef {
            worker: self.worker,
            slot,
            gen: e.gen,
        })
    }

    /// The half `r` refers to, if it is still live.
    pub fn get(&mut self, r: HalfRef) -> Option<&mut Half> {
        let e = self.entries.get_mut(r.slot as usize)?;
        if e.gen != r.gen || r.worker != self.worker {
            return None;
        }
        e.half.as_mut()
    }

    /// Remove the half at `slot`; its slot's generation moves on.
    pub fn remove(&mut self, slot: u32) -> Option<Half> {
        let e = self.entries.get_mut(slot as usize)?;
        let h = e.half.take()?;
        e.gen = e.gen.wrapping_add(1);
        self.free.push(slot);
        self.live -= 1;
        self.circuit_ends -= usize::from(h.role.ends_circuit());
        Some(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relabel(conn: usize) -> Half {
        Half::new(conn, 1, HalfRole::Relabel { created: false }, None)
    }

    #[test]
    fn stale_references_are_refused() {
        let mut t = HalfTable::new(3);
        let a = t.insert(relabel(1));
        assert_eq!(a.worker, 3);
        assert!(t.get(a).is_some());
        t.remove(a.slot).unwrap();
        assert!(t.get(a).is_none());
        let b = t.insert(relabel(2));
        assert_eq!(b.slot, a.slot, "slot reused");
        assert_ne!(b.gen, a.gen);
        assert!(t.get(a).is_none(), "old reference stays dead");
        assert_eq!(t.get(b).map(|h| h.conn), Some(2));
        assert_eq!(t.len(), 1);
    }
}

#[cfg(test)]
mod size_tests {
    /// An idle circuit costs its two slots and the keyed half's box
    /// (issue 37): a slot must stay a few cache lines, the keys under
    /// a KiB (the VAES backend; the portable one is boxed).
    #[test]
    fn a_slot_is_small_and_the_keys_are_boxed() {
        use std::mem::size_of;
        assert!(
            size_of::<super::Entry>() <= 128,
            "{}",
            size_of::<super::Entry>()
        );
        assert!(size_of::<super::HalfRole>() <= 16);
        assert!(size_of::<crate::worker::core::move_state::MoveState>() <= 20);
        assert!(size_of::<weft_proto::circuit::KeyedHalf>() <= 1024);
        assert!(size_of::<weft_crypto::aes_ctr::Aes128Ctr>() <= 256);
    }
}
