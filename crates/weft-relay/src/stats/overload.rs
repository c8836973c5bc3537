//! The extra-info's overload lines, as C Tor's rephist.c keeps and writes
//! them: `overload-ratelimits` while the read or write token bucket ran
//! empty within the last 24 h (with `BandwidthRate`, `BandwidthBurst` and
//! how many minutes it happened in, each side counted at most once a
//! minute) and `overload-fd-exhausted` while a socket could not be made
//! for want of file descriptors within the last 72 h; each event's time is
//! the start of its hour. Nothing is written when neither applies.
//! [C rephist.c rep_hist_note_overload(), rep_hist_get_overload_stats_lines()]
//!
//! Sans-IO: times are given in unix seconds.

use super::format_iso;

/// `OVERLOAD_STATS_VERSION`.
const VERSION: u32 = 1;
/// How long `overload-ratelimits` is written after its last event.
const RATELIMITS_FOR: u64 = 24 * 3600;
/// How long `overload-fd-exhausted` is written after its last event.
const FD_EXHAUSTED_FOR: u64 = 72 * 3600;

/// Overload events (C's `overload_stats_t`, less the general overload,
/// which the server descriptor carries).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OverloadStats {
    /// Start of the hour of the last empty bucket, either side.
    ratelimits_at: Option<u64>,
    /// Minutes with an empty read bucket (C's `overload_read_count`).
    read_count: u64,
    /// Minutes with an empty write bucket.
    write_count: u64,
    /// When each side was last counted (once a minute at most).
    read_counted: Option<u64>,
    write_counted: Option<u64>,
    /// Start of the hour of the last descriptor exhaustion.
    fd_exhausted_at: Option<u64>,
    /// Times descriptors ran out (not written; C keeps it too).
    fd_exhausted: u64,
}

fn start_of_hour(t: u64) -> u64 {
    t - t % 3600
}

impl OverloadStats {
    /// The read bucket (`read`) and/or the write bucket ran empty at `now`.
    pub fn note_rate_limited(&mut self, now: u64, read: bool, write: bool) {
        let once_a_minute = |last: &mut Option<u64>, count: &mut u64| {
            if last.is_none_or(|l| now >= l + 60) {
                *count += 1;
                *last = Some(now);
            }
        };
        if read {
            self.ratelimits_at = Some(start_of_hour(now));
            once_a_minute(&mut self.read_counted, &mut self.read_count);
        }
        if write {
            self.ratelimits_at = Some(start_of_hour(now));
            once_a_minute(&mut self.write_counted, &mut self.write_count);
        }
    }

    /// A socket could not be made for want of file descriptors at `now`.
    pub fn note_fd_exhausted(&mut self, now: u64) {
        self.fd_exhausted_at = Some(start_of_hour(now));
        self.fd_exhausted += 1;
    }

    /// The lines that apply at `now` (empty when none does);
    /// `rate`/`burst`: the relay's `BandwidthRate` and `BandwidthBurst`.
    pub fn lines(&self, now: u64, rate: u64, burst: u64) -> String {
        let recent = |at: Option<u64>, span: u64| at.filter(|&t| t + span > now);
        let mut s = String::new();
        if let Some(t) = recent(self.ratelimits_at, RATELIMITS_FOR).and_then(format_iso) {
            s.push_str(&format!(
                "overload-ratelimits {VERSION} {t} {rate} {burst} {} {}\n",
                self.read_count, self.write_count
            ));
        }
        if let Some(t) = recent(self.fd_exhausted_at, FD_EXHAUSTED_FOR).and_then(format_iso) {
            s.push_str(&format!("overload-fd-exhausted {VERSION} {t}\n"));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-28 10:00:00 UTC.
    const T: u64 = 1_795_860_000;

    #[test]
    fn nothing_without_an_event() {
        assert_eq!(OverloadStats::default().lines(T, 100, 200), "");
    }

    #[test]
    fn ratelimits_count_minutes_and_age_out_after_a_day() {
        let mut o = OverloadStats::default();
        o.note_rate_limited(T + 125, true, false);
        o.note_rate_limited(T + 150, true, true); // read: same minute
        o.note_rate_limited(T + 185, true, false); // read: a minute later
        o.note_rate_limited(T + 200, false, true); // write: same minute
        assert_eq!(
            o.lines(T + 300, 1_073_741_824, 2_147_483_647),
            "overload-ratelimits 1 2026-11-28 10:00:00 1073741824 2147483647 2 1\n"
        );
        // Hours later the time moves to the new event's hour.
        o.note_rate_limited(T + 3 * 3600 + 59, false, true);
        assert!(o
            .lines(T + 4 * 3600, 1, 1)
            .starts_with("overload-ratelimits 1 2026-11-28 13:00:00 1 1 2 2\n"));
        // 24 h after the start of that hour: gone.
        assert!(!o.lines(T + 3 * 3600 + 24 * 3600 - 1, 1, 1).is_empty());
        assert_eq!(o.lines(T + 3 * 3600 + 24 * 3600, 1, 1), "");
    }

    #[test]
    fn fd_exhaustion_is_written_for_three_days() {
        let mut o = OverloadStats::default();
        o.note_fd_exhausted(T + 1799);
        let line = "overload-fd-exhausted 1 2026-11-28 10:00:00\n";
        assert_eq!(o.lines(T + 72 * 3600 - 1, 1, 1), line);
        assert_eq!(o.lines(T + 72 * 3600, 1, 1), "");
        // Both kinds: ratelimits first, as C writes them.
        o.note_rate_limited(T + 60, true, false);
        assert_eq!(
            o.lines(T + 61, 5, 6),
            format!("overload-ratelimits 1 2026-11-28 10:00:00 5 6 1 0\n{line}")
        );
    }
}
