//! The onion-service statistics of the extra-info, as C Tor counts them by
//! default (`HiddenServiceStatistics 1`; rephist.c `rep_hist_hs_stats_*`):
//! the relay cells received on rendezvous-point circuits
//! (`hidserv-rend-v3-relayed-cells`) and the v3 blinded keys whose
//! descriptors this HSDir stored (`hidserv-dir-v3-onions-seen`), over 24
//! hours that start at the next time-period start (12:00 UTC) after
//! start-up; each figure rounded up to its bin and given Laplace noise,
//! then written to `stats/hidserv-v3-stats`, which the extra-info carries
//! while it is at most a day old. (C's v2 lines went with v2 services.)

use std::collections::HashSet;

/// C's WRITE_STATS_INTERVAL.
pub const INTERVAL: u64 = 24 * 3600;
/// C's REND_CELLS_DELTA_F, _EPSILON, _BIN_SIZE.
const CELLS: (f64, f64, u64) = (2048.0, 0.3, 1024);
/// C's ONIONS_SEEN_DELTA_F, _EPSILON, _BIN_SIZE.
const ONIONS: (f64, f64, u64) = (8.0, 0.3, 8);

/// The next 12:00 UTC at or after `now` (C's
/// `hs_get_start_time_of_next_time_period` with the default one-day period
/// and its 12-hour rotation offset), strictly after `now` as C's is.
pub fn next_time_period_start(now: u64) -> u64 {
    let offset = 12 * 3600;
    ((now.saturating_sub(offset)) / INTERVAL + 1) * INTERVAL + offset
}

/// C's `sample_laplace_distribution(0, b, p)` then `add_laplace_noise`:
/// `signal` plus noise of scale `delta_f / epsilon`, for a uniform `p` in
/// [0, 1).
pub fn add_laplace_noise(signal: i64, p: f64, delta_f: f64, epsilon: f64) -> i64 {
    if p <= 0.0 {
        return i64::MIN;
    }
    let b = delta_f / epsilon;
    let sign = if p > 0.5 { 1.0 } else { -1.0 };
    let x = -b * sign * (1.0 - 2.0 * (p - 0.5).abs()).ln();
    // C's clamp_double_to_int64: NaN is 0, then truncation.
    let noise = if x.is_nan() {
        0
    } else {
        x.clamp(i64::MIN as f64, i64::MAX as f64) as i64
    };
    signal.saturating_add(noise)
}

fn round_up(n: u64, bin: u64) -> u64 {
    n.div_ceil(bin).saturating_mul(bin)
}

/// The v3 onion-service counts of one interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HsStats {
    /// When counting starts (and the interval with it).
    start: u64,
    rend_cells: u64,
    onions: HashSet<[u8; 32]>,
}

impl HsStats {
    /// Counting from the next time-period start after `now`, as C.
    pub fn new(now: u64) -> Self {
        HsStats {
            start: next_time_period_start(now),
            rend_cells: 0,
            onions: HashSet::new(),
        }
    }

    /// `n` relay cells arrived on rendezvous-point circuits at `now`.
    pub fn note_rend_cells(&mut self, n: u64, now: u64) {
        if now >= self.start {
            self.rend_cells += n;
        }
    }

    /// The HSDir stored a descriptor for blinded key `key` at `now`.
    pub fn note_onion(&mut self, key: [u8; 32], now: u64) {
        if now >= self.start {
            self.onions.insert(key);
        }
    }

