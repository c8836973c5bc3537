//! An operator's first day, against stock tor's authorities and relays on
//! loopback (C Tor 0.4.9's `find_my_address`, `router_do_reachability_checks`
//! and `check_descriptor_ipaddress_changed`):
//!
//! 1. weft with a bare `ORPort PORT` and no `Address` finds its address as
//!    C does on this host (the interface toward the Internet, else the
//!    host name: C, like weft, takes no loopback address from the
//!    authorities' `X-Your-Address-Is`, so on loopback that is what there
//!    is), tests its IPv4 ORPort with a circuit through two stock relays
//!    back to itself before it publishes anything (`AssumeReachable 0`),
//!    and is voted Running at that address; `GETINFO
//!    status/reachability-succeeded` says `OR=1 DIR=1`.
//! 2. A reload with `Address 127.0.0.2`: C's "Our IP Address has changed"
//!    line, a new descriptor with the new address at the authorities and
//!    then in the consensus (with `AssumeReachable 1`: the relays' open
//!    connections to weft are canonical and they reuse them for a test
//!    circuit, so on loopback only new connections could prove the new
//!    address; the re-test itself is `reachability.rs`'s unit test).
//! 3. Restarted with `Address 127.0.0.4` while listening on 127.0.0.1
//!    only: nobody can reach the published ORPort, so weft never uploads a
//!    descriptor and after `TestingReachabilityWarnAfter` (C's 20 minutes,
//!    scaled) logs C's warning; `status/reachability-succeeded/or` is 0.
//!
//! The network lives in `target/tmp/weft-net-address-<pid>/`, kept on
//! failure.

use std::path::PathBuf;
use std::time::{Duration, Instant};

mod common;

use anyhow::{ensure, Context, Result};
use weft_testnet::{Testnet, TestnetConfig, WeftNode};

const BOUND: Duration = Duration::from_secs(240);

