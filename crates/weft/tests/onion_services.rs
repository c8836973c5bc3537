//! Onion services through a network where weft is a frequent middle hop
//! (issue "stock clients fail to reach onion services"), against stock C
//! tor on loopback:
//!
//! * 3 authorities, 4 relays and 2 exits (all stock, all voted HSDir), weft,
//!   one stock tor running 8 v3 onion services (`HiddenServicePort 80` to a
//!   local sink) and 2 stock clients that pick their own circuits;
//! * 40 connections to the onion addresses (a different SOCKS username each,
//!   so every one gets circuits of its own), 256 KiB each way, every byte
//!   checked by SHA-256; every connection must succeed;
//! * rounds with weft on `ConnectionThreads 1`, then `2`, then `2` with
//!   `TestingCrossWorkerExtends 1` (weft restarted between rounds, same
//!   identity);
//! * the clients' and the service's control ports must show onion-service
//!   circuits through weft (descriptor fetch/upload, intro, rendezvous), or
//!   the test proves nothing; weft's MetricsPort must show it served as
//!   rendezvous point in every round and as introduction point;
//! * weft advertises `Padding=2`, so the stock clients negotiate C's
//!   onion-service setup padding machines with it when it is the second
//!   hop of their introduction and rendezvous circuits (their vanguards
//!   decide how often: 0 to 25 machines a round were seen); the rounds
//!   print weft's circuit padding counters, and no PADDING_NEGOTIATE may be
//!   malformed or name an unknown machine (issue 36;
//!   `circuit_padding.rs` makes weft the second hop and checks both
//!   machines).
//!
//! * each round starts clear of an onion-service time period's start
//!   (every 8 minutes with the testnet's 20 s votes): there every stock
//!   client swaps its descriptors for the new period's, whose introduction
//!   points differ, and a connection whose introduction circuit was open
//!   under the old one fails at once (C's "Unable to find introduction
//!   point"), whatever the relays do; a CI run lost 1 of 40 so.
//!
//! The cause this test keeps away (the issue): C Tor clients pick
//! rendezvous points, and services introduction points, among all relays
//! without checking `HSRend`/`HSIntro`; weft lacked both roles, so those
//! circuits went nowhere (connections timed out, descriptors waited for
//! introduction points that never came up), and it answered clients'
//! path-bias probes with an END that lacked the address.
//!
//! `WEFT_ONION_BASELINE=1` runs the same load with a stock relay in weft's
//! place (for comparison by hand; not part of the suite).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use anyhow::{ensure, Context, Result};
use weft_testnet::{
    traffic, ConsensusEntry, HsCircuitCount, Role, Sink, Testnet, TestnetConfig, WeftNode,
};

/// Onion services on the service node.
const SERVICES: usize = 8;
/// Rounds of new rendezvous circuits after one in which weft was never
/// the rendezvous point. At about 1 in 40 per circuit (CI runs) the chance
/// that 9 rounds of 40 all miss weft is about 1 in 10,000; a round takes
/// about 3 s.
const MORE_ROUNDS: u32 = 8;

/// Connections per round.
const CONNECTIONS: usize = 40;
/// Bytes each way per connection.
const BYTES: u64 = 256 << 10;
/// Connections in flight at once.
const PARALLEL: usize = 10;
/// Bound on one connection (SOCKS connect and transfer).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(120);
/// Bound on every wait for the consensus and for descriptors.
const BOUND: Duration = Duration::from_secs(300);
/// Quiet time after weft restarts between rounds. A restart tears down
/// every circuit through weft: for about a second the stock relays pass
/// DESTROYs along and the services rebuild their introduction circuits
/// (they retry each second). In 1 of 12 runs, rounds that began within
/// 100 ms of the restart lost 4–5 of 40 connections: a stock introduction
/// point ACKed the INTRODUCE1, the service never logged the INTRODUCE2,
/// and the client waited its full 120 s. weft's log showed no cell for an
/// unknown circuit; the places where it drops a relay cell for a half
/// without a peer now log at debug too, and `WEFT_TESTNET_DEBUG_LOG=1`
/// gives the stock nodes debug logs, for the next time. Whether a stock
/// relay in weft's place loses cells in that transient is not settled.
/// The rounds measure weft in a settled network.
const SETTLE_AFTER_RESTART: Duration = Duration::from_secs(15);

