//! weft as a directory cache and a guard for stock tor (issue 14,
//! acceptance 1 and 2), on loopback:
//!
//! * 3 stock authorities that compute the Guard flag themselves (C Tor's
//!   rules, thresholds lowered for a young network; no flag is voted by
//!   list), 3 stock relays with `DirCache 0` (so not directory caches, not
//!   guards), 1 stock exit, and weft with `ConnectionThreads 2` and
//!   `TestingCrossWorkerExtends 1`;
//! * weft must get V2Dir (its descriptor says `tunnelled-dir-server`) and
//!   then Guard, which C's authorities give only to directory caches;
//! * then a stock client whose only directory source is weft: its
//!   `DirAuthority` lines carry the authorities' real identities (so it
//!   verifies every signature itself) but dead addresses, weft is its only
//!   `FallbackDir`, and `EntryNodes` is weft (`StrictNodes 1`). It must bootstrap to 100%
//!   from what weft served (weft's MetricsPort counts the consensus,
//!   certificate and microdescriptor answers), list weft as an `up` entry
//!   guard and build its circuits through it.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

mod common;

use weft_testnet::IsolatedClient;

use anyhow::{bail, ensure, Context, Result};
use weft_testnet::{pick_base_port, ControlClient, Testnet, WeftNode};

/// Bound on every wait for flags and bootstrap.
/// A family member in weft's MyFamily (not in the network: a family line
/// may name relays that are not running).
const FAMILY: &str = "$AAAABBBBCCCCDDDDEEEEFFFF0000111122223333";

const BOUND: Duration = Duration::from_secs(300);

/// The sum of every series of metric line `prefix` (e.g. one per
/// worker; 0 if absent).
fn metric(net: &Testnet, port: u16, prefix: &str) -> Result<f64> {
    Ok(common::metric_sum(
        &common::testnet_metrics(net, port)?,
        prefix,
    ))
}

fn served(net: &Testnet, port: u16, resource: &str) -> Result<f64> {
    metric(
        net,
        port,
        &format!("weft_dir_requests_total{{resource=\"{resource}\",result=\"served\"}}"),
    )
}

