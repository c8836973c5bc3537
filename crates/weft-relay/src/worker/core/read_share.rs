//! Read budgets by circuit (part of the sans-IO circuit core): how many
//! bytes the driver may read from a connection or an inbound ring in one
//! round ([`Circuits::read_budget`], [`ReadFrom`], [`ReadBudget`]).
//!
//! A worker short of CPU reads each readable connection once a round. With
//! the same budget for every connection, a link to another relay that
//! carries eight busy circuits gets no more than a client's link that
//! carries one, so each of its circuits gets an eighth: on a guard, whose
//! downloads come in on a few busy relay links, the direction people wait
//! for starved (issue 51). Here a connection's budget grows with the busy
//! circuits it carries: each round has the total it would have had with
//! [`BASE_BUDGET`] per connection read, shared out by busy circuits.
//!
//! A connection's busy circuits are the distinct circuits it read relay
//! cells for in the last tick (about 67 ms), counted with a 64-bit map
//! of half slots (one OR per cell on the connection's record, which the
//! cell path writes anyway; a linear-counting estimate of the distinct
//! slots when the tick ends). No clock read per cell, no walk, no
//! allocation.

use crate::worker::core::Circuits;

/// Where the driver takes cells from ([`Circuits::read_budget`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadFrom {
    /// A connection (the driver's slot).
    Conn(usize),
    /// The ring from worker `w`.
    Ring(usize),
}

/// What a connection reads per round when every connection carries as
/// many busy circuits (the budget before circuits were counted).
pub(crate) const BASE_BUDGET: u64 = 128 * 1024;
/// The least a readable connection may read in a round.
pub(crate) const MIN_BUDGET: u64 = 16 * 1024;
/// The most (a source with very many busy circuits: an inbound ring
/// that carries another worker's share of the relay's circuits must get
/// each of them its share, or the circuits that cross workers get less
/// than the rest; 1 MiB gave them half on the scale bench).
pub(crate) const MAX_BUDGET: u64 = 8 * 1024 * 1024;
/// Ring room (messages) below which a connection all of whose circuits
/// cross is held ([`Circuits::read_held`]): one read's worth (64 KiB), or
/// half the ring if it is smaller.
pub(crate) const HOLD_ROOM: usize = 128;
/// A circuit whose EWMA count is under this share of the busiest one's
/// on its connection is quiet: that connection is not held.
const QUIET_SHARE: f64 = 0.25;
/// Connections with more circuits are never held (the check walks them).
const HOLD_MAX_CIRCUITS: usize = 64;
/// Busy circuits counted at most per connection.
pub(crate) const MAX_BUSY: u32 = 64;
/// log2 of the tick's length in ns (2^26 ns ≈ 67 ms).
const TICK_SHIFT: u32 = 26;

/// A connection's count of the circuits it reads for.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ConnReads {
    /// Half slots (mod 64) read for in the current tick.
    bits: u64,
    /// That tick.
    tick: u64,
    /// Busy circuits in the tick before it.
    busy_before: u32,
}

impl ConnReads {
    /// A relay cell was read for the half at `slot`.
    #[inline]
    pub(crate) fn note(&mut self, slot: u32) {
        self.bits |= 1u64 << (slot & 63);
    }

    /// Busy circuits at `now_ns` (the round's clock): the larger of the
    /// last tick's count and the current one's so far, at least one.
    pub(crate) fn busy(&mut self, now_ns: u64) -> u32 {
        let tick = now_ns >> TICK_SHIFT;
        if tick != self.tick {
            // A tick with nothing read (a quiet connection) counts none.
            self.busy_before = if tick == self.tick + 1 {
                distinct(self.bits)
            } else {
                0
            };
            self.bits = 0;
            self.tick = tick;
        }
        self.busy_before.max(distinct(self.bits)).clamp(1, MAX_BUSY)
    }
}

/// The distinct slots behind a 64-bit map: the bits set, or past a
/// quarter of the map (where slots that share a bit start to matter)
/// linear counting's estimate (with `z` of the 64 bits still zero, about
/// −64·ln(z/64) were set).
fn distinct(bits: u64) -> u32 {
    let set = bits.count_ones();
    if set <= 16 {
        return set;
    }
    let zero = 64 - set;
    if zero == 0 {
        return MAX_BUSY;
    }
    let n = -64.0 * (f64::from(zero) / 64.0).ln();
    (n.round() as u32).clamp(set, MAX_BUSY)
}

/// A worker's shares: the bytes per busy circuit this round.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadShares {
    /// Bytes per busy circuit this round.
    per_circuit: u64,
    /// Connections given a budget this round, and their busy circuits.
    conns: u64,
    busy: u64,
}

impl Default for ReadShares {
    fn default() -> Self {
        ReadShares {
            per_circuit: BASE_BUDGET,
            conns: 0,
            busy: 0,
        }
    }
}