/// A round must not begin this close before an onion-service time
/// period's start ([`Testnet::wait_clear_of_hs_time_period_start`]): a
/// CI run lost 1 of 40 connections so (every client refetched all eight
/// descriptors in that round; a stock client's log showed "Unable to find
/// introduction point" for a circuit opened under the old descriptor).
const ROUND_CLEAR: Duration = Duration::from_secs(30);
/// How long after that start a round waits: the new period's first
/// consensus reaches the clients within one voting interval (20 s) and
/// they drop their old descriptors as it comes.
const PERIOD_SETTLE: Duration = Duration::from_secs(45);

fn start(baseline: bool) -> Result<(Testnet, PathBuf)> {
    let base_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("weft-net-onion-{}", std::process::id()));
    let mut cfg = TestnetConfig::new(&base_dir, 0);
    cfg.relays = if baseline { 5 } else { 4 };
    cfg.exits = 2;
    cfg.clients = 2;
    cfg.onion_services = SERVICES;
    // Five introduction points per service instead of C's three: with
    // eight services and about ten relays, three each left weft out of
    // every service's choice in about one run in twenty-five (a CI run
    // failed so), five in under one in five hundred.
    cfg.service_torrc = vec!["HiddenServiceNumIntroductionPoints 5".into()];
    cfg.clients_choose_circuits = true;
    if !baseline {
        let mut w = WeftNode::new(env!("CARGO_BIN_EXE_weft"));
        w.connection_threads = Some(1);
        w.extra_torrc = metrics_lines();
        cfg.weft = Some(w);
    }
    Ok((common::start_testnet("onion", cfg)?, base_dir))
}

/// The MetricsPort of the weft node (fixed for the test's life).
fn metrics_port() -> u16 {
    static PORT: std::sync::OnceLock<u16> = std::sync::OnceLock::new();
    *PORT.get_or_init(common::free_port)
}

fn metrics_lines() -> Vec<String> {
    vec![format!("MetricsPort 127.0.0.1:{}", metrics_port())]
}

/// weft's onion-service counters since its start: (introduction points
/// established, INTRODUCE2 sent, rendezvous joined).
fn weft_onion_counters(net: &Testnet) -> Result<(f64, f64, f64)> {
    let body = common::testnet_metrics(net, metrics_port())?;
    let value = |name: &str| common::metric_sum(&body, name);
    Ok((
        value("tor_relay_est_intro_total{action=\"success\"}"),
        value("tor_relay_intro1_total{action=\"success\"}"),
        value("tor_relay_rend1_total{action=\"success\"}"),
    ))
}

/// weft's circuit padding counters since its start: (intro machines
/// started, rendezvous machines started, PADDING_NEGOTIATED sent,
/// RELAY_DROP padding sent, PADDING_NEGOTIATE malformed or for an unknown
/// machine).
fn weft_padding_counters(net: &Testnet) -> Result<[f64; 5]> {
    let body = common::testnet_metrics(net, metrics_port())?;
    let value = |name: &str| common::metric_sum(&body, name);
    Ok([
        value("weft_circuit_padding_machines_total{machine=\"relay_ip_circ\"}"),
        value("weft_circuit_padding_machines_total{machine=\"relay_rp_circ\"}"),
        value("weft_circuit_padding_negotiated_sent_total "),
        value("weft_circuit_padding_cells_sent_total "),
        value("weft_circuit_padding_negotiate_total{outcome=\"malformed\"}")
            + value("weft_circuit_padding_negotiate_total{outcome=\"unknown_machine\"}"),
    ])
}

/// The relay whose share of onion-service circuits is counted: weft, or in
/// the baseline the extra stock relay.
fn watched_fp(net: &Testnet) -> Result<String> {
    match net.weft() {
        Some(w) => Ok(w.fingerprint()?.to_string()),
        None => net.fingerprint("relay4"),
    }
}

/// Wait until every client's consensus lists the watched relay with a
/// nonzero weight (else clients never pick it).
fn wait_for_weight(net: &Testnet, fp: &str) -> Result<()> {
    let deadline = Instant::now() + BOUND;
    for c in ["client0", "client1", "hs0"] {
        loop {
            if let ConsensusEntry::Listed {
                bandwidth: Some(w), ..
            } = net.control(c)?.consensus_entry(fp)?
            {
                if w > 0 {
                    eprintln!("[onion] {c} lists the watched relay with weight {w}");
                    break;
                }
            }
            ensure!(
                Instant::now() < deadline,
                "{c}: watched relay without weight"
            );
            std::thread::sleep(Duration::from_secs(2));
        }
    }
    Ok(())
}

