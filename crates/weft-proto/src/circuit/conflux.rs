//! Conflux (proposal 329) at the exit, sans-IO: the cells that link
//! circuits into a set, and one set's sequence numbers, out-of-order
//! queue, leg bookkeeping and the exit's choice of leg for what it sends.
//! The set does not know where its legs live: a leg is a `L` (the worker
//! passes its own reference type), and the leg's congestion state comes in
//! as [`LegState`] snapshots.
//!
//! As C Tor 0.4.9 runs it (`conflux.c`, `conflux_pool.c`,
//! `conflux_cell.c`): a client sends LINK (nonce, its last sequence
//! numbers, desired UX) on a fresh circuit; the exit adds the circuit to
//! the nonce's set at once and answers LINKED; the client's LINKED_ACK
//! gives the exit the leg's RTT. BEGIN, DATA, END, CONNECTED, RESOLVE(D),
//! XON and XOFF are *multiplexed*: each counts one in its leg's sequence
//! and is delivered in absolute order; SWITCH moves a leg's count on by a
//! relative number. Where C leaves a check commented out ("TODO-329"),
//! weft closes the set on what cannot be honest: a SWITCH that jumps past
//! anything the client can have in flight, an out-of-order queue over its
//! cap.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::cell::BODY_LEN;
use crate::relay::{relay_cmd, RelayMsg};

/// Relay command: join this circuit to a set (client → exit).
pub const LINK: u8 = 19;
/// Relay command: the exit's answer to LINK.
pub const LINKED: u8 = 20;
/// Relay command: the client saw LINKED (gives the exit the RTT).
pub const LINKED_ACK: u8 = 21;
/// Relay command: the sender moved to this leg; relative sequence number.
pub const SWITCH: u8 = 22;

/// Desired UX values of LINK (trunnel `CONFLUX_UX_*`).
pub mod ux {
    /// No opinion (the exit uses LowRTT).
    pub const NO_OPINION: u8 = 0;
    /// Minimum latency (MinRTT: one leg).
    pub const MIN_LATENCY: u8 = 1;
    /// Low memory, latency.
    pub const LOW_MEM_LATENCY: u8 = 2;
    /// High throughput (LowRTT).
    pub const HIGH_THROUGHPUT: u8 = 3;
    /// Low memory, throughput.
    pub const LOW_MEM_THROUGHPUT: u8 = 4;
}

/// The UX an exit asks of clients in LINKED (C's `DEFAULT_EXIT_UX`).
pub const EXIT_UX: u8 = ux::MIN_LATENCY;

/// Length of a LINK/LINKED body: version, nonce, two sequence numbers, UX.
pub const LINK_LEN: usize = 1 + 32 + 8 + 8 + 1;

/// A LINK or LINKED message (version 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// The set's nonce.
    pub nonce: [u8; 32],
    /// The sender's last sequence number sent.
    pub last_seqno_sent: u64,
    /// The sender's last sequence number received.
    pub last_seqno_recv: u64,
    /// Desired UX (one of [`ux`]).
    pub desired_ux: u8,
}

impl Link {
    /// Parse a LINK (or LINKED) body as trunnel does: version 1, then the
    /// v1 payload; a UX outside the known values, another version or a
    /// short body is refused (C closes the circuit, TORPROTOCOL).
    pub fn parse(data: &[u8]) -> Option<Link> {
        let (&version, p) = data.split_first()?;
        if version != 1 || p.len() < LINK_LEN - 1 {
            return None;
        }
        let u64_at = |i: usize| u64::from_be_bytes(p[i..i + 8].try_into().expect("8 bytes"));
        let desired_ux = p[48];
        if desired_ux > ux::LOW_MEM_THROUGHPUT {
            return None;
        }
        Some(Link {
            nonce: p[..32].try_into().expect("32 bytes"),
            last_seqno_sent: u64_at(32),
            last_seqno_recv: u64_at(40),
            desired_ux,
        })
    }

    /// The body of this LINK/LINKED.
    pub fn encode(&self) -> [u8; LINK_LEN] {
        let mut b = [0u8; LINK_LEN];
        b[0] = 1;
        b[1..33].copy_from_slice(&self.nonce);
        b[33..41].copy_from_slice(&self.last_seqno_sent.to_be_bytes());
        b[41..49].copy_from_slice(&self.last_seqno_recv.to_be_bytes());
        b[49] = self.desired_ux;
        b
    }
}

