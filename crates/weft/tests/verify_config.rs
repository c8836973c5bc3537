//! `weft --verify-config` against stock tor's: for each option weft
//! takes, a good and a bad value (and a few shapes: the command line,
//! `%include`, unknown options), both programs judge the same torrc and
//! must agree — except where weft is knowingly different, listed in
//! `KNOWN_DIFFERENCES` with the reason (and in docs/running.md).

use std::path::Path;
use std::process::Command;

use anyhow::{ensure, Context, Result};

/// (option, value). A torrc is a base relay configuration with the
/// option's line replaced by this one.
const CASES: &[(&str, &str)] = &[
    ("ORPort", "127.0.0.1:9002"),
    ("ORPort", "9003"),
    ("ORPort", "notaport"),
    ("ORPort", "127.0.0.1:99999"),
    ("ORPort", "127.0.0.1:9001\nORPort [::1]:9010"),
    ("ORPort", "127.0.0.1:9001\nORPort [::1]:99999"),
    ("ORPort", "[::1]:9010"),
    ("ORPort", "9001\nAddress 2001:db8::1"),
    ("Address", "127.0.0.1"),
    ("Address", "300.1.1.1"),
    ("SocksPort", "0"),
    ("SocksPort", "9050"),
    ("DirPort", "9030"),
    ("DirPort", "notaport"),
    ("SafeLogging", "relay"),
    ("SafeLogging", "2"),
    ("SigningKeyLifetime", "1 day"),
    ("KeepalivePeriod", "10 minutes"),
    ("NumCPUs", "4"),
    ("AccountingMax", "1 TBytes"),
    ("BandwidthRate", "1MB"),
    ("Nickname", "GoodName"),
    ("Nickname", "bad-name"),
    ("Nickname", "waytoolongnicknameforatorrelay"),
    ("ContactInfo", "ops <ops AT example dot org>"),
    ("Log", "notice stdout"),
    ("Log", "info-err stderr"),
    ("Log", "notice file @DIR@/notice.log"),
    ("Log", "notice syslog"),
    ("Log", "blah stdout"),
    ("Log", "notice nowhere"),
    ("Log", "[handshake]debug [~net,~mm]info notice stdout"),
    ("Log", "[*]warn [circ,EDGE]info-notice file @DIR@/circ.log"),
    ("Log", "[dos,heartbeat]notice syslog"),
    ("Log", "[nosuchdomain]notice stdout"),
    ("Log", "[net notice stdout"),
    ("Log", "notice info stdout"),
    ("Log", "[circ]loud stdout"),
    ("AccountingMax", "10 GB"),
    ("AccountingMax", "lots"),
    ("AccountingStart", "day 3:30"),
    ("AccountingStart", "week 7 23:59"),
    ("AccountingStart", "month 29 0:00"),
    ("AccountingStart", "week 8 1:00"),
    ("AccountingStart", "year 1 0:00"),
    ("AccountingStart", "day 24:00"),
    ("AccountingRule", "sum"),
    ("AccountingRule", "both"),
    ("FamilyId", "un7SEeF2xOHIM04cNncZX8jXOj68lFN7GomktpYl+Vw"),
    ("FamilyId", "notbase64!!"),
    (
        "FamilyId",
        "ed25519:un7SEeF2xOHIM04cNncZX8jXOj68lFN7GomktpYl+Vw",
    ),
    ("FamilyKeyDirectory", "@DIR@"),
    ("ShutdownWaitLength", "10 seconds"),
    ("ShutdownWaitLength", "0"),
    ("ShutdownWaitLength", "soon"),
    ("CircuitPadding", "0"),
    ("CircuitPadding", "1"),
    ("ReducedCircuitPadding", "1"),
    ("ReducedCircuitPadding", "0"),
    ("DirCache", "0"),
    ("DirCache", "2"),
    ("TestingTorNetwork", "0"),
    ("AssumeReachable", "1"),
    ("AssumeReachable", "maybe"),
    ("BandwidthRate", "1 MB"),
    ("BandwidthRate", "100 KBytes"),
    ("BandwidthRate", "10 KBytes"),
    ("BandwidthRate", "1 parsec"),
    ("BandwidthBurst", "2 MB"),
    ("BandwidthBurst", "2 GB"),
    ("BandwidthBurst", "lots"),
    ("RelayBandwidthRate", "500 KB"),
    ("RelayBandwidthRate", "10 KB"),
    ("RelayBandwidthBurst", "2 MB"),
    ("RelayBandwidthBurst", "x"),
    ("HeartbeatPeriod", "1 hour"),
    ("HeartbeatPeriod", "10 minutes"),
    ("HeartbeatPeriod", "soon"),
    ("MaxAdvertisedBandwidth", "500 KB"),
    ("MaxAdvertisedBandwidth", "x"),
    ("ConnLimit", "2000"),
    ("ConnLimit", "-1"),
    ("MaxMemInQueues", "512 MB"),
    ("MaxMemInQueues", "1 parsec"),
    ("ExitRelay", "1"),
    ("ExitRelay", "auto"),
    ("ExitRelay", "yes"),
    ("ExitPolicy", "accept *:80,reject *:*"),
    ("ExitPolicy", "accept *:99999"),
    ("ExitPolicy", "permit *:*"),
    ("ExitPolicyRejectPrivate", "0"),
    ("ExitPolicyRejectPrivate", "2"),
    ("ExitPolicyRejectLocalInterfaces", "1"),
    ("ReducedExitPolicy", "1"),
    ("IPv6Exit", "1"),
    ("IPv6Exit", "x"),
    ("ExtraInfoStatistics", "0"),
    ("ExtraInfoStatistics", "2"),
    ("DirReqStatistics", "0"),
    ("DirReqStatistics", "x"),
    ("GeoIPFile", "@DIR@/geoip"),
    ("GeoIPv6File", "@DIR@/geoip6"),
    ("ControlPort", "9051"),
    ("ControlPort", "127.0.0.1:9051"),
    ("ControlPort", "unix:@DIR@/control"),
    ("ControlPort", "notaport"),
    ("ControlPort", "0"),
    ("CookieAuthentication", "1"),
    ("CookieAuthentication", "2"),
    ("CookieAuthFile", "@DIR@/cookie"),
    ("CookieAuthFileGroupReadable", "1"),
    (
        "HashedControlPassword",
        "16:A69662735A265BAC602C01B03AE915B2705F1C8715ACD45E700AF749B5",
    ),
    ("HashedControlPassword", "16:00"),
    ("MetricsPort", "127.0.0.1:9035"),
    ("MetricsPort", "notaport"),
    ("MetricsPortPolicy", "accept 127.0.0.1"),
    ("MetricsPortPolicy", "accept 127.0.0.1:9035, reject *"),
    (
        "MetricsPortPolicy",
        "accept [::1]\nMetricsPortPolicy accept 10.0.0.0/8",
    ),
    ("MetricsPortPolicy", "allow 127.0.0.1"),
    ("MetricsPortPolicy", "accept 300.0.0.1"),
    ("PidFile", "@DIR@/pid"),
    ("RunAsDaemon", "0"),
    ("CircuitPriorityHalflife", "30"),
    ("CircuitPriorityHalflife", "soon"),
    ("KISTSchedRunInterval", "10 msec"),
    ("KISTSchedRunInterval", "1000 msec"),
    ("KISTSockBufSizeFactor", "1.5"),
    ("KISTSockBufSizeFactor", "-1"),
    ("Schedulers", "KIST,Vanilla"),
    ("Schedulers", "Fancy"),
    ("TokenBucketRefillInterval", "10 msec"),
    ("TokenBucketRefillInterval", "5000 msec"),
    ("DoSCircuitCreationEnabled", "1"),
    ("DoSCircuitCreationEnabled", "maybe"),
    ("DoSCircuitCreationRate", "3"),
    ("DoSCircuitCreationRate", "-3"),
    ("DoSConnectionEnabled", "0"),
    ("DoSConnectionMaxConcurrentCount", "50"),
    ("DoSConnectionDefenseType", "2"),
    ("DoSConnectionDefenseType", "7"),
    ("DoSRefuseSingleHopClientRendezvous", "1"),
    ("DoSStreamCreationEnabled", "1"),
    ("ServerDNSResolvConfFile", "/etc/resolv.conf"),
    ("ServerDNSRandomizeCase", "0"),
    ("ServerDNSRandomizeCase", "yes"),
    ("ServerDNSDetectHijacking", "0"),
    ("ServerDNSTestAddresses", "a.example,b.example"),
    ("ExtendAllowPrivateAddresses", "1"),
    ("MyFamily", "$5CACE6654275A6F8798B8C31BA2DE9A0669D9CEE"),
    (
        "MyFamily",
        "5CACE6654275A6F8798B8C31BA2DE9A0669D9CEE,$AAAABBBBCCCCDDDDEEEEFFFF0000111122223333~x",
    ),
    ("MyFamily", "somenick"),
    ("MyFamily", "bad!nick"),
    ("MyFamily", "$5CAC"),
    ("OutboundBindAddress", "192.0.2.1"),
    ("OutboundBindAddress", "[2001:db8::1]"),
    ("OutboundBindAddress", "not-an-ip"),
    ("OutboundBindAddressExit", "192.0.2.9"),
    ("OutboundBindAddressOR", "192.0.2.8"),
    ("OutboundBindAddressOR", "999.1.1.1"),
    ("User", "nobody"),
    ("User", "nosuchuserx"),
    ("Frobnicate", "1"),
];

