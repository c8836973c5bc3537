//! weft as the conflux exit of an unmodified stock tor client (issue 13),
//! against stock C tor from Debian on loopback: 3 authorities, 4 stock
//! guard/middle relays (a set's legs need different guards and middles),
//! no stock exit, and weft with an exit policy. The client picks its own
//! circuits; with the consensus defaults (`cfx_enabled=1`) it prebuilds
//! conflux sets of two legs to an exit that advertises `Conflux=1` — weft,
//! the only one — and puts its streams on them. The test shows it from
//! the client's control port (circuits with `PURPOSE=CONFLUX_LINKED`
//! ending at weft carry the streams) and from weft's MetricsPort (legs
//! linked, legs on another worker than their set's home), and verifies
//! every byte both ways (SHA-256 at both ends). Rounds with
//! ConnectionThreads 2, and with migration on (the default) and
//! `TestingCrossWorkerExtends 1`.
//!
//! A leg closed mid-transfer (acceptance 2): the client closes the leg of
//! a set that carries no stream bytes (C's client tears the whole set down
//! when the leg in use closes, as the exit does); the stream on the other
//! leg goes on, every byte verified.
//!
//! Networks live in `target/tmp/weft-net-conflux-<pid>/`, kept on failure.

mod common;

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use weft_testnet::{pick_base_port, traffic, Direction, Sink, Testnet, TestnetConfig, WeftNode};

/// Streams per round, run at once.
const STREAMS: usize = 4;
/// Bytes per stream and direction: many congestion windows.
const PER_STREAM: u64 = 4 << 20;
/// Bound on every wait for the consensus and for linked sets.
const BOUND: Duration = Duration::from_secs(240);

fn weft_lines(metrics_port: u16, extra: &[&str]) -> Vec<String> {
    let mut v = vec![format!("MetricsPort 127.0.0.1:{metrics_port}")];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// The sum of every series of metric line `prefix` (e.g. one per
/// worker; 0 if absent).
fn metric(net: &Testnet, port: u16, prefix: &str) -> Result<f64> {
    let dir = &net.weft().context("no weft")?.dir;
    let token = common::metrics_token(dir)?;
    let (status, body) = common::scrape_metrics(port, Some(&token))?;
    ensure!(status == 200, "MetricsPort answered {status}");
    Ok(body
        .lines()
        .filter_map(|l| l.strip_prefix(prefix).and_then(|v| v.trim().parse::<f64>().ok()))
        .sum())
}

fn start(sink_port: u16, metrics_port: u16) -> Result<Testnet> {
    let base_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("weft-net-conflux-{}", std::process::id()));
    let mut cfg = TestnetConfig::new(&base_dir, 0);
    cfg.relays = 4;
    cfg.exits = 0;
    cfg.clients = 1;
    cfg.clients_choose_circuits = true;
    let mut w = WeftNode::new(env!("CARGO_BIN_EXE_weft"));
    w.connection_threads = Some(2);
    w.extra_torrc = weft_lines(metrics_port, &[]);
    w.exit_policy = vec![
        "accept *:80".into(),
        "accept *:443".into(),
        format!("accept *:{sink_port}"),
        "reject *:*".into(),
    ];
    cfg.weft = Some(w);
    cfg.base_port = pick_base_port(cfg.ports_needed())?;
    eprintln!(
        "[conflux] network in {} from port {}",
        base_dir.display(),
        cfg.base_port
    );
    Testnet::start(cfg)
}

/// The client's circuits that are linked conflux legs ending at weft
/// (`fp`): their IDs.
fn linked_legs(net: &Testnet, fp: &str) -> Result<Vec<String>> {
    let mut ctl = net.control("client0")?;
    let status = ctl.getinfo("circuit-status")?;
    Ok(status
        .lines()
        .filter(|l| l.contains(" BUILT ") && l.contains("PURPOSE=CONFLUX_LINKED"))
        .filter(|l| {
            l.split_whitespace()
                .nth(2)
                .and_then(|p| p.rsplit(',').next())
                .is_some_and(|last| last.trim_start_matches('$').starts_with(fp))
        })
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect())
}

