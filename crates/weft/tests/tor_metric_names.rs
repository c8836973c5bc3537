//! An operator's tor MetricsPort set-up carries over to weft, checked
//! against stock C tor from Debian on loopback (installed when missing;
//! never skipped):
//!
//! * tor's torrc lines `MetricsPort` and `MetricsPortPolicy accept
//!   127.0.0.1` run weft unchanged; a plain scrape from 127.0.0.1 (no
//!   token) gets the page, and a connection from an address the policy
//!   does not accept is closed unanswered, as C Tor does;
//! * in one network, stock tor serves as a middle (relay1) and as an exit
//!   (exit0), and weft as both, with traffic through each; every
//!   `tor_relay_*`/`tor_*` family the two stock MetricsPorts expose (name,
//!   type, label names) must be in weft's scrape unless docs/metrics.md
//!   lists it as not applicable; the traffic bytes, the onionskins
//!   processed (by handshake type), the circuits open and the streams
//!   move on weft where they move on tor.
//!
//! Networks live in `target/tmp/weft-net-metric-names-<pid>/`, kept on
//! failure.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use common::{free_port, scrape_metrics, WeftProcess};
use weft_testnet::{traffic, Direction, Sink, Testnet, TestnetConfig, WeftNode};

/// One family of a scrape: its type and the label-name sets of its rows.
#[derive(Debug, Default)]
struct Family {
    kind: String,
    label_sets: BTreeSet<Vec<String>>,
}

/// Families of a Prometheus text page, by name (histogram rows folded into
/// their family).
fn families(body: &str) -> BTreeMap<String, Family> {
    let mut out: BTreeMap<String, Family> = BTreeMap::new();
    for l in body.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            let mut w = rest.split_whitespace();
            if let (Some(n), Some(k)) = (w.next(), w.next()) {
                out.entry(n.to_string()).or_default().kind = k.to_string();
            }
            continue;
        }
        if l.starts_with('#') || l.trim().is_empty() {
            continue;
        }
        let end = l.find(['{', ' ']).unwrap_or(l.len());
        let mut name = &l[..end];
        for suffix in ["_bucket", "_sum", "_count"] {
            if let Some(base) = name.strip_suffix(suffix) {
                if out.get(base).is_some_and(|f| f.kind == "histogram") {
                    name = base;
                }
            }
        }
        let mut labels: Vec<String> = match (l.find('{'), l.rfind('}')) {
            (Some(a), Some(b)) if a < b => l[a + 1..b]
                .split("\",")
                .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.trim().to_string()))
                .filter(|k| !k.is_empty())
                .collect(),
            _ => Vec::new(),
        };
        labels.sort();
        out.entry(name.to_string())
            .or_default()
            .label_sets
            .insert(labels);
    }
    out
}

/// The value of the row `name{labels}` (labels as written, in order), or
/// the sum of the family's rows whose labels contain every `key="value"`.
fn value(body: &str, name: &str, matchers: &[(&str, &str)]) -> f64 {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
        })
        .filter(|l| {
            matchers
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Families docs/metrics.md lists as not applicable to weft (the table
/// under "## tor families weft does not export": `| name | reason |`).
fn documented_absent() -> Result<BTreeSet<String>> {
    let doc = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/metrics.md"),
    )
    .context("docs/metrics.md")?;
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("tor families weft does not export"))
        .context("docs/metrics.md has no section 'tor families weft does not export'")?;
    Ok(section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .filter(|n| n.starts_with("tor_"))
        .map(str::to_string)
        .collect())
}

#[test]
fn metrics_port_policy_as_tor_reads_it() -> Result<()> {
    let port = free_port();
    let weft = WeftProcess::start(
        1,
        &format!("MetricsPort 127.0.0.1:{port}\nMetricsPortPolicy accept 127.0.0.1\n"),
    );
    // The port opens after the ORPort; retry briefly.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (status, body) = loop {
        match scrape_metrics(port, None) {
            Ok(r) => break r,
            Err(e) if Instant::now() < deadline => {
                eprintln!("scrape: {e}; retrying");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => return Err(e),
        }
    };
    ensure!(status == 200, "a plain scrape from 127.0.0.1 got {status}");
    ensure!(body.contains("# TYPE tor_relay_traffic_bytes counter"));
    // From 127.0.0.2, which the policy does not accept: closed, no reply
    // (the implied `reject *:*`).
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    sock.bind(&SocketAddr::from(([127, 0, 0, 2], 0)).into())?;
    sock.connect(&SocketAddr::from(([127, 0, 0, 1], port)).into())?;
    let mut s: std::net::TcpStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let _ = s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n");
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    ensure!(
        got.is_empty(),
        "a rejected address got an answer: {:?}",
        String::from_utf8_lossy(&got)
    );
    // At most 16 scrapes are answered at once: with 16 connections
    // holding their turn (no request sent yet), a 17th is closed
    // unanswered; once they go, scrapes are answered again.
    let idle: Vec<std::net::TcpStream> = (0..16)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)))
        .collect::<std::io::Result<_>>()?;
    std::thread::sleep(Duration::from_millis(500));
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let _ = s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n");
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    ensure!(got.is_empty(), "a 17th scrape at once was answered");
    drop(idle);
    std::thread::sleep(Duration::from_millis(500));
    ensure!(
        scrape_metrics(port, None)?.0 == 200,
        "scrapes answered again"
    );
    drop(weft);
    Ok(())
}