/// Where weft's verdict differs from tor's on purpose.
const KNOWN_DIFFERENCES: &[(&str, &str, &str)] = &[
    (
        "SocksPort",
        "9050",
        "weft is a relay only and refuses a SOCKS listener; tor opens one",
    ),
    (
        "DoSConnectionDefenseType",
        "7",
        "tor takes an unknown defense type and applies none; weft refuses it",
    ),
    (
        "MetricsPortPolicy",
        "allow 127.0.0.1",
        "tor's --verify-config does not parse MetricsPortPolicy; started with it, tor 0.4.9.11 dies ('Malformed policy', 'Bug: Error parsing already-validated policy options'); weft refuses it when verifying",
    ),
    (
        "MetricsPortPolicy",
        "accept 300.0.0.1",
        "as above: tor verifies it and then dies at start; weft refuses it when verifying",
    ),
];

fn verdict(cmd: &mut Command) -> Result<bool> {
    let out = cmd.output()?;
    Ok(out.status.success())
}

fn torrc(dir: &Path, key: &str, value: &str, for_tor: bool) -> String {
    let mut t = format!(
        "DataDirectory {}/data\nNickname parity\nExitRelay 0\nAddress 127.0.0.1\nORPort 127.0.0.1:9001\n",
        dir.display()
    );
    if for_tor {
        // A relay without a SocksPort, as weft is.
        t.push_str("SocksPort 0\n");
    }
    let mut lines: Vec<&str> = t
        .lines()
        .filter(|l| {
            !l.to_ascii_lowercase()
                .starts_with(&format!("{} ", key.to_ascii_lowercase()))
        })
        .collect();
    let case = format!(
        "{key} {}",
        value.replace("@DIR@", &dir.display().to_string())
    );
    lines.push(&case);
    lines.join("\n") + "\n"
}

