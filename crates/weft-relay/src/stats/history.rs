//! One byte history of the extra-info's `read-history`, `write-history`,
//! `ipv6-{read,write}-history` and `dirreq-{read,write}-history` lines,
//! as C Tor's bwhist.c keeps a `bw_array_t`'s totals: bytes per 24-hour
//! period (`NUM_SECS_BW_SUM_INTERVAL`), the last five periods kept
//! (`NUM_TOTALS`), periods counted from when the history began (not from
//! midnight), each total rounded down to a multiple of 1024 when written;
//! and its state-file items under C's names (`BWHistoryReadEnds`,
//! `…Interval`, `…Values`), so a restart keeps it as C's does.
//! [C bwhist.c add_obs(), advance_obs(), commit_max(),
//! bwhist_fill_bandwidth_history(), bwhist_get_one_bandwidth_line(),
//! bwhist_update_bwhist_state_section(), bwhist_load_bwhist_state_section()]
//!
//! Sans-IO: every time is given, in unix seconds. C's 10-second maxima
//! (which feed its observed bandwidth) are not kept here: weft's observed
//! bandwidth is the `bwhist` module's.

use std::collections::VecDeque;

use super::format_iso;

/// Seconds per period (C's `NUM_SECS_BW_SUM_INTERVAL`, 24 h since 0.4.x).
pub const INTERVAL: u64 = 24 * 60 * 60;
/// Periods kept (C's `NUM_TOTALS`: five days' worth).
pub const NUM_TOTALS: usize = 5;

/// The totals of one kind of bytes (C's `bw_array_t` without maxima).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ByteHistory {
    /// The last second bytes were counted in (C's `cur_obs_time`).
    cur: u64,
    /// When the current period ends (C's `next_period`).
    next_period: u64,
    /// Totals of the completed periods, oldest first.
    totals: VecDeque<u64>,
    /// Bytes of the current period (C's `total_in_period`).
    in_period: u64,
}

impl ByteHistory {
    /// A history that starts at `now` (C's `bw_array_new`): its first
    /// period ends 24 h later, and until then it has no line.
    pub fn new(now: u64) -> Self {
        ByteHistory {
            cur: now,
            next_period: now.saturating_add(INTERVAL),
            totals: VecDeque::with_capacity(NUM_TOTALS),
            in_period: 0,
        }
    }

    /// `n` bytes in second `when` (C's `add_obs`): a second before the last
    /// one counted is ignored; periods that ended by `when` are closed
    /// first, empty ones as 0.
    pub fn add(&mut self, when: u64, n: u64) {
        if when < self.cur {
            return;
        }
        self.advance_to(when);
        self.in_period = self.in_period.saturating_add(n);
    }

    /// C's `advance_obs` one second at a time up to `when`, at once: a
    /// period is closed each time the clock reaches its end.
    fn advance_to(&mut self, when: u64) {
        if when >= self.next_period {
            let closed = (when - self.next_period) / INTERVAL + 1;
            self.commit(self.in_period);
            // Empty periods: more than NUM_TOTALS of them leave only zeros.
            for _ in 1..closed.min(NUM_TOTALS as u64 + 1) {
                self.commit(0);
            }
            self.in_period = 0;
            self.next_period = self
                .next_period
                .saturating_add(closed.saturating_mul(INTERVAL));
        }
        self.cur = when;
    }

    fn commit(&mut self, total: u64) {
        if self.totals.len() == NUM_TOTALS {
            self.totals.pop_front();
        }
        self.totals.push_back(total);
    }

    /// The completed periods' totals as written (rounded down to 1 KiB,
    /// at most `cutoff`), oldest first.
    pub fn values(&self, cutoff: Option<u64>) -> Vec<u64> {
        self.totals
            .iter()
            .map(|t| (t & !0x3ff).min(cutoff.unwrap_or(u64::MAX)))
            .collect()
    }

    /// `<keyword> YYYY-MM-DD HH:MM:SS (86400 s) v,v,…` (the time is the end
    /// of the last completed period), or `None` before a period completed.
    /// `cutoff`: C's `RelayBandwidthRate * NUM_SECS_BW_SUM_INTERVAL`, so a
    /// relay never reports more than it is willing to relay.
    pub fn line(&self, keyword: &str, cutoff: Option<u64>) -> Option<String> {
        if self.totals.is_empty() {
            return None;
        }
        let values: Vec<String> = self.values(cutoff).iter().map(|v| v.to_string()).collect();
        Some(format!(
            "{keyword} {} ({INTERVAL} s) {}",
            format_iso(self.next_period - INTERVAL)?,
            values.join(",")
        ))
    }

    /// The state-file items under `name` (`Read`, `IPv6Write`, `DirRead`…):
    /// `BWHistory<name>Ends` (when the current period ends), `…Interval`
    /// and `…Values` (the completed totals, then the current one, each
    /// rounded down to 1 KiB). [C bwhist_update_bwhist_state_section()]
    pub fn to_state(&self, name: &str) -> String {
        let mut v: Vec<String> = self.values(None).iter().map(u64::to_string).collect();
        v.push((self.in_period & !0x3ff).to_string());
        format!(
            "BWHistory{name}Ends {}\nBWHistory{name}Interval {INTERVAL}\nBWHistory{name}Values {}\n",
            format_iso(self.next_period).unwrap_or_default(),
            v.join(",")
        )
    }

