//! weft as an HSDir (`HSDir=2`, issue 35 acceptance 2), against stock C tor
//! on loopback:
//!
//! * 3 authorities that compute HSDir by their own rules
//!   (`dirserv_thinks_router_is_hs_dir`; thresholds lowered for a young
//!   network: `MinUptimeHidServDirectoryV2 0 minutes`,
//!   `AuthDirVoteStableGuaranteeMinUptime 0`; no `TestingDirAuthVoteHSDir`
//!   list for anyone), 3 relays, 2 exits, weft (its descriptor says
//!   `hidden-service-dir` and `proto … HSDir=2`), a stock tor running 4 v3
//!   onion services, 2 stock clients;
//! * the consensus parameter `hsdir_spread_store=16` (every HSDir of this
//!   small ring is responsible for every descriptor), so each service
//!   uploads to weft among the others: the service's `HS_DESC UPLOADED`
//!   events must name weft for every service, and weft's MetricsPort must
//!   count the stores;
//! * each client fetches each service's descriptor from weft (`HSFETCH …
//!   SERVER=$weft`; its `HS_DESC RECEIVED` events name weft; weft counts
//!   the hits) and then connects: 40 of 40 connections to the services,
//!   64 KiB each way, every byte checked;
//! * a stale upload through stock tor (`HSPOST` of the descriptor weft
//!   holds, to weft: same revision counter) is refused as C refuses it
//!   (the poster logs `http status 400 ("Invalid HS descriptor.
//!   Rejected.")`, `HS_DESC FAILED … REASON=UPLOAD_REJECTED`), weft's
//!   count of refused old revisions moves and its store does not (the
//!   clients still fetch the same descriptors from it).
//!
//! Garbage, forged and oversized uploads cannot be sent through stock tor
//! (its `HSPOST` checks the descriptor itself); the worker's streams answer
//! them in `weft-relay`'s core tests (`worker/core/tests/hs_dir.rs`), with
//! the same check and store the controller runs.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use anyhow::{ensure, Context, Result};
use weft_testnet::{pick_base_port, traffic, Role, Sink, Testnet, TestnetConfig, WeftNode};

/// Onion services on the service node.
const SERVICES: usize = 4;
/// Connections, and bytes each way per connection.
const CONNECTIONS: usize = 40;
const BYTES: u64 = 64 << 10;
/// Connections in flight at once.
const PARALLEL: usize = 10;
/// Bound on one connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(90);
/// Bound on each wait for the network.
const BOUND: Duration = Duration::from_secs(180);

fn metrics_port() -> u16 {
    static PORT: std::sync::OnceLock<u16> = std::sync::OnceLock::new();
    *PORT.get_or_init(common::free_port)
}

fn start() -> Result<(Testnet, PathBuf)> {
    let base_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("weft-net-hsdir-{}", std::process::id()));
    let mut cfg = TestnetConfig::new(&base_dir, 0);
    cfg.relays = 3;
    cfg.exits = 2;
    cfg.clients = 2;
    cfg.onion_services = SERVICES;
    cfg.clients_choose_circuits = true;
    cfg.hsdirs_by_vote = true;
    cfg.consensus_params = "hsdir_spread_store=16".into();
    let mut w = WeftNode::new(env!("CARGO_BIN_EXE_weft"));
    w.connection_threads = Some(2);
    w.extra_torrc = vec![format!("MetricsPort 127.0.0.1:{}", metrics_port())];
    cfg.weft = Some(w);
    cfg.base_port = pick_base_port(cfg.ports_needed())?;
    eprintln!(
        "[hsdir] network in {} from port {}",
        base_dir.display(),
        cfg.base_port
    );
    Ok((Testnet::start(cfg)?, base_dir))
}

fn metric(body: &str, name: &str) -> f64 {
    common::metric_sum(body, name)
}

/// Fetch every onion's descriptor from weft on `client` (HSFETCH with
/// SERVER), waiting for each `HS_DESC RECEIVED` naming weft. Returns the
/// events seen.
fn fetch_from_weft(net: &Testnet, client: &str, onions: &[String], fp: &str) -> Result<usize> {
    let mut ctl = net.control(client)?;
    ctl.set_events(&["HS_DESC"])?;
    let mut received = 0;
    for onion in onions {
        let addr = onion.trim_end_matches(".onion");
        let r = ctl.command(&format!("HSFETCH {addr} SERVER=${fp}"))?;
        ensure!(r.is_ok(), "{client}: HSFETCH {addr}: {r:?}");
        let deadline = Instant::now() + BOUND;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            ensure!(!left.is_zero(), "{client}: no HS_DESC answer for {addr}");
            let Some(ev) = ctl.next_event(left)? else {
                continue;
            };
            let f: Vec<&str> = ev.split_whitespace().collect();
            match f.as_slice() {
                ["HS_DESC", "RECEIVED", a, _, hsdir, ..] if *a == addr => {
                    ensure!(hsdir.contains(fp), "{client}: {addr} received from {hsdir}");
                    received += 1;
                    break;
                }
                ["HS_DESC", "FAILED", a, ..] if *a == addr => {
                    anyhow::bail!("{client}: fetch of {addr} from weft failed: {ev}")
                }
                _ => {}
            }
        }
    }
    Ok(received)
}