#[test]
fn verify_config_agrees_with_stock_tor() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    std::fs::create_dir(d.join("data"))?;
    std::fs::set_permissions(
        d.join("data"),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )?;
    let weft = env!("CARGO_BIN_EXE_weft");
    let mut disagreements = Vec::new();
    let mut agreed = 0;
    for (key, value) in CASES {
        let (t, w) = (d.join("torrc.tor"), d.join("torrc.weft"));
        std::fs::write(&t, torrc(d, key, value, true))?;
        std::fs::write(&w, torrc(d, key, value, false))?;
        let tor_ok = verdict(
            Command::new("tor")
                .args(["--verify-config", "--quiet", "-f"])
                .arg(&t),
        )
        .context("stock tor (scripts/install-deps.sh installs it)")?;
        let weft_ok = verdict(
            Command::new(weft)
                .args(["--verify-config", "--quiet", "-f"])
                .arg(&w),
        )?;
        let known = KNOWN_DIFFERENCES
            .iter()
            .any(|(k, v, _)| k == key && v == value);
        eprintln!(
            "{key} {value}: tor {} weft {}{}",
            if tor_ok { "valid" } else { "invalid" },
            if weft_ok { "valid" } else { "invalid" },
            if known { " (known difference)" } else { "" }
        );
        if known {
            ensure!(
                tor_ok != weft_ok,
                "{key} {value}: listed as a difference but both agree now"
            );
        } else if tor_ok != weft_ok {
            disagreements.push(format!("{key} {value}: tor {tor_ok}, weft {weft_ok}"));
        } else {
            agreed += 1;
        }
    }
    ensure!(
        disagreements.is_empty(),
        "verdicts differ: {disagreements:#?}"
    );

    // The same through the command line and %include.
    std::fs::write(d.join("torrc.tor"), torrc(d, "ContactInfo", "x", true))?;
    std::fs::write(d.join("torrc.weft"), torrc(d, "ContactInfo", "x", false))?;
    for (args, want) in [
        (vec!["--Nickname", "bad-name"], false),
        (vec!["--Nickname", "GoodName"], true),
        (vec!["--BandwidthRate", "10 KBytes"], false),
    ] {
        let tor_ok = verdict(
            Command::new("tor")
                .args(["--verify-config", "--quiet", "-f"])
                .arg(d.join("torrc.tor"))
                .args(&args),
        )?;
        let weft_ok = verdict(
            Command::new(weft)
                .args(["--verify-config", "--quiet", "-f"])
                .arg(d.join("torrc.weft"))
                .args(&args),
        )?;
        ensure!(
            tor_ok == want && weft_ok == want,
            "{args:?}: tor {tor_ok}, weft {weft_ok}"
        );
    }
    std::fs::create_dir(d.join("conf.d"))?;
    for (extra, want) in [
        ("Nickname GoodName\n", true),
        ("Nickname bad-name\n", false),
    ] {
        std::fs::write(d.join("conf.d/50-extra"), extra)?;
        for (file, prog, sock) in [("torrc.tor", "tor", true), ("torrc.weft", weft, false)] {
            let mut t = torrc(d, "ContactInfo", "x", sock);
            t.push_str(&format!("%include {}/conf.d\n", d.display()));
            std::fs::write(d.join(file), t)?;
            let ok = verdict(
                Command::new(prog)
                    .args(["--verify-config", "--quiet", "-f"])
                    .arg(d.join(file)),
            )?;
            ensure!(ok == want, "{prog} with %include of {extra:?}: {ok}");
        }
    }
    eprintln!(
        "{agreed} verdicts agree; {} known differences",
        KNOWN_DIFFERENCES.len()
    );
    Ok(())
}

