//! A dual-stack weft (`ORPort 127.0.0.1:P` and `ORPort [::1]:P6`) in a
//! network of stock tor: the authorities (`AuthDirHasIPv6Connectivity 1`)
//! accept its descriptor's `or-address`, test the IPv6 ORPort's
//! reachability themselves and list it Running with it (the `a` line of
//! the consensus, only for a reachable IPv6 ORPort); a stock client that prefers IPv6 ORPorts reaches weft
//! over IPv6 as its first hop and moves verified traffic through it; weft
//! extends to stock relays that have IPv6 ORPorts over IPv4 or IPv6 as C
//! Tor does (at random; what it chose is printed).
//!
//! In the same network, a relay family by family key (tor 0.4.9's
//! `FamilyId`): `weft --keygen-family` makes the key, weft and a stock
//! relay both list it; the stock authorities verify each descriptor's
//! `family-cert` and give both microdescriptors the same `family-ids`.
//! Networks live in `target/tmp/weft-net-ipv6-<pid>/`, kept on failure.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use weft_testnet::{pick_base_port, traffic, Direction, Sink, Testnet, TestnetConfig, WeftNode};

const BOUND: Duration = Duration::from_secs(240);

/// A free TCP port on ::1.
fn free_port_v6() -> Result<u16> {
    Ok(std::net::TcpListener::bind("[::1]:0")?.local_addr()?.port())
}

