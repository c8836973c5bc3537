//! End-to-end mode: a private Tor network from weft-testnet (stock tor
//! authorities, guards, exits, client) with weft in it; the stock client
//! sends verified streams through `entry → target → exit` circuits where the
//! target is weft or the stock middle `relay1`, back to back in the same
//! network, and the same stream figures are reported for both: time to first
//! byte and time to last byte per stream, aggregate throughput, and the
//! target's CPU per GiB (from /proc, via its PidFile). Circuits take every
//! pair of entry (`relay0`, `relay2`, …) and exit in turn, so the target's
//! inbound and outbound connections share circuits many-to-many as on a
//! real relay (with 2 workers about half of weft's cells cross workers;
//! weft's MetricsPort says how many). With `worker_pairs`, weft is then
//! restarted with 1 and 2 workers in alternation in the same network; with
//! `ab_weft`, with two builds in alternation (the regression check's
//! capped A/B, docs/perf.md). Under a CPU cap each run also records the
//! cgroup's throttling and the relay's context switches.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use serde::Serialize;
use weft_testnet::{pick_base_port, traffic, Direction, Sink, Testnet, TestnetConfig, WeftNode};

use crate::run::{cdf_ms, Percentiles};
use crate::target::{context_switches, cpu_delta, thread_cpu};

/// What an e2e run does.
#[derive(Debug, Clone, Serialize)]
pub struct E2eProcedure {
    /// Circuits (one stream each) per target.
    pub circuits: usize,
    /// Bytes per stream, each way that is used.
    pub bytes_per_stream: u64,
    /// "up", "down" or "both".
    pub direction: String,
    /// weft's ConnectionThreads.
    pub weft_threads: u32,
    /// Entry relays the circuits take in turn (relay0, relay2, …).
    pub entries: usize,
    /// Exit relays the circuits take in turn.
    pub exits: usize,
    /// Stock clients the circuits are spread over (client0, client1, …),
    /// so that no one client's CPU limits the load.
    pub clients: usize,
    /// weft-1 / weft-2 pairs after the first weft run (0: none).
    pub worker_pairs: usize,
    /// Extra torrc lines for weft.
    pub weft_options: Vec<String>,
    /// CPU cap (CPUs, cgroup cpu.max) on the measured middle during its
    /// transfers, stock relay1 and weft alike; None: uncapped. Capped low
    /// enough, the middle and not the ten stock processes sharing the
    /// machine is the bottleneck (on 2 cores this did not make the
    /// weft-1 / weft-2 pairs steadier: docs/perf.md, 2026-11-27).
    pub cpu_cap: Option<f64>,
    /// A baseline weft binary: after the first runs, weft is restarted
    /// with it (`weft-A`) and with the binary under test (`weft-B`) in
    /// alternation, `ab_pairs` pairs, each pair's order swapped from the
    /// last (A B, B A, A B, …), in the same network and under the same cap;
    /// then stock relay1 once more.
    pub ab_weft: Option<std::path::PathBuf>,
    /// Pairs of A/B runs (with `ab_weft`).
    pub ab_pairs: usize,
}

/// The figures for one target.
#[derive(Debug, Clone, Serialize)]
pub struct E2eResult {
    /// `weft`, `weft-1`/`weft-2` (worker pairs) or `tor` (relay1).
    pub target: String,
    /// Share of weft's relayed cells that crossed workers (MetricsPort).
    pub cross_share: Option<f64>,
    /// weft's relayed cells per event-loop round (all workers).
    pub cells_per_round: Option<f64>,
    /// Wake-ups weft's workers sent each other per 1000 relayed cells.
    pub wakeups_per_1000_cells: Option<f64>,
    /// Bytes moved through the target (payload, all streams, both ways).
    pub bytes: u64,
    /// Wall time of the parallel transfers.
    pub seconds: f64,
    /// Aggregate payload throughput, bytes/s.
    pub bytes_per_s: f64,
    /// Target CPU seconds during the transfers.
    pub target_cpu_s: f64,
    /// CPU-seconds per GiB of payload.
    pub cpu_s_per_gib: f64,
    /// The part of `target_cpu_s` on weft's worker threads (`weft-worker-N`:
    /// the data path); the rest is the controller and its pools (directory
    /// cache, consensus, key rotation). None for stock tor.
    pub worker_cpu_s: Option<f64>,
    /// Per-stream time to first byte (downloads) in ms.
    pub ttfb_ms: Percentiles,
    /// Per-stream time to last byte in ms.
    pub ttlb_ms: Percentiles,
    /// CDF of TTFB.
    pub cdf_ttfb: Vec<(f64, f64)>,
    /// CDF of TTLB.
    pub cdf_ttlb: Vec<(f64, f64)>,
    /// Circuit build times, ms.
    pub build_ms: Percentiles,
    /// Heap allocations on weft's worker threads during the transfers
    /// (MetricsPort; None for stock tor).
    pub worker_allocations: Option<f64>,
    /// The CPU cap's throttling during the transfers (None: uncapped).
    pub throttle: Option<crate::target::ThrottleStat>,
    /// The target's context switches per second during the transfers,
    /// voluntary (a thread slept: its wake-ups) and involuntary.
    pub ctx_switches_per_s: (f64, f64),
}

