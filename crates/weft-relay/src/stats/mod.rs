//! The statistics a relay's extra-info carries, as C Tor writes them by
//! default (`ExtraInfoStatistics 1`, in `extrainfo_dump_to_string_stats_helper`):
//! the byte histories (`write-history`, `read-history`, their `ipv6-`
//! and `dirreq-` kinds; [`history`]), with a GeoIP database
//! (`geoip-db-digest`, `geoip6-db-digest`; [`geoip`]) the directory-request
//! statistics of the last 24-hour interval (`dirreq-stats-end`,
//! `dirreq-v3-*`; [`dirreq`]), and the overload lines
//! (`overload-ratelimits`, `overload-fd-exhausted`; [`overload`]) and
//! the cell counts of `padding-counts` ([`padding`]), in C's order; and
//! the state-file items that carry the histories across a restart under
//! C's names. [C router.c
//! extrainfo_dump_to_string_stats_helper(); bwhist.c
//! bwhist_get_bandwidth_lines(); geoip_stats.c geoip_format_dirreq_stats();
//! rephist.c rep_hist_get_overload_stats_lines()]
//!
//! The onion-service statistics (`hidserv-v3-*`; [`hidserv`]) come
//! between the directory requests and the padding counts.
//!
//! Sans-IO but for [`RelayStats::load`]: times are unix seconds, given.

pub mod dirreq;
pub mod geoip;
pub mod hidserv;
pub mod history;
pub mod overload;
pub mod padding;

use std::net::IpAddr;

use self::dirreq::{DirreqKind, DirreqStats, NsResponse};
use self::geoip::GeoIp;
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
    /// Directory-request statistics, with a GeoIP database only.
    dirreq: Option<Dirreq>,
    /// The cell counts of `padding-counts`.
    pub padding: padding::PaddingStats,
    /// The onion-service counts (None: `HiddenServiceStatistics 0`).
    pub hidserv: Option<hidserv::HsStats>,
    /// The text of `stats/hidserv-v3-stats` (the last interval's), if any.
    pub hidserv_written: Option<String>,
}

/// The directory-request statistics being counted and the last ones
/// written.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Dirreq {
    geoip: GeoIp,
    current: DirreqStats,
    /// The text of `stats/dirreq-stats` (the last interval's), if any.
    written: Option<String>,
}

impl RelayStats {
    /// Statistics that start at `now`.
    pub fn new(now: u64) -> Self {
        RelayStats {
            histories: std::array::from_fn(|_| ByteHistory::new(now)),
            overload: OverloadStats::default(),
            dirreq: None,
            padding: padding::PaddingStats::new(now, padding::INTERVAL, true),
            hidserv: None,
            hidserv_written: None,
        }
    }

    /// Count directory requests from `now` on, with `geoip` (C needs its
    /// IPv4 file); `written`: the `stats/dirreq-stats` a previous run
    /// left, if any (C puts it in the extra-info while it is fresh).
    pub fn enable_dirreq(&mut self, geoip: GeoIp, now: u64, written: Option<String>) {
        self.dirreq = Some(Dirreq {
            geoip,
            current: DirreqStats::new(now),
            written,
        });
    }

    /// A consensus request over BEGIN_DIR from `ip` was answered at
    /// `now_ms` (see [`DirreqStats`]); `id` names it until it is done.
    pub fn note_dir_request(
        &mut self,
        id: u64,
        ip: Option<IpAddr>,
        response: NsResponse,
        size: u64,
        now_ms: u64,
    ) {
        let Some(d) = self.dirreq.as_mut() else {
            return;
        };
        match (response, ip) {
            (NsResponse::Ok, Some(ip)) => {
                d.current.note_client(ip, d.geoip.country(ip));
                d.current.note_response(response);
                d.current
                    .start_download(DirreqKind::Tunneled, id, size, now_ms);
            }
            // C notes a success only with the client's address.
            (NsResponse::Ok, None) => {}
            (r, _) => d.current.note_response(r),
        }
    }

    /// The consensus of request `id` was sent whole at `now_ms`.
    pub fn note_dir_request_done(&mut self, id: u64, now_ms: u64) {
        if let Some(d) = self.dirreq.as_mut() {
            d.current
                .complete_download(DirreqKind::Tunneled, id, now_ms);
        }
    }