/// Wait (bounded) until weft's notice log, from byte `from` on, has a line
/// containing `needle`; that line.
fn wait_log(log: &std::path::Path, from: usize, needle: &str, limit: Duration) -> Result<String> {
    let t0 = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(l) = text
            .get(from..)
            .unwrap_or_default()
            .lines()
            .find(|l| l.contains(needle))
        {
            return Ok(l.to_string());
        }
        ensure!(
            t0.elapsed() < limit,
            "weft's log has no {needle:?} after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// weft's `r` line in auth0's consensus, if listed.
fn consensus_r_line(net: &Testnet) -> Result<Option<String>> {
    let c = std::fs::read_to_string(net.node("auth0")?.dir.join("cached-consensus"))
        .unwrap_or_default();
    Ok(c.lines()
        .find(|l| l.starts_with("r weft "))
        .map(str::to_owned))
}

/// Wait (bounded) until auth0's consensus lists weft at `addr:port`.
fn wait_listed_at(net: &Testnet, addr: &str, port: u16) -> Result<String> {
    let t0 = Instant::now();
    loop {
        let r = consensus_r_line(net)?;
        let fields: Vec<&str> = r.as_deref().unwrap_or_default().split(' ').collect();
        if fields.len() >= 8 && fields[6] == addr && fields[7] == port.to_string() {
            return Ok(r.unwrap_or_default());
        }
        ensure!(
            t0.elapsed() < BOUND,
            "auth0's consensus does not list weft at {addr}:{port}: {r:?}"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// The `router` line of the descriptor auth0 holds for weft.
fn authority_router_line(net: &Testnet, fp: &str) -> Result<String> {
    let d = net
        .control("auth0")?
        .getinfo(&format!("desc/id/{fp}"))
        .unwrap_or_default();
    Ok(d.lines()
        .find(|l| l.starts_with("router "))
        .unwrap_or_default()
        .to_string())
}

fn weft_getinfo(cport: u16, dir: &std::path::Path, key: &str) -> Result<String> {
    let mut c = common::Ctl::tcp(cport)?;
    c.authenticate(&dir.join("control_auth_cookie"))?;
    let r = c.cmd(&format!("GETINFO {key}"))?;
    let prefix = format!("250-{key}=");
    r.lines()
        .find_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
        .with_context(|| format!("GETINFO {key}: {r}"))
}

#[test]
fn weft_finds_tests_and_follows_its_address() -> Result<()> {
    let base_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("weft-net-address-{}", std::process::id()));
    let mut cfg = TestnetConfig::new(&base_dir, 0);
    cfg.relays = 2;
    let cport = common::free_port();
    let mut w = WeftNode::new(env!("CARGO_BIN_EXE_weft"));
    w.connection_threads = Some(2);
    w.address_lines = Some(vec!["ORPort {port}".into()]);
    let control = vec![
        format!("ControlPort 127.0.0.1:{cport}"),
        "CookieAuthentication 1".into(),
    ];
    // The testnet says AssumeReachable 1; this weft tests its ORPort.
    w.extra_torrc = [vec!["AssumeReachable 0".to_string()], control.clone()].concat();
    cfg.weft = Some(w);
    let mut net = common::start_testnet("address", cfg)?;
    let weft = net.weft().context("weft")?;
    let (fp, dir) = (weft.fingerprint()?.to_string(), weft.dir.clone());
    let port = weft.or_addr().context("weft's ORPort")?.port();
    let log = dir.join("notice.log");

    // 1. Found, tested, then published and voted Running.
    let found = wait_log(&log, 0, "Address found: ", Duration::from_secs(10))?;
    let addr = found
        .split("Address found: ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .context("the found address")?
        .to_string();
    eprintln!("[address] weft: {found}");
    let checking = format!("Now checking whether IPv4 ORPort {addr}:{port} is reachable");
    let reachable = format!(
        "Self-testing indicates your ORPort {addr}:{port} is reachable from the outside. Excellent."
    );
    let line = wait_log(&log, 0, &reachable, BOUND)?;
    let text = std::fs::read_to_string(&log)?;
    let (c, r) = (text.find(&checking), text.find(&reachable));
    ensure!(
        matches!((c, r), (Some(c), Some(r)) if c < r),
        "weft found its ORPort reachable without testing it"
    );
    let first_upload = text.find("uploading descriptor").unwrap_or(usize::MAX);
    ensure!(
        first_upload > r.unwrap_or_default(),
        "weft uploaded a descriptor before its ORPort was found reachable"
    );
    eprintln!("[address] weft: {line}");
    net.wait_until_listed(&[&fp], &["Running", "Valid"], BOUND)?;
    let r_line = wait_listed_at(&net, &addr, port)?;
    eprintln!("[address] auth0's consensus: {r_line}");
    let status = weft_getinfo(cport, &dir, "status/reachability-succeeded")?;
    ensure!(
        status == "OR=1 DIR=1",
        "status/reachability-succeeded={status}"
    );

    // 2. A reload with a new Address: a new descriptor, then the consensus.
    let torrc = net.weft().context("weft")?.torrc();
    let text = std::fs::read_to_string(&torrc)?;
    std::fs::write(
        &torrc,
        format!("{text}Address 127.0.0.2\nAssumeReachable 1\n"),
    )?;
    let from = std::fs::metadata(&log)?.len() as usize;
    let pid = net.weft_pid().context("weft's pid")?;
    let st = std::process::Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()?;
    ensure!(st.success(), "kill -HUP {pid}");
    let changed = wait_log(
        &log,
        from,
        &format!(
            "Our IP Address has changed from {addr} to 127.0.0.2; rebuilding descriptor (source: METHOD=CONFIGURED)."
        ),
        Duration::from_secs(30),
    )?;
    eprintln!("[address] weft: {changed}");
    let t0 = Instant::now();
    loop {
        let router = authority_router_line(&net, &fp)?;
        if router.starts_with(&format!("router weft 127.0.0.2 {port} ")) {
            eprintln!("[address] auth0 holds weft's new descriptor: {router}");
            break;
        }
        ensure!(
            t0.elapsed() < BOUND,
            "auth0's descriptor of weft: {router:?}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    let r_line = wait_listed_at(&net, "127.0.0.2", port)?;
    eprintln!("[address] auth0's consensus: {r_line}");

    // 3. An ORPort nobody can reach: never published, C's warning.
    net.set_weft_address_lines(Some(vec![
        "ORPort 127.0.0.1:{port}".into(),
        "Address 127.0.0.4".into(),
    ]))?;
    let from = std::fs::metadata(&log)?.len() as usize;
    let extra = [
        vec![
            "AssumeReachable 0".to_string(),
            "TestingReachabilityWarnAfter 20 seconds".into(),
        ],
        control,
    ]
    .concat();
    net.restart_weft(Some(2), extra)?;
    let where_ = format!("127.0.0.4:{port}");
    wait_log(
        &log,
        from,
        &format!("Now checking whether IPv4 ORPort {where_} is reachable"),
        Duration::from_secs(90),
    )?;
    let warning = wait_log(
        &log,
        from,
        &format!(
            "Your server has not managed to confirm reachability for its ORPort(s) at {where_}."
        ),
        Duration::from_secs(90),
    )?;
    eprintln!("[address] weft: {warning}");
    let text = std::fs::read_to_string(&log)?;
    ensure!(
        !text[from..].contains("uploading descriptor"),
        "weft uploaded a descriptor for an unreachable ORPort"
    );
    let or = weft_getinfo(cport, &dir, "status/reachability-succeeded/or")?;
    ensure!(or == "0", "status/reachability-succeeded/or={or}");
    let router = authority_router_line(&net, &fp)?;
    ensure!(
        !router.contains("127.0.0.4"),
        "auth0 holds a descriptor with the unreachable address: {router}"
    );
    net.stop()?;
    let _ = std::fs::remove_dir_all(&base_dir);
    Ok(())
}
