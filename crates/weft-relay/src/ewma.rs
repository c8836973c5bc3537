//! EWMA circuit priority (Tang & Goldberg, "An Improved Algorithm for Tor
//! Circuit Scheduling", CCS 2010; C Tor's circuitmux_ewma.c), sans-IO.
//!
//! Every circuit on a connection carries an exponentially decaying count
//! of the cells it sent: a cell sent `Δ` seconds ago counts
//! `2^(−Δ / halflife)`. When the connection can write, the active circuit
//! with the *smallest* count goes first, so bursty, interactive circuits
//! get ahead of bulk ones. `CircuitPriorityHalflife` ≤ 0 turns it off
//! (round robin).
//!
//! Decaying every count continuously is what the idea says; doing it costs
//! a pass over all circuits. The equivalent used here (the scaled-tick form
//! of the paper): counts are kept relative to a reference time `t₀`, and a
//! cell sent at time `t` adds the *weight* `2^((t − t₀) / halflife)` — one
//! number that grows — instead of every count shrinking. Order is
//! unchanged, because all true counts are the stored ones times the same
//! `2^(−(t − t₀)/halflife)`. When the weight passes [`RENORMALISE_AT`], the
//! reference moves to now and the active counts are divided by it (about
//! every 166 half-lives); idle circuits' counts are fixed lazily by an epoch
//! number. The caller reads the clock once per scheduling round and gets
//! the round's weight from [`EwmaMux::weight`].
//!
//! Active circuits sit in a binary min-heap keyed by count. The scheduler
//! always serves the top, so "sent a cell, count grew" is one sift-down of
//! the root; removing an arbitrary circuit (it closed) is a linear search,
//! which is rare.

/// Renormalise when the weight passes this.
pub const RENORMALISE_AT: f64 = 1e50;
/// C Tor's default half-life (consensus `CircuitPriorityHalflifeMsec`,
/// 30000).
pub const DEFAULT_HALFLIFE_S: f64 = 30.0;

/// The EWMA state of one circuit while it is idle (kept in the half).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CircuitEwma {
    /// Count relative to the mux's reference time of `epoch`.
    pub count: f64,
    /// Renormalisation epoch the count belongs to.
    pub epoch: u32,
    /// In the mux (its count then lives in the heap).
    pub active: bool,
}

/// One connection's active circuits (those with cells to write), in EWMA
/// order. Circuits are identified by a `u32` key (the half slot).
#[derive(Debug, Clone, Default)]
pub struct EwmaMux {
    heap: Vec<(f64, u32)>,
    /// `None`: EWMA off, round robin in activation order.
    halflife_s: Option<f64>,
    /// Reference time (seconds on the caller's clock).
    t0: f64,
    epoch: u32,
    /// Weight at the last renormalisation (divides idle counts one epoch
    /// old).
    last_factor: f64,
    rr: std::collections::VecDeque<u32>,
}

impl EwmaMux {
    /// A mux with half-life `halflife_s` seconds (≤ 0 or NaN: EWMA off).
    pub fn new(halflife_s: f64) -> Self {
        EwmaMux {
            halflife_s: (halflife_s > 0.0).then_some(halflife_s),
            last_factor: 1.0,
            ..Default::default()
        }
    }

    /// Change the half-life (counts keep their meaning approximately; as C
    /// Tor does on a consensus change).
    pub fn set_halflife(&mut self, halflife_s: f64) {
        let on = halflife_s > 0.0;
        if on == self.enabled() {
            self.halflife_s = on.then_some(halflife_s);
            return;
        }
        // Switching between EWMA and round robin: carry the active set over.
        let keys: Vec<u32> = if self.enabled() {
            self.heap.drain(..).map(|e| e.1).collect()
        } else {
            self.rr.drain(..).collect()
        };
        self.halflife_s = on.then_some(halflife_s);
        for k in keys {
            if on {
                self.heap.push((0.0, k));
            } else {
                self.rr.push_back(k);
            }
        }
    }

    /// Is EWMA on?
    pub fn enabled(&self) -> bool {
        self.halflife_s.is_some()
    }