/// The stock node `name`'s MetricsPort page (no token: its policy accepts
/// 127.0.0.1).
fn scrape(port: u16, what: &str) -> Result<String> {
    let (status, body) = scrape_metrics(port, None).with_context(|| format!("scraping {what}"))?;
    ensure!(status == 200, "{what}'s MetricsPort answered {status}");
    Ok(body)
}

/// A stream on each of `paths` (by node name, "weft" for weft) to the
/// sink, `bytes` each way, verified.
fn traffic_on(net: &Testnet, sink: &Sink, paths: &[[&str; 3]], bytes: u64) -> Result<()> {
    let mut ctl = net.control("client0")?;
    let socks = net
        .node("client0")?
        .socks_addr()
        .context("client0 SocksPort")?;
    let fp = |n: &str| -> Result<String> {
        if n == "weft" {
            Ok(net.weft().context("no weft")?.fingerprint()?.to_string())
        } else {
            net.fingerprint(n)
        }
    };
    let mut workers = Vec::new();
    let mut circs = Vec::new();
    for p in paths {
        let path = [fp(p[0])?, fp(p[1])?, fp(p[2])?];
        let c = ctl
            .build_circuit(&path, Duration::from_secs(60))
            .with_context(|| format!("building {p:?}"))?;
        circs.push(c);
        let s =
            traffic::connect_via_circuit(&mut ctl, socks, sink.addr(), c, Duration::from_secs(60))
                .with_context(|| format!("stream on {p:?}"))?;
        workers.push(std::thread::spawn(move || {
            traffic::transfer(s, Direction::Both, bytes, Duration::from_secs(120))
        }));
    }
    for (w, p) in workers.into_iter().zip(paths) {
        let r = w
            .join()
            .map_err(|_| anyhow::anyhow!("transfer thread panicked"))?
            .with_context(|| format!("transfer on {p:?}"))?;
        ensure!(
            r.up_bytes == bytes && r.down_bytes == bytes,
            "short transfer on {p:?}"
        );
    }
    Ok(())
}

