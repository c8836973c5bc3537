//! The extra-info's directory-request statistics, as C Tor's
//! geoip_stats.c counts and writes them for v3 consensus fetches over a
//! 24-hour interval: the clients' addresses by country
//! (`dirreq-v3-ips`, each count rounded up to 8), the successful
//! requests by country (`dirreq-v3-reqs`, rounded up to 8), the answers
//! by kind (`dirreq-v3-resp`, rounded up to 8), and the downloads, direct
//! and tunneled (`dirreq-v3-direct-dl`, `dirreq-v3-tunneled-dl`:
//! complete, timed out (over 10 minutes) and running, rounded up to 4;
//! with 16 or more complete, the deciles and quartiles of their speeds in
//! bytes/s); and C's check of a stats file's age before it goes into an
//! extra-info. [C geoip_stats.c geoip_note_client_seen(),
//! geoip_note_ns_response(), geoip_start_dirreq(),
//! geoip_change_dirreq_state(), geoip_get_dirreq_history(),
//! geoip_get_client_history(), geoip_get_request_history(),
//! geoip_format_dirreq_stats(); router.c load_stats_file()]
//!
//! Sans-IO: times are given (unix seconds, and milliseconds for the
//! downloads). Country codes come from the caller ([`super::geoip`]).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use super::format_iso;

/// C's `WRITE_STATS_INTERVAL`: statistics are written once a day.
pub const INTERVAL: u64 = 24 * 3600;
/// Countries' address counts are rounded up to this (`IP_GRANULARITY`).
const IP_GRANULARITY: u32 = 8;
/// Answers are rounded up to this (`RESPONSE_GRANULARITY`).
const RESPONSE_GRANULARITY: u32 = 8;
/// Download counts are rounded up to this (`DIR_REQ_GRANULARITY`).
const DIR_REQ_GRANULARITY: u32 = 4;
/// Speeds are written with at least this many complete downloads
/// (`MIN_DIR_REQ_RESPONSES`).
const MIN_DIR_REQ_RESPONSES: u32 = 16;
/// An unfinished download older than this is timed out (`DIRREQ_TIMEOUT`).
const DIRREQ_TIMEOUT_MS: u64 = 10 * 60 * 1000;
/// At most this many clients and downloads are kept per interval, so a
/// flood of requests (or of IPv6 addresses) cannot grow them without bound
/// (C trims its client history under memory pressure instead); past it,
/// new ones are not recorded (answers are still counted).
const MAX_TRACKED: usize = 1 << 20;

/// How a consensus request was answered (C's `geoip_ns_response_t`, in
/// its order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NsResponse {
    /// Served.
    Ok = 0,
    /// Not signed by enough of the authorities the client named.
    NotEnoughSigs = 1,
    /// Unavailable.
    Unavailable = 2,
    /// 404.
    NotFound = 3,
    /// 304.
    NotModified = 4,
    /// 503 (busy).
    Busy = 5,
}

/// Over the DirPort, or over a circuit (BEGIN_DIR).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DirreqKind {
    /// A DirPort request.
    Direct,
    /// A BEGIN_DIR request.
    Tunneled,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Download {
    started_ms: u64,
    size: u64,
    completed_ms: Option<u64>,
}

/// Round `n` up to a multiple of `m` (C's `round_uint32_to_next_multiple_of`).
fn round_up(n: u32, m: u32) -> u32 {
    n.checked_next_multiple_of(m).unwrap_or(u32::MAX)
}

/// One interval's directory-request statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirreqStats {
    start: u64,
    /// Clients that were served a consensus, by address: their country.
    clients: HashMap<IpAddr, String>,
    /// Requests served, by country.
    requests: BTreeMap<String, u32>,
    /// Answers, by [`NsResponse`].
    responses: [u32; 6],
    /// Downloads by kind and request id.
    downloads: HashMap<(DirreqKind, u64), Download>,
}

impl DirreqStats {
    /// An interval that starts at `now`.
    pub fn new(now: u64) -> Self {
        DirreqStats {
            start: now,
            clients: HashMap::new(),
            requests: BTreeMap::new(),
            responses: [0; 6],
            downloads: HashMap::new(),
        }
    }

    /// When the interval started.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// A consensus request was answered so.
    pub fn note_response(&mut self, r: NsResponse) {
        self.responses[r as usize] += 1;
    }

    /// A consensus was served to `ip` in `country` (C's
    /// `geoip_note_client_seen` for a network status, which also counts the
    /// request for the country).
    pub fn note_client(&mut self, ip: IpAddr, country: &str) {
        if self.clients.len() < MAX_TRACKED || self.clients.contains_key(&ip) {
            self.clients.insert(ip, country.to_owned());
        }
        *self.requests.entry(country.to_owned()).or_default() += 1;
    }

