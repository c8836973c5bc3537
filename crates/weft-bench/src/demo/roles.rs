//! The demo's first part: weft in each of its roles in one private network
//! of stock tor (3 authorities, 4 relays, 1 exit, 2 clients, an onion
//! service) on loopback, with a stock client's traffic through it and a
//! line per role saying what was checked:
//!
//! * **middle**: client0's circuit relay0 → weft → exit0 (attached by its
//!   controller), bytes hashed both ways;
//! * **exit with DNS**: client1 (`ExitNodes weft`) connects to a name that
//!   weft resolves through a stand-in name server on loopback; the
//!   stream's circuit ends at weft; bytes hashed;
//! * **conflux exit**: client1's linked conflux legs end at weft and carry
//!   its streams (weft's MetricsPort counts the legs linked);
//! * **directory cache**: a stock client that reaches no authority and
//!   knows weft as its only fallback bootstraps to 100% (weft's
//!   MetricsPort counts the consensus and certificates it served);
//! * **flags**: what the stock authorities voted for weft, once they give
//!   it a consensus weight (clients pick rendezvous points by weight);
//! * **rendezvous / introduction point**: client1 connects to hs0's onion
//!   service, one fresh circuit each, until weft was the rendezvous point
//!   of one (weft's MetricsPort), bytes hashed.
//!
//! Then weft's own node-delay histogram over the whole run.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use weft_testnet::dns::NameServer;
use weft_testnet::traffic::{self, Direction};
use weft_testnet::{ConsensusEntry, IsolatedClient, Sink, Testnet, TestnetConfig, WeftNode};

use crate::metrics;

/// Bound on each wait (listing, bootstrap, conflux sets, uploads).
const BOUND: Duration = Duration::from_secs(180);
/// Bytes each way through weft as the middle: a few seconds of it, so
/// that weft observes megabytes a second, reports them in its next
/// descriptor and gets a consensus weight like the stock relays' (clients
/// pick rendezvous points by weight).
const MIDDLE_BYTES: u64 = 48 << 20;
/// The consensus weight (kB/s) weft must have before the onion service's
/// clients are asked to pick it (the stock relays here get 1,000-4,000).
const MIN_WEIGHT: u64 = 1000;
/// Bytes each way through weft as the exit, and per conflux stream.
const EXIT_BYTES: u64 = 2 << 20;
/// Bytes each way per onion-service connection.
const ONION_BYTES: u64 = 256 << 10;
/// Onion-service connections at most, in batches of [`ONION_BATCH`].
const ONION_MAX: usize = 64;
/// Onion-service connections at once.
const ONION_BATCH: usize = 4;
/// The name weft resolves for the exit stream.
const NAME: &str = "sink.weft.demo";
/// Where the stand-in name server listens (resolv.conf names port 53
/// only; an address of its own beside the exit tests' 127.53.0.1).
const NAME_SERVER: &str = "127.53.0.2:53";

/// One role: what was done and checked, and whether it held.
#[derive(Debug, Clone, Serialize)]
pub struct RoleCheck {
    /// The role, e.g. "middle".
    pub role: String,
    /// It held.
    pub ok: bool,
    /// What was checked, in a line.
    pub checked: String,
}

/// The roles part's results.
#[derive(Debug, Clone, Serialize)]
pub struct RolesReport {
    /// The stock tor version of the network.
    pub tor_version: String,
    /// One per role, in order.
    pub checks: Vec<RoleCheck>,
    /// weft's node-delay histogram over the whole run (upper bound ms,
    /// cumulative cells), from its MetricsPort.
    pub node_delay_buckets_ms: Vec<(f64, f64)>,
    /// Seconds from start to the network being ready, and in all.
    pub ready_s: f64,
    /// Seconds the roles took in all.
    pub total_s: f64,
}

/// weft's MetricsPort in the network.
struct Metrics {
    port: u16,
    token: String,
}

impl Metrics {
    fn body(&self) -> Result<String> {
        metrics::scrape_text(self.port, &self.token)
    }

