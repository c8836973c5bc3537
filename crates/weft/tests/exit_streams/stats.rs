//! The extra-info's statistics and the IPv6 exit policy summary, as the
//! authorities have them.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, ensure, Context, Result};
use weft_testnet::Testnet;

/// Seconds per history period (C's `NUM_SECS_BW_SUM_INTERVAL`).
const DAY: u64 = 86_400;

/// A state file with two finished days per history, and the lines
/// the extra-info must carry for it; and the `stats/dirreq-stats` a
/// day of directory requests left an hour ago (weft's own formatter).
pub struct SeededHistory {
    pub state: String,
    pub dirreq: String,
    /// (keyword, "YYYY-MM-DD HH:MM:SS", values)
    pub lines: Vec<(&'static str, String, [u64; 2])>,
}

fn iso(secs: u64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp(secs as i64).expect("time");
    let fmt = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
    t.format(&fmt).expect("format")
}

impl SeededHistory {
    /// The current period ends in an hour; the two before it hold
    /// whole KiB per second, so C's replay (evenly spread, whole bytes
    /// per second) and its rounding give the values back exactly.
    pub fn new() -> Self {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_secs();
        let ends = now + 3600;
        let kinds: [(&str, &str, [u64; 2]); 6] = [
            ("write-history", "Write", [3, 5]),
            ("read-history", "Read", [2, 4]),
            ("ipv6-write-history", "IPv6Write", [1, 2]),
            ("ipv6-read-history", "IPv6Read", [1, 1]),
            ("dirreq-write-history", "DirWrite", [1, 3]),
            ("dirreq-read-history", "DirRead", [0, 1]),
        ];
        let mut state = String::from("# a previous run's state\n");
        let mut lines = Vec::new();
        for (keyword, name, k) in kinds {
            let v = k.map(|k| k * DAY * 1024);
            state.push_str(&format!(
                "BWHistory{name}Ends {}\nBWHistory{name}Interval {DAY}\nBWHistory{name}Values {},{},0\n",
                iso(ends),
                v[0],
                v[1]
            ));
            lines.push((keyword, iso(ends - DAY), v));
        }
        SeededHistory {
            state,
            lines,
            dirreq: dirreq_stats(now - 3600),
        }
    }
}

/// Directory-request statistics of the day that ended at `end`, as
/// weft's formatter writes them: clients from two countries, answers
/// of two kinds, twenty tunneled downloads (so the speeds' deciles are
/// written) and two still running.
fn dirreq_stats(end: u64) -> String {
    use weft_relay::stats::dirreq::{DirreqKind, DirreqStats, NsResponse};
    let mut d = DirreqStats::new(end - DAY);
    for i in 0..9u8 {
        d.note_client(std::net::IpAddr::from([10, 0, 0, i]), "de");
        d.note_response(NsResponse::Ok);
    }
    d.note_client(std::net::IpAddr::from([10, 0, 1, 1]), "us");
    d.note_response(NsResponse::NotModified);
    for i in 0..22u64 {
        d.start_download(DirreqKind::Tunneled, i, 1000 * (i + 1), 0);
        if i < 20 {
            d.complete_download(DirreqKind::Tunneled, i, 1000);
        }
    }
    d.format(end, 1000)
}

/// GET `path` from a DirPort; the body of a 200.
fn dir_get(addr: SocketAddr, path: &str) -> Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut r = Vec::new();
    s.read_to_end(&mut r)?;
    let r = String::from_utf8_lossy(&r).to_string();
    let (head, body) = r.split_once("\r\n\r\n").context("no HTTP head")?;
    ensure!(
        head.starts_with("HTTP/1.0 200"),
        "GET {path}: {}",
        head.lines().next().unwrap_or("")
    );
    Ok(body.to_string())
}

/// `path` from auth0's DirPort, retried (bounded) until it answers 200.
fn from_authority(net: &Testnet, path: &str) -> Result<String> {
    let auth = net.node("auth0")?;
    let addr = SocketAddr::from(([127, 0, 0, 1], auth.dir_port.context("auth0 DirPort")?));
    let t0 = Instant::now();
    loop {
        match dir_get(addr, path) {
            Ok(b) => return Ok(b),
            Err(e) if t0.elapsed() > Duration::from_secs(90) => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_secs(2)),
        }
    }
}

