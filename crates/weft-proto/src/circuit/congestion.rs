//! Congestion control at the last hop of a circuit (proposal 324), as C Tor
//! 0.4.9 runs it at an exit: the negotiation carried in the ntor-v3
//! handshake's extensions, and TOR_VEGAS — the congestion window that
//! replaces the fixed package window once a client asked for it, grown and
//! shrunk from the RTT each SENDME measures. Sans-IO: the caller passes the
//! clock (microseconds) and whether the circuit is blocked on its
//! connection. The SENDME digests and the deliver side stay in
//! [`super::flow`].
//! [proposal 324 §2–3; C congestion_control_common.c,
//! congestion_control_vegas.c, onion_crypto.c
//! negotiate_v3_ntor_server_circ_params()]

/// ntor-v3 extension: the client asks for congestion control (empty).
pub const EXT_CC_REQUEST: u8 = 1;
/// ntor-v3 extension: the relay accepts, with its `sendme_inc` (one byte).
pub const EXT_CC_RESPONSE: u8 = 2;

/// Cells that fit one TLS record (C's `TLS_RECORD_MAX_CELLS`, 31).
const TLS_RECORD_MAX_CELLS: u64 = 16 * 1024 / 514;
/// C's `OUTBUF_CELLS`, the unit of the Vegas thresholds.
const OUTBUF_CELLS: u64 = 2 * TLS_RECORD_MAX_CELLS;
/// The smallest relay payload (C's `RELAY_PAYLOAD_SIZE_MIN`): the unit of
/// `cc_xoff_exit`.
const RELAY_PAYLOAD_SIZE_MIN: u64 = 509 - 21;

/// The consensus parameters an exit's congestion control runs with (C's
/// names in the comments; defaults and bounds as C clamps them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CcParams {
    /// `cc_alg` is Vegas (2), not the fixed windows (0): we accept a
    /// client's request.
    pub enabled: bool,
    /// `cc_sendme_inc`: cells per SENDME (31).
    pub sendme_inc: u8,
    /// `cc_cwnd_init` (124).
    pub cwnd_init: u64,
    /// `cc_cwnd_min` (124).
    pub cwnd_min: u64,
    /// `cc_cwnd_max` (INT32_MAX).
    pub cwnd_max: u64,
    /// `cc_cwnd_inc` (1): steady-state step.
    pub cwnd_inc: u64,
    /// `cc_cwnd_inc_pct_ss` (100): slow-start step, percent.
    pub cwnd_inc_pct_ss: u64,
    /// `cc_cwnd_inc_rate` (31): updates per cwnd after slow start.
    pub cwnd_inc_rate: u64,
    /// `cc_ewma_cwnd_pct` (50), `cc_ewma_max` (10), `cc_ewma_ss` (2).
    pub ewma_cwnd_pct: u64,
    /// See `ewma_cwnd_pct`.
    pub ewma_max: u64,
    /// See `ewma_cwnd_pct`.
    pub ewma_ss: u64,
    /// `cc_rtt_reset_pct` (100).
    pub rtt_reset_pct: u64,
    /// `cc_vegas_alpha_exit` (186), `_beta_exit` (248), `_gamma_exit`
    /// (186), `_delta_exit` (310).
    pub alpha: u64,
    /// See `alpha`.
    pub beta: u64,
    /// See `alpha`.
    pub gamma: u64,
    /// See `alpha`.
    pub delta: u64,
    /// `cc_sscap_exit` (600).
    pub ss_cwnd_cap: u64,
    /// `cc_ss_max` (5000).
    pub ss_cwnd_max: u64,
    /// `cc_cwnd_full_gap` (4), `cc_cwnd_full_minpct` (25),
    /// `cc_cwnd_full_per_cwnd` (1).
    pub cwnd_full_gap: u64,
    /// See `cwnd_full_gap`.
    pub cwnd_full_minpct: u64,
    /// See `cwnd_full_gap`.
    pub cwnd_full_per_cwnd: bool,
    /// `cc_xoff_exit` in bytes (500 × 488): a stream's bytes waiting for
    /// its destination above which the exit sends XOFF.
    pub xoff_exit_bytes: usize,
}

impl Default for CcParams {
    fn default() -> Self {
        Self::from_consensus(|_, d, _, _| d)
    }
}