/// One round: `CONNECTIONS` verified connections; returns the failures.
/// `isolation` goes into each connection's SOCKS username: a client reuses
/// a rendezvous circuit for streams of the same isolation, so a round that
/// must build new rendezvous circuits needs a value no earlier round used.
fn round(net: &Testnet, onions: &[String], label: &str, isolation: u32) -> Result<Vec<String>> {
    let socks = [
        net.node("client0")?.socks_addr().context("client0 socks")?,
        net.node("client1")?.socks_addr().context("client1 socks")?,
    ];
    let next = Arc::new(Mutex::new(0usize));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..PARALLEL {
            let (next, failures) = (next.clone(), failures.clone());
            s.spawn(move || loop {
                let i = {
                    let mut n = next.lock().unwrap_or_else(|e| e.into_inner());
                    if *n >= CONNECTIONS {
                        return;
                    }
                    *n += 1;
                    *n - 1
                };
                let onion = &onions[i % onions.len()];
                let user = format!("{label}-{isolation}-{i}");
                let r =
                    traffic::socks5_connect_host(socks[i % 2], onion, 80, &user, CONNECT_TIMEOUT)
                        .and_then(|st| traffic::transfer_sized(st, BYTES, BYTES, CONNECT_TIMEOUT));
                match r {
                    Ok(rep) if rep.up_bytes == BYTES && rep.down_bytes == BYTES => {}
                    Ok(rep) => failures
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(format!("connection {i} to {onion}: short transfer {rep}")),
                    Err(e) => failures
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(format!("connection {i} to {onion}: {e:#}")),
                }
            });
        }
    });
    let failures = std::mem::take(&mut *failures.lock().unwrap_or_else(|e| e.into_inner()));
    eprintln!(
        "[{label}] {} of {CONNECTIONS} onion connections intact in {:.1?}",
        CONNECTIONS - failures.len(),
        t0.elapsed()
    );
    Ok(failures)
}

/// Subscribe the clients and the service to CIRC events.
fn watch_circuits(net: &Testnet) -> Result<Vec<weft_testnet::ControlClient>> {
    ["client0", "client1", "hs0"]
        .iter()
        .map(|n| {
            let mut c = net.control(n)?;
            c.set_events(&["CIRC"])?;
            Ok(c)
        })
        .collect()
}

fn count_circuits(ctls: &mut [weft_testnet::ControlClient], fp: &str) -> HsCircuitCount {
    let mut count = HsCircuitCount::default();
    for c in ctls.iter_mut() {
        let mut lines = c.take_events();
        while let Ok(Some(l)) = c.next_event(Duration::from_millis(50)) {
            lines.push(l);
        }
        count.add_events(&lines, fp);
    }
    count
}