/// The authorities accepted weft's extra-info with the seeded
/// histories in C's format, and stem parses it to the same values.
pub fn check_extra_info(net: &Testnet, fp: &str, h: &SeededHistory) -> Result<()> {
    let ei = from_authority(net, &format!("/tor/extra/fp/{fp}"))?;
    ensure!(
        ei.starts_with("extra-info weft "),
        "not weft's extra-info: {ei}"
    );
    for (keyword, end, v) in &h.lines {
        let want = format!("\n{keyword} {end} (86400 s) {},{}\n", v[0], v[1]);
        ensure!(ei.contains(&want), "no {want:?} in the extra-info:\n{ei}");
    }
    eprintln!("[stats] auth0 serves weft's extra-info with its six byte histories");
    // With C's GeoIP file (tor-geoipdb), weft counts directory
    // requests as C does, and puts the statistics a previous run wrote
    // (stats/dirreq-stats, an hour old) into its extra-info.
    let geoip = std::path::Path::new("/usr/share/tor/geoip").exists();
    if geoip {
        ensure!(
            ei.contains(&h.dirreq) && ei.contains("\ngeoip-db-digest "),
            "no dirreq statistics ({:?}) in the extra-info:\n{ei}",
            h.dirreq
        );
        eprintln!("[stats] and the dirreq statistics weft's last run wrote");
    }
    let script = r#"
import sys
from stem.descriptor.extrainfo_descriptor import RelayExtraInfoDescriptor
d = RelayExtraInfoDescriptor(open(sys.argv[1], 'rb').read(), validate=True)
for name in ['write', 'read', 'dir_write', 'dir_read']:
    print(name, getattr(d, name + '_history_end'), getattr(d, name + '_history_interval'),
          ','.join(str(v) for v in getattr(d, name + '_history_values')))
if d.dir_stats_end:
    print('dirreq', d.dir_stats_end, d.dir_stats_interval, sorted(d.dir_v3_ips.items()),
          sorted(d.dir_v3_requests.items()),
          sorted((str(k), v) for k, v in d.dir_v3_responses.items()),
          sorted((str(k), v) for k, v in d.dir_v3_tunneled_dl.items()),
          d.geoip_db_digest)
print('unrecognized', d.get_unrecognized_lines())
"#;
    let stdout = stem(script, &ei)?;
    eprintln!("[stats] stem: {}", stdout.trim().replace('\n', "; "));
    for (name, keyword) in [
        ("write", "write-history"),
        ("read", "read-history"),
        ("dir_write", "dirreq-write-history"),
        ("dir_read", "dirreq-read-history"),
    ] {
        let (_, end, v) = h
            .lines
            .iter()
            .find(|l| l.0 == keyword)
            .context("seeded kind")?;
        let want = format!("{name} {end} 86400 {},{}", v[0], v[1]);
        ensure!(
            stdout.lines().any(|l| l == want),
            "stem read {stdout:?}, want {want:?}"
        );
    }
    if geoip {
        let l = stdout
            .lines()
            .find(|l| l.starts_with("dirreq "))
            .context("stem read no dirreq statistics")?;
        ensure!(
            l.contains("86400 [('de', 16), ('us', 8)]")
                && l.contains("('not-modified', 8)")
                && l.contains("('ok', 16)")
                && l.contains("('complete', 20)")
                && l.contains("('d1', 2000)"),
            "stem's dirreq statistics: {l}"
        );
    }
    Ok(())
}