impl ReadShares {
    /// A round begins: the share per circuit is what keeps the last
    /// round's total ([`BASE_BUDGET`] per connection read) spread over
    /// its busy circuits.
    pub(crate) fn begin_round(&mut self) {
        if self.conns > 0 {
            self.per_circuit = (BASE_BUDGET * self.conns / self.busy.max(1)).max(1);
        }
        self.conns = 0;
        self.busy = 0;
    }

    /// The budget of a connection with `busy` busy circuits this round.
    pub(crate) fn budget(&mut self, busy: u32) -> u64 {
        self.conns += 1;
        self.busy += u64::from(busy);
        (self.per_circuit * u64::from(busy)).clamp(MIN_BUDGET, MAX_BUDGET)
    }
}

impl Circuits {
    /// How many bytes the driver may take this round from a connection's
    /// socket or from another worker's ring (a cell on a ring counts 514):
    /// a share of the round's reading that grows with the circuits the
    /// source carries busy ([`crate::worker::core::read_share`]). A worker
    /// short of CPU thus serves the circuits that cross to it from another
    /// worker as it serves those it reads itself: cells the other worker
    /// read freely do not take its rounds from its own connections' cells
    /// (that left the direction read on the busier worker starved).
    /// Asked once per source and round, before taking from it.
    ///
    /// A circuit whose cells wait to cross to another worker (the ring is
    /// full) still counts: its connection reads on, so the cells of its
    /// other circuits never wait behind it in the kernel's socket buffer
    /// (the crossing queue is bounded by the circuit's window and the
    /// circuit queue limit, as C's circuit queues are). Cutting such a
    /// connection's share (until the twentieth session) starved the
    /// circuits that share a relay link with crossing ones: the direction
    /// read on the few busy links (issue 51, docs/perf.md).
    /// A connection none of whose circuits could send a cell sooner for
    /// it reads nothing instead ([`Circuits::read_paused`], which the
    /// driver asks before each read).
    pub(crate) fn read_budget(&mut self, from: ReadFrom) -> u64 {
        let now = self.now_ns;
        let busy = match from {
            ReadFrom::Conn(idx) => self
                .conns
                .get_mut(idx)
                .and_then(Option::as_mut)
                .map_or(1, |c| c.reads.busy(now)),
            ReadFrom::Ring(w) => self.ring_reads.get_mut(w).map_or(1, |r| r.busy(now)),
        };
        self.read_shares.budget(busy)
    }

    /// True if reading connection `idx` now could only add to what waits:
    /// every circuit it carries has cells waiting to cross to another
    /// worker (its ring is full), so none of them could send a cell
    /// sooner for it. Its bytes then stay in the kernel's socket buffer
    /// until one of its circuits has nothing waiting (the driver asks
    /// again after each read and each round): no circuit waits behind
    /// another's, and the cells read ahead of the ring stay few. Each
    /// of those costs a copy into a pool slot and another from it, gone
    /// cold under a deep backlog, into the ring; at saturation with every
    /// cell crossing, pausing here cut weft-2's CPU per GiB by a quarter
    /// (docs/perf.md, "The regression check"). A connection with any
    /// circuit that has nothing waiting, quiet ones included, reads as
    /// usual. Nothing waits on any lane (weft-1, or rings with room):
    /// false at once. Also true while the connection is held for a ring
    /// with too little room ([`Circuits::read_held`]).
    pub(crate) fn read_paused(&mut self, idx: usize) -> bool {
        if self.read_held(idx) {
            return true;
        }
        if self.lanes.cells == 0 {
            return false;
        }
        let Circuits { conns, halves, .. } = self;
        let Some(c) = conns.get(idx).and_then(Option::as_ref) else {
            return false;
        };
        !c.circuits.is_empty()
            && c.circuits.values().all(|&slot| {
                halves
                    .at(slot)
                    .and_then(|h| h.cross.as_deref())
                    .is_some_and(|x| !x.queue.is_empty())
            })
    }

