//! The `padding-counts` extra-info line, as C Tor's `rephist.c` keeps it
//! (`PaddingStatistics 1`, the default): the cells read and written on
//! relay connections, of them the PADDING cells, the same two counts on
//! the connections where padding is on, the circuit-padding DROP cells,
//! and the most padding timers pending at once. Counted over an interval
//! (C's `REPHIST_CELL_PADDING_COUNTS_INTERVAL`, 24 hours, from start); at
//! its end the counts are rounded up to multiples of 10,000 and become
//! the published line (none if no cell was read or none written), and a
//! new interval starts. The counts are not kept across a restart, as in
//! C. [C rephist.c rep_hist_padding_count_read(), _write(), _timers(),
//! rep_hist_prep_published_padding_counts(),
//! rep_hist_get_padding_count_lines(); mainloop.c
//! reset_padding_counts_callback()]
//!
//! Sans-IO: times are unix seconds, given.

/// C's interval: a day.
pub const INTERVAL: u64 = 24 * 60 * 60;
/// C's `ROUND_CELL_COUNTS_TO`: the published counts' bin size.
pub const ROUND_TO: u64 = 10_000;

/// Cell counts of one interval (C's `padding_counts_t` but its time).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PaddingCellCounts {
    /// Fixed-size cells read (C counts no variable-length cell read).
    pub read: u64,
    /// Cells written, fixed and variable-length.
    pub written: u64,
    /// Of `read`, PADDING cells.
    pub read_pad: u64,
    /// Of `written`, PADDING cells.
    pub written_pad: u64,
    /// Of `read`, on connections with padding on.
    pub enabled_read: u64,
    /// Of `written`, on connections with padding on.
    pub enabled_written: u64,
    /// Of `read_pad`, on connections with padding on.
    pub enabled_read_pad: u64,
    /// Of `written_pad`, on connections with padding on.
    pub enabled_written_pad: u64,
    /// Circuit-padding DROP cells received at their hop.
    pub read_drop: u64,
    /// Circuit-padding DROP cells sent.
    pub written_drop: u64,
}

impl PaddingCellCounts {
    /// Add `o`.
    pub fn add(&mut self, o: &PaddingCellCounts) {
        self.read += o.read;
        self.written += o.written;
        self.read_pad += o.read_pad;
        self.written_pad += o.written_pad;
        self.enabled_read += o.enabled_read;
        self.enabled_written += o.enabled_written;
        self.enabled_read_pad += o.enabled_read_pad;
        self.enabled_written_pad += o.enabled_written_pad;
        self.read_drop += o.read_drop;
        self.written_drop += o.written_drop;
    }

    /// Every count rounded up to a multiple of [`ROUND_TO`] (C's
    /// `round_uint64_to_next_multiple_of`: 0 stays 0).
    fn rounded(&self) -> PaddingCellCounts {
        let r = |x: u64| x.div_ceil(ROUND_TO).saturating_mul(ROUND_TO);
        PaddingCellCounts {
            read: r(self.read),
            written: r(self.written),
            read_pad: r(self.read_pad),
            written_pad: r(self.written_pad),
            enabled_read: r(self.enabled_read),
            enabled_written: r(self.enabled_written),
            enabled_read_pad: r(self.enabled_read_pad),
            enabled_written_pad: r(self.enabled_written_pad),
            read_drop: r(self.read_drop),
            written_drop: r(self.written_drop),
        }
    }
}

/// The last interval's counts, as published.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Published {
    /// When they were published (the interval's end).
    at: u64,
    counts: PaddingCellCounts,
    max_timers: u64,
}

/// The padding statistics: the interval being counted and the last one
/// published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaddingStats {
    /// `PaddingStatistics`: publish at the end of each interval.
    publish: bool,
    interval: u64,
    /// When the current interval ends.
    ends: u64,
    current: PaddingCellCounts,
    /// The most padding timers pending at once in this interval (C's
    /// `maximum_chanpad_timers`; not rounded).
    max_timers: u64,
    published: Option<Published>,
}

impl PaddingStats {
    /// Counting from `now`, over intervals of `interval` seconds (C's a
    /// day; shorter only in a testing network); `publish`: the
    /// `PaddingStatistics` option.
    pub fn new(now: u64, interval: u64, publish: bool) -> PaddingStats {
        let interval = interval.max(1);
        PaddingStats {
            publish,
            interval,
            ends: now + interval,
            current: PaddingCellCounts::default(),
            max_timers: 0,
            published: None,
        }
    }

    /// Cells counted (a worker's second).
    pub fn add(&mut self, c: &PaddingCellCounts) {
        self.current.add(c);
    }

    /// `pending` padding timers at once now.
    pub fn note_timers(&mut self, pending: u64) {
        self.max_timers = self.max_timers.max(pending);
    }

    /// At `now`: if the interval ended, its counts become the published
    /// ones (with `PaddingStatistics`; rounded, or none without a cell read
    /// and a cell written) and a new interval starts. True if it ended.
    /// [C reset_padding_counts_callback()]
    pub fn rotate(&mut self, now: u64) -> bool {
        if now < self.ends {
            return false;
        }
        if self.publish {
            // C's MIN_CELL_COUNTS_TO_PUBLISH is 1.
            self.published =
                (self.current.read >= 1 && self.current.written >= 1).then(|| Published {
                    at: now,
                    counts: self.current.rounded(),
                    max_timers: self.max_timers,
                });
        }
        self.current = PaddingCellCounts::default();
        self.max_timers = 0;
        self.ends = now + self.interval;
        true
    }

