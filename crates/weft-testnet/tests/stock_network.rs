//! End-to-end check of the harness with stock tor only: 3 authorities, 2
//! relays, 2 exits, 1 client on loopback; the flags come out as configured
//! (Guard only on relays, Exit only on exits), a relay0 → relay1 → exit0
//! circuit built through the control port carries 5 MiB each way, verified by
//! SHA-256. Installs tor when missing (never skips). Prints timings.
//!
//! Ports: `$WEFT_TESTNET_BASE_PORT` or a free range picked per process.
//! Files: `target/tmp/weft-testnet-stock-<pid>/` (kept only if the test fails).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use weft_testnet::{
    pick_base_port, traffic, ConsensusEntry, Direction, Role, Sink, Testnet, TestnetConfig,
    TorBinaries,
};

const BYTES: u64 = 5 << 20;

fn flags_of(net: &Testnet, observer: &str, fp: &str) -> Result<Vec<String>> {
    match net.control(observer)?.consensus_entry(fp)? {
        ConsensusEntry::Listed { flags, .. } => Ok(flags),
        other => bail!("{observer}: {fp} is {other:?}"),
    }
}

#[test]
fn stock_network_carries_verified_traffic() -> Result<()> {
    let bins = TorBinaries::locate_or_install().context("stock tor is required for this test")?;
    eprintln!("using {} ({})", bins.tor.display(), bins.version()?);

    // Per process, so concurrent runs never share a directory; removed on
    // success, kept for post-mortems on failure.
    let base_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("weft-testnet-stock-{}", std::process::id()));
    let mut cfg = TestnetConfig::new(&base_dir, 0);
    cfg.base_port = pick_base_port(cfg.ports_needed())?;
    eprintln!(
        "network in {} on ports {}..",
        base_dir.display(),
        cfg.base_port
    );

    let t0 = Instant::now();
    let mut net = Testnet::start(cfg)?;
    let t_started = t0.elapsed();

    let fp = |name: &str| net.fingerprint(name);
    let (relay0, relay1, exit0, exit1) = (fp("relay0")?, fp("relay1")?, fp("exit0")?, fp("exit1")?);
    let auths: Vec<String> = net
        .by_role(Role::Authority)
        .iter()
        .map(|n| n.fingerprint().map(str::to_string))
        .collect::<Result<_>>()?;
    assert_eq!(net.dir_authority_lines().len(), 3);

    let mut all = auths.clone();
    all.extend([relay0.clone(), relay1.clone()]);
    let t_relays = net.wait_until_listed(&all, &["Running", "Valid"], Duration::from_secs(180))?;
    let t_exits = net.wait_until_listed(
        &[&exit0, &exit1],
        &["Running", "Valid", "Exit"],
        Duration::from_secs(120),
    )?;
    let t_boot = net.wait_for_bootstrap(Duration::from_secs(180))?;

    // The strict Testing* vote lists: Guard only on relays, Exit only on exits.
    for (name, fp) in [("relay0", &relay0), ("exit0", &exit0), ("auth0", &auths[0])] {
        let flags = flags_of(&net, "client0", fp)?;
        let has = |f: &str| flags.iter().any(|x| x == f);
        match name {
            "relay0" => assert!(has("Guard") && !has("Exit"), "relay0 flags {flags:?}"),
            "exit0" => assert!(has("Exit") && !has("Guard"), "exit0 flags {flags:?}"),
            _ => assert!(!has("Exit") && !has("Guard"), "auth0 flags {flags:?}"),
        }
        assert!(has("HSDir"), "{name} flags {flags:?}");
    }

    let mut ctl = net.control("client0")?;
    let t = Instant::now();
    let circ = ctl.build_circuit(&[&relay0, &relay1, &exit0], Duration::from_secs(60))?;
    let t_circ = t.elapsed();

    let sink = Sink::start()?;
    let socks = net
        .node("client0")?
        .socks_addr()
        .context("client0 SocksPort")?;
    let t = Instant::now();
    let stream =
        traffic::connect_via_circuit(&mut ctl, socks, sink.addr(), circ, Duration::from_secs(60))?;
    let t_stream = t.elapsed();
    let report = traffic::transfer(stream, Direction::Both, BYTES, Duration::from_secs(180))?;
    assert_eq!((report.up_bytes, report.down_bytes), (BYTES, BYTES));
    ctl.close_circuit(circ)?;

    for w in net.unexpected_warnings() {
        eprintln!("unexpected tor warning: {w}");
    }

    let t = Instant::now();
    net.stop()?;
    let t_stop = t.elapsed();
    eprintln!(
        "timings: processes up {t_started:.1?}; relays Running+Valid after {t_relays:.1?} more; \
         exits +{t_exits:.1?}; client bootstrapped +{t_boot:.1?}; circuit built in {t_circ:.2?}; \
         stream open in {t_stream:.2?}; transfer: {report}; stop {t_stop:.2?}; total {:.1?}",
        t0.elapsed()
    );
    drop(net);
    std::fs::remove_dir_all(&base_dir)
        .with_context(|| format!("removing {}", base_dir.display()))?;
    Ok(())
}
