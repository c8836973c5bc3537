//! Acceptance 2–4 of "weft joins a Tor network as a middle relay", against
//! stock C tor from Debian on loopback (installed when missing; never
//! skipped):
//!
//! * on a fresh network (3 authorities, 2 guards, 2 exits, 1 client) weft is
//!   listed Running, Valid and Fast by every authority, exit and client
//!   within a bound, and keeps its fingerprint across a restart;
//! * the stock client builds 30 three-hop circuits guard → weft → exit and
//!   moves more than 200 MiB through them (both directions, every stream
//!   verified by SHA-256 at both ends); no circuit fails; weft's own counters
//!   show the cells passed through it; the stock tor logs (ProtocolWarnings 1)
//!   hold no unexpected warning;
//! * the client builds those circuits with EXTENDCIRCUIT, so it asks every
//!   hop that advertises `FlowCtrl=2 Relay=5 Relay=6` for CGO relay crypto
//!   (C's control_cmd.c extends with `for_exit_use`): weft, a middle, runs
//!   CGO and relay cell format V1 on every one (counted in its log), and
//!   the bytes still arrive intact;
//! * all of it with ConnectionThreads 0, 1 and 2, and with
//!   `TestingCrossWorkerExtends 1`, which puts the two halves of every new
//!   circuit on different workers (checked from weft's extend counters).
//!
//! Networks live in `target/tmp/weft-net-<test>-<pid>/`, kept on failure.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use weft_testnet::{traffic, ConsensusEntry, Direction, Sink, Testnet, TestnetConfig, WeftNode};

/// Circuits per round of traffic.
const CIRCUITS: usize = 30;
/// Bytes per round, both directions together.
const TOTAL_BYTES: u64 = 200 << 20;
/// Payload bytes in one RELAY_DATA cell.
const DATA_PER_CELL: u64 = 498;
/// Bound on every wait for the consensus.
const LISTING_BOUND: Duration = Duration::from_secs(240);

fn start(test: &str, threads: u32, extra: &[&str]) -> Result<(Testnet, PathBuf)> {
    let base_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("weft-net-{test}-{}", std::process::id()));
    let mut cfg = TestnetConfig::new(&base_dir, 0);
    let mut w = WeftNode::new(env!("CARGO_BIN_EXE_weft"));
    w.connection_threads = Some(threads);
    w.extra_torrc = extra.iter().map(|s| s.to_string()).collect();
    cfg.weft = Some(w);
    Ok((common::start_testnet(test, cfg)?, base_dir))
}

fn weft_fp(net: &Testnet) -> Result<String> {
    Ok(net
        .weft()
        .context("no weft node")?
        .fingerprint()?
        .to_string())
}

/// Acceptance 2: every authority, exit and client lists everyone; weft with
/// Running, Valid and Fast. Returns how long it took.
fn wait_listed(net: &mut Testnet) -> Result<Duration> {
    let t0 = Instant::now();
    let stock = common::stock_relays(net);
    net.wait_until_listed(&stock, &["Running", "Valid"], LISTING_BOUND)?;
    let weft = weft_fp(net)?;
    net.wait_until_listed(&[&weft], &["Running", "Valid", "Fast"], LISTING_BOUND)?;
    net.wait_for_bootstrap(LISTING_BOUND)?;
    Ok(t0.elapsed())
}

