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

mod common;

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
    cfg.exit_torrc = vec![vec![format!("ORPort [::1]:{}", free_port_v6()?)]];
    let weft_v6 = free_port_v6()?;
    let hidden_v6 = free_port_v6()?;
    let mut w = WeftNode::new(env!("CARGO_BIN_EXE_weft"));
    w.connection_threads = Some(2);
    w.extra_torrc = vec![
        format!("ORPort [::1]:{weft_v6}"),
        // The testnet says AssumeReachable 1, which (as in C) skips the
        // ORPorts' self-tests; here weft tests both before it publishes
        // (the IPv4 one is address_and_reachability.rs's subject).
        "AssumeReachable 0".into(),
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
        // A relay nobody knows of (unpublished: no self-tests, no
        // circuits through it; it fetches from the authorities and builds
        // no circuits), so weft's connection to it can only come from the
        // test's IPv6-only extend.
        vec![
            format!("ORPort [::1]:{hidden_v6}"),
            "PublishServerDescriptor 0".into(),
            // Its directory fetches go to the authorities, not to weft
            // (a cache), and it builds no circuits of its own.
            "FetchDirInfoEarly 1".into(),
            "__DisablePredictedCircuits 1".into(),
        ],
    ];
    cfg.relays = 3;
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

    // weft's IPv6 self-test: a CREATE over IPv6 to its published address
    // (C's rule), then the IPv6 ORPort in its descriptor, then the
    // authorities list it (the `a` line, only for a reachable one).
    let reachable = format!("Self-testing indicates your ORPort [::1]:{weft_v6} is reachable");
    let weft_log = net.weft().context("weft")?.dir.join("notice.log");
    let t0 = std::time::Instant::now();
    let found = |t: Duration| -> bool {
        let deadline = std::time::Instant::now() + t;
        loop {
            if std::fs::read_to_string(&weft_log)
                .unwrap_or_default()
                .contains(&reachable)
            {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    };
    // The stock relay before weft on a testing circuit completes the
    // IPv6-only extend with weft's IPv4 address from the consensus and
    // picks one of the two at random (C's circuit_extend_add_ipv4_helper,
    // circuit_choose_ip_ap_for_extend), or reuses a connection it has:
    // each attempt proves the IPv6 ORPort with probability 1/2 at best.
    // If none did in 150 s, a CREATE over IPv6 from the test (what a
    // client that prefers IPv6 sends) proves it by the same rule.
    if !found(Duration::from_secs(150)) {
        eprintln!(
            "[ipv6] weft's own testing circuits reached it over IPv4 only (stock relays choose at random); a CREATE over IPv6 from the test"
        );
        let weft = net.weft().context("weft")?;
        let fp = weft.fingerprint()?.to_string();
        let md = net.control("client0")?.getinfo(&format!("md/id/{fp}"))?;
        let hop =
            common::origin_client::hop_from_md(&md, &fp, format!("[::1]:{weft_v6}").parse()?)?;
        let dir = tempfile::tempdir()?;
        let ident = weft_bench::run::identity(dir.path(), "ipv6Prover")?;
        let _c = common::origin_client::OriginClient::open(&ident, &hop)?;
        ensure!(
            found(Duration::from_secs(20)),
            "weft's IPv6 ORPort not found reachable after a CREATE over IPv6"
        );
    }
    let notices = std::fs::read_to_string(&weft_log)?;
    ensure!(
        notices.contains("Self-testing indicates your ORPort 127.0.0.1:"),
        "weft published without finding its IPv4 ORPort reachable"
    );
    let checking = format!("Now checking whether IPv6 ORPort [::1]:{weft_v6} is reachable");
    ensure!(
        matches!((notices.find(&checking), notices.find(&reachable)), (Some(a), Some(b)) if a < b),
        "weft found its IPv6 ORPort reachable without testing it"
    );
    eprintln!(
        "[ipv6] weft: {checking}; {reachable} (after {:.1?})",
        t0.elapsed()
    );
    let name = format!("{} ", net.weft().context("weft")?.name);
    let t0 = std::time::Instant::now();
    let (consensus, entry) = loop {
        let consensus = std::fs::read_to_string(net.node("auth0")?.dir.join("cached-consensus"))
            .context("auth0's cached-consensus")?;
        let entry: Vec<String> = consensus
            .split("\nr ")
            .find(|e| e.starts_with(&name))
            .context("weft's entry in the consensus")?
            .lines()
            .map(str::to_owned)
            .collect();
        if entry.iter().any(|l| *l == format!("a [::1]:{weft_v6}")) {
            break (consensus, entry);
        }
        ensure!(
            t0.elapsed() < BOUND,
            "no IPv6 ORPort in weft's consensus entry: {entry:?}"
        );
        std::thread::sleep(Duration::from_secs(2));
    };
    eprintln!(
        "[ipv6] the authorities list weft's IPv6 ORPort after {:.1?} more",
        t0.elapsed()
    );
    protocols_cover_stock_lists(&consensus, &entry)?;

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
    ipv6_only_extend_through_weft(&net, hidden_v6)?;

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

/// Issue 35, acceptance 4: weft's `pr` line in a consensus the stock
/// authorities made holds every protocol of their
/// `required-relay-protocols` and `recommended-relay-protocols`, and
/// (issue 54) `Relay=2-6` as stock tor 0.4.9's does.
fn protocols_cover_stock_lists(consensus: &str, weft_entry: &[String]) -> Result<()> {
    use std::str::FromStr;
    use tor_protover::Protocols;
    let list = |key: &str| -> Result<Protocols> {
        let l = consensus
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .with_context(|| format!("no {key} in the consensus"))?;
        Protocols::from_str(l.trim()).map_err(|e| anyhow::anyhow!("{key}: {e}"))
    };
    let pr = weft_entry
        .iter()
        .find_map(|l| l.strip_prefix("pr "))
        .context("no pr line for weft")?;
    let ours = Protocols::from_str(pr).map_err(|e| anyhow::anyhow!("pr: {e}"))?;
    let relay = Protocols::from_str("Relay=2-6").expect("static");
    ensure!(
        relay.difference(&ours).is_empty(),
        "weft's pr line ({pr}) lacks {}",
        relay.difference(&ours)
    );
    for key in ["required-relay-protocols ", "recommended-relay-protocols "] {
        let wanted = list(key)?;
        let missing = wanted.difference(&ours);
        ensure!(
            missing.is_empty(),
            "weft's pr line ({pr}) lacks {missing} of the consensus's {key}"
        );
        eprintln!(
            "[ipv6] weft's pr line covers the stock {}({wanted}) but for {}",
            key.trim_end(),
            wanted.difference(&ours)
        );
    }
    Ok(())
}

/// Issue 35, acceptance 3: a circuit the test builds itself — stock
/// relay1 (over IPv4), weft, then an EXTEND2 that names only relay2's
/// IPv6 ORPort — and a directory request at relay2 (BEGIN_DIR): weft must
/// carry the extend over a new IPv6 connection (relay2 is unpublished, so
/// weft has no other connection to it) and the consensus relay2 serves
/// must come back byte for byte (equal to its `cached-microdesc-consensus`).
fn ipv6_only_extend_through_weft(net: &Testnet, hidden_v6: u16) -> Result<()> {
    use common::origin_client::{hop_from_md, OriginClient};
    use weft_proto::relay::{self, relay_cmd};
    let mut ctl = net.control("client0")?;
    let md = |ctl: &mut weft_testnet::ControlClient, fp: &str| -> Result<String> {
        ctl.getinfo(&format!("md/id/{fp}"))
    };
    let relay1 = net.fingerprint("relay1")?;
    let r1 = net.node("relay1")?;
    let first = hop_from_md(
        &md(&mut ctl, &relay1)?,
        &relay1,
        r1.or_addr().context("relay1")?,
    )?;
    let weft = net.weft().context("weft")?;
    let weft_fp = weft.fingerprint()?.to_string();
    let middle = hop_from_md(
        &md(&mut ctl, &weft_fp)?,
        &weft_fp,
        weft.or_addr().context("weft")?,
    )?;
    // relay2 is in no consensus: its keys from its data directory.
    let r2 = net.node("relay2")?;
    let mut rsa_id = [0u8; 20];
    hex::decode_to_slice(r2.fingerprint()?, &mut rsa_id)?;
    let ed = std::fs::read_to_string(r2.dir.join("fingerprint-ed25519"))?;
    let ed = ed
        .split_whitespace()
        .nth(1)
        .context("fingerprint-ed25519")?;
    use base64::Engine as _;
    let ed = base64::engine::general_purpose::STANDARD_NO_PAD.decode(ed.trim_end_matches('='))?;
    let last = weft_proto::origin::HopTarget {
        rsa_id,
        ed_id: Some(ed.try_into().ok().context("ed25519 length")?),
        ntor_key: tor_ntor_public(&r2.dir.join("keys").join("secret_onion_key_ntor"))?,
        addr: format!("[::1]:{hidden_v6}").parse()?,
    };
    let dir = tempfile::tempdir()?;
    let ident = weft_bench::run::identity(dir.path(), "ipv6TestRelay")?;
    let mut c = OriginClient::open(&ident, &first)?;
    c.extend(&middle)?;
    c.extend(&last)?;
    let log = std::fs::read_to_string(weft.dir.join("info.log"))?;
    ensure!(
        log.lines()
            .any(|l| l.contains("opening connection")
                && l.contains(&format!(" to [::1]:{hidden_v6}"))),
        "weft did not open an IPv6 connection to relay2's [::1]:{hidden_v6}"
    );
    // A consensus from relay2, through weft, against relay2's own copy.
    let relay2_md = r2.dir.join("cached-microdesc-consensus");
    for attempt in 0..6 {
        let sid = c.new_stream();
        c.send(2, relay_cmd::BEGIN_DIR, sid, &[]);
        c.send(
            2,
            relay_cmd::DATA,
            sid,
            b"GET /tor/status-vote/current/consensus-microdesc HTTP/1.0\r\n\r\n",
        );
        let mut answer = Vec::new();
        let mut ended = false;
        while !ended {
            for (_, h, body) in c.relay_cells()? {
                if h.stream_id == sid {
                    match h.command {
                        relay_cmd::DATA => answer.extend_from_slice(relay::data(&body, &h)),
                        relay_cmd::END => ended = true,
                        _ => {}
                    }
                }
            }
        }
        let text = String::from_utf8_lossy(&answer);
        let body = text.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
        // What relay2 serves is the consensus it keeps on disk.
        let theirs = std::fs::read_to_string(&relay2_md)?;
        if !body.is_empty() && body == theirs {
            eprintln!(
                "[ipv6] an EXTEND2 naming only [::1]:{hidden_v6}: weft opened an IPv6 connection to relay2; its consensus ({} bytes) came back byte for byte",
                body.len()
            );
            return Ok(());
        }
        ensure!(
            text.starts_with("HTTP/1.0 200"),
            "relay2 answered: {:.200}",
            text
        );
        eprintln!(
            "[ipv6] relay2's consensus is not auth0's (a new one in between?); again ({attempt})"
        );
        std::thread::sleep(Duration::from_secs(3));
    }
    anyhow::bail!("relay2's answer never matched its cached consensus")
}

/// The public key in stock tor's `secret_onion_key_ntor` (C's
/// `curve25519_keypair_write_to_file`: a 32-byte tag block
/// `== c25519v1: onion ==`, the secret key, the public key).
fn tor_ntor_public(p: &std::path::Path) -> Result<[u8; 32]> {
    let b = std::fs::read(p)?;
    ensure!(
        b.len() == 96 && b.starts_with(b"== c25519v1: onion =="),
        "{}: not a tor curve25519 key file",
        p.display()
    );
    Ok(b[64..96].try_into().expect("32 bytes"))
}