/// A SWITCH's relative sequence number (0 if the body is short: C counts
/// a parse failure as 0, which moves nothing).
pub fn parse_switch(data: &[u8]) -> u32 {
    data.get(..4)
        .map_or(0, |b| u32::from_be_bytes(b.try_into().expect("4 bytes")))
}

/// A SWITCH body.
pub fn switch_body(relative: u32) -> [u8; 4] {
    relative.to_be_bytes()
}

/// Whether a relay command is sequenced across the set
/// (`conflux_should_multiplex`).
pub fn is_multiplexed(command: u8) -> bool {
    matches!(
        command,
        relay_cmd::BEGIN
            | relay_cmd::DATA
            | relay_cmd::END
            | relay_cmd::CONNECTED
            | relay_cmd::RESOLVE
            | relay_cmd::RESOLVED
            | relay_cmd::XOFF
            | relay_cmd::XON
    )
}

/// How the exit spreads its sending over the legs (C's `conflux_alg_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// Only the leg with the lowest RTT.
    MinRtt,
    /// The lowest-RTT leg that has congestion window left.
    LowRtt,
}

impl Algorithm {
    /// `conflux_choose_algorithm`: the client's desired UX decides.
    pub fn for_ux(desired_ux: u8) -> Self {
        match desired_ux {
            ux::NO_OPINION | ux::HIGH_THROUGHPUT => Algorithm::LowRtt,
            _ => Algorithm::MinRtt,
        }
    }
}

/// The set's limits (consensus `cfx_*` and weft's own).
#[derive(Debug, Clone, Copy)]
pub struct SetLimits {
    /// `cfx_max_legs_set` (C default 8).
    pub max_legs: usize,
    /// Bytes the out-of-order queue may hold before the set closes
    /// (`cfx_max_oooq_bytes`, C's default INT32_MAX).
    pub max_ooo_bytes: usize,
    /// Most cells a SWITCH may put a leg ahead of what was delivered: the
    /// client cannot have more in flight on its other legs than their
    /// congestion windows (`cc_cwnd_max` each).
    pub max_switch_gap: u64,
}

/// The consensus's conflux parameters an exit uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CfxParams {
    /// `cfx_enabled` (default 1): 0 is the network's kill switch, and every
    /// conflux cell then closes its circuit, as C's `conflux_is_enabled`.
    pub enabled: bool,
    /// `cfx_max_legs_set` (3–255, default 8).
    pub max_legs: usize,
    /// `cfx_max_oooq_bytes`, never above weft's own cap.
    pub max_ooo_bytes: usize,
}

impl CfxParams {
    /// From the consensus (`get(name, default, min, max)` clamps), with
    /// `own_cap` as weft's ceiling on the out-of-order queue.
    pub fn from_consensus(get: impl Fn(&str, i32, i32, i32) -> i32, own_cap: usize) -> Self {
        CfxParams {
            enabled: get("cfx_enabled", 1, 0, 1) == 1,
            max_legs: get("cfx_max_legs_set", 8, 3, 255) as usize,
            max_ooo_bytes: (get("cfx_max_oooq_bytes", i32::MAX, 0, i32::MAX) as usize).min(own_cap),
        }
    }
}

/// The cap on a set's out-of-order queue without a consensus value: C's
/// default, INT32_MAX. The queues count toward `MaxMemInQueues`, whose
/// handler closes the set with the oldest queued cell, as C's. (A 2-MiB
/// cap closed a stock client's set on loopback: a leg can run a whole
/// congestion window ahead of the other.)
pub const DEFAULT_MAX_OOO_BYTES: usize = i32::MAX as usize;

impl Default for CfxParams {
    fn default() -> Self {
        CfxParams {
            enabled: true,
            max_legs: 8,
            max_ooo_bytes: DEFAULT_MAX_OOO_BYTES,
        }
    }
}

/// What one queued message costs (C's `conflux_msg_alloc_cost`: the
/// message, its body and the entry).
pub const OOO_CELL_COST: usize = BODY_LEN + 32;

/// A leg's congestion state as its owner last reported it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LegState {
    /// Congestion window (cells).
    pub cwnd: u64,
    /// DATA cells sent and not yet acknowledged, as the leg counted them.
    pub inflight: u64,
    /// How many DATA cells the leg had sent in all when it counted
    /// `inflight` (so the set adds what it sent since).
    pub sent_total: u64,
    /// The leg's RTT estimate (µs; 0: none yet).
    pub rtt_us: u64,
    /// The leg's connection has a backlog: do not send on it.
    pub blocked: bool,
}