    /// True if every circuit of connection `idx` crosses to another
    /// worker and the rings they cross on have less room than a read may
    /// bring ([`HOLD_ROOM`]): what it read now could only wait in crossing
    /// queues (a copy into a pool slot and another from it), so its bytes
    /// stay in the kernel until the ring has room (its consumer wakes us
    /// when it frees some). Not while another connection's circuits wait
    /// on such a lane and none of this one's does: then it reads, and its
    /// circuits take their turn for the ring's room in EWMA order. Never
    /// with EWMA off (no circuit is known to be quiet: holding a link then
    /// left a web fetch's cells behind bulk ones in the kernel, 0.6 s p50
    /// on the priority bench with every cell crossing).
    fn read_held(&mut self, idx: usize) -> bool {
        let Circuits {
            conns,
            halves,
            lanes,
            me,
            ..
        } = self;
        // Cheap first: a ring that is nearly full (asked without
        // registering for the consumer's wake-up, which only a connection
        // actually held needs: a wake-up costs the consumer a syscall).
        let low = |l: &mut crate::worker::core::crossing::Lane, register: bool| {
            l.ring.as_mut().is_some_and(|r| {
                let want = HOLD_ROOM.min(r.capacity() / 2);
                !if register {
                    r.has_room_or_ask_wake(want)
                } else {
                    r.has_room(want)
                }
            })
        };
        if !lanes.lanes.iter_mut().any(|l| low(l, false)) {
            return false;
        }
        let Some(c) = conns.get(idx).and_then(Option::as_ref) else {
            return false;
        };
        if c.circuits.is_empty() || c.circuits.len() > HOLD_MAX_CIRCUITS {
            return false;
        }
        let (mut to, mut waits) = (0u64, 0u64);
        // The least EWMA count among its circuits that wait for nothing,
        // and the most among all (a waiting one's as it was when it began
        // to wait: no more than it is).
        let (mut least, mut most) = (f64::INFINITY, 0.0f64);
        for &slot in c.circuits.values() {
            let Some(h) = halves.at(slot) else {
                return false;
            };
            match h.peer {
                Some(p) if usize::from(p.worker) != *me && p.worker < 64 => {
                    to |= 1 << p.worker;
                    let Some(x) = h.cross.as_deref() else {
                        // Never crossed yet: nothing known of it.
                        return false;
                    };
                    let waiting = !x.queue.is_empty();
                    if waiting {
                        waits |= 1 << p.worker;
                    }
                    let Some(n) = lanes
                        .lanes
                        .get(usize::from(p.worker))
                        .and_then(|l| l.waiting.idle_count(&x.ewma))
                    else {
                        // EWMA off: nothing tells a quiet circuit from a
                        // busy one, so none is held for (the read pause
                        // still stops a link all of whose circuits wait).
                        return false;
                    };
                    if !waiting {
                        least = least.min(n);
                    }
                    most = most.max(n);
                }
                _ => return false,
            }
        }
        // A quiet circuit among busy ones (EWMA on): read on, so its cells
        // get ahead of theirs in the crossing queues' EWMA order rather
        // than wait behind them in the kernel.
        if least < QUIET_SHARE * most {
            return false;
        }
        lanes.lanes.iter_mut().enumerate().all(|(w, l)| {
            to & (1 << w) == 0 || ((l.is_idle() || waits & (1 << w) != 0) && low(l, true))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: u64 = 1 << TICK_SHIFT;

    #[test]
    fn a_connection_counts_the_circuits_it_read_for_in_the_last_tick() {
        let mut r = ConnReads::default();
        assert_eq!(r.busy(0), 1, "at least one");
        for slot in [3, 9, 3, 70, 9] {
            r.note(slot);
        }
        assert_eq!(r.busy(0), 3, "slots 3, 9 and 70 (6 mod 64)");
        // The next tick remembers them while it reads for fewer.
        r.note(3);
        assert_eq!(r.busy(TICK), 3);
        assert_eq!(r.busy(2 * TICK), 1);
        // A tick with nothing read between: none remembered.
        for s in 0..8 {
            r.note(s);
        }
        assert_eq!(r.busy(2 * TICK), 8);
        assert_eq!(r.busy(4 * TICK), 1);
    }

    #[test]
    fn many_circuits_are_estimated_and_capped() {
        let mut r = ConnReads::default();
        // 40 random-ish distinct slots: some share a bit; the estimate
        // corrects for it.
        for i in 0..40u32 {
            r.note(i.wrapping_mul(2_654_435_761) >> 7);
        }
        let b = r.busy(0);
        assert!((30..=60).contains(&b), "{b}");
        for s in 0..64 {
            r.note(s);
        }
        assert_eq!(r.busy(0), MAX_BUSY);
    }

    #[test]
    fn the_rounds_total_is_shared_out_by_busy_circuits() {
        let mut s = ReadShares::default();
        s.begin_round();
        // 64 links with one busy circuit and 8 with eight.
        for _ in 0..64 {
            s.budget(1);
        }
        for _ in 0..8 {
            s.budget(8);
        }
        s.begin_round();
        let one = s.budget(1);
        let eight = s.budget(8);
        assert_eq!(eight, 8 * one, "a link's share grows with its circuits");
        // The total stays what 72 links at the base budget would read.
        let total = 64 * one + 8 * eight;
        assert!(total.abs_diff(72 * BASE_BUDGET) < 72 * 1024, "{total}");
        // Every link alike: the base budget, as before circuits counted.
        let mut s = ReadShares::default();
        s.begin_round();
        for _ in 0..4 {
            s.budget(8);
        }
        s.begin_round();
        for _ in 0..4 {
            assert_eq!(s.budget(8), BASE_BUDGET);
        }
        // Many circuits: their shares, bounded.
        assert_eq!(s.budget(MAX_BUSY), BASE_BUDGET / 8 * u64::from(MAX_BUSY));
        assert_eq!(s.budget(0), MIN_BUDGET);
        s.begin_round();
        s.budget(1);
        s.begin_round();
        assert_eq!(s.budget(MAX_BUSY), MAX_BUDGET);
    }
}