impl CcParams {
    /// The parameters from the consensus: `get(name, default, min, max)`
    /// returns the clamped value (C's `networkstatus_get_param`).
    pub fn from_consensus(get: impl Fn(&str, i32, i32, i32) -> i32) -> Self {
        let g = |name: &str, d: u64, min: i32, max: i32| {
            u64::try_from(get(name, d as i32, min, max)).unwrap_or(d)
        };
        let inc = TLS_RECORD_MAX_CELLS;
        let alg = g("cc_alg", 2, 0, 2);
        CcParams {
            // Algorithms other than 0 and 2 are C's "unsupported": default.
            enabled: alg != 0,
            sendme_inc: g("cc_sendme_inc", inc, 1, 254) as u8,
            cwnd_init: g("cc_cwnd_init", 4 * inc, inc as i32, 10_000),
            cwnd_min: g("cc_cwnd_min", 4 * inc, inc as i32, 1000),
            cwnd_max: g("cc_cwnd_max", i32::MAX as u64, 500, i32::MAX),
            cwnd_inc: g("cc_cwnd_inc", 1, 1, 1000),
            cwnd_inc_pct_ss: g("cc_cwnd_inc_pct_ss", 100, 1, 500),
            cwnd_inc_rate: g("cc_cwnd_inc_rate", inc, 1, 250),
            ewma_cwnd_pct: g("cc_ewma_cwnd_pct", 50, 1, 255),
            ewma_max: g("cc_ewma_max", 10, 2, i32::MAX),
            ewma_ss: g("cc_ewma_ss", 2, 2, i32::MAX),
            rtt_reset_pct: g("cc_rtt_reset_pct", 100, 0, 100),
            alpha: g("cc_vegas_alpha_exit", 3 * OUTBUF_CELLS, 0, 1000),
            beta: g("cc_vegas_beta_exit", 4 * OUTBUF_CELLS, 0, 1000),
            gamma: g("cc_vegas_gamma_exit", 3 * OUTBUF_CELLS, 0, 1000),
            delta: g("cc_vegas_delta_exit", 5 * OUTBUF_CELLS, 0, i32::MAX),
            ss_cwnd_cap: g("cc_sscap_exit", 600, 100, i32::MAX),
            ss_cwnd_max: g("cc_ss_max", 5000, 500, i32::MAX),
            cwnd_full_gap: g("cc_cwnd_full_gap", 4, 0, i32::from(i16::MAX)),
            cwnd_full_minpct: g("cc_cwnd_full_minpct", 25, 0, 100),
            cwnd_full_per_cwnd: g("cc_cwnd_full_per_cwnd", 1, 0, 1) != 0,
            xoff_exit_bytes: (g("cc_xoff_exit", 500, 1, 10_000) * RELAY_PAYLOAD_SIZE_MIN) as usize,
        }
    }
}

/// The server's extension list: the CC response with our `sendme_inc`,
/// or an empty list.
pub fn server_reply(accept: Option<u8>) -> Vec<u8> {
    match accept {
        Some(inc) => vec![1, EXT_CC_RESPONSE, 1, inc],
        None => vec![0],
    }
}

/// `n_count_ewma` of C.
fn n_count_ewma(curr: u64, prev: u64, n: u64) -> u64 {
    if prev == 0 {
        curr
    } else {
        (2 * curr + (n - 1) * prev) / (n + 1)
    }
}

/// What the congestion window did at a SENDME (for counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendmeOutcome {
    /// This SENDME ended slow start.
    pub exited_slow_start: bool,
    /// The congestion window (cells) when it did (0 otherwise).
    pub ss_exit_cwnd: u64,
    /// The minimum RTT was reset (cwnd stuck at its minimum).
    pub rtt_reset: bool,
    /// No RTT could be measured (clock stalled or jumped).
    pub clock_stalled: bool,
}

/// TOR_VEGAS state of one circuit at its exit.
#[derive(Debug, Clone)]
pub struct Vegas {
    p: CcParams,
    /// Cells we may have in flight.
    pub cwnd: u64,
    /// Cells sent and not yet acknowledged by a SENDME.
    pub inflight: u64,
    /// Still in slow start.
    pub in_slow_start: bool,
    next_cc_event: u64,
    next_cwnd_event: u64,
    cwnd_full: bool,
    blocked_chan: bool,
    /// RTT estimates, µs.
    pub ewma_rtt_us: u64,
    /// See `ewma_rtt_us`.
    pub min_rtt_us: u64,
    max_rtt_us: u64,
    /// Bandwidth-delay product estimate, cells.
    pub bdp: u64,
}