/// Wait until the client has at least one linked set (two legs) to weft
/// that is not in `old` (sets from before a restart of weft).
fn wait_for_sets(net: &Testnet, fp: &str, old: &[String], label: &str) -> Result<Vec<String>> {
    let deadline = Instant::now() + BOUND;
    loop {
        let legs: Vec<String> = linked_legs(net, fp)?
            .into_iter()
            .filter(|l| !old.contains(l))
            .collect();
        if legs.len() >= 2 {
            eprintln!("[{label}] client0 has {} linked legs to weft: {legs:?}", legs.len());
            return Ok(legs);
        }
        ensure!(
            Instant::now() < deadline,
            "[{label}] no conflux set to weft within {BOUND:?}"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// `STREAMS` streams through client0 at once, each verified both ways;
/// returns the circuits that carried them (from STREAM events).
fn round(net: &Testnet, sink: &Sink, label: &str) -> Result<HashSet<String>> {
    let socks = net.node("client0")?.socks_addr().context("SocksPort")?;
    let mut ctl = net.control("client0")?;
    ctl.set_events(&["STREAM"])?;
    // The first connect is retried while the client's sets are not usable
    // yet (bounded).
    let deadline = Instant::now() + Duration::from_secs(120);
    let first = loop {
        match traffic::socks5_connect(socks, sink.addr(), Duration::from_secs(60)) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                eprintln!("[{label}] no stream yet ({e:#}); retrying");
                std::thread::sleep(Duration::from_secs(3));
            }
            Err(e) => return Err(e).context(format!("[{label}] first stream")),
        }
    };
    let mut streams = vec![first];
    for i in 1..STREAMS {
        streams.push(
            traffic::socks5_connect(socks, sink.addr(), Duration::from_secs(60))
                .with_context(|| format!("[{label}] stream {i}"))?,
        );
    }
    let t0 = Instant::now();
    let threads: Vec<_> = streams
        .into_iter()
        .map(|s| {
            std::thread::spawn(move || {
                traffic::transfer(s, Direction::Both, PER_STREAM, Duration::from_secs(300))
            })
        })
        .collect();
    for (i, t) in threads.into_iter().enumerate() {
        let r = t
            .join()
            .map_err(|_| anyhow::anyhow!("transfer thread panicked"))?
            .with_context(|| format!("[{label}] transfer on stream {i}"))?;
        ensure!(r.up_bytes == PER_STREAM && r.down_bytes == PER_STREAM, "{r}");
    }
    eprintln!(
        "[{label}] {STREAMS} streams × {} MiB both ways verified in {:.2?}",
        PER_STREAM >> 20,
        t0.elapsed()
    );
    // "STREAM <id> SUCCEEDED <circuit> <target>", read as they come.
    let mut circuits = HashSet::new();
    while let Some(l) = ctl.next_event(Duration::from_millis(500))? {
        if l.starts_with("STREAM ") && l.contains(" SUCCEEDED ") {
            if let Some(c) = l.split_whitespace().nth(3) {
                circuits.insert(c.to_string());
            }
        }
    }
    Ok(circuits)
}

/// The round's streams were on linked legs to weft.
fn check_on_legs(net: &Testnet, fp: &str, used: &HashSet<String>, label: &str) -> Result<()> {
    let legs: HashSet<String> = linked_legs(net, fp)?.into_iter().collect();
    eprintln!("[{label}] streams on circuits {used:?}; linked legs {legs:?}");
    ensure!(!used.is_empty(), "[{label}] no STREAM SUCCEEDED event seen");
    ensure!(
        used.iter().all(|c| legs.contains(c)),
        "[{label}] streams went on circuits that are not conflux legs to weft"
    );
    Ok(())
}

#[test]
fn stock_clients_link_conflux_sets_at_weft() -> Result<()> {
    let sink_port = common::free_port();
    let sink = Sink::start_on(sink_port)?;
    let metrics_port = common::free_port();
    let mut net = start(sink_port, metrics_port)?;
    let stock: Vec<String> = net
        .nodes()
        .iter()
        .filter_map(|n| n.fingerprint.clone())
        .filter(|f| Some(f.as_str()) != net.weft().and_then(|w| w.fingerprint.as_deref()))
        .collect();
    net.wait_until_listed(&stock, &["Running", "Valid"], BOUND)?;
    let fp = net.weft().context("weft")?.fingerprint()?.to_string();
    net.wait_until_listed(&[&fp], &["Running", "Valid", "Exit"], BOUND)?;
    net.wait_for_bootstrap(BOUND)?;

    let rounds: [(&str, &[&str]); 2] = [
        ("threads2", &[]),
        ("threads2-cross", &["TestingCrossWorkerExtends 1"]),
    ];
    let mut old = Vec::new();
    for (i, (label, extra)) in rounds.iter().enumerate() {
        if i > 0 {
            net.restart_weft(Some(2), weft_lines(metrics_port, extra))?;
            net.wait_until_listed(&[&fp], &["Running", "Valid", "Exit"], BOUND)?;
            // Sets to the old weft died with it; the client builds new ones.
            let mut ctl = net.control("client0")?;
            ctl.command("SIGNAL NEWNYM")?;
        }
        old = wait_for_sets(&net, &fp, &old, label)?;
        let used = round(&net, &sink, label)?;
        check_on_legs(&net, &fp, &used, label)?;
        std::thread::sleep(Duration::from_millis(1500));
        let m = |l: &str| metric(&net, metrics_port, l);
        let linked = m("weft_conflux_total{event=\"leg_linked\"}")?;
        let remote = m("weft_conflux_total{event=\"leg_linked_other_worker\"}")?;
        let sets = m("weft_conflux_total{event=\"set_created\"}")?;
        let switches = m("weft_conflux_total{event=\"switch_sent\"}")?
            + m("weft_conflux_total{event=\"switch_received\"}")?;
        let open = m("weft_conflux_sets ")?;
        let legs_open = m("weft_conflux_legs ")?;
        let closed = m("weft_conflux_total{event=\"set_closed_legs\"}")?;
        let reordered = m("weft_conflux_total{event=\"reordered\"}")?;
        let errors = m("weft_conflux_total{event=\"set_closed_protocol\"}")?
            + m("weft_conflux_total{event=\"set_closed_ooo_full\"}")?;
        eprintln!(
            "[{label}] weft: {sets} sets ({open} open, {legs_open} legs), {linked} legs linked ({remote} on another worker than home), {switches} switches, {reordered} messages reordered, {closed} sets closed as their legs closed, {errors} for errors"
        );
        ensure!(linked >= 2.0 && sets >= 1.0, "[{label}] weft linked no set");
        ensure!(errors == 0.0, "[{label}] sets closed for errors");
    }
    Ok(())
}