/// Acceptance 3: 30 circuits guard → weft → exit, >200 MiB verified, no
/// circuit lost. Returns the bytes moved.
fn traffic_through_weft(net: &Testnet, label: &str) -> Result<u64> {
    let weft = weft_fp(net)?;
    let guards = [net.fingerprint("relay0")?, net.fingerprint("relay1")?];
    let exits = [net.fingerprint("exit0")?, net.fingerprint("exit1")?];
    let mut ctl = net.control("client0")?;
    let t0 = Instant::now();
    let mut circs = Vec::new();
    for i in 0..CIRCUITS {
        let path = [&guards[i % 2], &weft, &exits[(i / 2) % 2]];
        let id = ctl
            .build_circuit(&path, Duration::from_secs(60))
            .with_context(|| format!("[{label}] building circuit {i} {path:?}"))?;
        circs.push(id);
    }
    let t_build = t0.elapsed();

    let sink = Sink::start()?;
    let socks = net
        .node("client0")?
        .socks_addr()
        .context("client0 SocksPort")?;
    let mut streams = Vec::new();
    for &c in &circs {
        let s =
            traffic::connect_via_circuit(&mut ctl, socks, sink.addr(), c, Duration::from_secs(60))
                .with_context(|| format!("[{label}] stream on circuit {c}"))?;
        streams.push(s);
    }
    let per_dir = TOTAL_BYTES.div_ceil(2 * CIRCUITS as u64);
    let t1 = Instant::now();
    let workers: Vec<_> = streams
        .into_iter()
        .map(|s| {
            std::thread::spawn(move || {
                traffic::transfer(s, Direction::Both, per_dir, Duration::from_secs(600))
            })
        })
        .collect();
    let mut moved = 0;
    for (i, w) in workers.into_iter().enumerate() {
        let r = w
            .join()
            .map_err(|_| anyhow::anyhow!("transfer thread panicked"))?
            .with_context(|| format!("[{label}] transfer on circuit {}", circs[i]))?;
        ensure!(r.up_bytes == per_dir && r.down_bytes == per_dir);
        moved += r.up_bytes + r.down_bytes;
    }
    let t_xfer = t1.elapsed();

    // No circuit may have failed or closed before we close it ourselves.
    let lost: Vec<String> = ctl
        .take_events()
        .into_iter()
        .filter_map(|l| weft_testnet::control::parse_circ_event(&l))
        .filter(|e| circs.contains(&e.id) && matches!(e.status.as_str(), "FAILED" | "CLOSED"))
        .map(|e| e.line)
        .collect();
    ensure!(lost.is_empty(), "[{label}] circuits lost: {lost:?}");
    for &c in &circs {
        ctl.close_circuit(c)?;
    }
    eprintln!(
        "[{label}] {CIRCUITS} circuits built in {t_build:.2?}; {} MiB verified in {t_xfer:.2?} ({:.1} MiB/s)",
        moved >> 20,
        moved as f64 / (1 << 20) as f64 / t_xfer.as_secs_f64()
    );
    Ok(moved)
}