    fn sum(&self, prefix: &str) -> Result<f64> {
        Ok(metrics::sum_lines(&self.body()?, prefix))
    }
}

/// Run every role in a network under `base_dir` with `weft_bin`; print a
/// line per role as it is checked. An error only when the network itself
/// fails; a role that does not hold is a check with `ok: false`.
pub fn run(base_dir: &Path, weft_bin: &Path) -> Result<RolesReport> {
    let t0 = Instant::now();
    let sink = Sink::start()?;
    let ns_addr: SocketAddr = NAME_SERVER.parse()?;
    let names = NameServer::start(ns_addr, &[(NAME, Ipv4Addr::LOCALHOST)])
        .context("the stand-in name server needs root (port 53 on a loopback address)")?;
    std::fs::create_dir_all(base_dir)?;
    let resolv = base_dir.with_extension("resolv.conf");
    std::fs::write(&resolv, format!("nameserver {}\n", ns_addr.ip()))?;
    let metrics_port = crate::run::free_port()?;
    let mut cfg = TestnetConfig::new(base_dir, 0);
    cfg.relays = 4;
    cfg.exits = 1;
    cfg.clients = 2;
    cfg.onion_services = 1;
    cfg.service_torrc = vec!["HiddenServiceNumIntroductionPoints 8".into()];
    cfg.clients_choose_circuits = true;
    cfg.client_torrc = vec![vec![], vec!["ExitNodes weft".into()]];
    let mut w = WeftNode::new(weft_bin);
    w.connection_threads = Some(2);
    w.extra_torrc = vec![
        format!("MetricsPort 127.0.0.1:{metrics_port}"),
        format!("ServerDNSResolvConfFile {}", resolv.display()),
    ];
    w.exit_policy = vec![
        "accept *:80".into(),
        "accept *:443".into(),
        format!("accept *:{}", sink.addr().port()),
        "reject *:*".into(),
    ];
    cfg.weft = Some(w);
    cfg.base_port = weft_testnet::pick_base_port(cfg.ports_needed())?;
    println!(
        "[roles] starting 3 authorities, 4 relays, 1 exit, 2 clients, an onion service and weft (2 workers) in {}",
        base_dir.display()
    );
    let mut net = Testnet::start(cfg)?;
    let mut uploads = net.watch_onion_uploads()?;
    let service_port = net
        .node("hs0")?
        .service_port
        .context("hs0 has no service port")?;
    let service_sink = Sink::start_on(service_port)?;
    let weft = net.weft().context("weft")?.clone();
    let fp = weft.fingerprint()?.to_string();
    let metrics = Metrics {
        port: metrics_port,
        token: metrics::read_token(&weft.dir)?,
    };
    let stock: Vec<String> = net
        .nodes()
        .iter()
        .filter(|n| {
            matches!(
                n.role,
                weft_testnet::Role::Authority
                    | weft_testnet::Role::Relay
                    | weft_testnet::Role::Exit
            )
        })
        .filter_map(|n| n.fingerprint.clone())
        .collect();
    net.wait_until_listed(&stock, &["Running", "Valid"], BOUND)?;
    net.wait_until_listed(&[&fp], &["Running", "Valid", "Fast", "Exit"], BOUND)?;
    net.wait_for_bootstrap(BOUND)?;
    let ready_s = t0.elapsed().as_secs_f64();
    println!(
        "[roles] {}; network ready after {ready_s:.0} s",
        net.tor_version()
    );
    let mut checks = Vec::new();
    let mut record = |role: &str, r: Result<String>| {
        let (ok, checked) = match r {
            Ok(s) => (true, s),
            Err(e) => (false, format!("FAILED: {e:#}")),
        };
        println!(
            "  {} {role:<22} {checked}",
            if ok { "ok  " } else { "FAIL" }
        );
        checks.push(RoleCheck {
            role: role.into(),
            ok,
            checked,
        });
    };
    // The directory client starts now and bootstraps while the others run.
    let weft_or_port = weft.or_port.context("weft ORPort")?;
    let dir_client = |folder: &str| {
        IsolatedClient::start_with(&net, &fp, weft_or_port, &base_dir.join(folder), false)
    };
    let isolated = dir_client("dir-client");
    record("middle", middle(&net, &fp, &sink));
    record("exit with DNS", exit_dns(&net, &fp, &sink, &names));
    record("conflux exit", conflux(&net, &fp, &sink, &metrics));
    // A client that asks before weft's cache holds the consensus gets a
    // 404 and, weft being its only fallback, then waits on
    // dead authorities: once, a second client, with the cache minutes
    // older; the line says so.
    let dir_result = isolated
        .and_then(|c| directory(&c, &metrics))
        .or_else(|first| {
            let again = dir_client("dir-client-2")?;
            let first = format!("{first:#}");
            let first = first.lines().next().unwrap_or_default().to_string();
            directory(&again, &metrics)
                .map(|s| format!("{s}; a second client (the first: {first})"))
        });
    record("directory cache", dir_result);
    // Clients pick rendezvous points by consensus weight, and weft's is 0
    // until its descriptor reports the bandwidth it has now observed.
    record("flags", flags(&net, &fp));
    record(
        "rendezvous point",
        onion(&net, &mut uploads, &service_sink, &metrics),
    );
    let node_delay_buckets_ms = metrics::parse(&metrics.body()?)
        .buckets
        .get("weft_node_delay_seconds")
        .map(|b| b.iter().map(|(le, c)| (le * 1e3, *c)).collect())
        .unwrap_or_default();
    let tor_version = net.tor_version().to_string();
    net.stop()?;
    Ok(RolesReport {
        tor_version,
        checks,
        node_delay_buckets_ms,
        ready_s,
        total_s: t0.elapsed().as_secs_f64(),
    })
}