    /// At the end of a 24-hour interval: the statistics to write into
    /// `stats/dirreq-stats` (a new interval starts at `now`).
    pub fn dirreq_due(&mut self, now: u64, now_ms: u64) -> Option<String> {
        let d = self.dirreq.as_mut()?;
        if now < d.current.start() + dirreq::INTERVAL {
            return None;
        }
        let text = d.current.format(now, now_ms);
        d.current = DirreqStats::new(now);
        d.written = Some(text.clone());
        Some(text)
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
    /// end): the histories, the GeoIP digests, the directory requests, the
    /// padding counts, then the overload lines. `rate`/`burst`: the
    /// relay's `BandwidthRate` and `BandwidthBurst`.
    pub fn extra_info_chunks(&self, now: u64, rate: u64, burst: u64) -> Vec<String> {
        let (digests, dirreq) = match &self.dirreq {
            Some(d) => (
                d.geoip.digest_lines(),
                d.written
                    .as_deref()
                    .and_then(|t| dirreq::fresh_stats(t, "dirreq-stats-end", now))
                    .unwrap_or_default()
                    .to_string(),
            ),
            None => (String::new(), String::new()),
        };
        let hidserv = match (&self.hidserv, &self.hidserv_written) {
            (Some(_), Some(t)) => dirreq::fresh_stats(t, "hidserv-v3-stats-end", now)
                .unwrap_or_default()
                .to_string(),
            _ => String::new(),
        };
        [
            self.history_lines(None),
            digests,
            dirreq,
            hidserv,
            self.padding.line().unwrap_or_default(),
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
    fn directory_requests_are_counted_with_a_geoip_file_only() {
        let mut s = RelayStats::new(T0);
        let ip: IpAddr = "1.0.0.7".parse().unwrap();
        // No GeoIP file: nothing counted, no lines (C turns
        // DirReqStatistics off).
        s.note_dir_request(1, Some(ip), NsResponse::Ok, 100, 0);
        assert_eq!(s.dirreq_due(T0 + 2 * INTERVAL, 0), None);
        let (v4, _) = geoip::GeoIpTable::parse_v4("16777216,16777471,AU\n");
        let digest = v4.digest.clone();
        s.enable_dirreq(
            GeoIp {
                v4: Some(v4),
                v6: None,
            },
            T0,
            None,
        );
        s.note_dir_request(1, Some(ip), NsResponse::Ok, 100_000, 1000);
        s.note_dir_request_done(1, 1500);
        s.note_dir_request(2, Some("9.9.9.9".parse().unwrap()), NsResponse::Ok, 5, 2000);
        s.note_dir_request(3, None, NsResponse::NotModified, 0, 2000);
        // Before the interval ends: only the GeoIP digest.
        assert_eq!(s.dirreq_due(T0 + INTERVAL - 1, 3000), None);
        let chunks = s.extra_info_chunks(T0 + 10, 1, 1);
        assert_eq!(chunks, vec![format!("geoip-db-digest {digest}\n")]);
        let text = s.dirreq_due(T0 + INTERVAL, 3000).expect("due");
        // Equal counts: by code, "??" first (C's strcmp).
        assert!(text.contains("\ndirreq-v3-ips ??=8,au=8\n"), "{text}");
        assert!(text.contains("\ndirreq-v3-resp ok=8,not-enough-sigs=0,unavailable=0,not-found=0,not-modified=8,busy=0\n"));
        assert!(
            text.contains("\ndirreq-v3-tunneled-dl complete=4,timeout=0,running=4\n"),
            "{text}"
        );
        // The new interval starts; what was written goes into extra-infos
        // for 25 hours.
        assert_eq!(s.dirreq_due(T0 + INTERVAL + 1, 3001), None);
        let chunks = s.extra_info_chunks(T0 + INTERVAL + 10, 1, 1);
        assert_eq!(chunks[1], text);
        let later = s.extra_info_chunks(T0 + INTERVAL + 25 * 3600 + 1, 1, 1);
        assert_eq!(later.len(), 1, "{later:?}");
    }

    #[test]
    fn iso_times() {
        assert_eq!(format_iso(T0).as_deref(), Some("2026-11-28 00:00:00"));
        assert_eq!(parse_iso("2026-11-28 00:00:00"), Some(T0));
        assert_eq!(parse_iso("2026-11-28"), None);
    }

    /// The `hidserv-v3-*` lines go between the directory requests and the
    /// padding counts while their file is at most 25 hours old, and only
    /// with `HiddenServiceStatistics 1`.
    #[test]
    fn hidserv_lines_come_in_cs_place_while_fresh() {
        let end = T0 + 36 * 3600;
        let mut s = RelayStats::new(T0);
        let text = "hidserv-v3-stats-end 2026-11-29 12:00:00 (86400 s)\nhidserv-rend-v3-relayed-cells 0 delta_f=2048 epsilon=0.30 bin_size=1024\nhidserv-dir-v3-onions-seen 8 delta_f=8 epsilon=0.30 bin_size=8\n";
        s.hidserv_written = Some(text.into());
        assert!(!s
            .extra_info_chunks(end, 1, 1)
            .iter()
            .any(|c| c.contains("hidserv")));
        s.hidserv = Some(hidserv::HsStats::new(T0));
        s.padding = padding::PaddingStats::new(T0, 3600, true);
        let chunks = s.extra_info_chunks(end, 1, 1);
        let at = chunks
            .iter()
            .position(|c| c == text)
            .expect("hidserv chunk");
        if let Some(p) = chunks.iter().position(|c| c.starts_with("padding-counts")) {
            assert!(at < p);
        }
        assert!(!s
            .extra_info_chunks(end + 25 * 3600 + 1, 1, 1)
            .iter()
            .any(|c| c.contains("hidserv")));
    }
}