    /// The lines C writes for the counts at `now` (`p1`, `p2`: uniform in
    /// [0, 1), C's `crypto_rand_double`).
    pub fn format(&self, now: u64, p1: f64, p2: f64) -> String {
        let noisy = |n: u64, (delta_f, eps, bin): (f64, f64, u64), p: f64| {
            let rounded = round_up(n, bin).min(i64::MAX as u64) as i64;
            add_laplace_noise(rounded, p, delta_f, eps)
        };
        let end = super::format_iso(now).unwrap_or_default();
        format!(
            "hidserv-v3-stats-end {end} ({} s)\n\
             hidserv-rend-v3-relayed-cells {} delta_f={} epsilon={:.2} bin_size={}\n\
             hidserv-dir-v3-onions-seen {} delta_f={} epsilon={:.2} bin_size={}\n",
            now.saturating_sub(self.start),
            noisy(self.rend_cells, CELLS, p1),
            CELLS.0,
            CELLS.1,
            CELLS.2,
            noisy(self.onions.len() as u64, ONIONS, p2),
            ONIONS.0,
            ONIONS.1,
            ONIONS.2,
        )
    }

    /// Once the interval is over: its lines (for `stats/hidserv-v3-stats`),
    /// and counting starts again at `now` (C's `rep_hist_hs_stats_write`).
    pub fn due(&mut self, now: u64) -> Option<String> {
        if now < self.start + INTERVAL {
            return None;
        }
        let text = self.format(now, uniform(), uniform());
        *self = HsStats {
            start: now,
            rend_cells: 0,
            onions: HashSet::new(),
        };
        Some(text)
    }
}

/// A uniform double in [0, 1) (C's `crypto_rand_double`).
fn uniform() -> f64 {
    rand::random::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-28 00:00:00 UTC.
    const T0: u64 = 1_795_824_000;

    #[test]
    fn counting_starts_at_the_next_noon_utc() {
        assert_eq!(next_time_period_start(T0), T0 + 12 * 3600);
        assert_eq!(next_time_period_start(T0 + 12 * 3600), T0 + 36 * 3600);
        assert_eq!(next_time_period_start(T0 + 13 * 3600), T0 + 36 * 3600);
        let mut s = HsStats::new(T0);
        s.note_rend_cells(5, T0 + 3600);
        s.note_onion([1; 32], T0 + 3600);
        assert_eq!((s.rend_cells, s.onions.len()), (0, 0));
        s.note_rend_cells(5, T0 + 12 * 3600);
        s.note_onion([1; 32], T0 + 13 * 3600);
        s.note_onion([1; 32], T0 + 14 * 3600);
        s.note_onion([2; 32], T0 + 14 * 3600);
        assert_eq!((s.rend_cells, s.onions.len()), (5, 2));
        assert_eq!(s.due(T0 + 35 * 3600), None);
        let text = s.due(T0 + 36 * 3600).unwrap();
        assert!(
            text.starts_with("hidserv-v3-stats-end 2026-11-29 12:00:00 (86400 s)\n"),
            "{text}"
        );
        assert_eq!(s.rend_cells, 0);
        assert_eq!(s.start, T0 + 36 * 3600);
    }

    #[test]
    fn figures_are_binned_and_noised_as_c_does() {
        let mut s = HsStats::new(T0);
        s.note_rend_cells(1000, T0 + 12 * 3600);
        for i in 0..9 {
            s.note_onion([i; 32], T0 + 12 * 3600);
        }
        // p = 0.5: no noise; the figures rounded up to their bins.
        let t = s.format(T0 + 36 * 3600, 0.5, 0.5);
        assert_eq!(
            t,
            "hidserv-v3-stats-end 2026-11-29 12:00:00 (86400 s)\n\
             hidserv-rend-v3-relayed-cells 1024 delta_f=2048 epsilon=0.30 bin_size=1024\n\
             hidserv-dir-v3-onions-seen 16 delta_f=8 epsilon=0.30 bin_size=8\n"
        );
        // C's inverse CDF: b = delta_f / epsilon; p = 0.75 adds b·ln 2.
        assert_eq!(add_laplace_noise(0, 0.75, 2048.0, 0.3), 4731);
        assert_eq!(add_laplace_noise(0, 0.25, 2048.0, 0.3), -4731);
        assert_eq!(add_laplace_noise(7, 0.0, 1.0, 0.3), i64::MIN);
    }
}