    /// The history saved as `ends`, `interval`, `values` (see
    /// [`Self::to_state`]), replayed as C replays it at `now`: each value
    /// spread evenly (whole bytes per second) over its interval from
    /// `ends - interval * values`, the last one only up to `now`. A saved
    /// history that ended more than five periods ago, or that starts in
    /// the future, gives a new one. [C bwhist_load_bwhist_state_section()]
    pub fn from_state(ends: u64, interval: u64, values: &[u64], now: u64) -> Self {
        let mut h = ByteHistory::new(now);
        let Some(span) = interval.checked_mul(values.len() as u64) else {
            return h;
        };
        if interval == 0 || ends < now.saturating_sub(INTERVAL * NUM_TOTALS as u64) {
            return h;
        }
        let Some(mut start) = ends.checked_sub(span) else {
            return h;
        };
        if start > now {
            return h;
        }
        h.cur = start;
        h.next_period = start.saturating_add(INTERVAL);
        for &v in values {
            if start >= now {
                break;
            }
            let len = interval.min(now - start);
            h.add_spread(start, len, v / len);
            start += len;
        }
        h
    }

    /// `per_second` bytes in each second of `[from, from + len)`.
    fn add_spread(&mut self, mut from: u64, mut len: u64, per_second: u64) {
        while len > 0 {
            self.advance_to(from);
            let span = len.min(self.next_period - from);
            self.in_period = self
                .in_period
                .saturating_add(per_second.saturating_mul(span));
            from += span;
            len -= span;
            self.cur = from - 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-28 00:00:00 UTC.
    const T0: u64 = 1_795_824_000;

    #[test]
    fn no_line_until_the_first_period_ends() {
        let mut h = ByteHistory::new(T0);
        h.add(T0, 5000);
        h.add(T0 + INTERVAL - 1, 5000);
        assert_eq!(h.line("read-history", None), None);
        // The second the period ends belongs to the next one.
        h.add(T0 + INTERVAL, 777);
        assert_eq!(
            h.line("read-history", None).as_deref(),
            // 10000 & ~0x3ff = 9216.
            Some("read-history 2026-11-29 00:00:00 (86400 s) 9216")
        );
    }

    #[test]
    fn totals_round_down_to_a_kibibyte_and_are_capped() {
        let mut h = ByteHistory::new(T0);
        h.add(T0 + 1, 1023);
        h.add(T0 + INTERVAL, 2048 + 1023);
        h.add(T0 + 2 * INTERVAL, 0);
        assert_eq!(h.values(None), vec![0, 3072 - 1024]);
        assert_eq!(h.values(Some(1500)), vec![0, 1500]);
    }

    #[test]
    fn idle_periods_are_zeros_and_only_five_are_kept() {
        let mut h = ByteHistory::new(T0);
        h.add(T0, 4096);
        // Eight periods later: the first period's total and seven empty
        // ones, of which the last five are kept.
        h.add(T0 + 8 * INTERVAL + 10, 1);
        assert_eq!(h.values(None), vec![0, 0, 0, 0, 0]);
        let mut h = ByteHistory::new(T0);
        for d in 0..7 {
            h.add(T0 + d * INTERVAL, (d + 1) * 1024);
        }
        assert_eq!(h.values(None), vec![2048, 3072, 4096, 5120, 6144]);
        assert_eq!(
            h.line("write-history", None).unwrap(),
            "write-history 2026-12-04 00:00:00 (86400 s) 2048,3072,4096,5120,6144"
        );
        // Seconds before the last one counted are ignored (C's add_obs).
        h.add(T0, 1 << 30);
        assert_eq!(h.values(None).last(), Some(&6144));
    }

    #[test]
    fn the_state_round_trips_as_c_replays_it() {
        let mut h = ByteHistory::new(T0);
        h.add(T0 + 10, 86_400 * 3);
        h.add(T0 + INTERVAL + 10, 86_400 * 5);
        let s = h.to_state("Read");
        assert_eq!(
            s,
            "BWHistoryReadEnds 2026-11-30 00:00:00\nBWHistoryReadInterval 86400\nBWHistoryReadValues 259072,431104\n"
        );
        // Loaded two hours into the second period: the completed period
        // comes back (spread evenly and rounded as C's replay does), the
        // current one is spread over the two hours already past.
        let now = T0 + INTERVAL + 7200;
        let again = ByteHistory::from_state(T0 + 2 * INTERVAL, INTERVAL, &[259_072, 431_104], now);
        assert_eq!(
            again.values(None),
            vec![(259_072 / 86_400 * 86_400) & !0x3ff]
        );
        assert_eq!(again.in_period, 431_104 / 7200 * 7200);
        assert_eq!(again.next_period, T0 + 2 * INTERVAL);
        assert_eq!(again.cur, now - 1);
        // Saved long ago: a new history.
        let old = ByteHistory::from_state(T0, INTERVAL, &[1 << 20], T0 + 6 * INTERVAL);
        assert_eq!(old, ByteHistory::new(T0 + 6 * INTERVAL));
        // Starting in the future: a new history.
        let future = ByteHistory::from_state(T0 + 9 * INTERVAL, INTERVAL, &[1], T0);
        assert_eq!(future, ByteHistory::new(T0));
    }

    #[test]
    fn an_older_interval_is_replayed_across_periods() {
        // Four 15-minute values (an old state file) straddling a period
        // boundary: each second's share lands in its own period.
        let start = T0 - 1800;
        let h = ByteHistory::from_state(start + 3600, 900, &[900, 1800, 2700, 3600], T0 + 5000);
        // The first period ran from `start` (the history's start) for 24 h:
        // it holds everything.
        assert_eq!(h.totals.len(), 0);
        assert_eq!(h.in_period, 900 + 1800 + 2700 + 3600);
        assert_eq!(h.next_period, start + INTERVAL);
    }
}