/// Relay lines of Debian's /etc/tor/torrc (tor's torrc.sample) that an
/// operator uncomments.
const DEBIAN_RELAY_LINES: &[&str] = &[
    "ORPort 9001",
    "Address noname.example.com",
    "Nickname ididnteditheconfig",
    "RelayBandwidthRate 100 KB",
    "RelayBandwidthBurst 200 KB",
    "AccountingMax 4 GB",
    "AccountingStart day 00:00",
    "ContactInfo Random Person <nobody AT example dot com>",
    "DirPort 9030",
    "ExitPolicy reject *:*",
];

/// Real relay torrcs (`tests/torrcs/*.torrc`, written from the tor
/// manual's relay section and the Relay Guide, and Debian's own torrc with
/// its relay lines uncommented): weft's verdict is stock tor's on each.
#[test]
fn real_world_torrcs_get_stock_tors_verdict() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let weft = env!("CARGO_BIN_EXE_weft");
    let mut torrcs: Vec<(String, String)> = Vec::new();
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/torrcs");
    let mut names: Vec<_> = std::fs::read_dir(&here)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "torrc"))
        .collect();
    names.sort();
    for p in names {
        let text = std::fs::read_to_string(&p)?.replace("@DIR@", &d.display().to_string());
        torrcs.push((p.file_name().unwrap().to_string_lossy().into_owned(), text));
    }
    let debian = std::fs::read_to_string("/etc/tor/torrc")
        .context("Debian's /etc/tor/torrc (the tor package; scripts/install-deps.sh)")?;
    let mut uncommented = 0;
    let mut text: String = debian
        .lines()
        .map(|l| {
            let bare = l.trim_start_matches('#').trim_start();
            if l.starts_with('#') && DEBIAN_RELAY_LINES.iter().any(|r| bare.starts_with(r)) {
                uncommented += 1;
                format!("{bare}\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    ensure!(
        uncommented >= DEBIAN_RELAY_LINES.len(),
        "only {uncommented} relay lines found in /etc/tor/torrc"
    );
    text.push_str(&format!("DataDirectory {}/data\n", d.display()));
    torrcs.push(("/etc/tor/torrc (relay lines)".into(), text));
    let mut valid = 0;
    let mut disagreements = Vec::new();
    for (name, text) in &torrcs {
        let f = d.join("torrc");
        std::fs::write(&f, text)?;
        let tor_ok = verdict(
            Command::new("tor")
                .args(["--verify-config", "--quiet", "-f"])
                .arg(&f),
        )?;
        let weft_ok = verdict(
            Command::new(weft)
                .args(["--verify-config", "--quiet", "-f"])
                .arg(&f),
        )?;
        eprintln!("{name}: tor {tor_ok}, weft {weft_ok}");
        valid += usize::from(tor_ok);
        if tor_ok != weft_ok {
            disagreements.push(format!("{name}: tor {tor_ok}, weft {weft_ok}"));
        }
    }
    ensure!(
        disagreements.is_empty(),
        "verdicts differ: {disagreements:#?}"
    );
    ensure!(valid + 1 == torrcs.len(), "all but the typo are valid");
    Ok(())
}
