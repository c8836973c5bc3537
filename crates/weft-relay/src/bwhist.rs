//! Bandwidth history and the observed bandwidth the descriptor reports, as
//! C Tor's bwhist does: per-second totals, the largest 10-second average of
//! min(read, written) per UTC day, kept for five days and saved in
//! `DataDirectory/state` so that a restart does not reset the relay to "0
//! bytes/s observed" (which costs it the Fast flag and all its consensus
//! weight). [dir-spec §2.1.1 "bandwidth"; protocol-notes §10.4]
//!
//! The state file is weft's own, one item per line:
//! `BWHistoryObserved <UTC day number> <bytes/s>`. It is not a key: a file
//! that does not parse is reported and ignored, never fatal.

use std::collections::VecDeque;
use std::fmt::Write as _;

/// Days of history kept.
pub const DAYS_KEPT: u64 = 5;
/// Seconds averaged for one observation.
const WINDOW: usize = 10;

/// Bandwidth history of the relay.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BandwidthHistory {
    cur_read: u64,
    cur_write: u64,
    window: VecDeque<(u64, u64)>,
    days: VecDeque<(u64, u64)>,
    /// Total bytes read since start.
    pub total_read: u64,
    /// Total bytes written since start.
    pub total_written: u64,
    /// Total relay cells handed between halves since start.
    pub total_cells: u64,
}

impl BandwidthHistory {
    /// Add bytes reported by a worker.
    pub fn add(&mut self, read: u64, written: u64) {
        self.cur_read += read;
        self.cur_write += written;
        self.total_read += read;
        self.total_written += written;
    }

    /// Bytes read and written in the last closed second.
    pub fn last_second(&self) -> (u64, u64) {
        self.window.back().copied().unwrap_or_default()
    }

    /// Close the current second; `day` is the UTC day number (unix time /
    /// 86400).
    pub fn tick(&mut self, day: u64) {
        self.window.push_back((self.cur_read, self.cur_write));
        self.cur_read = 0;
        self.cur_write = 0;
        if self.window.len() > WINDOW {
            self.window.pop_front();
        }
        if self.window.len() == WINDOW {
            let r: u64 = self.window.iter().map(|w| w.0).sum();
            let w: u64 = self.window.iter().map(|w| w.1).sum();
            self.note(day, r.min(w) / WINDOW as u64);
        }
    }

    fn note(&mut self, day: u64, value: u64) {
        match self.days.back_mut() {
            Some((d, v)) if *d == day => *v = (*v).max(value),
            _ => self.days.push_back((day, value)),
        }
        while self.days.front().is_some_and(|(d, _)| d + DAYS_KEPT <= day) {
            self.days.pop_front();
        }
    }

    /// Observed bandwidth, bytes/s: the largest observation of the days
    /// kept.
    pub fn observed(&self) -> u64 {
        self.days.iter().map(|(_, v)| *v).max().unwrap_or(0)
    }

    /// The state-file text for the kept days.
    pub fn to_state(&self) -> String {
        let mut s = String::from("# weft state; written by weft\n");
        for (d, v) in &self.days {
            let _ = writeln!(s, "BWHistoryObserved {d} {v}");
        }
        s
    }

    /// History from state-file text, keeping the days still in range on
    /// `today`. Errors name the line.
    pub fn from_state(text: &str, today: u64) -> Result<Self, String> {
        let mut h = BandwidthHistory::default();
        for (i, line) in text.lines().enumerate() {
            let l = line.trim();
            // The accounting's lines share the file (crate::accounting), and
            // so do the extra-info's byte histories (crate::stats).
            let key = l.split_whitespace().next().unwrap_or("");
            if l.is_empty()
                || l.starts_with('#')
                || l.starts_with("Accounting")
                || crate::stats::is_state_item(key)
            {
                continue;
            }
            let mut t = l.split_whitespace();
            match (t.next(), t.next(), t.next(), t.next()) {
                (Some("BWHistoryObserved"), Some(d), Some(v), None) => {
                    let d: u64 = d
                        .parse()
                        .map_err(|_| format!("line {}: bad day {d:?}", i + 1))?;
                    let v: u64 = v
                        .parse()
                        .map_err(|_| format!("line {}: bad value {v:?}", i + 1))?;
                    if d <= today && d + DAYS_KEPT > today {
                        h.note(d, v);
                    }
                }
                _ => return Err(format!("line {}: unknown item {l:?}", i + 1)),
            }
        }
        Ok(h)
    }
}

/// Today's UTC day number.
pub fn today() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86400)
}

impl BandwidthHistory {
    /// The history saved by the last run, if any (a bad file is reported
    /// and ignored: it holds no secret and no identity).
    pub fn load(path: &std::path::Path) -> BandwidthHistory {
        match std::fs::read_to_string(path) {
            Ok(t) => match BandwidthHistory::from_state(&t, today()) {
                Ok(h) => {
                    tracing::info!("bandwidth history loaded: observed {} B/s", h.observed());
                    h
                }
                Err(e) => {
                    tracing::warn!("{}: {e}; starting a new bandwidth history", path.display());
                    BandwidthHistory::default()
                }
            },
            Err(_) => BandwidthHistory::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observed_is_max_ten_second_min_and_survives_a_restart() {
        let mut b = BandwidthHistory::default();
        for _ in 0..10 {
            b.add(1000, 500);
            b.tick(100);
        }
        assert_eq!(b.observed(), 500);
        assert_eq!(b.last_second(), (1000, 500));
        for _ in 0..10 {
            b.add(100, 100);
            b.tick(100);
        }
        assert_eq!(b.observed(), 500);
        // Saved and loaded the next day: still reported.
        let again = BandwidthHistory::from_state(&b.to_state(), 101).unwrap();
        assert_eq!(again.observed(), 500);
        // Five days later it has aged out.
        assert_eq!(
            BandwidthHistory::from_state(&b.to_state(), 105)
                .unwrap()
                .observed(),
            0
        );
        // A new day starts its own maximum; the old one still counts.
        let mut c = again;
        for _ in 0..10 {
            c.add(50, 50);
            c.tick(101);
        }
        assert_eq!(c.observed(), 500);
        assert!(c.to_state().contains("BWHistoryObserved 101 50"));
    }

    #[test]
    fn bad_state_lines_are_named() {
        assert!(BandwidthHistory::from_state("BWHistoryObserved x 1\n", 1)
            .unwrap_err()
            .contains("line 1"));
        assert!(BandwidthHistory::from_state("# ok\nFoo 1\n", 1)
            .unwrap_err()
            .contains("line 2"));
    }
}