pub(crate) fn pid_of(net: &Testnet, node: &str) -> Result<u32> {
    let dir = &net.node(node)?.dir;
    let p =
        std::fs::read_to_string(dir.join("pid")).with_context(|| format!("{node}'s PidFile"))?;
    Ok(p.trim().parse()?)
}

/// The entry relays' names: relay0, relay2, relay3, … (relay1 is the
/// stock middle measured beside weft).
fn entry_names(n: usize) -> Vec<String> {
    (0..n.max(1))
        .map(|i| format!("relay{}", if i == 0 { 0 } else { i + 1 }))
        .collect()
}

/// Build a circuit; after weft restarts, a stock relay that saw a
/// connection to it fail refuses new ones for a while (C Tor's OR-connect
/// failure cache, 60 s), so a failed build is retried, bounded.
fn build_with_retries(ctl: &mut weft_testnet::ControlClient, path: &[&String]) -> Result<u64> {
    let mut tries = 0;
    loop {
        match ctl.build_circuit(path, Duration::from_secs(60)) {
            Ok(c) => return Ok(c),
            Err(e) if tries < 4 => {
                tries += 1;
                eprintln!("[e2e] circuit did not build ({e:#}); retry {tries} of 4 in 20 s");
                std::thread::sleep(Duration::from_secs(20));
            }
            Err(e) => return Err(e),
        }
    }
}

/// weft's MetricsPort and bearer token in the network.
pub(crate) struct WeftMetrics {
    pub(crate) port: u16,
    pub(crate) cookie: std::path::PathBuf,
}

impl WeftMetrics {
    fn scrape(&self) -> Option<crate::metrics::Scrape> {
        let token = std::fs::read_to_string(&self.cookie).ok()?;
        crate::metrics::scrape(self.port, token.trim()).ok()
    }
}

/// Where the measured relay sits in the circuits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Position {
    /// entry → target → exit (the stock exits `exit0`, … in turn).
    Middle,
    /// entry → `relay1` (the stock middle) → target.
    Exit,
}

/// One measurement: `circuits` streams through `node` at `position`.
pub(crate) struct Measure<'a> {
    /// Its label in the results (`tor`, `weft`, `weft-1`, …).
    pub label: &'a str,
    /// The testnet node measured.
    pub node: &'a str,
    /// Where it sits.
    pub position: Position,
    /// Circuits, one stream each.
    pub circuits: usize,
    /// Bytes per stream and direction used.
    pub bytes_per_stream: u64,
    /// "up", "down" or "both".
    pub direction: &'a str,
    /// Entry relays taken in turn.
    pub entries: usize,
    /// Stock exits taken in turn (middle position).
    pub exits: usize,
    /// Stock clients the circuits are spread over.
    pub clients: usize,
    /// CPU cap (CPUs, cgroup) on the node during its transfers.
    pub cpu_cap: Option<f64>,
}