impl Vegas {
    /// A new circuit's state.
    pub fn new(p: CcParams) -> Self {
        let mut v = Vegas {
            p,
            cwnd: p.cwnd_init,
            inflight: 0,
            in_slow_start: true,
            next_cc_event: 0,
            next_cwnd_event: 0,
            cwnd_full: false,
            blocked_chan: false,
            ewma_rtt_us: 0,
            min_rtt_us: 0,
            max_rtt_us: 0,
            bdp: 0,
        };
        v.next_cc_event = v.update_rate();
        v
    }

    /// Cells per SENDME.
    pub fn sendme_inc(&self) -> u64 {
        u64::from(self.p.sendme_inc.max(1))
    }

    /// C's `CWND_UPDATE_RATE`: SENDMEs between two updates of cwnd.
    fn update_rate(&self) -> u64 {
        if self.in_slow_start {
            1
        } else {
            let per = self.p.cwnd_inc_rate * self.sendme_inc();
            (self.cwnd + per / 2) / per
        }
    }

    /// C's `SENDME_PER_CWND`.
    fn sendmes_per_cwnd(&self) -> u64 {
        (self.cwnd + self.sendme_inc() / 2) / self.sendme_inc()
    }

    /// C's `n_ewma_count`.
    fn ewma_count(&self) -> u64 {
        let n = if self.in_slow_start {
            self.p.ewma_ss
        } else {
            (self.update_rate() * self.p.ewma_cwnd_pct / 100).min(self.p.ewma_max)
        };
        n.max(2)
    }

    /// Cells we may still send (C's `congestion_control_get_package_window`).
    pub fn package_window(&self) -> u64 {
        self.cwnd.saturating_sub(self.inflight)
    }

    /// Is the cell about to be sent the one whose SENDME we will time (and
    /// whose digest the SENDME will echo)? (C's
    /// `circuit_sent_cell_for_sendme` with congestion control.)
    pub fn next_cell_needs_tag(&self) -> bool {
        self.inflight != 0 && (self.inflight + 1).is_multiple_of(self.sendme_inc())
    }

    /// A cell was sent.
    pub fn cell_sent(&mut self) {
        self.inflight += 1;
    }

    /// C's `congestion_control_update_circuit_rtt`: the SENDME for the
    /// cell sent at `sent_us` came at `now_us`. Returns the RTT, or 0 if
    /// the clock looks wrong.
    fn update_rtt(&mut self, sent_us: u64, now_us: u64, out: &mut SendmeOutcome) -> u64 {
        const DISCREPANCY: u64 = 5000;
        let rtt = now_us.saturating_sub(sent_us);
        let heuristics = !self.in_slow_start && self.ewma_rtt_us != 0;
        let old = self.ewma_rtt_us;
        if rtt == 0 || (heuristics && rtt > old.saturating_mul(DISCREPANCY)) {
            out.clock_stalled = true;
            return 0;
        }
        self.ewma_rtt_us = n_count_ewma(rtt, self.ewma_rtt_us, self.ewma_count());
        self.max_rtt_us = self.max_rtt_us.max(rtt);
        if self.min_rtt_us == 0 {
            self.min_rtt_us = self.ewma_rtt_us;
        } else if self.cwnd == self.p.cwnd_min && !self.in_slow_start {
            let (hi, lo) = (
                self.ewma_rtt_us.max(self.min_rtt_us),
                self.ewma_rtt_us.min(self.min_rtt_us),
            );
            let pct = self.p.rtt_reset_pct;
            self.min_rtt_us = pct * hi / 100 + (100 - pct) * lo / 100;
            out.rtt_reset = true;
        } else if self.ewma_rtt_us < self.min_rtt_us {
            self.min_rtt_us = self.ewma_rtt_us;
        }
        rtt
    }