    /// Download `id` of `size` bytes began at `now_ms`.
    pub fn start_download(&mut self, kind: DirreqKind, id: u64, size: u64, now_ms: u64) {
        if self.downloads.len() >= MAX_TRACKED {
            return;
        }
        self.downloads.insert(
            (kind, id),
            Download {
                started_ms: now_ms,
                size,
                completed_ms: None,
            },
        );
    }

    /// Download `id` finished at `now_ms` (unknown ids are ignored: a
    /// request from the previous interval).
    pub fn complete_download(&mut self, kind: DirreqKind, id: u64, now_ms: u64) {
        if let Some(d) = self.downloads.get_mut(&(kind, id)) {
            d.completed_ms.get_or_insert(now_ms);
        }
    }

    /// `cc=n,…` of `counts` rounded up to 8, largest first, then by code.
    fn by_country<'a>(counts: impl Iterator<Item = (&'a str, u32)>) -> String {
        let mut v: Vec<(&str, u32)> = counts
            .filter(|(_, n)| *n > 0)
            .map(|(c, n)| (c, round_up(n, IP_GRANULARITY)))
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let parts: Vec<String> = v.iter().map(|(c, n)| format!("{c}={n}")).collect();
        parts.join(",")
    }

    /// C's `geoip_get_dirreq_history` for one kind at `now_ms`.
    fn downloads_line(&self, kind: DirreqKind, now_ms: u64) -> String {
        let mut speeds = Vec::new();
        let (mut timeouts, mut running) = (0u32, 0u32);
        for ((k, _), d) in &self.downloads {
            if *k != kind {
                continue;
            }
            match d.completed_ms {
                Some(done) => {
                    let ms = done
                        .saturating_sub(d.started_ms)
                        .clamp(1, u64::from(u32::MAX));
                    // C: (uint32_t)(1000 * response_size / time_diff).
                    speeds.push((d.size.wrapping_mul(1000) / ms) as u32);
                }
                None if now_ms.saturating_sub(d.started_ms) > DIRREQ_TIMEOUT_MS => timeouts += 1,
                None => running += 1,
            }
        }
        let complete = round_up(speeds.len() as u32, DIR_REQ_GRANULARITY);
        let mut s = format!(
            "complete={complete},timeout={},running={}",
            round_up(timeouts, DIR_REQ_GRANULARITY),
            round_up(running, DIR_REQ_GRANULARITY)
        );
        if complete >= MIN_DIR_REQ_RESPONSES {
            speeds.sort_unstable();
            let n = speeds.len();
            let at = |num: usize, den: usize| speeds[(num * n / den).saturating_sub(1)];
            s.push_str(&format!(
                ",min={},d1={},d2={},q1={},d3={},d4={},md={},d6={},d7={},q3={},d8={},d9={},max={}",
                speeds[0],
                at(1, 10),
                at(2, 10),
                at(1, 4),
                at(3, 10),
                at(4, 10),
                at(5, 10),
                at(6, 10),
                at(7, 10),
                at(3, 4),
                at(8, 10),
                at(9, 10),
                speeds[n - 1]
            ));
        }
        s
    }

    /// The six lines at `now` (unix seconds; `now_ms` the same instant on
    /// the downloads' clock), as C writes them into `stats/dirreq-stats`.
    pub fn format(&self, now: u64, now_ms: u64) -> String {
        let mut per_country: BTreeMap<&str, u32> = BTreeMap::new();
        for c in self.clients.values() {
            *per_country.entry(c.as_str()).or_default() += 1;
        }
        let ips = Self::by_country(per_country.into_iter());
        let reqs = Self::by_country(self.requests.iter().map(|(c, n)| (c.as_str(), *n)));
        let r = self.responses.map(|n| round_up(n, RESPONSE_GRANULARITY));
        format!(
            "dirreq-stats-end {} ({} s)\n\
             dirreq-v3-ips {ips}\n\
             dirreq-v3-reqs {reqs}\n\
             dirreq-v3-resp ok={},not-enough-sigs={},unavailable={},not-found={},not-modified={},busy={}\n\
             dirreq-v3-direct-dl {}\n\
             dirreq-v3-tunneled-dl {}\n",
            format_iso(now).unwrap_or_default(),
            now.saturating_sub(self.start),
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            r[5],
            self.downloads_line(DirreqKind::Direct, now_ms),
            self.downloads_line(DirreqKind::Tunneled, now_ms),
        )
    }
}

