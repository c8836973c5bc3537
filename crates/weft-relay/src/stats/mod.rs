//! The statistics a relay's extra-info carries, as C Tor writes them by
//! default (`ExtraInfoStatistics 1`, in `extrainfo_dump_to_string_stats_helper`):
//! the byte histories (`write-history`, `read-history`, their `ipv6-`
//! and `dirreq-` kinds; [`history`]) and the overload lines
//! (`overload-ratelimits`, `overload-fd-exhausted`; [`overload`]), and
//! the state-file items that carry the histories across a restart under
//! C's names. [C router.c extrainfo_dump_to_string_stats_helper();
//! bwhist.c bwhist_get_bandwidth_lines(); rephist.c
//! rep_hist_get_overload_stats_lines()]
//!
//! What C writes by default and weft does not: `geoip-db-digest`,
//! `geoip6-db-digest` and the `dirreq-*` statistics (C needs a GeoIP
//! database and 24 hours of counting; weft reads no GeoIP file, and C
//! without one turns `DirReqStatistics` off — so the two agree there),
//! `hidserv-*` statistics, and `padding-counts` (weft negotiates no
//! connection padding yet, so it has none to count).
//!
//! Sans-IO but for [`RelayStats::load`]: times are unix seconds, given.

pub mod history;
pub mod overload;

use self::history::ByteHistory;
use self::overload::OverloadStats;

/// Bytes moved in one second (or one report), by kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ByteCounts {
    /// Read from relay connections and exit streams.
    pub read: u64,
    /// Written to relay connections and exit streams.
    pub written: u64,
    /// Of `read`, over IPv6.
    pub read_v6: u64,
    /// Of `written`, over IPv6.
    pub written_v6: u64,
    /// Directory requests read (BEGIN_DIR streams).
    pub dir_read: u64,
    /// Directory answers written.
    pub dir_written: u64,
}

/// The six histories in C's line order: (extra-info keyword, state-file
/// name).
const HISTORIES: [(&str, &str); 6] = [
    ("write-history", "Write"),
    ("read-history", "Read"),
    ("ipv6-write-history", "IPv6Write"),
    ("ipv6-read-history", "IPv6Read"),
    ("dirreq-write-history", "DirWrite"),
    ("dirreq-read-history", "DirRead"),
];

/// The relay's extra-info statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayStats {
    /// In [`HISTORIES`] order.
    histories: [ByteHistory; 6],
    /// Overload events.
    pub overload: OverloadStats,
}

impl RelayStats {
    /// Statistics that start at `now`.
    pub fn new(now: u64) -> Self {
        RelayStats {
            histories: std::array::from_fn(|_| ByteHistory::new(now)),
            overload: OverloadStats::default(),
        }
    }

    /// Bytes moved at `now`. As C notes bytes only when some moved, a
    /// history that sees none does not move on either (C's `add_obs` is
    /// called per read or write).
    pub fn add_bytes(&mut self, now: u64, b: &ByteCounts) {
        let n = [
            b.written,
            b.read,
            b.written_v6,
            b.read_v6,
            b.dir_written,
            b.dir_read,
        ];
        for (h, n) in self.histories.iter_mut().zip(n) {
            if n > 0 {
                h.add(now, n);
            }
        }
    }

    /// The history lines, in C's order; a history that has not completed
    /// a period yet has none. `cutoff`: see [`ByteHistory::line`].
    pub fn history_lines(&self, cutoff: Option<u64>) -> String {
        let mut s = String::new();
        for (h, (keyword, _)) in self.histories.iter().zip(HISTORIES) {
            if let Some(l) = h.line(keyword, cutoff) {
                s.push_str(&l);
                s.push('\n');
            }
        }
        s
    }

    /// The extra-info's statistics at `now`, as C's chunks (each whole
    /// lines, in C's order; a document too large drops chunks from the
    /// end): the histories, then the overload lines. `rate`/`burst`: the
    /// relay's `BandwidthRate` and `BandwidthBurst`.
    pub fn extra_info_chunks(&self, now: u64, rate: u64, burst: u64) -> Vec<String> {
        [
            self.history_lines(None),
            self.overload.lines(now, rate, burst),
        ]
        .into_iter()
        .filter(|c| !c.is_empty())
        .collect()
    }

    /// The histories' state-file items (C's `BWHistory*` names).
    pub fn to_state(&self) -> String {
        self.histories
            .iter()
            .zip(HISTORIES)
            .map(|(h, (_, name))| h.to_state(name))
            .collect()
    }

    /// The histories from state-file text (other items ignored; a history
    /// whose items are missing or do not parse starts anew at `now`).
    pub fn from_state(text: &str, now: u64) -> Self {
        fn item<'a>(text: &'a str, name: &str, what: &str) -> Option<&'a str> {
            let key = format!("BWHistory{name}{what}");
            text.lines().find_map(|l| {
                let (k, v) = l.trim().split_once(' ')?;
                (k == key).then_some(v.trim())
            })
        }
        let item = |name: &str, what: &str| item(text, name, what);
        let mut s = RelayStats::new(now);
        for (h, (_, name)) in s.histories.iter_mut().zip(HISTORIES) {
            let Some(ends) = item(name, "Ends").and_then(parse_iso) else {
                continue;
            };
            // C's default interval (the or_state_t default).
            let interval = match item(name, "Interval") {
                Some(v) => match v.parse::<u64>() {
                    Ok(v) => v,
                    Err(_) => continue,
                },
                None => 900,
            };
            let values: Result<Vec<u64>, _> = item(name, "Values")
                .unwrap_or("")
                .split(',')
                .filter(|v| !v.is_empty())
                .map(str::parse)
                .collect();
            let Ok(values) = values else { continue };
            *h = ByteHistory::from_state(ends, interval, &values, now);
        }
        s
    }

    /// The statistics saved in the state file at `path`, if any.
    pub fn load(path: &std::path::Path, now: u64) -> Self {
        match std::fs::read_to_string(path) {
            Ok(t) => RelayStats::from_state(&t, now),
            Err(_) => RelayStats::new(now),
        }
    }
}