    /// C's `congestion_control_update_circuit_bdp`; false if no estimate
    /// could be made this time.
    fn update_bdp(&mut self, rtt: u64, blocked: bool) -> bool {
        if self.ewma_rtt_us == 0 {
            // The clock never worked on this circuit: BDP is the window.
            self.bdp = self.cwnd;
            self.blocked_chan = blocked;
            return blocked;
        }
        self.bdp = self.cwnd * self.min_rtt_us / self.ewma_rtt_us;
        if blocked != self.blocked_chan {
            // Becoming blocked, or unblocked, is a congestion signal now.
            self.next_cc_event = 0;
            self.blocked_chan = blocked;
        }
        blocked || rtt != 0
    }

    /// A SENDME arrived at `now_us` for the cell sent at `sent_us` (the
    /// digest already checked); `blocked`: the circuit's cells are held
    /// back by its connection. C's `congestion_control_vegas_process_sendme`.
    pub fn sendme_received(&mut self, sent_us: u64, now_us: u64, blocked: bool) -> SendmeOutcome {
        let mut out = SendmeOutcome::default();
        let inc = self.sendme_inc();
        self.next_cc_event = self.next_cc_event.saturating_sub(1);
        self.next_cwnd_event = self.next_cwnd_event.saturating_sub(1);
        let rtt = self.update_rtt(sent_us, now_us, &mut out);
        if !self.update_bdp(rtt, blocked) {
            self.inflight = self.inflight.saturating_sub(inc);
            return out;
        }
        let queue_use = self.cwnd.saturating_sub(self.bdp);
        if self.inflight + self.p.cwnd_full_gap * inc >= self.cwnd {
            self.cwnd_full = true;
        } else if 100 * self.inflight < self.p.cwnd_full_minpct * self.cwnd {
            self.cwnd_full = false;
        }
        if self.in_slow_start {
            if queue_use < self.p.gamma && !self.blocked_chan {
                if self.cwnd_full {
                    let step = self.slow_start_step();
                    self.cwnd += step;
                    if step * self.sendmes_per_cwnd() <= self.p.cwnd_inc * self.p.cwnd_inc_rate {
                        self.in_slow_start = false;
                    }
                }
            } else {
                self.cwnd = self.bdp + self.p.gamma;
                self.in_slow_start = false;
            }
            if self.cwnd >= self.p.ss_cwnd_max {
                self.cwnd = self.p.ss_cwnd_max;
                self.in_slow_start = false;
            }
            out.exited_slow_start = !self.in_slow_start;
            if out.exited_slow_start {
                out.ss_exit_cwnd = self.cwnd;
            }
        } else if self.next_cc_event == 0 {
            if queue_use > self.p.delta {
                self.cwnd = (self.bdp + self.p.delta).saturating_sub(self.p.cwnd_inc);
            } else if queue_use > self.p.beta || self.blocked_chan {
                self.cwnd = self.cwnd.saturating_sub(self.p.cwnd_inc);
            } else if self.cwnd_full && queue_use < self.p.alpha {
                self.cwnd += self.p.cwnd_inc;
            }
            self.cwnd = self.cwnd.max(self.p.cwnd_min);
        }
        if self.next_cwnd_event == 0 {
            self.next_cwnd_event = self.sendmes_per_cwnd();
        }
        if self.next_cc_event == 0 {
            self.next_cc_event = self.update_rate();
        }
        let reset = if self.p.cwnd_full_per_cwnd {
            self.next_cwnd_event == self.sendmes_per_cwnd()
        } else {
            self.next_cc_event == self.update_rate()
        };
        if reset {
            self.cwnd_full = false;
        }
        self.cwnd = self.cwnd.min(self.p.cwnd_max);
        self.inflight = self.inflight.saturating_sub(inc);
        out
    }

