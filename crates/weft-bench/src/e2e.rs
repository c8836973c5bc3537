//! End-to-end mode: a private Tor network from weft-testnet (stock tor
//! authorities, guards, exits, client) with weft in it; the stock client
//! sends verified streams through `relay0 → target → exit` circuits where the
//! target is weft or the stock middle `relay1`, back to back in the same
//! network, and the same stream figures are reported for both: time to first
//! byte and time to last byte per stream, aggregate throughput, and the
//! target's CPU per GiB (from /proc, via its PidFile).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use serde::Serialize;
use weft_testnet::{pick_base_port, traffic, Direction, Sink, Testnet, TestnetConfig, WeftNode};

use crate::run::{cdf_ms, Percentiles};
use crate::target::{cpu_delta, thread_cpu};

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
}

/// The figures for one target.
#[derive(Debug, Clone, Serialize)]
pub struct E2eResult {
    /// `weft` or `tor` (relay1).
    pub target: String,
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
}

fn pid_of(net: &Testnet, node: &str) -> Result<u32> {
    let dir = &net.node(node)?.dir;
    let p =
        std::fs::read_to_string(dir.join("pid")).with_context(|| format!("{node}'s PidFile"))?;
    Ok(p.trim().parse()?)
}

fn one_target(net: &Testnet, middle: &str, p: &E2eProcedure) -> Result<E2eResult> {
    let guard = net.fingerprint("relay0")?;
    let mid = net.fingerprint(middle)?;
    let exits = [net.fingerprint("exit0")?, net.fingerprint("exit1")?];
    let mut ctl = net.control("client0")?;
    let mut build = Vec::new();
    let mut circs = Vec::new();
    for i in 0..p.circuits {
        let t = Instant::now();
        let c = ctl
            .build_circuit(&[&guard, &mid, &exits[i % 2]], Duration::from_secs(60))
            .with_context(|| format!("circuit {i} through {middle}"))?;
        build.push(t.elapsed().as_secs_f64() * 1e3);
        circs.push(c);
    }
    let sink = Sink::start()?;
    let socks = net
        .node("client0")?
        .socks_addr()
        .context("client0 SocksPort")?;
    let mut streams = Vec::new();
    for &c in &circs {
        streams.push(traffic::connect_via_circuit(
            &mut ctl,
            socks,
            sink.addr(),
            c,
            Duration::from_secs(60),
        )?);
    }
    let dir = match p.direction.as_str() {
        "up" => Direction::Up,
        "down" => Direction::Down,
        _ => Direction::Both,
    };
    let pid = pid_of(net, middle)?;
    let cpu0 = thread_cpu(pid);
    let t0 = Instant::now();
    let bytes = p.bytes_per_stream;
    let handles: Vec<_> = streams
        .into_iter()
        .map(|s| {
            std::thread::spawn(move || traffic::transfer(s, dir, bytes, Duration::from_secs(600)))
        })
        .collect();
    let mut ttfb = Vec::new();
    let mut ttlb = Vec::new();
    let mut moved = 0;
    for h in handles {
        let r = h
            .join()
            .map_err(|_| anyhow::anyhow!("transfer thread panicked"))??;
        if let Some(fb) = r.first_byte {
            ttfb.push(fb.as_secs_f64() * 1e3);
        }
        ttlb.push(r.elapsed.as_secs_f64() * 1e3);
        moved += r.up_bytes + r.down_bytes;
    }
    let secs = t0.elapsed().as_secs_f64();
    let cpu: f64 = cpu_delta(&cpu0, &thread_cpu(pid))
        .iter()
        .map(|t| t.cpu_s)
        .sum();
    for c in circs {
        let _ = ctl.close_circuit(c);
    }
    ensure!(moved > 0, "nothing moved through {middle}");
    Ok(E2eResult {
        target: if middle == "relay1" {
            "tor".into()
        } else {
            "weft".into()
        },
        bytes: moved,
        seconds: secs,
        bytes_per_s: moved as f64 / secs,
        target_cpu_s: cpu,
        cpu_s_per_gib: cpu / (moved as f64 / (1u64 << 30) as f64),
        ttfb_ms: Percentiles::from_ms(&ttfb),
        ttlb_ms: Percentiles::from_ms(&ttlb),
        cdf_ttfb: cdf_ms(&ttfb),
        cdf_ttlb: cdf_ms(&ttlb),
        build_ms: Percentiles::from_ms(&build),
    })
}

/// Start a network with weft (bounded waits), measure stock relay1 and weft
/// as the middle, stop everything.
pub fn run(base_dir: &Path, weft_bin: &Path, p: &E2eProcedure) -> Result<Vec<E2eResult>> {
    let mut cfg = TestnetConfig::new(base_dir, 0);
    let mut w = WeftNode::new(weft_bin);
    w.connection_threads = Some(p.weft_threads);
    cfg.weft = Some(w);
    cfg.base_port = pick_base_port(cfg.ports_needed())?;
    let mut net = Testnet::start(cfg)?;
    let bound = Duration::from_secs(240);
    let all: Vec<String> = net
        .nodes()
        .iter()
        .filter_map(|n| n.fingerprint.clone())
        .collect();
    net.wait_until_listed(&all, &["Running", "Valid"], bound)?;
    net.wait_for_bootstrap(bound)?;
    let mut out = Vec::new();
    for middle in ["relay1", "weft"] {
        eprintln!(
            "[e2e] {} streams of {} bytes through {middle}",
            p.circuits, p.bytes_per_stream
        );
        let r = one_target(&net, middle, p)?;
        eprintln!(
            "[e2e] {}: {:.1} MiB/s, {:.2} CPU-s/GiB, TTLB p50 {:.0} ms",
            r.target,
            r.bytes_per_s / (1 << 20) as f64,
            r.cpu_s_per_gib,
            r.ttlb_ms.p50
        );
        out.push(r);
    }
    net.stop()?;
    Ok(out)
}