    /// Number of active circuits.
    pub fn len(&self) -> usize {
        if self.enabled() {
            self.heap.len()
        } else {
            self.rr.len()
        }
    }

    /// No active circuit.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The weight of a cell sent at `now_s` (seconds), renormalising first
    /// if it grew too big. Call once per scheduling round.
    pub fn weight(&mut self, now_s: f64) -> f64 {
        let Some(h) = self.halflife_s else { return 1.0 };
        let w = ((now_s - self.t0) / h).exp2();
        if w < RENORMALISE_AT {
            return w;
        }
        self.t0 = now_s;
        self.epoch = self.epoch.wrapping_add(1);
        self.last_factor = w;
        for e in self.heap.iter_mut() {
            e.0 /= w;
        }
        1.0
    }

    fn current(&self, e: &mut CircuitEwma) {
        if e.epoch != self.epoch {
            // One epoch old: rescale; older: it has decayed below 10^-50.
            e.count = if e.epoch.wrapping_add(1) == self.epoch {
                e.count / self.last_factor
            } else {
                0.0
            };
            e.epoch = self.epoch;
        }
    }

    /// The count of circuit `e`, not in the mux, in the mux's current
    /// units (comparable with other circuits' counts from this call);
    /// `None` when EWMA is off.
    pub fn idle_count(&self, e: &CircuitEwma) -> Option<f64> {
        if !self.enabled() {
            return None;
        }
        let mut e = *e;
        self.current(&mut e);
        Some(e.count)
    }

    /// Circuit `key` has cells to write.
    pub fn activate(&mut self, key: u32, e: &mut CircuitEwma) {
        if e.active {
            return;
        }
        e.active = true;
        if !self.enabled() {
            self.rr.push_back(key);
            return;
        }
        self.current(e);
        self.heap.push((e.count, key));
        self.sift_up(self.heap.len() - 1);
    }

    /// The circuit to serve next (it stays in the mux).
    pub fn peek(&self) -> Option<u32> {
        if self.enabled() {
            self.heap.first().map(|e| e.1)
        } else {
            self.rr.front().copied()
        }
    }

    /// The circuit at the top (from [`Self::peek`]) sent `n` cells with the
    /// round's `weight`; `still_active` if it has more to send.
    pub fn sent(&mut self, key: u32, e: &mut CircuitEwma, n: u32, weight: f64, still_active: bool) {
        if !self.enabled() {
            if self.rr.front() == Some(&key) {
                self.rr.pop_front();
                if still_active {
                    self.rr.push_back(key);
                } else {
                    e.active = false;
                }
            }
            return;
        }
        let Some(top) = self.heap.first_mut() else {
            return;
        };
        if top.1 != key {
            return;
        }
        top.0 += f64::from(n) * weight;
        if still_active {
            self.sift_down(0);
        } else {
            e.count = top.0;
            e.epoch = self.epoch;
            e.active = false;
            self.remove_at(0);
        }
    }

    /// Circuit `e`, not in the mux (nothing of it waits), sent `n` cells
    /// with the round's `weight` some other way (the cross-worker ring had
    /// room for them): its count grows as if the mux had served them, so
    /// a busy circuit that starts to wait does not look quiet.
    #[inline]
    pub fn charge_idle(&self, e: &mut CircuitEwma, n: u32, weight: f64) {
        if !self.enabled() || e.active {
            return;
        }
        self.current(e);
        e.count += f64::from(n) * weight;
    }

    /// Take circuit `key` out (it closed or its queue was dropped).
    pub fn remove(&mut self, key: u32, e: &mut CircuitEwma) {
        if !e.active {
            return;
        }
        e.active = false;
        if !self.enabled() {
            self.rr.retain(|&k| k != key);
            return;
        }
        if let Some(i) = self.heap.iter().position(|x| x.1 == key) {
            e.count = self.heap[i].0;
            e.epoch = self.epoch;
            self.remove_at(i);
        }
    }