#[test]
fn dual_stack_weft_in_a_stock_network() -> Result<()> {
    let base_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("weft-net-ipv6-{}", std::process::id()));
    // A family key made by weft, listed by weft and by relay0.
    let keys = tempfile::tempdir()?;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["--keygen-family", "TestFam"])
        .current_dir(keys.path())
        .output()?;
    ensure!(out.status.success(), "--keygen-family: {out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let family_line = stdout
        .lines()
        .find(|l| l.starts_with("FamilyId "))
        .with_context(|| format!("no FamilyId line in {stdout:?}"))?
        .to_string();
    let family_id = family_line["FamilyId ".len()..].to_string();
    let key_dir = format!("FamilyKeyDirectory {}", keys.path().display());
    let mut cfg = TestnetConfig::new(&base_dir, 0);
    cfg.exits = 1;
    let weft_v6 = free_port_v6()?;
    let mut w = WeftNode::new(env!("CARGO_BIN_EXE_weft"));
    w.connection_threads = Some(2);
    w.extra_torrc = vec![
        format!("ORPort [::1]:{weft_v6}"),
        family_line.clone(),
        key_dir.clone(),
    ];
    cfg.weft = Some(w);
    cfg.relay_torrc = vec![
        vec![
            format!("ORPort [::1]:{}", free_port_v6()?),
            family_line.clone(),
            key_dir.clone(),
        ],
        vec![format!("ORPort [::1]:{}", free_port_v6()?)],
    ];
    // Authorities that test IPv6 ORPorts (and list only reachable ones).
    // The client bootstraps only with a Stable guard; in a young network
    // whether the stock relays are Stable depends on their uptimes against
    // the median (weft's among them), so it is guaranteed here.
    cfg.authority_torrc = vec![
        "AuthDirHasIPv6Connectivity 1".into(),
        "AuthDirVoteStableGuaranteeMinUptime 0".into(),
    ];
    cfg.client_torrc = vec![vec![
        "ClientUseIPv6 1".into(),
        "ClientPreferIPv6ORPort 1".into(),
    ]];
    cfg.base_port = pick_base_port(cfg.ports_needed())?;
    eprintln!(
        "[ipv6] network in {} from port {}",
        base_dir.display(),
        cfg.base_port
    );
    let mut net = Testnet::start(cfg)?;
    let weft = net.weft().context("weft")?.fingerprint()?.to_string();
    net.wait_until_listed(&[&weft], &["Running", "Valid"], BOUND)?;
    net.wait_for_bootstrap(BOUND)?;

    // The authorities list weft's IPv6 ORPort.
    let consensus = std::fs::read_to_string(net.node("auth0")?.dir.join("cached-consensus"))
        .context("auth0's cached-consensus")?;
    let name = format!("{} ", net.weft().context("weft")?.name);
    let entry: Vec<&str> = consensus
        .split("\nr ")
        .find(|e| e.starts_with(&name))
        .context("weft's entry in the consensus")?
        .lines()
        .collect();
    ensure!(
        entry.iter().any(|l| *l == format!("a [::1]:{weft_v6}")),
        "no IPv6 ORPort in weft's consensus entry: {entry:?}"
    );

    // The family: both microdescriptors carry its ID (the authorities
    // checked both family-certs); relay1's does not.
    let want = format!("family-ids ed25519:{family_id}");
    let t0 = std::time::Instant::now();
    let mut client = net.control("client0")?;
    loop {
        let md = |c: &mut weft_testnet::ControlClient, name: &str| -> Result<String> {
            let fp = if name == "weft" {
                weft.clone()
            } else {
                net.fingerprint(name)?
            };
            Ok(c.getinfo(&format!("md/id/{fp}")).unwrap_or_default())
        };
        let (w, r0, r1) = (
            md(&mut client, "weft")?,
            md(&mut client, "relay0")?,
            md(&mut client, "relay1")?,
        );
        if w.contains(&want) && r0.contains(&want) {
            ensure!(!r1.contains("family-ids"), "relay1 is in no family: {r1}");
            break;
        }
        ensure!(
            t0.elapsed() < BOUND,
            "no shared family-ids:
weft: {w}
relay0: {r0}"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    drop(client);

    // A client that prefers IPv6 ORPorts: weft first, over ::1.
    // (relay1: relay0 is weft's family, and clients keep a family out of
    // one circuit.)
    let relay1 = net.fingerprint("relay1")?;
    let exit = net.fingerprint("exit0")?;
    let mut ctl = net.control("client0")?;
    let sink = Sink::start()?;
    let socks = net.node("client0")?.socks_addr().context("SocksPort")?;
    let mut moved = 0;
    for i in 0..4 {
        let path = [&weft, &relay1, &exit];
        let c = ctl
            .build_circuit(&path, Duration::from_secs(60))
            .with_context(|| format!("circuit {i} {path:?}"))?;
        let s =
            traffic::connect_via_circuit(&mut ctl, socks, sink.addr(), c, Duration::from_secs(60))?;
        let r = traffic::transfer(s, Direction::Both, 1 << 20, Duration::from_secs(120))?;
        ensure!(r.up_bytes == 1 << 20 && r.down_bytes == 1 << 20);
        moved += r.up_bytes + r.down_bytes;
    }
    let log = std::fs::read_to_string(net.weft().context("weft")?.dir.join("info.log"))?;
    ensure!(
        log.lines()
            .any(|l| l.contains("accepted connection") && l.contains("from [::1]:")),
        "the client did not reach weft over IPv6"
    );
    let to_v6 = log
        .lines()
        .filter(|l| l.contains("opening connection") && l.contains(" to [::1]:"))
        .count();
    let to_v4 = log
        .lines()
        .filter(|l| l.contains("opening connection") && l.contains(" to 127.0.0.1:"))
        .count();
    eprintln!(
        "[ipv6] {moved} bytes through weft (first hop over IPv6); weft opened {to_v6} relay connections over IPv6 and {to_v4} over IPv4"
    );
    // relay0 lists a FamilyId without MyFamily, which tor warns about
    // (the fingerprints are not known before the network starts). And
    // relay0's reachability self-test circuits (relay1, a middle, itself)
    // may find no middle in the moment between its first consensus and
    // its first descriptors: weft is its family and out, the authorities'
    // descriptors not yet fetched (its info log: "Empty routerlist passed
    // in to consensus weight node selection", then "Received 7/7 router
    // descriptors").
    // relay1's self-test can meet the same window (seen once in CI,
    // 2026-11-27: five warnings within 40 ms, then the test passed on a
    // rerun).
    let unexpected: Vec<String> = net
        .unexpected_warnings()
        .into_iter()
        .filter(|w| !w.contains("FamilyId was configured, but MyFamily was not"))
        .filter(|w| {
            !((w.starts_with("relay0:") || w.starts_with("relay1:"))
                && w.contains("No available nodes when trying to choose node"))
        })
        .collect();
    ensure!(unexpected.is_empty(), "stock tor warnings: {unexpected:?}");
    net.stop()?;
    drop(net);
    std::fs::remove_dir_all(&base_dir).with_context(|| format!("removing {}", base_dir.display()))
}