/// `CONNECTIONS` verified connections to the onions; the failures.
fn connections(net: &Testnet, onions: &[String]) -> Result<Vec<String>> {
    let socks = [
        net.node("client0")?.socks_addr().context("client0 socks")?,
        net.node("client1")?.socks_addr().context("client1 socks")?,
    ];
    let next = Arc::new(Mutex::new(0usize));
    let failures = Arc::new(Mutex::new(Vec::new()));
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
                let r = traffic::socks5_connect_host(
                    socks[i % 2],
                    onion,
                    80,
                    &format!("hsdir-{i}"),
                    CONNECT_TIMEOUT,
                )
                .and_then(|st| traffic::transfer_sized(st, BYTES, BYTES, CONNECT_TIMEOUT));
                let bad = match r {
                    Ok(rep) if rep.up_bytes == BYTES && rep.down_bytes == BYTES => continue,
                    Ok(rep) => format!("connection {i} to {onion}: short transfer {rep}"),
                    Err(e) => format!("connection {i} to {onion}: {e:#}"),
                };
                failures.lock().unwrap_or_else(|e| e.into_inner()).push(bad);
            });
        }
    });
    let f = std::mem::take(&mut *failures.lock().unwrap_or_else(|e| e.into_inner()));
    Ok(f)
}

/// Re-post the descriptor `client` holds for `onion` to weft through the
/// client's own tor (`HSPOST`): the same revision counter, so weft must
/// answer 400 as C does. Returns the HS_DESC FAILED line.
fn stale_upload(net: &Testnet, client: &str, onion: &str, fp: &str) -> Result<String> {
    let addr = onion.trim_end_matches(".onion");
    let mut ctl = net.control(client)?;
    let desc = ctl.getinfo(&format!("hs/client/desc/id/{addr}"))?;
    ensure!(
        desc.starts_with("hs-descriptor 3"),
        "no descriptor: {desc:.80}"
    );
    ctl.set_events(&["HS_DESC"])?;
    let r = ctl.command_with_data(&format!("HSPOST SERVER=${fp} HSADDRESS={addr}"), &desc)?;
    ensure!(r.is_ok(), "HSPOST: {r:?}");
    let deadline = Instant::now() + BOUND;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        ensure!(!left.is_zero(), "no HS_DESC answer to HSPOST");
        let Some(ev) = ctl.next_event(left)? else {
            continue;
        };
        if ev.starts_with("HS_DESC FAILED") && ev.contains(fp) {
            return Ok(ev);
        }
        ensure!(
            !(ev.starts_with("HS_DESC UPLOADED") && ev.contains(fp)),
            "weft accepted a stale descriptor: {ev}"
        );
    }
}

#[test]
fn weft_is_an_hsdir_for_stock_services_and_clients() -> Result<()> {
    let t0 = Instant::now();
    let (mut net, base_dir) = start()?;
    let mut uploads = net.watch_onion_uploads()?;
    let sink = Sink::start_on(
        net.by_role(Role::OnionService)[0]
            .service_port
            .context("service port")?,
    )?;
    let fp = net.weft().context("no weft")?.fingerprint()?.to_string();
    // Voted HSDir by the authorities' own rules.
    let waited = net.wait_until_listed(&[&fp], &["Running", "Valid", "HSDir"], BOUND)?;
    eprintln!("[hsdir] weft voted HSDir after {waited:.1?}");
    net.wait_for_bootstrap(BOUND)?;
    let onions = net.onion_addresses()?;
    let waited = uploads.wait_uploaded_to(&onions, &fp, BOUND)?;
    eprintln!("[hsdir] every service uploaded to weft after {waited:.1?} more");
    let m = common::testnet_metrics(&net, metrics_port())?;
    let stored = metric(&m, "weft_hsdir_stores_total{result=\"stored\"}");
    ensure!(
        stored >= SERVICES as f64,
        "weft counts {stored} stores for {SERVICES} services"
    );
    let held = metric(&m, "weft_hsdir_descriptors ");
    eprintln!("[hsdir] weft stored {stored} uploads, holds {held} descriptors");

    // Stock clients fetch from weft.
    let mut received = 0;
    for client in ["client0", "client1"] {
        received += fetch_from_weft(&net, client, &onions, &fp)?;
    }
    let m = common::testnet_metrics(&net, metrics_port())?;
    let hits = metric(&m, "weft_hsdir_fetches_total{result=\"hit\"}");
    ensure!(
        hits >= received as f64,
        "weft counts {hits} hits for {received} descriptors received from it"
    );
    eprintln!("[hsdir] clients received {received} descriptors from weft ({hits} hits)");

    // A stale upload through stock tor: refused as C refuses it.
    let old_before = metric(&m, "weft_hsdir_stores_total{result=\"old_revision\"}");
    let failed = stale_upload(&net, "client0", &onions[0], &fp)?;
    ensure!(failed.contains("UPLOAD_REJECTED"), "{failed}");
    let logged = net
        .grep_logs("http status 400 (\"Invalid HS descriptor. Rejected.\")")
        .len();
    ensure!(logged > 0, "the poster did not log weft's 400");
    let m = common::testnet_metrics(&net, metrics_port())?;
    let old_after = metric(&m, "weft_hsdir_stores_total{result=\"old_revision\"}");
    ensure!(
        old_after > old_before,
        "weft did not count the stale upload"
    );

    // Connect, with the descriptors fetched from weft.
    let failures = connections(&net, &onions)?;
    eprintln!(
        "[hsdir] {} of {CONNECTIONS} onion connections intact",
        CONNECTIONS - failures.len()
    );
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    // Still served after the refused upload.
    fetch_from_weft(&net, "client1", &onions[..1], &fp)?;
    eprintln!("[hsdir] done in {:.1?}", t0.elapsed());
    drop(sink);
    net.stop()?;
    drop(net);
    std::fs::remove_dir_all(&base_dir).with_context(|| format!("removing {}", base_dir.display()))
}