/// The flags client1's consensus gives weft, once it gives weft a weight
/// of at least [`MIN_WEIGHT`] (its observed bandwidth, republished).
fn flags(net: &Testnet, fp: &str) -> Result<String> {
    let t0 = Instant::now();
    let mut ctl = net.control("client1")?;
    loop {
        match ctl.consensus_entry(fp)? {
            ConsensusEntry::Listed {
                flags,
                bandwidth: Some(w),
            } if w >= MIN_WEIGHT => {
                return Ok(format!(
                "the stock authorities voted weft {}; consensus weight {w} (after {:.0} s more)",
                flags.join(" "),
                t0.elapsed().as_secs_f64()
            ))
            }
            other if t0.elapsed() > BOUND => {
                bail!("weft's weight in client1's consensus is still under {MIN_WEIGHT}: {other:?}")
            }
            _ => std::thread::sleep(Duration::from_secs(1)),
        }
    }
}

/// client0's own circuit relay0 → weft → exit0, a hashed transfer.
fn middle(net: &Testnet, fp: &str, sink: &Sink) -> Result<String> {
    let path = [
        net.fingerprint("relay0")?,
        fp.to_string(),
        net.fingerprint("exit0")?,
    ];
    let mut ctl = net.control("client0")?;
    ctl.set_conf("__LeaveStreamsUnattached", "1")?;
    let circ = ctl.build_circuit(&path, Duration::from_secs(60))?;
    let socks = net.node("client0")?.socks_addr().context("SocksPort")?;
    let stream =
        traffic::connect_via_circuit(&mut ctl, socks, sink.addr(), circ, Duration::from_secs(60))?;
    let r = traffic::transfer(
        stream,
        Direction::Both,
        MIDDLE_BYTES,
        Duration::from_secs(120),
    )?;
    ctl.close_circuit(circ)?;
    ctl.set_conf("__LeaveStreamsUnattached", "0")?;
    Ok(format!(
        "stock client0, circuit relay0 → weft → exit0: {} MiB each way, SHA-256 matched at both ends, {:.1} MiB/s",
        MIDDLE_BYTES >> 20,
        r.bytes_per_sec() / (1 << 20) as f64
    ))
}

/// Every event the connection has had so far (read until it is quiet for
/// 300 ms; at most 10,000).
fn drain_events(ctl: &mut weft_testnet::ControlClient) -> Result<Vec<String>> {
    let mut v = Vec::new();
    while v.len() < 10_000 {
        match ctl.next_event(Duration::from_millis(300))? {
            Some(l) => v.push(l),
            None => break,
        }
    }
    Ok(v)
}