/// weft's consensus weight, once its bandwidth self-test (and later its
/// relayed traffic) made its descriptor report an observed bandwidth: every
/// client's consensus must come to list it with a nonzero weight, or clients
/// would never pick it. Bounded; returns the weight seen by client0.
fn wait_for_weight(net: &Testnet, label: &str) -> Result<u64> {
    let fp = weft_fp(net)?;
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        if let ConsensusEntry::Listed {
            bandwidth: Some(w),
            flags,
        } = net.control("client0")?.consensus_entry(&fp)?
        {
            if w > 0 {
                eprintln!("[{label}] client0 lists weft with weight {w} ({flags:?})");
                return Ok(w);
            }
        }
        ensure!(
            Instant::now() < deadline,
            "weft still has consensus weight 0 after 180 s"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// After a restart, a stock relay that tried to reach weft while it was
/// down refuses new connections to it for a minute ("because we failed
/// earlier", connection_or.c). Wait (bounded) until a probe circuit through
/// weft builds, so the measured round starts with weft reachable again.
fn wait_until_reachable_again(net: &Testnet, label: &str) -> Result<()> {
    // Every guard/exit pair the traffic round uses: a stock relay that
    // tried weft while it was down refuses to reconnect to it for 60 s
    // (C Tor's OR connect-failure cache), and answers CONNECTFAILED.
    let weft = weft_fp(net)?;
    let mut ctl = net.control("client0")?;
    let deadline = Instant::now() + Duration::from_secs(180);
    for guard in ["relay0", "relay1"] {
        for exit in ["exit0", "exit1"] {
            let path = [
                net.fingerprint(guard)?,
                weft.clone(),
                net.fingerprint(exit)?,
            ];
            loop {
                match ctl.build_circuit(&path, Duration::from_secs(30)) {
                    Ok(c) => {
                        ctl.close_circuit(c)?;
                        break;
                    }
                    Err(e) if Instant::now() < deadline => {
                        eprintln!(
                            "[{label}] probe circuit {guard} → weft → {exit} after restart: {e:#}; retrying"
                        );
                        std::thread::sleep(Duration::from_secs(5));
                    }
                    Err(e) => return Err(e.context("weft unreachable after its restart")),
                }
            }
        }
    }
    Ok(())
}

/// weft's "stopped after ..." lines (one per run), parsed as
/// (cells relayed, same-worker extends, cross-worker extends, CGO circuits).
fn weft_run_totals(net: &Testnet) -> Result<Vec<(u64, u64, u64, u64)>> {
    let log = std::fs::read_to_string(net.weft().context("no weft")?.notice_log())?;
    let num_before = |l: &str, word: &str| -> Option<u64> {
        let i = l.find(word)?;
        l[..i].split_whitespace().last()?.parse().ok()
    };
    Ok(log
        .lines()
        .filter(|l| l.contains("stopped after"))
        .filter_map(|l| {
            Some((
                num_before(l, " cells")?,
                num_before(l, " same-worker")?,
                num_before(l, " cross-worker")?,
                num_before(l, " CGO circuits")?,
            ))
        })
        .collect())
}

fn no_unexpected_warnings(net: &Testnet) -> Result<()> {
    let w = net.unexpected_warnings();
    ensure!(w.is_empty(), "stock tor warnings:\n{}", w.join("\n"));
    let weft_log = std::fs::read_to_string(net.weft().context("no weft")?.notice_log())?;
    ensure!(!weft_log.contains("panicked"), "weft panicked:\n{weft_log}");
    Ok(())
}

fn min_cells(bytes: u64) -> u64 {
    bytes / DATA_PER_CELL
}

fn finish(mut net: Testnet, base_dir: PathBuf) -> Result<()> {
    net.stop()?;
    drop(net);
    std::fs::remove_dir_all(&base_dir).with_context(|| format!("removing {}", base_dir.display()))
}

/// One fresh network per thread count; `restart` adds a restart round.
fn run(test: &str, threads: u32, restart_with: Option<&[&str]>) -> Result<()> {
    let (mut net, base_dir) = start(test, threads, &[])?;
    let listed = wait_listed(&mut net)?;
    eprintln!("[{test}] weft listed Running+Valid+Fast everywhere after {listed:.1?}");
    if let ConsensusEntry::Listed { flags, bandwidth } =
        net.control("client0")?.consensus_entry(&weft_fp(&net)?)?
    {
        eprintln!("[{test}] client0 lists weft: {flags:?}, bandwidth {bandwidth:?}");
    }
    let moved = traffic_through_weft(&net, test)?;
    ensure!(moved >= TOTAL_BYTES);
    if threads == 1 {
        wait_for_weight(&net, test)?;
    }
    let mut rounds = vec![(moved, false)];

    if let Some(extra) = restart_with {
        let before = weft_fp(&net)?;
        net.restart_weft(Some(threads), extra.iter().map(|s| s.to_string()).collect())?;
        let after = weft_fp(&net)?;
        ensure!(
            before == after,
            "fingerprint changed across restart: {before} -> {after}"
        );
        eprintln!("[{test}] restarted weft ({extra:?}); fingerprint kept: {after}");
        net.wait_until_listed(&[&after], &["Running", "Valid", "Fast"], LISTING_BOUND)?;
        wait_until_reachable_again(&net, test)?;
        let moved = traffic_through_weft(&net, &format!("{test} after restart"))?;
        rounds.push((moved, extra.contains(&"TestingCrossWorkerExtends 1")));
    }

    no_unexpected_warnings(&net)?;
    // Stop the network (weft logs its totals on SIGTERM) and check weft's
    // counters saw every round's cells.
    net.stop()?;
    let totals = weft_run_totals(&net)?;
    ensure!(
        totals.len() == rounds.len(),
        "expected {} 'stopped after' lines in weft's log, found {totals:?}",
        rounds.len()
    );
    for ((cells, same, cross, cgo), (moved, forced_cross)) in totals.iter().zip(&rounds) {
        eprintln!("[{test}] weft run: {cells} cells relayed, extends {same} same-worker / {cross} cross-worker, {cgo} CGO circuits");
        ensure!(
            *cgo >= CIRCUITS as u64,
            "the client's {CIRCUITS} controller-built circuits should all run CGO at weft: {cgo}"
        );
        ensure!(
            *cells >= min_cells(*moved),
            "weft relayed {cells} cells, fewer than the {} that {moved} bytes need",
            min_cells(*moved)
        );
        if *forced_cross {
            ensure!(
                *cross >= CIRCUITS as u64 && *same == 0,
                "TestingCrossWorkerExtends: {same} same-worker / {cross} cross-worker extends"
            );
        }
    }
    finish(net, base_dir)
}

#[test]
fn connection_threads_0() -> Result<()> {
    run("threads0", 0, None)
}

#[test]
fn connection_threads_1_and_restart() -> Result<()> {
    run("threads1", 1, Some(&[]))
}

#[test]
fn connection_threads_2_and_halves_on_different_workers() -> Result<()> {
    run("threads2", 2, Some(&["TestingCrossWorkerExtends 1"]))
}