struct Leg<L> {
    id: L,
    last_seq_sent: u64,
    last_seq_recv: u64,
    state: LegState,
    /// DATA cells the set handed this leg in all.
    sent_total: u64,
}

impl<L> Leg<L> {
    /// Inflight as the set sees it: the leg's count plus what the set
    /// sent since that count.
    fn inflight(&self) -> u64 {
        self.state.inflight + self.sent_total.saturating_sub(self.state.sent_total)
    }

    fn ready(&self) -> bool {
        !self.state.blocked && self.inflight() < self.state.cwnd
    }

    fn rtt(&self) -> u64 {
        self.state.rtt_us
    }
}

/// What to do with a multiplexed message that arrived on a leg.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// It is next: deliver it now, then [`ConfluxSet::pop_ready`].
    Deliver,
    /// Kept in the out-of-order queue.
    Queued,
}

/// Why a set must close (the whole set: every leg, every stream).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetError {
    /// A sequence number at or below the last delivered (C: INTERNAL).
    Replayed,
    /// The out-of-order queue is over its cap (C: RESOURCELIMIT).
    QueueFull,
    /// A SWITCH jumped further than a client can have in flight.
    AbsurdSwitch(u32),
    /// The message came on a circuit that is not a leg of this set.
    UnknownLeg,
}

impl std::fmt::Display for SetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SetError::Replayed => {
                write!(f, "conflux sequence number at or below the delivered one")
            }
            SetError::QueueFull => write!(f, "conflux out-of-order queue over its cap"),
            SetError::AbsurdSwitch(n) => {
                write!(f, "conflux SWITCH of {n} cells past anything in flight")
            }
            SetError::UnknownLeg => write!(f, "conflux message on a circuit outside the set"),
        }
    }
}

/// A message waiting in the out-of-order queue.
pub struct Queued<L> {
    /// Its absolute sequence number.
    pub seq: u64,
    /// The leg it came on.
    pub leg: L,
    /// When it was read (ns).
    pub stamp_ns: u64,
    /// The message.
    pub msg: RelayMsg,
}

impl<L> PartialEq for Queued<L> {
    fn eq(&self, o: &Self) -> bool {
        self.seq == o.seq
    }
}
impl<L> Eq for Queued<L> {}
impl<L> PartialOrd for Queued<L> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<L> Ord for Queued<L> {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.seq.cmp(&o.seq)
    }
}

/// Where the next multiplexed message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendPlan<L> {
    /// The leg.
    pub leg: L,
    /// Send SWITCH with this relative number on it first.
    pub switch: Option<u32>,
}

/// One conflux set at the exit.
pub struct ConfluxSet<L> {
    legs: Vec<Leg<L>>,
    alg: Algorithm,
    limits: SetLimits,
    last_seq_delivered: u64,
    ooo: BinaryHeap<Reverse<Queued<L>>>,
    ooo_bytes: usize,
    /// Largest `ooo_bytes` seen.
    pub ooo_peak_bytes: usize,
    curr: Option<L>,
    /// SWITCH cells sent and received.
    pub switches_sent: u64,
    /// See [`Self::switches_sent`].
    pub switches_received: u64,
}

impl<L: Copy + Eq + std::fmt::Debug> ConfluxSet<L> {
    /// An empty set.
    pub fn new(limits: SetLimits) -> Self {
        ConfluxSet {
            legs: Vec::new(),
            alg: Algorithm::LowRtt,
            limits,
            last_seq_delivered: 0,
            ooo: BinaryHeap::new(),
            ooo_bytes: 0,
            ooo_peak_bytes: 0,
            curr: None,
            switches_sent: 0,
            switches_received: 0,
        }
    }

    /// Number of legs.
    pub fn len(&self) -> usize {
        self.legs.len()
    }

    /// True without legs.
    pub fn is_empty(&self) -> bool {
        self.legs.is_empty()
    }