/// True for the state-file items [`RelayStats::to_state`] writes (so
/// other readers of the state file can skip them).
pub fn is_state_item(key: &str) -> bool {
    HISTORIES.iter().any(|(_, name)| {
        key.strip_prefix("BWHistory")
            .and_then(|k| k.strip_prefix(name))
            .is_some_and(|what| matches!(what, "Ends" | "Interval" | "Values" | "Maxima"))
    })
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) of unix time `secs`.
pub(crate) fn format_iso(secs: u64) -> Option<String> {
    let t = time::OffsetDateTime::from_unix_timestamp(i64::try_from(secs).ok()?).ok()?;
    let fmt = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
    t.format(&fmt).ok()
}

/// Unix time of `YYYY-MM-DD HH:MM:SS` (UTC).
pub(crate) fn parse_iso(s: &str) -> Option<u64> {
    let fmt = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
    let t = time::PrimitiveDateTime::parse(s.trim(), &fmt).ok()?;
    u64::try_from(t.assume_utc().unix_timestamp()).ok()
}

#[cfg(test)]
mod tests {
    use super::history::INTERVAL;
    use super::*;

    /// 2026-11-28 00:00:00 UTC.
    const T0: u64 = 1_795_824_000;

    fn bytes(read: u64, written: u64, v6: u64, dir: u64) -> ByteCounts {
        ByteCounts {
            read,
            written,
            read_v6: v6,
            written_v6: v6,
            dir_read: dir,
            dir_written: 2 * dir,
        }
    }

    #[test]
    fn lines_in_c_order_once_a_period_completed() {
        let mut s = RelayStats::new(T0);
        s.add_bytes(T0 + 5, &bytes(10 << 10, 20 << 10, 3 << 10, 1 << 10));
        assert!(s.extra_info_chunks(T0 + 6, 1, 1).is_empty());
        s.add_bytes(T0 + INTERVAL, &bytes(1, 1, 1, 1));
        assert_eq!(
            s.history_lines(None),
            "write-history 2026-11-29 00:00:00 (86400 s) 20480\n\
             read-history 2026-11-29 00:00:00 (86400 s) 10240\n\
             ipv6-write-history 2026-11-29 00:00:00 (86400 s) 3072\n\
             ipv6-read-history 2026-11-29 00:00:00 (86400 s) 3072\n\
             dirreq-write-history 2026-11-29 00:00:00 (86400 s) 2048\n\
             dirreq-read-history 2026-11-29 00:00:00 (86400 s) 1024\n"
        );
        s.overload.note_fd_exhausted(T0 + INTERVAL);
        let chunks = s.extra_info_chunks(T0 + INTERVAL, 1, 1);
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[1], "overload-fd-exhausted 1 2026-11-29 00:00:00\n");
    }

    #[test]
    fn a_kind_without_bytes_does_not_move() {
        // No IPv6 bytes ever: no IPv6 lines (as C's arrays, which only
        // advance when bytes are noted).
        let mut s = RelayStats::new(T0);
        s.add_bytes(T0 + 1, &bytes(4096, 4096, 0, 0));
        s.add_bytes(T0 + INTERVAL + 1, &bytes(4096, 4096, 0, 0));
        let l = s.history_lines(None);
        assert!(l.contains("\nread-history ") && !l.contains("ipv6") && !l.contains("dirreq"));
    }

    #[test]
    fn state_round_trip_and_other_items_ignored() {
        let mut s = RelayStats::new(T0);
        s.add_bytes(
            T0 + 1,
            &bytes(86_400 << 10, 86_400 << 11, 86_400 << 10, 86_400 << 10),
        );
        s.add_bytes(T0 + INTERVAL + 1, &bytes(1, 1, 1, 1));
        let text = format!(
            "# weft state\nBWHistoryObserved 20785 100\n{}AccountingBytesReadInInterval 5\n",
            s.to_state()
        );
        assert!(text.contains("BWHistoryIPv6ReadEnds 2026-11-30 00:00:00\n"));
        let again = RelayStats::from_state(&text, T0 + INTERVAL + 3600);
        assert_eq!(again.history_lines(None), s.history_lines(None));
        for l in text.lines().filter(|l| l.starts_with("BWHistory")) {
            let key = l.split(' ').next().unwrap();
            assert_eq!(is_state_item(key), key != "BWHistoryObserved", "{key}");
        }
        assert!(is_state_item("BWHistoryDirWriteMaxima"));
        assert!(!is_state_item("BWHistoryReadFoo"));
        // A value that does not parse: that history starts anew.
        let bad = text.replace("BWHistoryReadValues ", "BWHistoryReadValues x,");
        let b = RelayStats::from_state(&bad, T0 + INTERVAL + 3600);
        assert!(!b.history_lines(None).contains("\nread-history"));
        assert!(b.history_lines(None).contains("write-history"));
    }

    #[test]
    fn iso_times() {
        assert_eq!(format_iso(T0).as_deref(), Some("2026-11-28 00:00:00"));
        assert_eq!(parse_iso("2026-11-28 00:00:00"), Some(T0));
        assert_eq!(parse_iso("2026-11-28"), None);
    }
}