#[test]
fn weft_exports_the_families_tor_exports() -> Result<()> {
    let base_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("weft-net-metric-names-{}", std::process::id()));
    let (tor_middle_port, tor_exit_port, weft_port) = (free_port(), free_port(), free_port());
    let policy = "MetricsPortPolicy accept 127.0.0.1".to_string();
    let sink = Sink::start()?;
    let mut cfg = TestnetConfig::new(&base_dir, 0);
    cfg.relay_torrc = vec![
        vec![],
        vec![
            format!("MetricsPort 127.0.0.1:{tor_middle_port}"),
            policy.clone(),
        ],
    ];
    cfg.exit_torrc = vec![vec![
        format!("MetricsPort 127.0.0.1:{tor_exit_port}"),
        policy.clone(),
    ]];
    let mut w = WeftNode::new(env!("CARGO_BIN_EXE_weft"));
    w.connection_threads = Some(2);
    w.extra_torrc = vec![format!("MetricsPort 127.0.0.1:{weft_port}"), policy];
    w.exit_policy = vec![
        "accept *:80".into(),
        "accept *:443".into(),
        format!("accept 127.0.0.1:{}", sink.addr().port()),
        "reject *:*".into(),
    ];
    cfg.weft = Some(w);
    let mut net = common::start_testnet("metrics", cfg)?;
    let stock = common::stock_relays(&net);
    let bound = Duration::from_secs(240);
    net.wait_until_listed(&stock, &["Running", "Valid"], bound)?;
    let weft_fp = net.weft().context("no weft")?.fingerprint()?.to_string();
    net.wait_until_listed(&[&weft_fp], &["Running", "Valid", "Exit"], bound)?;
    net.wait_for_bootstrap(bound)?;

    let before = (
        scrape(tor_middle_port, "relay1")?,
        scrape(tor_exit_port, "exit0")?,
        scrape(weft_port, "weft")?,
    );
    // Each of tor and weft as a middle and as an exit.
    let paths = [
        ["relay0", "relay1", "exit0"],
        ["relay0", "weft", "exit1"],
        ["relay0", "relay1", "weft"],
        ["relay0", "exit1", "exit0"],
    ];
    traffic_on(&net, &sink, &paths, 1 << 20)?;
    // weft's workers report once a second: let the last second arrive.
    std::thread::sleep(Duration::from_secs(3));
    let after = (
        scrape(tor_middle_port, "relay1")?,
        scrape(tor_exit_port, "exit0")?,
        scrape(weft_port, "weft")?,
    );

    // Names, types, label names.
    let absent = documented_absent()?;
    let weft = families(&after.2);
    let mut missing = Vec::new();
    let mut checked = 0;
    for (who, body) in [("tor middle", &after.0), ("tor exit", &after.1)] {
        for (name, f) in families(body) {
            if !name.starts_with("tor_") {
                continue;
            }
            checked += 1;
            if absent.contains(&name) {
                continue;
            }
            match weft.get(&name) {
                None => missing.push(format!("{name} ({who}): not in weft's scrape")),
                Some(w) if w.kind != f.kind => missing.push(format!(
                    "{name}: type {} in weft, {} in tor",
                    w.kind, f.kind
                )),
                Some(w) => {
                    for ls in f.label_sets.difference(&w.label_sets) {
                        missing.push(format!("{name}: tor has rows labelled {ls:?}, weft none"));
                    }
                }
            }
        }
    }
    ensure!(
        missing.is_empty(),
        "weft's MetricsPort lacks tor's:\n{}",
        missing.join("\n")
    );
    eprintln!(
        "{checked} tor families checked (name, type, label names); {} documented absent",
        absent.len()
    );

    // Values that move with traffic move on weft too.
    let delta =
        |b: &str, a: &str, name: &str, m: &[(&str, &str)]| value(a, name, m) - value(b, name, m);
    for dir in ["read", "written"] {
        let m = [("direction", dir)];
        let (t, w) = (
            delta(&before.0, &after.0, "tor_relay_traffic_bytes", &m),
            delta(&before.2, &after.2, "tor_relay_traffic_bytes", &m),
        );
        eprintln!("traffic {dir}: tor middle +{t}, weft +{w}");
        ensure!(
            t >= 2e6 && w >= 2e6,
            "traffic bytes {dir} did not move (tor +{t}, weft +{w})"
        );
    }
    // The client's circuits use one handshake type; tor may also count
    // other relays' testing circuits of another type in the window, so
    // only require a type both counted, and weft's total to cover the two
    // test circuits through it.
    let (mut both, mut weft_total) = (0, 0.0);
    for ty in ["fast", "ntor", "ntor_v3"] {
        let m = [("type", ty), ("action", "processed")];
        let t = delta(&before.0, &after.0, "tor_relay_load_onionskins_total", &m);
        let w = delta(&before.2, &after.2, "tor_relay_load_onionskins_total", &m);
        eprintln!("onionskins {ty} processed: tor middle +{t}, weft +{w}");
        if t > 0.0 && w > 0.0 {
            both += 1;
        }
        weft_total += w;
    }
    ensure!(both > 0, "no handshake type counted by both tor and weft");
    ensure!(
        weft_total >= 2.0,
        "weft counted {weft_total} onionskins for 2 circuits"
    );
    let begins = |b: &str, a: &str| delta(b, a, "tor_relay_streams_total", &[("type", "BEGIN")]);
    let (t, w) = (begins(&before.1, &after.1), begins(&before.2, &after.2));
    eprintln!("exit BEGINs: tor exit +{t}, weft +{w}");
    ensure!(
        t >= 1.0 && w >= 1.0,
        "exit streams did not move (tor +{t}, weft +{w})"
    );
    let exits = |a: &str| {
        value(
            a,
            "tor_relay_connections_total",
            &[("type", "Exit"), ("state", "created")],
        )
    };
    ensure!(exits(&after.2) >= 1.0, "weft counted no exit connection");
    ensure!(
        value(&after.2, "tor_relay_circuits_total", &[]) >= 1.0,
        "weft shows no open circuit while the client's circuits are open"
    );
    net.check_alive()?;
    drop(net);
    let _ = std::fs::remove_dir_all(&base_dir);
    Ok(())
}