/// C's `load_stats_file` check: `contents` goes into an extra-info at
/// `now` only if its line `tag` (e.g. `dirreq-stats-end`) carries a time
/// within the last 25 hours (and not over an hour ahead).
pub fn fresh_stats<'a>(contents: &'a str, tag: &str, now: u64) -> Option<&'a str> {
    let line = contents
        .lines()
        .find_map(|l| l.strip_prefix(tag).and_then(|r| r.strip_prefix(' ')))?;
    let written = super::parse_iso(line.get(..19)?)?;
    (written + 25 * 3600 >= now && written <= now + 3600).then_some(contents)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-28 00:00:00 UTC.
    const T0: u64 = 1_795_824_000;

    #[test]
    fn an_empty_interval_as_c_writes_it() {
        let s = DirreqStats::new(T0);
        assert_eq!(
            s.format(T0 + INTERVAL, 0),
            "dirreq-stats-end 2026-11-29 00:00:00 (86400 s)\n\
             dirreq-v3-ips \n\
             dirreq-v3-reqs \n\
             dirreq-v3-resp ok=0,not-enough-sigs=0,unavailable=0,not-found=0,not-modified=0,busy=0\n\
             dirreq-v3-direct-dl complete=0,timeout=0,running=0\n\
             dirreq-v3-tunneled-dl complete=0,timeout=0,running=0\n"
        );
    }

    #[test]
    fn countries_are_rounded_up_and_sorted_after_rounding() {
        let mut s = DirreqStats::new(T0);
        let ip = |i: u8| IpAddr::from([10, 0, 0, i]);
        // de: 9 addresses, 10 requests; us: 3 addresses; ??: 1.
        for i in 0..9 {
            s.note_client(ip(i), "de");
        }
        s.note_client(ip(0), "de");
        for i in 20..23 {
            s.note_client(ip(i), "us");
        }
        s.note_client(ip(30), "??");
        for _ in 0..13 {
            s.note_response(NsResponse::Ok);
        }
        s.note_response(NsResponse::NotModified);
        let f = s.format(T0 + 3600, 0);
        // 3 and 1 both round to 8: then by code ("??" < "us").
        assert!(f.contains("\ndirreq-v3-ips de=16,??=8,us=8\n"), "{f}");
        assert!(f.contains("\ndirreq-v3-reqs de=16,??=8,us=8\n"), "{f}");
        assert!(f.contains("\ndirreq-v3-resp ok=16,not-enough-sigs=0,unavailable=0,not-found=0,not-modified=8,busy=0\n"));
        assert!(f.starts_with("dirreq-stats-end 2026-11-28 01:00:00 (3600 s)\n"));
    }

    #[test]
    fn downloads_count_and_their_speeds_as_c_computes_them() {
        let mut s = DirreqStats::new(T0);
        // Twenty tunneled downloads of 1000·(i+1) bytes taking 1000 ms:
        // speeds 1000, 2000, … 20000 bytes/s.
        for i in 0..20u64 {
            s.start_download(DirreqKind::Tunneled, i, 1000 * (i + 1), 0);
            s.complete_download(DirreqKind::Tunneled, i, 1000);
        }
        // One still running, one timed out, one direct that finished in
        // 0 ms (counted as 1 ms).
        s.start_download(DirreqKind::Tunneled, 100, 5, 700_000);
        s.start_download(DirreqKind::Tunneled, 101, 5, 0);
        s.start_download(DirreqKind::Direct, 1, 7, 5);
        s.complete_download(DirreqKind::Direct, 1, 5);
        s.complete_download(DirreqKind::Direct, 99, 5); // unknown: ignored
        let f = s.format(T0 + 1, 1_000_000);
        // n = 20: d1 = [1], d2 = [3], q1 = [4], … q3 = [14], max = [19].
        assert!(
            f.contains(
                "\ndirreq-v3-tunneled-dl complete=20,timeout=4,running=4,min=1000,d1=2000,d2=4000,q1=5000,d3=6000,d4=8000,md=10000,d6=12000,d7=14000,q3=15000,d8=16000,d9=18000,max=20000\n"
            ),
            "{f}"
        );
        assert!(
            f.contains("\ndirreq-v3-direct-dl complete=4,timeout=0,running=0\n"),
            "{f}"
        );
    }

    #[test]
    fn a_stats_file_goes_in_while_under_25_hours_old() {
        let text = DirreqStats::new(T0).format(T0 + INTERVAL, 0);
        let written = T0 + INTERVAL;
        assert!(fresh_stats(&text, "dirreq-stats-end", written).is_some());
        assert!(fresh_stats(&text, "dirreq-stats-end", written + 25 * 3600).is_some());
        assert!(fresh_stats(&text, "dirreq-stats-end", written + 25 * 3600 + 1).is_none());
        assert!(fresh_stats(&text, "dirreq-stats-end", written - 3601).is_none());
        assert!(fresh_stats(&text, "hidserv-stats-end", written).is_none());
    }
}