#[test]
fn stock_client_bootstraps_from_weft_alone_and_uses_it_as_guard() -> Result<()> {
    let metrics_port = common::free_port();
    let control_port = common::free_port();
    let mut cfg = common::weft_only_cache_config("dircache");
    let base_dir = cfg.base_dir.clone();
    let mut w = WeftNode::new(env!("CARGO_BIN_EXE_weft"));
    w.connection_threads = Some(2);
    w.extra_torrc = vec![
        format!("MetricsPort 127.0.0.1:{metrics_port}"),
        "TestingCrossWorkerExtends 1".to_string(),
        format!("ControlPort {control_port}"),
        format!("MyFamily {FAMILY}"),
    ];
    cfg.weft = Some(w);
    cfg.base_port = pick_base_port(cfg.ports_needed())?;
    eprintln!(
        "[dircache] network in {} from port {}",
        base_dir.display(),
        cfg.base_port
    );
    let mut net = Testnet::start(cfg)?;
    let weft = net.weft().context("weft")?;
    let fp = weft.fingerprint()?.to_string();
    let weft_or_port = weft.or_addr().context("weft ORPort")?.port();

    // The whole network first (a client that starts from a consensus
    // without exits would pick other paths).
    common::wait_stock_listed(&mut net, &fp, BOUND)?;
    let t = net.wait_until_listed(&[&fp], &["Running", "Valid", "V2Dir"], BOUND)?;
    eprintln!("[dircache] weft listed V2Dir after {t:?}");
    let t = net.wait_until_listed(&[&fp], &["Guard"], BOUND)?;
    eprintln!("[dircache] weft voted Guard after {t:?} more");
    // weft's own ControlPort shows the flags (once weft has the
    // consensus that gives them), to stem's parser and on nyx's screen.
    let mut weft_ctl = ControlClient::connect(
        SocketAddr::from(([127, 0, 0, 1], control_port)),
        &net.weft().context("weft")?.dir,
        Duration::from_secs(10),
    )?;
    let deadline = Instant::now() + BOUND;
    loop {
        let entry = weft_ctl.getinfo(&format!("ns/id/{fp}")).unwrap_or_default();
        if entry
            .lines()
            .any(|l| l.starts_with("s ") && l.contains(" Guard") && l.contains(" V2Dir"))
        {
            eprintln!(
                "[dircache] weft's ControlPort: {}",
                entry.replace('\n', " | ")
            );
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "weft's own consensus entry: {entry}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    let screen = common::nyx_screen(
        control_port,
        Duration::from_secs(30),
        || Ok(()),
        |s| {
            s.lines()
                .any(|l| l.starts_with("flags:") && l.contains("Guard") && l.contains("V2Dir"))
        },
    )?;
    eprintln!(
        "[dircache] nyx: {}",
        screen.lines().take(3).collect::<Vec<_>>().join(" | ")
    );
    // The stock relays are not caches: no V2Dir, so no Guard.
    let relay_fp = net.fingerprint("relay0")?;
    let mut auth = net.control("auth0")?;
    // The authorities took weft's descriptor with its family line.
    let desc = auth.getinfo(&format!("desc/id/{fp}")).unwrap_or_default();
    ensure!(
        desc.lines().any(|l| l == format!("family {FAMILY}")),
        "weft's descriptor at auth0: {desc}"
    );
    if let weft_testnet::ConsensusEntry::Listed { flags, .. } = auth.consensus_entry(&relay_fp)? {
        ensure!(
            !flags.iter().any(|f| f == "V2Dir" || f == "Guard"),
            "a relay with DirCache 0 is listed {flags:?}"
        );
    }

    let client = IsolatedClient::start(&net, &fp, weft_or_port, &base_dir.join("isolated"))?;
    client.wait_bootstrapped(BOUND)?;
    let mut ctl = client.control()?;
    eprintln!("[dircache] client bootstrapped to 100% with weft as its only directory");
    let consensus = served(&net, metrics_port, "consensus")?;
    let mds = served(&net, metrics_port, "microdesc")?;
    let keys = served(&net, metrics_port, "keys")?;
    eprintln!("[dircache] weft served: consensus {consensus}, microdesc {mds}, keys {keys}");
    ensure!(
        consensus >= 1.0 && mds >= 1.0 && keys >= 1.0,
        "weft served too little"
    );

    let guards = ctl.getinfo("entry-guards")?;
    eprintln!(
        "[dircache] client entry-guards: {}",
        guards.replace('\n', " | ")
    );
    ensure!(
        guards.lines().any(
            |l| l.to_ascii_uppercase().contains(&fp.to_ascii_uppercase()) && l.contains(" up")
        ),
        "weft is not an up entry guard of the client: {guards}"
    );
    // Circuits through weft as the first hop (the client's own: its
    // network's exits accept only private addresses, which a client's
    // path selection does not count as exits, so it builds internal
    // circuits; no stream goes out).
    let deadline = Instant::now() + BOUND;
    let upper = format!("${}", fp.to_ascii_uppercase());
    loop {
        let circs = ctl.getinfo("circuit-status")?;
        let through_weft = circs
            .lines()
            .filter(|l| l.contains(" BUILT "))
            .filter(|l| {
                l.split(' ')
                    .nth(2)
                    .is_some_and(|p| p.to_ascii_uppercase().starts_with(&upper))
            })
            .count();
        if through_weft > 0 {
            eprintln!("[dircache] {through_weft} built circuits start at weft");
            break;
        }
        if Instant::now() > deadline {
            bail!("no built circuit starts at weft: {circs}");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    net.stop()?;
    Ok(())
}