fn run(baseline: bool) -> Result<()> {
    let (mut net, base_dir) = start(baseline)?;
    let mut uploads = net.watch_onion_uploads()?;
    let sink = Sink::start_on(
        net.by_role(Role::OnionService)[0]
            .service_port
            .context("service port")?,
    )?;
    let stock = common::stock_relays(&net);
    net.wait_until_listed(&stock, &["Running", "Valid"], BOUND)?;
    let fp = watched_fp(&net)?;
    net.wait_until_listed(&[&fp], &["Running", "Valid", "Fast"], BOUND)?;
    net.wait_for_bootstrap(BOUND)?;
    wait_for_weight(&net, &fp)?;
    let onions = net.onion_addresses()?;
    let t = uploads.wait_uploaded(&onions, 1, BOUND)?;
    eprintln!("[onion] every descriptor uploaded after {t:.1?} more");

    let rounds: &[(u32, &[&str])] = if baseline {
        &[(0, &[])]
    } else {
        &[(1, &[]), (2, &[]), (2, &["TestingCrossWorkerExtends 1"])]
    };
    let mut report = Vec::new();
    let mut padding: Vec<[f64; 5]> = Vec::new();
    for (i, (threads, extra)) in rounds.iter().enumerate() {
        let label = if baseline {
            "stock".to_string()
        } else {
            format!(
                "threads{threads}{}",
                if extra.is_empty() { "" } else { "-cross" }
            )
        };
        if !baseline && i > 0 {
            let mut torrc: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
            torrc.extend(metrics_lines());
            net.restart_weft(Some(*threads), torrc)?;
            ensure!(watched_fp(&net)? == fp, "weft's fingerprint changed");
            std::thread::sleep(SETTLE_AFTER_RESTART);
            // The restart broke every circuit through weft; a client whose
            // introduction through weft died in it marks that introduction
            // point failed for minutes (C's intro-state cache) and, with a
            // service's other points failed too, answers "host
            // unreachable" at once. NEWNYM drops that client state (C's
            // hs_client_purge_state), as a user's new identity would, so
            // the round measures weft, not the restart.
            for client in ["client0", "client1"] {
                let reply = net.control(client)?.command("SIGNAL NEWNYM")?;
                ensure!(reply.is_ok(), "{client}: SIGNAL NEWNYM: {reply:?}");
            }
        }
        // A round takes about 3 s; one that met the start of an
        // onion-service time period (every 8 minutes here) could lose a
        // connection to a stock client's race, whatever weft does.
        let waited = net.wait_clear_of_hs_time_period_start(ROUND_CLEAR, PERIOD_SETTLE);
        if !waited.is_zero() {
            eprintln!("[{label}] waited {waited:.1?} past an onion-service time period's start");
        }
        let mut ctls = watch_circuits(&net)?;
        let mut failures = round(&net, &onions, &label, 0)?;
        let count = count_circuits(&mut ctls, &fp);
        eprintln!(
            "[{label}] onion-service circuits built {:?}; through the watched relay {:?}",
            count.built, count.through
        );
        let mut rounds_run = 1;
        let roles = if baseline {
            None
        } else {
            let mut r = weft_onion_counters(&net)?;
            // A client picks its rendezvous point at random among the
            // relays by weight (2, 0 and 1 of 40 in one CI run): a round
            // that happened not to pick weft is followed by up to
            // MORE_ROUNDS more, so every configuration is seen as a
            // rendezvous point. Each
            // more round uses new SOCKS usernames: with the old ones the
            // clients reuse the rendezvous circuits they already built
            // (rounds of 1.2 s, no new rendezvous point, in one CI run).
            for more in 1..=MORE_ROUNDS {
                if r.2 > 0.0 {
                    break;
                }
                eprintln!("[{label}] weft not yet a rendezvous point: round {more} more");
                failures.extend(round(&net, &onions, &label, more)?);
                rounds_run += 1;
                r = weft_onion_counters(&net)?;
            }
            eprintln!(
                "[{label}] weft as introduction point {} times ({} INTRODUCE2), as rendezvous point {} times",
                r.0, r.1, r.2
            );
            let p = weft_padding_counters(&net)?;
            eprintln!(
                "[{label}] weft's circuit padding: {} relay_ip_circ and {} relay_rp_circ machines, {} PADDING_NEGOTIATED and {} RELAY_DROP sent, {} refused",
                p[0], p[1], p[2], p[3], p[4]
            );
            padding.push(p);
            Some(r)
        };
        report.push((label, failures, count, roles, rounds_run));
    }
    let mut bad = Vec::new();
    let intro_total: f64 = report.iter().filter_map(|r| r.3).map(|r| r.0).sum();
    if !baseline && intro_total == 0.0 {
        bad.push("weft never became an introduction point".to_string());
    }
    let refused: f64 = padding.iter().map(|p| p[4]).sum();
    if refused > 0.0 {
        bad.push(format!(
            "{refused} PADDING_NEGOTIATE cells malformed or for an unknown machine"
        ));
    }
    for (label, failures, count, roles, rounds_run) in &report {
        if roles.is_some_and(|r| r.2 == 0.0) {
            bad.push(format!("[{label}] weft was never a rendezvous point"));
        }
        if !failures.is_empty() {
            bad.push(format!(
                "[{label}] {} of {} failed:\n  {}",
                failures.len(),
                CONNECTIONS * rounds_run,
                failures.join("\n  ")
            ));
        }
        if count.through_total() == 0 {
            bad.push(format!(
                "[{label}] no onion-service circuit went through the watched relay"
            ));
        }
    }
    ensure!(
        bad.is_empty(),
        "{}\nupload failures: {:?}",
        bad.join("\n"),
        uploads.failures()
    );
    drop(sink);
    net.stop()?;
    drop(net);
    std::fs::remove_dir_all(&base_dir).with_context(|| format!("removing {}", base_dir.display()))
}

#[test]
fn onion_services_through_weft() -> Result<()> {
    run(std::env::var_os("WEFT_ONION_BASELINE").is_some())
}
