//! Connection padding (proposal 251) with weft as the first hop of stock
//! tor clients, on loopback against stock C tor from Debian: 3
//! authorities, 2 relays, 1 exit, weft, and two clients. With the
//! consensus defaults, C pads a client's channel once it carried a
//! multi-hop circuit, after a random 1.5 to 9.5 s without a cell.
//!
//! 1. client1 runs with `ReducedConnectionPadding 1`: when its channel to
//!    weft opens it sends PADDING_NEGOTIATE STOP; weft then sends it no
//!    padding, though a circuit through weft stays open and idle.
//! 2. client0 (defaults) builds a circuit through weft and stays idle:
//!    weft pads its channel, every PADDING cell between 1.5 and 10.5 s
//!    after the channel's last cell (C's range, plus the time to write).
//!
//! Read from weft's MetricsPort (`weft_connection_padding_*`). The
//! network lives in `target/tmp/weft-net-padding-<pid>/`, kept on failure.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use weft_testnet::{Testnet, TestnetConfig};

const BOUND: Duration = Duration::from_secs(240);
/// How long the reduced client's circuit stays idle.
const IDLE: Duration = Duration::from_secs(35);
/// How long the default client's circuit stays idle. Both ends pad and
/// each end's PADDING resets the other's timer, so weft sends about one
/// cell per 11 s.
const IDLE_PADDED: Duration = Duration::from_secs(60);

/// weft's padding counters: (cells sent, cumulative count by gap bucket
/// upper bound in seconds, STOP cells received).
struct Padding {
    sent: f64,
    buckets: Vec<(String, f64)>,
    stops: f64,
}

fn padding(net: &Testnet, port: u16) -> Result<Padding> {
    let body = common::testnet_metrics(net, port)?;
    let mut buckets = Vec::new();
    for l in body.lines() {
        if let Some(rest) = l.strip_prefix("weft_connection_padding_gap_seconds_bucket{le=\"") {
            let (le, v) = rest.split_once("\"} ").context("bucket line")?;
            buckets.push((le.to_string(), v.trim().parse()?));
        }
    }
    Ok(Padding {
        sent: common::metric_sum(&body, "weft_connection_padding_gap_seconds_count"),
        buckets,
        stops: common::metric_sum(
            &body,
            "weft_connection_padding_negotiate_total{command=\"stop\"}",
        ),
    })
}

fn bucket(p: &Padding, le: &str) -> f64 {
    p.buckets
        .iter()
        .find(|(b, _)| b == le)
        .map_or(f64::NAN, |(_, v)| *v)
}

#[test]
fn weft_pads_idle_client_channels_as_c_tor_does() -> Result<()> {
    let base_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("weft-net-padding-{}", std::process::id()));
    let metrics_port = common::free_port();
    let mut cfg = TestnetConfig::new(&base_dir, 0);
    cfg.exits = 1;
    cfg.clients = 2;
    cfg.client_torrc = vec![vec![], vec!["ReducedConnectionPadding 1".into()]];
    // The clients bootstrap only with a Stable guard; in a young network
    // that depends on the relays' uptimes against the median, so it is
    // guaranteed here.
    cfg.authority_torrc = vec!["AuthDirVoteStableGuaranteeMinUptime 0".into()];
    cfg.weft = Some(common::weft_node(2, metrics_port));
    let mut net = common::start_testnet("padding", cfg)?;
    let weft = net.weft().context("weft")?.fingerprint()?.to_string();
    net.wait_until_listed(&[&weft], &["Running", "Valid"], BOUND)?;
    net.wait_for_bootstrap(BOUND)?;
    let path = [
        weft.clone(),
        net.fingerprint("relay0")?,
        net.fingerprint("exit0")?,
    ];

    // 1. The reduced-padding client: STOP, then nothing from weft.
    let before = padding(&net, metrics_port)?;
    let mut reduced = net.control("client1")?;
    let circ = reduced.build_circuit(&path, BOUND)?;
    std::thread::sleep(IDLE);
    let after = padding(&net, metrics_port)?;
    eprintln!(
        "[padding] reduced client (circuit {circ}): STOP cells {} → {}, padding sent {} → {}",
        before.stops, after.stops, before.sent, after.sent
    );
    ensure!(
        after.stops > before.stops,
        "weft counted no PADDING_NEGOTIATE STOP from the reduced-padding client"
    );
    ensure!(
        after.sent == before.sent,
        "weft padded after STOP: {} PADDING cells",
        after.sent - before.sent
    );
    reduced.close_circuit(circ)?;
    drop(reduced);

    // 2. The default client: padding at C's gaps.
    let mut client = net.control("client0")?;
    let circ = client.build_circuit(&path, BOUND)?;
    std::thread::sleep(IDLE_PADDED);
    let p = padding(&net, metrics_port)?;
    eprintln!(
        "[padding] default client (circuit {circ}): {} PADDING cells sent; gaps by bucket (cumulative): {:?}",
        p.sent - after.sent,
        p.buckets
    );
    ensure!(
        p.sent - after.sent >= 2.0,
        "weft sent {} PADDING cells on an idle client channel in {IDLE_PADDED:?}",
        p.sent - after.sent
    );
    ensure!(
        bucket(&p, "1.5") == 0.0,
        "PADDING sooner than 1.5 s after a cell: {:?}",
        p.buckets
    );
    ensure!(
        bucket(&p, "10.5") == p.sent,
        "PADDING later than 10.5 s after a cell: {:?}",
        p.buckets
    );
    client.close_circuit(circ)?;
    drop(client);
    net.check_alive()?;
    net.stop()?;
    let _ = std::fs::remove_dir_all(&base_dir);
    Ok(())
}