/// The circuits the STREAM SUCCEEDED events of `events` name, for
/// targets on `port`.
fn stream_circuits(events: &[String], port: u16) -> Vec<String> {
    let suffix = format!(":{port}");
    events
        .iter()
        .filter_map(|l| weft_testnet::control::parse_stream_event(l))
        .filter(|e| e.status == "SUCCEEDED" && e.target.ends_with(&suffix))
        .map(|e| e.circ.to_string())
        .collect()
}

/// The path (fingerprints) of circuit `circ` in `status` (GETINFO
/// circuit-status), and its line.
fn circuit_line<'a>(status: &'a str, circ: &str) -> Option<&'a str> {
    status
        .lines()
        .find(|l| l.split_whitespace().next() == Some(circ))
}

/// True if the circuit's line ends at `fp`.
fn ends_at(line: &str, fp: &str) -> bool {
    line.split_whitespace()
        .nth(2)
        .and_then(|p| p.rsplit(',').next())
        .is_some_and(|last| last.trim_start_matches('$').starts_with(fp))
}

/// client1 connects to a name weft resolves; the stream's circuit ends at
/// weft; hashed transfer.
fn exit_dns(net: &Testnet, fp: &str, sink: &Sink, names: &NameServer) -> Result<String> {
    let mut ctl = net.control("client1")?;
    ctl.set_events(&["STREAM"])?;
    let socks = net.node("client1")?.socks_addr().context("SocksPort")?;
    let before = names.answered();
    let port = sink.addr().port();
    let stream = traffic::socks5_connect_host(socks, NAME, port, "demo-exit", BOUND)?;
    let r = traffic::transfer(
        stream,
        Direction::Both,
        EXIT_BYTES,
        Duration::from_secs(120),
    )?;
    let asked = names.answered() - before;
    ensure!(asked > 0, "weft never asked the name server for {NAME}");
    let circs = stream_circuits(&drain_events(&mut ctl)?, port);
    let status = ctl.getinfo("circuit-status")?;
    let circ = circs.first().context("no STREAM SUCCEEDED event")?;
    let line = circuit_line(&status, circ).context("the stream's circuit is gone")?;
    ensure!(
        ends_at(line, fp),
        "the stream's circuit does not end at weft: {line}"
    );
    Ok(format!(
        "stock client1 → {NAME}:{port}: weft resolved it ({asked} A queries answered by the stand-in name server) and connected; {} MiB each way, SHA-256 matched, {:.1} MiB/s",
        EXIT_BYTES >> 20,
        r.bytes_per_sec() / (1 << 20) as f64
    ))
}

/// client1's linked conflux legs that end at weft (circuit IDs).
fn linked_legs(net: &Testnet, fp: &str) -> Result<Vec<String>> {
    let status = net.control("client1")?.getinfo("circuit-status")?;
    Ok(status
        .lines()
        .filter(|l| l.contains(" BUILT ") && l.contains("PURPOSE=CONFLUX_LINKED"))
        .filter(|l| ends_at(l, fp))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect())
}