    /// C's `rfc3742_ss_inc`.
    fn slow_start_step(&self) -> u64 {
        let inc = self.sendme_inc();
        if self.cwnd <= self.p.ss_cwnd_cap {
            (self.p.cwnd_inc_pct_ss * inc + 50) / 100
        } else {
            ((inc * self.p.ss_cwnd_cap + self.cwnd) / (2 * self.cwnd)).max(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_c_tors() {
        let p = CcParams::default();
        assert!(p.enabled);
        assert_eq!(p.sendme_inc, 31);
        assert_eq!((p.cwnd_init, p.cwnd_min), (124, 124));
        assert_eq!((p.alpha, p.beta, p.gamma, p.delta), (186, 248, 186, 310));
        assert_eq!((p.ss_cwnd_cap, p.ss_cwnd_max), (600, 5000));
        assert_eq!(p.xoff_exit_bytes, 500 * 488);
        // cc_alg 0: the fixed windows; clamped values.
        let off = CcParams::from_consensus(|n, d, min, max| match n {
            "cc_alg" => 0,
            "cc_sendme_inc" => 400i32.clamp(min, max),
            _ => d,
        });
        assert!(!off.enabled);
        assert_eq!(off.sendme_inc, 254);
    }

    #[test]
    fn extension_lists_parse_as_trunnel_does() {
        use crate::circuit::extensions::read_client_extensions as read;
        assert_eq!(read(&[0], false).map(|e| e.cc), Ok(false));
        assert_eq!(read(&[1, 1, 0], false).map(|e| e.cc), Ok(true));
        // Another extension first (an unknown type), then CC.
        assert_eq!(read(&[2, 99, 2, 9, 9, 1, 0], false).map(|e| e.cc), Ok(true));
        assert!(read(&[], false).is_err());
        assert!(read(&[1, 1], false).is_err());
        assert!(read(&[1, 1, 5, 0], false).is_err());
        assert_eq!(server_reply(Some(31)), vec![1, 2, 1, 31]);
        assert_eq!(server_reply(None), vec![0]);
    }

    /// Send a window's worth and acknowledge it every `inc` cells after
    /// `rtt_us`, as a client does; returns the cwnd after `rounds`.
    fn run(v: &mut Vegas, rounds: usize, rtt_us: impl Fn(usize) -> u64) -> Vec<u64> {
        let mut now = 1_000_000u64;
        let mut cwnds = Vec::new();
        for r in 0..rounds {
            let mut stamps = Vec::new();
            while v.package_window() > 0 {
                if v.next_cell_needs_tag() {
                    stamps.push(now);
                }
                v.cell_sent();
            }
            now += rtt_us(r);
            for s in stamps {
                v.sendme_received(s, now, false);
            }
            // The cells not acknowledged this round stay in flight.
            cwnds.push(v.cwnd);
        }
        cwnds
    }

    #[test]
    fn slow_start_grows_until_the_queue_builds_then_vegas_holds() {
        let mut v = Vegas::new(CcParams::default());
        assert_eq!(v.package_window(), 124);
        // A constant RTT: no queue, the window grows in slow start up to
        // cc_ss_max, where slow start ends; then by cc_cwnd_inc per update.
        let c = run(&mut v, 40, |_| 50_000);
        assert!(c.windows(2).all(|w| w[1] >= w[0]), "{c:?}");
        assert!(c.contains(&5000), "{c:?}");
        assert!(!v.in_slow_start);
        assert!(*c.last().unwrap() < 6000, "{c:?}");
        // The RTT doubles (a queue): Vegas brings cwnd down toward
        // BDP + delta, never below cwnd_min.
        let c = run(&mut v, 200, |_| 100_000);
        assert!(*c.last().unwrap() < 5000, "{c:?}");
        assert!(c.iter().all(|&w| w >= 124));
    }

    #[test]
    fn a_growing_rtt_ends_slow_start_at_bdp_plus_gamma() {
        let mut v = Vegas::new(CcParams::default());
        let c = run(&mut v, 30, |r| if r < 3 { 50_000 } else { 200_000 });
        assert!(!v.in_slow_start, "{c:?}");
        assert!(v.cwnd < 5000);
    }

    #[test]
    fn the_sendme_cell_is_every_inc_th_after_the_first() {
        let mut v = Vegas::new(CcParams::default());
        let tagged: Vec<u64> = (0..124u64)
            .filter(|_| {
                let t = v.next_cell_needs_tag();
                v.cell_sent();
                t
            })
            .collect();
        assert_eq!(tagged.len(), 4);
        assert_eq!(v.package_window(), 0);
    }

    #[test]
    fn a_stalled_clock_is_no_measurement() {
        let mut v = Vegas::new(CcParams::default());
        for _ in 0..31 {
            v.cell_sent();
        }
        let out = v.sendme_received(10, 10, false);
        assert!(out.clock_stalled);
        assert_eq!(v.inflight, 0);
        assert_eq!(v.cwnd, 124);
    }
}