    fn remove_at(&mut self, i: usize) {
        self.heap.swap_remove(i);
        if i < self.heap.len() {
            self.sift_down(i);
            self.sift_up(i);
        }
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let p = (i - 1) / 2;
            if self.heap[p].0 <= self.heap[i].0 {
                break;
            }
            self.heap.swap(p, i);
            i = p;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut m = i;
            if l < n && self.heap[l].0 < self.heap[m].0 {
                m = l;
            }
            if r < n && self.heap[r].0 < self.heap[m].0 {
                m = r;
            }
            if m == i {
                return;
            }
            self.heap.swap(m, i);
            i = m;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_circuits_count_is_read_in_the_muxs_current_units() {
        let mut m = EwmaMux::new(30.0);
        let w = m.weight(0.0);
        let (mut quiet, mut bulk) = (CircuitEwma::default(), CircuitEwma::default());
        m.charge_idle(&mut quiet, 2, w);
        m.charge_idle(&mut bulk, 200, w);
        let (q, b) = (m.idle_count(&quiet).unwrap(), m.idle_count(&bulk).unwrap());
        assert!(q < 0.25 * b, "{q} against {b}");
        // After a renormalisation both are rescaled alike.
        let w = m.weight(30.0 * 200.0);
        assert_eq!(w, 1.0, "renormalised");
        let (q2, b2) = (m.idle_count(&quiet).unwrap(), m.idle_count(&bulk).unwrap());
        assert!(q2 < b2 && (q2 / b2 - q / b).abs() < 1e-9);
        assert_eq!(EwmaMux::new(0.0).idle_count(&bulk), None, "EWMA off");
    }

    /// Hand-computed: half-life 10 s. Circuit 1 sends 4 cells at t=0,
    /// circuit 2 sends 3 cells at t=10. True counts at t=10: c1 = 4·½ = 2,
    /// c2 = 3 → c1 first. At t=20: c1 = 1, c2 = 1.5; c1 sends 1 → c1 = 2,
    /// c2 = 1.5 → c2 first.
    #[test]
    fn decay_and_order_by_hand() {
        let mut m = EwmaMux::new(10.0);
        let mut e = [CircuitEwma::default(); 3];
        let w0 = m.weight(0.0);
        assert_eq!(w0, 1.0);
        m.activate(1, &mut e[1]);
        m.sent(1, &mut e[1], 4, w0, false);
        assert_eq!(e[1].count, 4.0);
        let w10 = m.weight(10.0);
        assert_eq!(w10, 2.0, "one half-life later a cell weighs twice as much");
        m.activate(2, &mut e[2]);
        m.sent(2, &mut e[2], 3, w10, false);
        assert_eq!(e[2].count, 6.0, "3 cells × weight 2 (true count 3 at t=10)");
        m.activate(1, &mut e[1]);
        m.activate(2, &mut e[2]);
        assert_eq!(m.peek(), Some(1), "true counts 2 < 3");
        let w20 = m.weight(20.0);
        assert_eq!(w20, 4.0);
        m.sent(1, &mut e[1], 1, w20, true);
        // Stored: c1 = 4 + 4 = 8 (true 2 at t=20), c2 = 6 (true 1.5).
        assert_eq!(m.peek(), Some(2));
    }

    /// A circuit charged while it was not waiting goes in behind one that
    /// sent less: what it sent straight through still counts.
    #[test]
    fn cells_charged_while_idle_count_when_the_circuit_waits() {
        let mut m = EwmaMux::new(10.0);
        let mut e = [CircuitEwma::default(); 3];
        let w = m.weight(0.0);
        m.charge_idle(&mut e[1], 50, w);
        m.charge_idle(&mut e[2], 2, w);
        assert_eq!((e[1].count, e[2].count), (50.0, 2.0));
        m.activate(1, &mut e[1]);
        m.activate(2, &mut e[2]);
        assert_eq!(m.peek(), Some(2), "the quiet one first");
        // Active circuits are charged by `sent`, not here.
        m.charge_idle(&mut e[2], 100, w);
        assert_eq!(e[2].count, 2.0);
        // Round robin keeps no counts.
        let rr = EwmaMux::new(0.0);
        let mut x = CircuitEwma::default();
        rr.charge_idle(&mut x, 5, 1.0);
        assert_eq!(x.count, 0.0);
    }

    #[test]
    fn renormalisation_keeps_the_order_and_bounds_the_numbers() {
        let mut m = EwmaMux::new(1.0);
        let mut e = [CircuitEwma::default(); 3];
        m.activate(1, &mut e[1]);
        m.activate(2, &mut e[2]);
        let w = m.weight(0.0);
        m.sent(1, &mut e[1], 1, w, true);
        assert_eq!(m.peek(), Some(2));
        // 200 half-lives later: the weight would be 2^200; it renormalises.
        let w = m.weight(200.0);
        assert_eq!(w, 1.0);
        m.sent(2, &mut e[2], 3, w, true);
        assert_eq!(
            m.peek(),
            Some(1),
            "c1's old cell has decayed to nothing; c2 just sent 3"
        );
        // An idle circuit from two epochs ago counts as fresh.
        let mut idle = CircuitEwma {
            count: 5.0,
            epoch: 0,
            active: false,
        };
        m.weight(400.0);
        m.activate(7, &mut idle);
        assert_eq!(m.peek(), Some(7));
    }

    #[test]
    fn off_is_round_robin() {
        let mut m = EwmaMux::new(0.0);
        assert!(!m.enabled());
        let mut e = [CircuitEwma::default(); 4];
        for k in 1..4 {
            m.activate(k, &mut e[k as usize]);
        }
        let mut order = Vec::new();
        for _ in 0..6 {
            let k = m.peek().unwrap();
            order.push(k);
            m.sent(k, &mut e[k as usize], 1, 1.0, true);
        }
        assert_eq!(order, vec![1, 2, 3, 1, 2, 3]);
        m.remove(2, &mut e[2]);
        assert_eq!(m.len(), 2);
    }

    /// A long random trace: circuits become active, the scheduler serves the
    /// top circuit each step, time advances. The scaled-tick mux must pick
    /// the same circuit as a naive implementation that decays every count
    /// at every step, over 100 000 steps and several renormalisations.
    #[test]
    fn scaled_tick_matches_naive_decay_on_a_long_trace() {
        let halflife = 0.5;
        let mut m = EwmaMux::new(halflife);
        let n = 40usize;
        let mut e = vec![CircuitEwma::default(); n];
        let mut naive = vec![0.0f64; n];
        let mut queued = vec![0u32; n];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut t = 0.0f64;
        let mut last_t = 0.0f64;
        let mut compared = 0;
        for step in 0..100_000 {
            // Time moves on by 0–20 ms; every count decays in the naive model.
            t += (rand() % 20) as f64 / 1000.0;
            let decay = (-(t - last_t) / halflife).exp2();
            for c in naive.iter_mut() {
                *c *= decay;
            }
            last_t = t;
            // Some circuits get cells (bursty ones rarely, bulk ones often).
            for _ in 0..(rand() % 3) {
                let k = (rand() % n as u64) as usize;
                if k < 10 || rand() % 8 == 0 {
                    queued[k] += 1 + (rand() % 4) as u32;
                    m.activate(k as u32, &mut e[k]);
                }
            }
            let w = m.weight(t);
            let Some(top) = m.peek() else { continue };
            // The naive choice: smallest decayed count among active.
            let best = (0..n)
                .filter(|&k| queued[k] > 0)
                .min_by(|&a, &b| naive[a].total_cmp(&naive[b]).then(a.cmp(&b)))
                .unwrap();
            let (a, b) = (naive[top as usize], naive[best]);
            // Ties (equal within rounding) may break either way.
            assert!(
                top as usize == best || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-300),
                "step {step}: mux picked {top} ({a}), naive picked {best} ({b})"
            );
            compared += 1;
            let k = top as usize;
            queued[k] -= 1;
            naive[k] += 1.0;
            m.sent(top, &mut e[k], 1, w, queued[k] > 0);
        }
        assert!(compared > 50_000);
        assert!(
            m.epoch >= 2,
            "the trace must cross renormalisations (epoch {})",
            m.epoch
        );
    }
}