/// client1's streams on its conflux legs to weft, hashed.
fn conflux(net: &Testnet, fp: &str, sink: &Sink, m: &Metrics) -> Result<String> {
    let deadline = Instant::now() + BOUND;
    let legs = loop {
        let legs = linked_legs(net, fp)?;
        if legs.len() >= 2 {
            break legs;
        }
        ensure!(
            Instant::now() < deadline,
            "client1 linked no conflux set to weft within {BOUND:?}"
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    let mut ctl = net.control("client1")?;
    ctl.set_events(&["STREAM"])?;
    let socks = net.node("client1")?.socks_addr().context("SocksPort")?;
    let target = sink.addr();
    let results: Vec<Result<traffic::TransferReport>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(move || {
                    let st = traffic::socks5_connect(socks, target, BOUND)?;
                    traffic::transfer(st, Direction::Both, EXIT_BYTES, Duration::from_secs(120))
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| bail!("a stream's thread panicked"))
            })
            .collect()
    });
    for r in &results {
        if let Err(e) = r {
            bail!("a stream on the conflux set failed: {e:#}");
        }
    }
    let circs = stream_circuits(&drain_events(&mut ctl)?, target.port());
    let legs_now = linked_legs(net, fp)?;
    let on_legs = circs
        .iter()
        .filter(|c| legs.contains(c) || legs_now.contains(c))
        .count();
    ensure!(
        on_legs == circs.len() && !circs.is_empty(),
        "streams on circuits {circs:?}, linked legs to weft {legs_now:?}"
    );
    let linked = m.sum("weft_conflux_total{event=\"leg_linked\"}")?;
    ensure!(linked >= 2.0, "weft counts {linked} legs linked");
    Ok(format!(
        "stock client1 has {} linked conflux legs ending at weft (weft linked {linked} legs); 2 streams on them, {} MiB each way each, SHA-256 matched",
        legs.len(),
        EXIT_BYTES >> 20
    ))
}

/// Connections to hs0's service until weft is a rendezvous point.
fn onion(
    net: &Testnet,
    uploads: &mut weft_testnet::UploadWatch,
    service_sink: &Sink,
    m: &Metrics,
) -> Result<String> {
    let onions = net.onion_addresses()?;
    uploads.wait_uploaded(&onions, 1, BOUND)?;
    let socks = net.node("client1")?.socks_addr().context("SocksPort")?;
    let rend = "tor_relay_rend1_total{action=\"success\"}";
    let intro = "tor_relay_est_intro_total{action=\"success\"}";
    let rend0 = m.sum(rend)?;
    let (mut ok, mut tried, mut failed) = (0usize, 0usize, Vec::new());
    let served0 = service_sink.served();
    while tried < ONION_MAX && m.sum(rend)? <= rend0 {
        let batch: Vec<Result<()>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..ONION_BATCH)
                .map(|i| {
                    let onion = &onions[0];
                    let user = format!("demo-onion-{}", tried + i);
                    s.spawn(move || {
                        let st = traffic::socks5_connect_host(socks, onion, 80, &user, BOUND)?;
                        let r = traffic::transfer(st, Direction::Both, ONION_BYTES, BOUND)?;
                        ensure!(r.up_bytes == ONION_BYTES && r.down_bytes == ONION_BYTES);
                        Ok(())
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or_else(|_| bail!("panicked")))
                .collect()
        });
        tried += batch.len();
        for r in batch {
            match r {
                Ok(()) => ok += 1,
                Err(e) => failed.push(format!("{e:#}")),
            }
        }
    }
    let rends = m.sum(rend)? - rend0;
    let intros = m.sum(intro)?;
    ensure!(
        rends > 0.0,
        "weft was no rendezvous point in {tried} connections ({ok} intact; failures: {failed:?})"
    );
    ensure!(
        ok > 0 && service_sink.served() > served0,
        "no connection intact: {failed:?}"
    );
    Ok(format!(
        "stock client1 → {}…onion, a new circuit each: {ok} of {tried} connections intact ({} KiB each way, SHA-256 matched); weft joined {rends} of their rendezvous (its MetricsPort), and the service made it an introduction point {intros} times",
        &onions[0][..8],
        ONION_BYTES >> 10
    ))
}

/// The isolated client bootstraps from what weft served.
fn directory(c: &IsolatedClient, m: &Metrics) -> Result<String> {
    c.wait_bootstrapped(BOUND)?;
    let served = |r: &str| {
        m.sum(&format!(
            "weft_dir_requests_total{{resource=\"{r}\",result=\"served\"}}"
        ))
    };
    let (cons, keys, mds) = (served("consensus")?, served("keys")?, served("microdesc")?);
    ensure!(cons >= 1.0, "weft served no consensus");
    Ok(format!(
        "a stock client that reaches no authority, weft its only fallback directory, bootstrapped to 100% (weft served {cons} consensus, {keys} certificate and {mds} microdescriptor answers)"
    ))
}
