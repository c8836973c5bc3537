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
//!   count the stores and hold both descriptors (current and next time
//!   period) of every service before the clients fetch;
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
//! * garbage, forged and oversized uploads cannot be sent through stock tor
//!   (its `HSPOST` checks the descriptor itself), so the test sends them
//!   as a relay would forward them: over a link that authenticates as a
//!   relay (weft-bench's identity, weft-relay's `LinkConn`), a circuit to
//!   weft and BEGIN_DIR. Each gets C's `400 Invalid HS descriptor.
//!   Rejected.`, weft counts it by cause, and the store keeps what it had
//!   (the stock descriptor is still served, byte for byte what the
//!   service uploaded); a good synthetic upload on the same path is 200
//!   and fetched back.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use common::origin_client::OriginClient;

use anyhow::{bail, ensure, Context, Result};
use weft_proto::origin::HopTarget;
use weft_proto::relay::{self, relay_cmd};
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

/// weft's MetricsPort once `name` is at least `min` (the workers' counters
/// arrive in their once-a-second report; bounded, 10 s).
fn metrics_when(net: &Testnet, name: &str, min: f64) -> Result<String> {
    metrics_within(net, name, min, Duration::from_secs(10))
}

/// [`metrics_when`] with its bound.
fn metrics_within(net: &Testnet, name: &str, min: f64, bound: Duration) -> Result<String> {
    let deadline = Instant::now() + bound;
    loop {
        let m = common::testnet_metrics(net, metrics_port())?;
        let v = metric(&m, name);
        if v >= min {
            return Ok(m);
        }
        ensure!(
            Instant::now() < deadline,
            "{name} is {v}, expected at least {min}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
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
                // `HS_DESC FAILED <addr> <auth> <hsdir> <blinded key> ...`:
                // say whether weft had logged that key as stored.
                ["HS_DESC", "FAILED", a, _, _, key, ..] if *a == addr => {
                    let stored = net.grep_logs(&format!("handled successfully ({key})"));
                    anyhow::bail!(
                        "{client}: fetch of {addr} from weft failed: {ev}; weft's log of \
                         storing that blinded key: {stored:?}"
                    )
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

/// One request on a new BEGIN_DIR stream at `c`'s last hop; the answer's
/// bytes.
fn request(c: &mut OriginClient, req: &[u8]) -> Result<String> {
    let sid = c.new_stream();
    let last = c.oc.len() - 1;
    c.send(last, relay_cmd::BEGIN_DIR, sid, &[]);
    for chunk in req.chunks(weft_proto::circuit::flow::DATA_MAX) {
        c.send(last, relay_cmd::DATA, sid, chunk);
    }
    let mut answer = Vec::new();
    for _ in 0..1000 {
        let mut ended = false;
        for (_, h, body) in c.relay_cells()? {
            if h.stream_id != sid {
                continue;
            }
            match h.command {
                relay_cmd::DATA => answer.extend_from_slice(relay::data(&body, &h)),
                relay_cmd::END => ended = true,
                _ => {}
            }
        }
        if ended {
            return Ok(String::from_utf8_lossy(&answer).into_owned());
        }
    }
    bail!("stream {sid} did not end")
}

fn post(desc: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "POST /tor/hs/3/publish HTTP/1.0\r\nContent-Length: {}\r\n\r\n",
        desc.len()
    )
    .into_bytes();
    r.extend_from_slice(desc);
    r
}

/// weft's first hop: identities from its data directory.
fn weft_hop(net: &Testnet) -> Result<HopTarget> {
    let w = net.weft().context("no weft")?;
    let mut rsa_id = [0u8; 20];
    hex::decode_to_slice(w.fingerprint()?, &mut rsa_id)?;
    Ok(HopTarget {
        rsa_id,
        ed_id: None,
        ntor_key: weft_crypto::keys::read_ntor_public(&w.dir)?,
        addr: (
            std::net::Ipv4Addr::LOCALHOST,
            w.or_port.context("weft's ORPort")?,
        )
            .into(),
    })
}

/// Bad uploads sent as a relay would forward them: each refused with C's
/// 400, counted by cause; the store keeps `onion`'s descriptor (`stock`,
/// as the client fetched it from weft) and gains only the good one.
fn bad_uploads(
    net: &Testnet,
    work: &std::path::Path,
    stock: &str,
    blinded_b64: &str,
) -> Result<()> {
    let ident = weft_bench::run::identity(&work.join("fake-relay"), "hsdirTestRelay")?;
    let mut c = OriginClient::open(&ident, &weft_hop(net)?)?;
    let before = common::testnet_metrics(net, metrics_port())?;
    let rejected = "HTTP/1.0 400 Invalid HS descriptor. Rejected.";
    let mut forged = stock.as_bytes().to_vec();
    // A character of the superencrypted blob: the signature no longer
    // verifies.
    let at = stock.find("-----BEGIN MESSAGE-----").context("no blob")? + 30;
    forged[at] = if forged[at] == b'A' { b'B' } else { b'A' };
    let now = std::time::SystemTime::now();
    let mut big = weft_dir::hs_cache::testing::SyntheticDescriptor::new(77, now);
    big.blob_len = 40_000;
    let oversize = big.encode();
    ensure!(oversize.len() > 50_000, "not oversize: {}", oversize.len());
    let cases: [(&str, Vec<u8>, &str); 4] = [
        ("garbage", post(b"this is not a descriptor\n"), "malformed"),
        ("bad signature", post(&forged), "bad_signature"),
        ("old revision", post(stock.as_bytes()), "old_revision"),
        ("oversize", post(oversize.as_bytes()), "too_large_announced"),
    ];
    for (what, req, _) in &cases {
        let a = request(&mut c, req)?;
        let status = a.lines().next().unwrap_or("");
        ensure!(status == rejected, "{what}: weft answered {status:?}");
    }
    let announced = "weft_hsdir_stores_total{result=\"too_large_announced\"}";
    let after = metrics_when(net, announced, metric(&before, announced) + 1.0)?;
    for (what, _, label) in &cases {
        let name = format!("weft_hsdir_stores_total{{result=\"{label}\"}}");
        ensure!(
            metric(&after, &name) > metric(&before, &name),
            "{what}: {name} did not move"
        );
    }
    ensure!(
        metric(&after, "weft_hsdir_stores_total{result=\"stored\"}")
            == metric(&before, "weft_hsdir_stores_total{result=\"stored\"}"),
        "a bad upload was stored"
    );
    // The stock descriptor is still there, byte for byte.
    let a = request(
        &mut c,
        format!("GET /tor/hs/3/{blinded_b64} HTTP/1.0\r\n\r\n").as_bytes(),
    )?;
    ensure!(a.starts_with("HTTP/1.0 200 OK\r\n"), "{:.80}", a);
    let body = a.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    ensure!(
        body.trim_end() == stock.trim_end(),
        "the stock descriptor changed"
    );
    // A good one on the same path: 200, then fetched back.
    let good = weft_dir::hs_cache::testing::SyntheticDescriptor::new(78, now);
    let a = request(&mut c, &post(good.encode().as_bytes()))?;
    ensure!(
        a.starts_with("HTTP/1.0 200 HS descriptor stored successfully."),
        "good upload: {a:.80}"
    );
    use base64::Engine as _;
    let key = base64::engine::general_purpose::STANDARD_NO_PAD.encode(good.blinded_key());
    let a = request(
        &mut c,
        format!("GET /tor/hs/3/{key} HTTP/1.0\r\n\r\n").as_bytes(),
    )?;
    ensure!(a.ends_with(&good.encode()), "good upload not served back");
    eprintln!(
        "[hsdir] garbage, forged, stale and oversized uploads refused with 400; a good one stored"
    );
    Ok(())
}

/// The blinded key (base64) of a descriptor: its certificate's signing
/// key, as weft reads it.
fn blinded_key_b64(desc: &str) -> Result<String> {
    use base64::Engine as _;
    let d = weft_dir::hs_cache::check_descriptor(
        desc.as_bytes(),
        weft_dir::hs_cache::HS_DESC_MAX_LEN,
        std::time::SystemTime::now(),
    )
    .map_err(|e| anyhow::anyhow!("the stock descriptor: {e}"))?;
    Ok(base64::engine::general_purpose::STANDARD_NO_PAD.encode(d.blinded_key))
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
    // A service's current and next descriptors have their own intro
    // points and are uploaded when each is ready, so "uploaded to weft"
    // above may be one of the two; the clients fetch the current one.
    // Every HSDir here is responsible for both (hsdir_spread_store=16).
    let m = metrics_within(
        &net,
        "weft_hsdir_descriptors ",
        2.0 * SERVICES as f64,
        BOUND,
    )?;
    let stored = metric(&m, "weft_hsdir_stores_total{result=\"stored\"}");
    let held = metric(&m, "weft_hsdir_descriptors ");
    eprintln!("[hsdir] weft stored {stored} uploads, holds {held} descriptors");

    // From the fetches to the last connection (under a minute), clear of
    // an onion-service time period's start: there the clients drop the
    // descriptors they fetched, and a stock client's race can lose a
    // connection (see the helper).
    let waited =
        net.wait_clear_of_hs_time_period_start(Duration::from_secs(90), Duration::from_secs(45));
    if !waited.is_zero() {
        eprintln!("[hsdir] waited {waited:.1?} past an onion-service time period's start");
    }

    // Stock clients fetch from weft.
    let mut received = 0;
    for client in ["client0", "client1"] {
        received += fetch_from_weft(&net, client, &onions, &fp)?;
    }
    let hit = "weft_hsdir_fetches_total{result=\"hit\"}";
    let m = metrics_when(&net, hit, received as f64)?;
    let hits = metric(&m, hit);
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

    // Garbage, forged, stale and oversized uploads as a relay forwards them.
    let addr = onions[0].trim_end_matches(".onion");
    let stock = net
        .control("client0")?
        .getinfo(&format!("hs/client/desc/id/{addr}"))?;
    bad_uploads(&net, &base_dir, &stock, &blinded_key_b64(&stock)?)?;

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