/// The authorities accepted an extra-info of weft's with a
/// `padding-counts` line (C's `rep_hist_get_padding_count_lines`; the
/// test's interval is 30 s), and stem parses it: C's bin size, cells
/// read and written. As in C, the line is no reason to republish: the
/// test changes weft's ContactInfo and reloads (SIGHUP), which is, every
/// 25 s until the authorities serve a copy with the line (the first
/// interval ends 30 s after weft started).
pub fn check_padding_counts(net: &Testnet, fp: &str) -> Result<()> {
    let node = net.weft().context("no weft node")?;
    let torrc = node.torrc();
    let base = std::fs::read_to_string(&torrc)?;
    let pid = net.weft_pid().context("weft's pid")?;
    let t0 = Instant::now();
    let mut reloads = 0;
    let mut last_reload: Option<Instant> = None;
    let ei = loop {
        if last_reload.is_none_or(|t| t.elapsed() > Duration::from_secs(25)) {
            reloads += 1;
            std::fs::write(
                &torrc,
                format!("{base}ContactInfo padding-counts {reloads} <weft@test.invalid>\n"),
            )?;
            ensure!(std::process::Command::new("kill")
                .args(["-HUP", &pid.to_string()])
                .status()?
                .success());
            last_reload = Some(Instant::now());
        }
        let ei = from_authority(net, &format!("/tor/extra/fp/{fp}"))?;
        if ei.contains("\npadding-counts ") {
            break ei;
        }
        ensure!(
            t0.elapsed() < Duration::from_secs(180),
            "no padding-counts in weft's extra-info at auth0 after 180 s ({reloads} reloads):\n{ei}"
        );
        std::thread::sleep(Duration::from_secs(3));
    };
    let line = ei
        .lines()
        .find(|l| l.starts_with("padding-counts "))
        .context("padding-counts line")?;
    eprintln!("[stats] auth0 serves weft's extra-info with: {line}");
    let script = r#"
import sys
from stem.descriptor.extrainfo_descriptor import RelayExtraInfoDescriptor
d = RelayExtraInfoDescriptor(open(sys.argv[1], 'rb').read(), validate=True)
print(d.padding_counts_interval, ' '.join('%s=%s' % kv for kv in sorted(d.padding_counts.items())))
print('unrecognized', d.get_unrecognized_lines())
"#;
    let stdout = stem(script, &ei)?;
    eprintln!("[stats] stem: {}", stdout.trim().replace('\n', "; "));
    let counts = stdout.lines().next().unwrap_or("");
    let get = |k: &str| -> u64 {
        counts
            .split(' ')
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    ensure!(
        counts.starts_with("30 ")
            && get("bin-size") == 10_000
            && get("read-total") >= 10_000
            && get("write-total") >= 10_000
            && counts.contains("max-chanpad-timers="),
        "stem read {counts:?}"
    );
    // (stem 1.8 knows no `ipv6-*-history`; the padding line it must know.)
    ensure!(
        stdout
            .lines()
            .any(|l| l.starts_with("unrecognized") && !l.contains("padding-counts")),
        "stem did not recognize the padding line: {stdout}"
    );
    Ok(())
}

/// weft's descriptor (as an authority serves it) has the `ipv6-policy`
/// line, and the microdescriptor the authorities made of it the `p6`
/// line (what clients read), both `want`.
pub fn check_ipv6_policy(net: &Testnet, fp: &str, want: &str) -> Result<()> {
    let desc = from_authority(net, &format!("/tor/server/fp/{fp}"))?;
    ensure!(
        desc.contains(&format!("\nipv6-policy {want}\n")),
        "no ipv6-policy {want} in weft's descriptor:\n{desc}"
    );
    let mut ctl = net.control("client0")?;
    let t0 = Instant::now();
    loop {
        let md = ctl.getinfo(&format!("md/id/{fp}")).unwrap_or_default();
        if md.contains(&format!("p6 {want}")) {
            eprintln!(
                "[ipv6] weft's descriptor: ipv6-policy {want}; its microdescriptor: p6 {want}"
            );
            return Ok(());
        }
        ensure!(
            t0.elapsed() < Duration::from_secs(90),
            "no p6 {want} in weft's microdescriptor: {md}"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// Run the python `script` (stem) on the extra-info `ei` (its path as
/// the first argument): its output, or an error with stem's complaint.
fn stem(script: &str, ei: &str) -> Result<String> {
    let file = tempfile::NamedTempFile::new()?;
    std::fs::write(file.path(), ei)?;
    let out = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(file.path())
        .output()
        .context("python3 (stem; scripts/install-deps.sh installs it)")?;
    if !out.status.success() {
        bail!(
            "stem refused weft's extra-info: {}\n{ei}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).to_string())
}

/// C's router.c as the authorities see it: a reload that names a
/// resolver configuration that cannot be read (a directory: C's "Unable
/// to parse") makes weft publish `reject *:*` at once (`has_dns_init_failed()`),
/// and the reload that gives its working file back puts the exit policy
/// back ("dns resolvers back"). Read from auth0's copy of weft's
/// descriptor.
pub fn check_dns_withdrawal(net: &Testnet, fp: &str) -> Result<()> {
    let node = net.weft().context("no weft node")?;
    let torrc = node.torrc();
    let base = std::fs::read_to_string(&torrc)?;
    let pid = net.weft_pid().context("weft's pid")?;
    let unreadable = torrc.with_extension("resolv-dir");
    std::fs::create_dir_all(&unreadable)?;
    let broken: String = base
        .lines()
        .map(|l| {
            if l.starts_with("ServerDNSResolvConfFile ") {
                format!("ServerDNSResolvConfFile {}\n", unreadable.display())
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    ensure!(broken != base, "no ServerDNSResolvConfFile in weft's torrc");
    let hup = || -> Result<()> {
        ensure!(std::process::Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()?
            .success());
        Ok(())
    };
    let wait_for = |what: &str, want: &dyn Fn(&str) -> bool| -> Result<Duration> {
        let t0 = Instant::now();
        loop {
            let desc = from_authority(net, &format!("/tor/server/fp/{fp}"))?;
            if want(&desc) {
                return Ok(t0.elapsed());
            }
            ensure!(
                t0.elapsed() < Duration::from_secs(120),
                "auth0 has no descriptor of weft with {what} after 120 s:\n{desc}"
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    };
    std::fs::write(&torrc, &broken)?;
    hup()?;
    let took = wait_for("reject *:* only", &|d| {
        d.contains("\nreject *:*\n") && !d.contains("\naccept ") && !d.contains("\nipv6-policy ")
    })?;
    eprintln!("[dns] unreadable name-server file: auth0 has weft's descriptor with reject *:* {:.1} s after the reload", took.as_secs_f64());
    std::fs::write(&torrc, &base)?;
    hup()?;
    let took = wait_for("its exit policy", &|d| {
        d.contains("\naccept ") && d.contains("\nipv6-policy accept ")
    })?;
    eprintln!(
        "[dns] working file again: auth0 has weft's exit policy {:.1} s after the reload",
        took.as_secs_f64()
    );
    let _ = std::fs::remove_dir(&unreadable);
    Ok(())
}
