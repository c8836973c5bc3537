//! Circuit padding machines (proposal 254, `Padding=2`, issue 36) with
//! weft as the middle of a stock client's onion-service circuits, on
//! loopback against stock C tor: 3 authorities, 3 relays, 1 exit, weft, a
//! stock tor running 2 v3 onion services and one stock client whose
//! onion-service circuits all take weft as their second hop
//! (`HSLayer2Nodes`, C's vanguard option, set once the network is up).
//!
//! Over 6 verified connections (a SOCKS username each: fresh introduction
//! and rendezvous circuits every time) the client negotiates C's setup
//! machines with weft: weft's MetricsPort must show both relay machines
//! (`relay_ip_circ`, `relay_rp_circ`) started, its PADDING_NEGOTIATED
//! answers and its RELAY_DROP padding; the client's own info log must show
//! the padding cells arriving on its circuits ("Got padding cell on
//! origin circuit") and never "Middle node did not accept our padding
//! request"; every connection must stay intact.
//!
//! The network lives in `target/tmp/weft-net-circpad-<pid>/`, kept on
//! failure.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use weft_testnet::{traffic, ConsensusEntry, Role, Sink, TestnetConfig};

const SERVICES: usize = 2;
const CONNECTIONS: usize = 6;
const BYTES: u64 = 32 << 10;
const BOUND: Duration = Duration::from_secs(300);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(120);

fn count_lines(path: &std::path::Path, needle: &str) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

#[test]
fn stock_clients_negotiate_the_onion_service_padding_machines_with_weft() -> Result<()> {
    let base_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("weft-net-circpad-{}", std::process::id()));
    let metrics_port = common::free_port();
    let mut cfg = TestnetConfig::new(&base_dir, 0);
    cfg.relays = 3;
    cfg.exits = 1;
    cfg.clients = 1;
    cfg.onion_services = SERVICES;
    cfg.clients_choose_circuits = true;
    cfg.client_torrc = vec![vec!["ProtocolWarnings 1".into()]];
    cfg.authority_torrc = vec!["AuthDirVoteStableGuaranteeMinUptime 0".into()];
    cfg.weft = Some(common::weft_node(2, metrics_port));
    let mut net = common::start_testnet("circpad", cfg)?;
    let mut uploads = net.watch_onion_uploads()?;
    let sink = Sink::start_on(
        net.by_role(Role::OnionService)[0]
            .service_port
            .context("service port")?,
    )?;
    let stock = common::stock_relays(&net);
    net.wait_until_listed(&stock, &["Running", "Valid"], BOUND)?;
    let fp = net.weft().context("weft")?.fingerprint()?.to_string();
    net.wait_until_listed(&[&fp], &["Running", "Valid", "Fast"], BOUND)?;
    net.wait_for_bootstrap(BOUND)?;
    let deadline = Instant::now() + BOUND;
    loop {
        if let ConsensusEntry::Listed {
            bandwidth: Some(w), ..
        } = net.control("client0")?.consensus_entry(&fp)?
        {
            if w > 0 {
                break;
            }
        }
        ensure!(Instant::now() < deadline, "client0: weft without weight");
        std::thread::sleep(Duration::from_secs(2));
    }
    let onions = net.onion_addresses()?;
    uploads.wait_uploaded(&onions, 1, BOUND)?;
    let reply = net
        .control("client0")?
        .command(&format!("SETCONF HSLayer2Nodes={fp}"))?;
    ensure!(reply.is_ok(), "SETCONF HSLayer2Nodes: {reply:?}");

    // Clear of an onion-service time period's start, where a stock client
    // can lose a connection to its own race (see the helper).
    net.wait_clear_of_hs_time_period_start(Duration::from_secs(30), Duration::from_secs(45));
    let socks = net.node("client0")?.socks_addr().context("client0 socks")?;
    let mut failures = Vec::new();
    for i in 0..CONNECTIONS {
        let onion = &onions[i % onions.len()];
        let r =
            traffic::socks5_connect_host(socks, onion, 80, &format!("pad-{i}"), CONNECT_TIMEOUT)
                .and_then(|st| traffic::transfer_sized(st, BYTES, BYTES, CONNECT_TIMEOUT));
        match r {
            Ok(rep) if rep.up_bytes == BYTES && rep.down_bytes == BYTES => {}
            Ok(rep) => failures.push(format!("connection {i}: short transfer {rep}")),
            Err(e) => failures.push(format!("connection {i}: {e:#}")),
        }
    }
    // The intro machine pads for at most ~100 ms after the INTRODUCE_ACK.
    std::thread::sleep(Duration::from_secs(2));

    let body = common::testnet_metrics(&net, metrics_port)?;
    let m = |name: &str| common::metric_sum(&body, name);
    let ip = m("weft_circuit_padding_machines_total{machine=\"relay_ip_circ\"}");
    let rp = m("weft_circuit_padding_machines_total{machine=\"relay_rp_circ\"}");
    let negotiated = m("weft_circuit_padding_negotiated_sent_total");
    let drops = m("weft_circuit_padding_cells_sent_total");
    let malformed = m("weft_circuit_padding_negotiate_total{outcome=\"malformed\"}");
    let client = net.node("client0")?;
    let got_padding = count_lines(&client.info_log(), "Got padding cell on origin circuit");
    let negotiating = count_lines(&client.info_log(), "Negotiating padding on circuit");
    let refused = count_lines(
        &client.info_log(),
        "Middle node did not accept our padding request",
    );
    eprintln!(
        "[circpad] {} of {CONNECTIONS} connections intact; weft: {ip} relay_ip_circ and {rp} relay_rp_circ machines, {negotiated} PADDING_NEGOTIATED and {drops} RELAY_DROP sent, {malformed} malformed negotiations; client0: {negotiating} negotiations sent, {got_padding} padding cells received, {refused} refusals",
        CONNECTIONS - failures.len()
    );
    ensure!(failures.is_empty(), "failed:\n  {}", failures.join("\n  "));
    ensure!(
        ip >= 1.0,
        "no intro padding machine (relay_ip_circ) was negotiated with weft"
    );
    ensure!(
        rp >= 1.0,
        "no rendezvous padding machine (relay_rp_circ) was negotiated with weft"
    );
    ensure!(
        negotiated >= ip + rp,
        "{negotiated} PADDING_NEGOTIATED for {} machines",
        ip + rp
    );
    ensure!(drops >= rp + 7.0, "only {drops} RELAY_DROP sent");
    ensure!(malformed == 0.0, "{malformed} malformed PADDING_NEGOTIATE");
    ensure!(got_padding > 0, "client0 logged no padding cell from weft");
    ensure!(
        refused == 0,
        "client0 logged {refused} refused padding requests"
    );
    net.check_alive()?;
    drop(sink);
    net.stop()?;
    let _ = std::fs::remove_dir_all(&base_dir);
    Ok(())
}