    /// The counts being gathered now.
    pub fn current(&self) -> &PaddingCellCounts {
        &self.current
    }

    /// The extra-info line, once an interval with cells ended.
    /// [C rep_hist_get_padding_count_lines()]
    pub fn line(&self) -> Option<String> {
        if !self.publish {
            return None;
        }
        let p = self.published.as_ref()?;
        let c = &p.counts;
        Some(format!(
            "padding-counts {} ({} s) bin-size={ROUND_TO} write-drop={} write-pad={} \
             write-total={} read-drop={} read-pad={} read-total={} enabled-read-pad={} \
             enabled-read-total={} enabled-write-pad={} enabled-write-total={} \
             max-chanpad-timers={}\n",
            super::format_iso(p.at)?,
            self.interval,
            c.written_drop,
            c.written_pad,
            c.written,
            c.read_drop,
            c.read_pad,
            c.read,
            c.enabled_read_pad,
            c.enabled_read,
            c.enabled_written_pad,
            c.enabled_written,
            p.max_timers
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-28 00:00:00 UTC.
    const T0: u64 = 1_795_824_000;

    fn counts(read: u64, written: u64) -> PaddingCellCounts {
        PaddingCellCounts {
            read,
            written,
            read_pad: 3,
            written_pad: 10_000,
            enabled_read: read / 2,
            enabled_written: written / 2,
            enabled_read_pad: 1,
            enabled_written_pad: 10_001,
            read_drop: 0,
            written_drop: 55,
        }
    }

    #[test]
    fn a_line_after_each_interval_rounded_as_c() {
        let mut s = PaddingStats::new(T0, INTERVAL, true);
        s.add(&counts(123_456, 7));
        s.note_timers(3);
        s.note_timers(2);
        assert!(!s.rotate(T0 + INTERVAL - 1));
        assert_eq!(s.line(), None, "nothing before the first interval ends");
        assert!(s.rotate(T0 + INTERVAL));
        assert_eq!(
            s.line().unwrap(),
            "padding-counts 2026-11-29 00:00:00 (86400 s) bin-size=10000 write-drop=10000 \
             write-pad=10000 write-total=10000 read-drop=0 read-pad=10000 read-total=130000 \
             enabled-read-pad=10000 enabled-read-total=70000 enabled-write-pad=20000 \
             enabled-write-total=10000 max-chanpad-timers=3\n"
        );
        // The next interval counts anew; its line replaces the last.
        assert_eq!(s.current(), &PaddingCellCounts::default());
        s.add(&counts(1, 1));
        assert!(!s.rotate(T0 + 2 * INTERVAL - 1));
        assert!(s.line().unwrap().contains("read-total=130000"));
        assert!(s.rotate(T0 + 2 * INTERVAL));
        let l = s.line().unwrap();
        assert!(l.starts_with("padding-counts 2026-11-30 00:00:00 (86400 s) "));
        assert!(l.contains(" read-total=10000 ") && l.ends_with(" max-chanpad-timers=0\n"));
    }

    #[test]
    fn no_line_without_cells_both_ways_or_without_the_option() {
        let mut s = PaddingStats::new(T0, INTERVAL, true);
        s.add(&counts(100, 0));
        s.rotate(T0 + INTERVAL);
        assert_eq!(
            s.line(),
            None,
            "no cell written: C zeroes what it publishes"
        );
        let mut off = PaddingStats::new(T0, INTERVAL, false);
        off.add(&counts(100, 100));
        off.rotate(T0 + INTERVAL);
        assert_eq!(off.line(), None);
    }

    #[test]
    fn stem_reads_the_line() {
        // stem's parser of `padding-counts` (as the Tor Metrics pipeline
        // reads extra-infos), if python3 with stem is here.
        let mut s = PaddingStats::new(T0, INTERVAL, true);
        s.add(&counts(20_001, 5));
        s.rotate(T0 + INTERVAL);
        let line = s.line().unwrap();
        let script = "import sys\n\
from stem.descriptor.extrainfo_descriptor import _parse_padding_counts_line as p\n\
class D: pass\n\
d = D()\n\
p(d, {'padding-counts': [(sys.argv[1], None, None)]})\n\
print(d.padding_counts_end, d.padding_counts_interval, sorted(d.padding_counts.items()))\n";
        let Ok(out) = std::process::Command::new("python3")
            .args([
                "-c",
                script,
                line.trim_end().strip_prefix("padding-counts ").unwrap(),
            ])
            .output()
        else {
            eprintln!("no python3: stem not asked");
            return;
        };
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("No module named 'stem'"),
                "stem refused {line:?}: {err}"
            );
            eprintln!("no stem: not asked");
            return;
        }
        let got = String::from_utf8_lossy(&out.stdout);
        assert!(
            got.starts_with("2026-11-29 00:00:00 86400 [('bin-size', 10000), ")
                && got.contains("('read-total', 30000)")
                && got.contains("('max-chanpad-timers', 0)"),
            "{got}"
        );
    }
}