    /// The legs.
    pub fn legs(&self) -> impl Iterator<Item = L> + '_ {
        self.legs.iter().map(|l| l.id)
    }

    /// The algorithm the client's UX chose.
    pub fn algorithm(&self) -> Algorithm {
        self.alg
    }

    /// Bytes in the out-of-order queue now.
    pub fn ooo_bytes(&self) -> usize {
        self.ooo_bytes
    }

    /// When the oldest message in the out-of-order queue was read (for
    /// the memory limit's choice of victims).
    pub fn ooo_oldest_stamp(&self) -> Option<u64> {
        self.ooo.iter().map(|q| q.0.stamp_ns).min()
    }

    /// A LINK on leg `id`: add it (`cfx_add_leg`: its counters from the
    /// LINK, as C blindly copies them). Returns the LINKED to send, or
    /// None when the set is full (the leg closes).
    pub fn add_leg(&mut self, id: L, link: &Link) -> Option<Link> {
        if self.legs.len() >= self.limits.max_legs || self.legs.iter().any(|l| l.id == id) {
            return None;
        }
        // The LINKED reports the set's state before this leg joins.
        let linked = Link {
            nonce: link.nonce,
            last_seqno_sent: self.max_seq_sent(),
            last_seqno_recv: self.last_seq_delivered,
            desired_ux: EXIT_UX,
        };
        self.legs.push(Leg {
            id,
            last_seq_recv: link.last_seqno_sent,
            last_seq_sent: link.last_seqno_recv,
            state: LegState::default(),
            sent_total: 0,
        });
        self.alg = Algorithm::for_ux(link.desired_ux);
        Some(linked)
    }

    fn max_seq_sent(&self) -> u64 {
        self.legs.iter().map(|l| l.last_seq_sent).max().unwrap_or(0)
    }

    fn max_seq_recv(&self) -> u64 {
        self.legs.iter().map(|l| l.last_seq_recv).max().unwrap_or(0)
    }

    fn leg_mut(&mut self, id: L) -> Result<&mut Leg<L>, SetError> {
        self.legs
            .iter_mut()
            .find(|l| l.id == id)
            .ok_or(SetError::UnknownLeg)
    }

    /// Leg `id` reported its congestion state.
    pub fn update_leg(&mut self, id: L, state: LegState) {
        if let Ok(l) = self.leg_mut(id) {
            l.state = state;
        }
    }

    /// Leg `id` left the set (its circuit closed). True when the whole
    /// set must go (`cfx_del_leg`: it had data in flight, held the highest
    /// sequence numbers, or was the leg in use) or no leg is left.
    pub fn remove_leg(&mut self, id: L, sendme_inc: u64) -> bool {
        let Some(i) = self.legs.iter().position(|l| l.id == id) else {
            return self.legs.is_empty();
        };
        let leg = self.legs.remove(i);
        let mut teardown = leg.inflight() >= sendme_inc.max(1);
        if !self.legs.is_empty()
            && (self.max_seq_sent() < leg.last_seq_sent || self.max_seq_recv() < leg.last_seq_recv)
        {
            teardown = true;
        }
        if self.curr == Some(id) {
            self.curr = None;
            teardown = true;
        }
        teardown || self.legs.is_empty()
    }

    /// A SWITCH with `relative` arrived on leg `id`
    /// (`conflux_process_switch_command`).
    pub fn switch_received(&mut self, id: L, relative: u32) -> Result<(), SetError> {
        let (delivered, gap) = (self.last_seq_delivered, self.limits.max_switch_gap);
        let leg = self.leg_mut(id)?;
        let next = leg.last_seq_recv.saturating_add(u64::from(relative));
        if next.saturating_sub(delivered) > gap {
            return Err(SetError::AbsurdSwitch(relative));
        }
        leg.last_seq_recv = next;
        self.switches_received += 1;
        Ok(())
    }

    /// A multiplexed message arrived on leg `id`
    /// (`conflux_process_relay_msg`): deliver it now, or queue a copy.
    pub fn received(&mut self, id: L, stamp_ns: u64, msg: &RelayMsg) -> Result<Arrival, SetError> {
        let delivered = self.last_seq_delivered;
        let leg = self.leg_mut(id)?;
        // The starting number is the client's (its LINK): no overflow.
        leg.last_seq_recv = leg.last_seq_recv.saturating_add(1);
        let seq = leg.last_seq_recv;
        if seq == delivered + 1 {
            self.last_seq_delivered = seq;
            return Ok(Arrival::Deliver);
        }
        if seq <= delivered {
            return Err(SetError::Replayed);
        }
        if self.ooo_bytes + OOO_CELL_COST > self.limits.max_ooo_bytes {
            return Err(SetError::QueueFull);
        }
        self.ooo.push(Reverse(Queued {
            seq,
            leg: id,
            stamp_ns,
            msg: *msg,
        }));
        self.ooo_bytes += OOO_CELL_COST;
        self.ooo_peak_bytes = self.ooo_peak_bytes.max(self.ooo_bytes);
        Ok(Arrival::Queued)
    }

    /// The queued message that is next in order, if it is here
    /// (`conflux_dequeue_relay_msg`).
    pub fn pop_ready(&mut self) -> Option<Queued<L>> {
        let top = self.ooo.peek()?;
        if top.0.seq != self.last_seq_delivered + 1 {
            return None;
        }
        let Reverse(q) = self.ooo.pop()?;
        self.ooo_bytes -= OOO_CELL_COST;
        self.last_seq_delivered = q.seq;
        Some(q)
    }

    /// The leg for the next multiplexed message of command `command`
    /// (`conflux_decide_circ_for_send`), and the SWITCH to send first if
    /// it changes. None: no leg may send DATA now (other commands then
    /// stay on the current leg, so they keep their order).
    pub fn plan_send(&mut self, command: u8) -> Option<SendPlan<L>> {
        if self.curr.is_none() {
            self.curr = self.first_leg();
        }
        let curr = self.curr?;
        let pick = match self.alg {
            Algorithm::MinRtt => self.min_rtt_leg().filter(|&i| self.legs[i].ready()),
            Algorithm::LowRtt => self.low_rtt_ready_leg(),
        }
        .map(|i| self.legs[i].id);
        let next = pick.or((command != relay_cmd::DATA).then_some(curr))?;
        if next == curr {
            return Some(SendPlan {
                leg: next,
                switch: None,
            });
        }
        let prev_sent = self.leg_mut(curr).map(|l| l.last_seq_sent).unwrap_or(0);
        let new = self.leg_mut(next).ok()?;
        // C closes the set if the new leg is ahead (a bug); it cannot be
        // here, as every leg's count only grows to the sender's.
        let relative = prev_sent.saturating_sub(new.last_seq_sent);
        new.last_seq_sent = new.last_seq_sent.max(prev_sent);
        self.curr = Some(next);
        self.switches_sent += 1;
        Some(SendPlan {
            leg: next,
            switch: Some(u32::try_from(relative).unwrap_or(u32::MAX)),
        })
    }

    /// A multiplexed message went out on `leg` (`conflux_note_cell_sent`).
    pub fn note_sent(&mut self, leg: L, command: u8) {
        if let Ok(l) = self.leg_mut(leg) {
            l.last_seq_sent = l.last_seq_sent.saturating_add(1);
            if command == relay_cmd::DATA {
                l.sent_total += 1;
            }
        }
    }

    /// True if some leg may take a DATA cell now.
    pub fn can_send_data(&self) -> bool {
        match self.alg {
            Algorithm::MinRtt => self.min_rtt_leg().is_some_and(|i| self.legs[i].ready()),
            Algorithm::LowRtt => self.low_rtt_ready_leg().is_some(),
        }
    }

    /// Cells the set may send now before it must wait for a SENDME: the
    /// window left on the legs the algorithm uses.
    pub fn send_window(&self) -> u64 {
        let room = |l: &Leg<L>| {
            if l.state.blocked {
                0
            } else {
                l.state.cwnd.saturating_sub(l.inflight())
            }
        };
        match self.alg {
            Algorithm::MinRtt => self.min_rtt_leg().map_or(0, |i| room(&self.legs[i])),
            Algorithm::LowRtt => self.legs.iter().filter(|l| l.rtt() > 0).map(room).sum(),
        }
    }

    /// `conflux_pick_first_leg`: the lowest measured RTT, else the first.
    fn first_leg(&self) -> Option<L> {
        self.min_rtt_leg()
            .map(|i| self.legs[i].id)
            .or(self.legs.first().map(|l| l.id))
    }

    fn min_rtt_leg(&self) -> Option<usize> {
        (0..self.legs.len())
            .filter(|&i| self.legs[i].rtt() > 0)
            .min_by_key(|&i| self.legs[i].rtt())
    }

    fn low_rtt_ready_leg(&self) -> Option<usize> {
        (0..self.legs.len())
            .filter(|&i| self.legs[i].ready() && self.legs[i].rtt() > 0)
            .min_by_key(|&i| self.legs[i].rtt())
    }
}

#[cfg(test)]
mod tests;