/// Measure one target: build its circuits, attach a stream to each, move
/// the bytes, read its CPU from /proc (and weft's MetricsPort).
pub(crate) fn measure(
    net: &Testnet,
    m: &Measure<'_>,
    metrics: Option<&WeftMetrics>,
) -> Result<E2eResult> {
    let entries = entry_names(m.entries)
        .iter()
        .map(|n| net.fingerprint(n))
        .collect::<Result<Vec<_>>>()?;
    let target = net.fingerprint(m.node)?;
    let others = match m.position {
        Position::Middle => (0..m.exits.max(1))
            .map(|i| net.fingerprint(&format!("exit{i}")))
            .collect::<Result<Vec<_>>>()?,
        Position::Exit => vec![net.fingerprint("relay1")?],
    };
    let clients = m.clients.max(1);
    let mut ctls = (0..clients)
        .map(|k| net.control(&format!("client{k}")))
        .collect::<Result<Vec<_>>>()?;
    let mut build = Vec::new();
    // (client, circuit id)
    let mut circs = Vec::new();
    for i in 0..m.circuits {
        let k = i % clients;
        let t = Instant::now();
        let entry = &entries[i % entries.len()];
        let other = &others[(i / entries.len()) % others.len()];
        let path = match m.position {
            Position::Middle => [entry, &target, other],
            Position::Exit => [entry, other, &target],
        };
        let c = build_with_retries(&mut ctls[k], &path)
            .with_context(|| format!("circuit {i} through {}", m.node))?;
        build.push(t.elapsed().as_secs_f64() * 1e3);
        circs.push((k, c));
    }
    let sink = Sink::start()?;
    let mut streams = Vec::new();
    for &(k, c) in &circs {
        let client = format!("client{k}");
        let socks = net
            .node(&client)?
            .socks_addr()
            .with_context(|| format!("{client} SocksPort"))?;
        streams.push(traffic::connect_via_circuit(
            &mut ctls[k],
            socks,
            sink.addr(),
            c,
            Duration::from_secs(60),
        )?);
    }
    let dir = match m.direction {
        "up" => Direction::Up,
        "down" => Direction::Down,
        _ => Direction::Both,
    };
    let pid = pid_of(net, m.node)?;
    let cap = match m.cpu_cap {
        Some(q) => Some(crate::target::CpuCap::apply(pid, m.label, q)?),
        None => None,
    };
    let m0 = metrics.and_then(WeftMetrics::scrape);
    let throttle0 = cap.as_ref().map(|c| c.stat());
    let ctx0 = context_switches(pid);
    let cpu0 = thread_cpu(pid);
    let t0 = Instant::now();
    let bytes = m.bytes_per_stream;
    let handles: Vec<_> = streams
        .into_iter()
        .map(|s| {
            std::thread::spawn(move || traffic::transfer(s, dir, bytes, Duration::from_secs(600)))
        })
        .collect();
    let mut ttfb = Vec::new();
    let mut ttlb = Vec::new();
    let mut moved = 0;
    let mut failed = None;
    for h in handles {
        match h.join() {
            Ok(Ok(r)) => {
                if let Some(fb) = r.first_byte {
                    ttfb.push(fb.as_secs_f64() * 1e3);
                }
                ttlb.push(r.elapsed.as_secs_f64() * 1e3);
                moved += r.up_bytes + r.down_bytes;
            }
            Ok(Err(e)) => failed = Some(e),
            Err(_) => failed = Some(anyhow::anyhow!("transfer thread panicked")),
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let per_thread = cpu_delta(&cpu0, &thread_cpu(pid));
    let ctx1 = context_switches(pid);
    let throttle = cap.as_ref().zip(throttle0).map(|(c, a)| {
        let b = c.stat();
        crate::target::ThrottleStat {
            periods: b.periods.saturating_sub(a.periods),
            throttled_periods: b.throttled_periods.saturating_sub(a.throttled_periods),
            throttled_s: (b.throttled_s - a.throttled_s).max(0.0),
        }
    });
    let cpu: f64 = per_thread.iter().map(|t| t.cpu_s).sum();
    let worker_cpu = metrics.map(|_| {
        per_thread
            .iter()
            .filter(|t| t.name.starts_with("weft-worker"))
            .map(|t| t.cpu_s)
            .sum::<f64>()
    });
    drop(cap);
    if let Some(e) = failed {
        return Err(e.context(format!("a stream through {}", m.node)));
    }
    let m1 = metrics.and_then(WeftMetrics::scrape);
    let all = match (&m0, &m1) {
        (Some(a), Some(b)) => Some(crate::metrics::RelayMetrics::between(a, b)),
        _ => None,
    };
    let worker_allocations = all.as_ref().map(|m| m.worker_allocations);
    let rm = all.filter(|m| m.cells > 0.0);
    for (k, c) in circs {
        let _ = ctls[k].close_circuit(c);
    }
    ensure!(moved > 0, "nothing moved through {}", m.node);
    Ok(E2eResult {
        target: m.label.to_string(),
        cross_share: rm
            .as_ref()
            .map(|m| (m.cross_cells / m.cells).clamp(0.0, 1.0)),
        cells_per_round: rm.as_ref().map(|m| m.cells / m.rounds.max(1.0)),
        wakeups_per_1000_cells: rm.as_ref().map(|m| m.wakeups / m.cells * 1000.0),
        bytes: moved,
        seconds: secs,
        bytes_per_s: moved as f64 / secs,
        target_cpu_s: cpu,
        cpu_s_per_gib: cpu / (moved as f64 / (1u64 << 30) as f64),
        worker_cpu_s: worker_cpu,
        ttfb_ms: Percentiles::from_ms(&ttfb),
        ttlb_ms: Percentiles::from_ms(&ttlb),
        cdf_ttfb: cdf_ms(&ttfb),
        cdf_ttlb: cdf_ms(&ttlb),
        build_ms: Percentiles::from_ms(&build),
        worker_allocations,
        throttle,
        ctx_switches_per_s: (
            ctx1.0.saturating_sub(ctx0.0) as f64 / secs,
            ctx1.1.saturating_sub(ctx0.1) as f64 / secs,
        ),
    })
}

/// [`measure`] with the e2e procedure, `node` as the middle.
fn one_target(
    net: &Testnet,
    middle: &str,
    p: &E2eProcedure,
    metrics: Option<&WeftMetrics>,
) -> Result<E2eResult> {
    let label = if middle == "relay1" { "tor" } else { "weft" };
    measure(
        net,
        &Measure {
            label,
            node: middle,
            position: Position::Middle,
            circuits: p.circuits,
            bytes_per_stream: p.bytes_per_stream,
            direction: &p.direction,
            entries: p.entries,
            exits: p.exits,
            clients: p.clients,
            cpu_cap: p.cpu_cap,
        },
        metrics,
    )
}

/// Start `cfg` with weft node `w` (its binary copied beside `base_dir` —
/// not inside it, which the network wipes — so that a rebuild during the
/// run does not change what restarts start),
/// weft's MetricsPort on the port after the network's, and wait (bounded)
/// until every node is listed and the clients bootstrapped. Returns the
/// network, weft's metrics and weft's torrc lines (for restarts).
pub(crate) fn start_network(
    base_dir: &Path,
    mut cfg: TestnetConfig,
    mut w: WeftNode,
    weft_options: &[String],
) -> Result<(Testnet, WeftMetrics, Vec<String>)> {
    let bin = base_dir.with_file_name("weft-under-test");
    if let Some(parent) = bin.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::copy(&w.binary, &bin).with_context(|| format!("copying {}", w.binary.display()))?;
    w.binary = bin;
    // weft counts in ports_needed: set it before picking the range.
    cfg.weft = Some(w);
    cfg.base_port = pick_base_port(cfg.ports_needed() + 1)?;
    let metrics_port = cfg.base_port + cfg.ports_needed() as u16;
    let mut options = weft_options.to_vec();
    options.push(format!("MetricsPort 127.0.0.1:{metrics_port}"));
    if let Some(w) = cfg.weft.as_mut() {
        w.extra_torrc = options.clone();
    }
    let mut net = Testnet::start(cfg)?;
    let metrics = WeftMetrics {
        port: metrics_port,
        cookie: net
            .weft()
            .context("no weft node")?
            .dir
            .join("metrics_auth_cookie"),
    };
    let bound = Duration::from_secs(240);
    let all: Vec<String> = net
        .nodes()
        .iter()
        .filter_map(|n| n.fingerprint.clone())
        .collect();
    net.wait_until_listed(&all, &["Running", "Valid"], bound)?;
    net.wait_for_bootstrap(bound)?;
    Ok((net, metrics, options))
}

/// Start a network with weft (bounded waits), measure stock relay1 and weft
/// as the middle, stop everything.
pub fn run(base_dir: &Path, weft_bin: &Path, p: &E2eProcedure) -> Result<Vec<E2eResult>> {
    let mut cfg = TestnetConfig::new(base_dir, 0);
    // relay1 is the stock middle; the others are entries.
    cfg.relays = p.entries.max(1) + 1;
    cfg.exits = p.exits.max(1);
    cfg.clients = p.clients.max(1);
    let mut w = WeftNode::new(weft_bin);
    w.connection_threads = Some(p.weft_threads);
    let (mut net, metrics, options) = start_network(base_dir, cfg, w, &p.weft_options)?;
    let mut out = Vec::new();
    for middle in ["relay1", "weft"] {
        eprintln!(
            "[e2e] {} streams of {} bytes through {middle}",
            p.circuits, p.bytes_per_stream
        );
        let r = one_target(&net, middle, p, (middle == "weft").then_some(&metrics))?;
        report(&r);
        out.push(r);
    }
    for pair in 0..p.worker_pairs {
        for threads in [1u32, 2] {
            net.restart_weft(Some(threads), options.clone())?;
            // The stock nodes pass the restart's DESTROYs along and
            // rebuild; measure in a settled network.
            std::thread::sleep(SETTLE_AFTER_RESTART);
            eprintln!(
                "[e2e] pair {} of {}: weft with {threads} worker(s)",
                pair + 1,
                p.worker_pairs
            );
            let mut r = one_target(&net, "weft", p, Some(&metrics))?;
            r.target = format!("weft-{threads}");
            report(&r);
            out.push(r);
        }
    }
    if let Some(a) = &p.ab_weft {
        // Copied beside the network as the binary under test is.
        let a_bin = base_dir.with_file_name("weft-baseline");
        std::fs::copy(a, &a_bin).with_context(|| format!("copying {}", a.display()))?;
        let b_bin = net
            .config()
            .weft
            .as_ref()
            .context("no weft node")?
            .binary
            .clone();
        for pair in 0..p.ab_pairs {
            let order = if pair % 2 == 0 {
                ["A", "B"]
            } else {
                ["B", "A"]
            };
            for side in order {
                let bin = if side == "A" { &a_bin } else { &b_bin };
                net.set_weft_binary(bin.clone())?;
                net.restart_weft(Some(p.weft_threads), options.clone())?;
                std::thread::sleep(SETTLE_AFTER_RESTART);
                eprintln!(
                    "[e2e] A/B pair {} of {}: weft-{side} ({})",
                    pair + 1,
                    p.ab_pairs,
                    bin.display()
                );
                let mut r = one_target(&net, "weft", p, Some(&metrics))?;
                r.target = format!("weft-{side}");
                report(&r);
                out.push(r);
            }
        }
        // Stock tor once more, so that weft's ratio to it rests on two tor
        // runs (start and end of the network's life), not one.
        eprintln!("[e2e] stock relay1 again after the A/B pairs");
        let r = one_target(&net, "relay1", p, None)?;
        report(&r);
        out.push(r);
    }
    net.stop()?;
    Ok(out)
}

/// B ÷ A of each A/B pair in `results` (in order), as (throughput,
/// CPU-s/GiB): above 1 B is faster, resp. costlier.
pub fn ab_pair_ratios(results: &[E2eResult]) -> Vec<(f64, f64)> {
    let a = results.iter().filter(|r| r.target == "weft-A");
    let b = results.iter().filter(|r| r.target == "weft-B");
    a.zip(b)
        .filter(|(a, _)| a.bytes_per_s > 0.0 && a.cpu_s_per_gib > 0.0)
        .map(|(a, b)| {
            (
                b.bytes_per_s / a.bytes_per_s,
                b.cpu_s_per_gib / a.cpu_s_per_gib,
            )
        })
        .collect()
}

/// Quiet time after weft restarts between worker pairs.
pub(crate) const SETTLE_AFTER_RESTART: Duration = Duration::from_secs(5);

pub(crate) fn report(r: &E2eResult) {
    eprintln!(
        "[e2e] {}: {:.1} MiB/s, {:.2} CPU-s/GiB{}, TTLB p50 {:.0} ms{}{}",
        r.target,
        r.bytes_per_s / (1 << 20) as f64,
        r.cpu_s_per_gib,
        r.worker_cpu_s
            .map(|w| format!(
                " ({:.0}% on worker threads)",
                w / r.target_cpu_s.max(1e-9) * 100.0
            ))
            .unwrap_or_default(),
        r.ttlb_ms.p50,
        r.cross_share
            .map(|f| format!(", {:.1}% of cells crossed workers", f * 100.0))
            .unwrap_or_default(),
        match (r.cells_per_round, r.wakeups_per_1000_cells) {
            (Some(c), Some(w)) =>
                format!(", {c:.1} cells per round, {w:.1} wake-ups per 1000 cells"),
            _ => String::new(),
        }
    );
    eprintln!(
        "[e2e] {}: {:.0} voluntary / {:.0} involuntary context switches per s{}",
        r.target,
        r.ctx_switches_per_s.0,
        r.ctx_switches_per_s.1,
        r.throttle
            .map(|t| format!(
                "; throttled in {} of {} periods, {:.1} s stopped",
                t.throttled_periods, t.periods, t.throttled_s
            ))
            .unwrap_or_default()
    );
}

/// weft-2 ÷ weft-1 CPU-s/GiB of each worker pair in `results` (in order).
pub fn worker_pair_ratios(results: &[E2eResult]) -> Vec<f64> {
    pair_ratios(results, |r| Some(r.target_cpu_s))
}

/// The same on the worker threads' CPU alone (the data path, without the
/// controller's directory and consensus work, which comes every voting
/// interval and lands in some runs and not others).
pub fn worker_thread_pair_ratios(results: &[E2eResult]) -> Vec<f64> {
    pair_ratios(results, |r| r.worker_cpu_s)
}

fn pair_ratios(results: &[E2eResult], cpu: impl Fn(&E2eResult) -> Option<f64>) -> Vec<f64> {
    let per_gib = |r: &E2eResult| cpu(r).map(|c| c / (r.bytes as f64 / (1u64 << 30) as f64));
    let one = results.iter().filter(|r| r.target == "weft-1");
    let two = results.iter().filter(|r| r.target == "weft-2");
    one.zip(two)
        .filter_map(|(a, b)| Some((per_gib(a)?, per_gib(b)?)))
        .filter(|&(a, _)| a > 0.0)
        .map(|(a, b)| b / a)
        .collect()
}

/// The results as a Markdown table, with the worker pairs' ratios.
pub fn markdown(results: &[E2eResult], ratios: &[f64]) -> String {
    use std::fmt::Write;
    let mut s = String::from("| target | MiB/s | CPU-s/GiB | TTFB p50 ms | TTLB p50 / p90 ms | circuit build p50 ms | cells crossing workers | throttled periods | context switches/s (vol / invol) |\n|---|---|---|---|---|---|---|---|---|\n");
    for r in results {
        let ttfb = if r.ttfb_ms.count == 0 {
            "– (upload only)".to_string()
        } else {
            format!("{:.1}", r.ttfb_ms.p50)
        };
        let _ = writeln!(
            s,
            "| {} | {:.1} | {:.2} | {ttfb} | {:.0} / {:.0} | {:.1} | {} | {} | {:.0} / {:.0} |",
            r.target,
            r.bytes_per_s / (1 << 20) as f64,
            r.cpu_s_per_gib,
            r.ttlb_ms.p50,
            r.ttlb_ms.p90,
            r.build_ms.p50,
            r.cross_share
                .map_or("–".to_string(), |f| format!("{:.1}%", f * 100.0)),
            r.throttle.map_or("–".to_string(), |t| format!(
                "{} of {}",
                t.throttled_periods, t.periods
            )),
            r.ctx_switches_per_s.0,
            r.ctx_switches_per_s.1,
        );
    }
    let ab = ab_pair_ratios(results);
    if !ab.is_empty() {
        let speed: Vec<f64> = ab.iter().map(|r| r.0).collect();
        let cost: Vec<f64> = ab.iter().map(|r| r.1).collect();
        let list = |v: &[f64]| {
            v.iter()
                .map(|r| format!("{r:.3}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            s,
            "\nweft-B ÷ weft-A per pair: throughput {} (median {:.3}); CPU-s/GiB {} (median {:.3}); {} pairs",
            list(&speed),
            crate::report::median(&speed),
            list(&cost),
            crate::report::median(&cost),
            ab.len()
        );
    }
    if !ratios.is_empty() {
        let list: Vec<String> = ratios.iter().map(|r| format!("{r:.3}")).collect();
        let _ = writeln!(
            s,
            "\nweft-2 ÷ weft-1 CPU-s/GiB per pair: {}; median {:.3} over {} pairs",
            list.join(", "),
            crate::report::median(ratios),
            ratios.len()
        );
        let workers = worker_thread_pair_ratios(results);
        if !workers.is_empty() {
            let list: Vec<String> = workers.iter().map(|r| format!("{r:.3}")).collect();
            let _ = writeln!(
                s,
                "\nthe same on the worker threads' CPU alone: {}; median {:.3}",
                list.join(", "),
                crate::report::median(&workers)
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(target: &str, cpu: f64, workers: Option<f64>) -> E2eResult {
        E2eResult {
            target: target.into(),
            cross_share: None,
            cells_per_round: None,
            wakeups_per_1000_cells: None,
            bytes: 1 << 30,
            seconds: 1.0,
            bytes_per_s: 0.0,
            target_cpu_s: cpu,
            cpu_s_per_gib: cpu,
            worker_cpu_s: workers,
            ttfb_ms: Percentiles::from_ms(&[]),
            ttlb_ms: Percentiles::from_ms(&[]),
            cdf_ttfb: Vec::new(),
            cdf_ttlb: Vec::new(),
            build_ms: Percentiles::from_ms(&[]),
            worker_allocations: None,
            throttle: None,
            ctx_switches_per_s: (0.0, 0.0),
        }
    }

    /// Pairs are weft-1 then weft-2 in order; the worker-thread ratios use
    /// the workers' CPU alone and skip runs without it.
    #[test]
    fn pair_ratios_follow_the_runs() {
        let rs = [
            result("tor", 9.0, None),
            result("weft-1", 2.0, Some(1.5)),
            result("weft-2", 2.2, Some(1.8)),
            result("weft-1", 4.0, None),
            result("weft-2", 4.0, Some(3.0)),
        ];
        let all = worker_pair_ratios(&rs);
        assert_eq!(all.len(), 2);
        assert!((all[0] - 1.1).abs() < 1e-9 && (all[1] - 1.0).abs() < 1e-9);
        let workers = worker_thread_pair_ratios(&rs);
        assert_eq!(workers.len(), 1);
        assert!((workers[0] - 1.2).abs() < 1e-9);
    }

    /// A/B pairs match the n-th A with the n-th B whatever their order
    /// (A B, then B A); the ratios are B over A.
    #[test]
    fn ab_ratios_pair_in_order() {
        let run = |t: &str, speed: f64, cost: f64| E2eResult {
            bytes_per_s: speed,
            cpu_s_per_gib: cost,
            ..result(t, cost, None)
        };
        let rs = [
            run("tor", 10.0, 9.0),
            run("weft-A", 40.0, 3.0),
            run("weft-B", 50.0, 2.4),
            run("weft-B", 44.0, 3.3),
            run("weft-A", 44.0, 3.0),
        ];
        let ab = ab_pair_ratios(&rs);
        assert_eq!(ab.len(), 2);
        assert!((ab[0].0 - 1.25).abs() < 1e-9 && (ab[0].1 - 0.8).abs() < 1e-9);
        assert!((ab[1].0 - 1.0).abs() < 1e-9 && (ab[1].1 - 1.1).abs() < 1e-9);
        assert!(markdown(&rs, &[]).contains("weft-B ÷ weft-A per pair"));
    }

    /// cgroup v2's and v1's cpu.stat give the same figures.
    #[test]
    fn throttle_counters_parse() {
        let v2 = "usage_usec 100\nnr_periods 50\nnr_throttled 40\nthrottled_usec 3400000\n";
        let t = crate::target::ThrottleStat::parse(v2);
        assert_eq!((t.periods, t.throttled_periods), (50, 40));
        assert!((t.throttled_s - 3.4).abs() < 1e-9);
        let v1 = "nr_periods 50\nnr_throttled 40\nthrottled_time 3400000000\n";
        assert_eq!(crate::target::ThrottleStat::parse(v1), t);
    }
}
