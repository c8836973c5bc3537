//! Exit mode (`weft-bench exit`): the relay under test is the *last* hop.
//! A weft-testnet network of stock tor (authorities, entries, the stock
//! middle `relay1`, the stock exit `exit0`, a stock client) with weft as an
//! exit beside `exit0`; the client sends verified streams over
//! `entry → relay1 → target` circuits to a local sink, where the target
//! is `exit0` (stock tor) or weft with 1 or 2 workers, in alternating
//! triples in the same network (tor, weft-1, weft-2; weft restarted
//! between). Both exits have the same policy (127.0.0.0/8 only) and the
//! consensus's defaults, so the client negotiates the same flow control
//! with both (congestion control unless `--consensus-param cc_alg=0`).
//!
//! Figures per run as in e2e mode (CPU-seconds per GiB from /proc,
//! throughput, TTFB/TTLB), optionally with the target capped by a cgroup
//! (`--cpu-cap`) during its transfers so that it, not the load, is the
//! bottleneck; ratios weft-n ÷ tor per triple and their medians.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Serialize;
use weft_testnet::{TestnetConfig, WeftNode};

use crate::e2e::{measure, report, start_network, E2eResult, Measure, Position};

/// What an exit run does.
#[derive(Debug, Clone, Serialize, clap::Args)]
pub struct ExitProcedure {
    /// Circuits (one stream each) per run.
    #[arg(long, default_value_t = 8)]
    pub circuits: usize,
    /// MiB per stream and direction.
    #[arg(long, default_value_t = 16)]
    pub mib: u64,
    /// up, down or both.
    #[arg(long, default_value = "both")]
    pub direction: String,
    /// Entry relays the circuits take in turn.
    #[arg(long, default_value_t = 2)]
    pub entries: usize,
    /// Triples (tor, weft-1, weft-2) to measure.
    #[arg(long, default_value_t = 3)]
    pub pairs: usize,
    /// CPU cap on the target during its transfers, in CPUs (cgroup); 0:
    /// none. Low enough that stock tor, not the load on the same machine,
    /// is the bottleneck of its runs.
    #[arg(long, default_value_t = 0.2)]
    pub cpu_cap: f64,
    /// Extra torrc line for weft (repeatable).
    #[arg(long = "option")]
    pub weft_options: Vec<String>,
    /// The authorities' ConsensusParams, e.g. "cc_alg=0" (empty: defaults).
    #[arg(long, default_value = "")]
    pub consensus_params: String,
}

/// Start the network, measure tor / weft-1 / weft-2 as the exit
/// `p.pairs` times, stop everything.
pub fn run(base_dir: &Path, weft_bin: &Path, p: &ExitProcedure) -> Result<Vec<E2eResult>> {
    let mut cfg = TestnetConfig::new(base_dir, 0);
    cfg.relays = p.entries.max(1) + 1;
    cfg.exits = 1;
    cfg.consensus_params = p.consensus_params.clone();
    let mut w = WeftNode::new(weft_bin);
    w.connection_threads = Some(1);
    // The stock exits' policy.
    w.exit_policy = vec!["accept 127.0.0.0/8:*".into(), "reject *:*".into()];
    let (mut net, metrics, options) = start_network(base_dir, cfg, w, &p.weft_options)?;
    let cap = (p.cpu_cap > 0.0).then_some(p.cpu_cap);
    let mut out = Vec::new();
    for pair in 0..p.pairs {
        for (label, node, threads) in [
            ("tor", "exit0", 0),
            ("weft-1", "weft", 1),
            ("weft-2", "weft", 2),
        ] {
            // weft started with 1 worker; after that each weft run
            // follows a restart with its worker count.
            if threads != 0 && !(pair == 0 && threads == 1) {
                net.restart_weft(Some(threads), options.clone())?;
                std::thread::sleep(crate::e2e::SETTLE_AFTER_RESTART);
            }
            eprintln!(
                "[exit] triple {} of {}: {} streams of {} MiB through {label}",
                pair + 1,
                p.pairs,
                p.circuits,
                p.mib
            );
            let r = measure(
                &net,
                &Measure {
                    label,
                    node,
                    position: Position::Exit,
                    circuits: p.circuits,
                    bytes_per_stream: p.mib << 20,
                    direction: &p.direction,
                    entries: p.entries,
                    exits: 1,
                    clients: 1,
                    cpu_cap: cap,
                },
                (node == "weft").then_some(&metrics),
            )?;
            report(&r);
            out.push(r);
        }
    }
    net.stop()?;
    Ok(out)
}

/// Per triple: (weft-1 ÷ tor, weft-2 ÷ tor) of CPU-s/GiB and of
/// throughput.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ExitRatios {
    /// weft-1 ÷ tor CPU-s/GiB per triple.
    pub cpu_weft1: Vec<f64>,
    /// weft-2 ÷ tor CPU-s/GiB per triple.
    pub cpu_weft2: Vec<f64>,
    /// weft-1 ÷ tor throughput per triple.
    pub speed_weft1: Vec<f64>,
    /// weft-2 ÷ tor throughput per triple.
    pub speed_weft2: Vec<f64>,
}

/// The ratios of each triple in `results` (in order).
pub fn ratios(results: &[E2eResult]) -> ExitRatios {
    let mut r = ExitRatios::default();
    for t in results.chunks(3) {
        let [tor, w1, w2] = t else { continue };
        if tor.cpu_s_per_gib > 0.0 && tor.bytes_per_s > 0.0 {
            r.cpu_weft1.push(w1.cpu_s_per_gib / tor.cpu_s_per_gib);
            r.cpu_weft2.push(w2.cpu_s_per_gib / tor.cpu_s_per_gib);
            r.speed_weft1.push(w1.bytes_per_s / tor.bytes_per_s);
            r.speed_weft2.push(w2.bytes_per_s / tor.bytes_per_s);
        }
    }
    r
}

/// The results as a Markdown table, then the ratios' medians.
pub fn markdown(results: &[E2eResult], r: &ExitRatios) -> String {
    use std::fmt::Write;
    let mut s = crate::e2e::markdown(results, &[]);
    let med = |v: &[f64]| {
        if v.is_empty() {
            "–".to_string()
        } else {
            let list: Vec<String> = v.iter().map(|x| format!("{x:.3}")).collect();
            format!(
                "{} (median {:.3})",
                list.join(", "),
                crate::report::median(v)
            )
        }
    };
    s.push('\n');
    for r in results.iter().filter(|r| r.worker_allocations.is_some()) {
        // DATA cells both ways: the payload over 498 bytes per cell.
        let cells = r.bytes as f64 / 498.0;
        let a = r.worker_allocations.unwrap_or(0.0);
        let _ = writeln!(
            s,
            "{}: {a:.0} worker allocations over {cells:.0} DATA cells ({:.3} per 1000)",
            r.target,
            a / cells * 1000.0
        );
    }
    let _ = writeln!(
        s,
        "\nCPU-s/GiB ÷ tor, per triple: weft-1 {}; weft-2 {}",
        med(&r.cpu_weft1),
        med(&r.cpu_weft2)
    );
    let _ = writeln!(
        s,
        "throughput ÷ tor, per triple: weft-1 {}; weft-2 {}",
        med(&r.speed_weft1),
        med(&r.speed_weft2)
    );
    s
}

/// Where `weft-bench exit` keeps its network.
pub fn default_dir() -> PathBuf {
    crate::run::default_dir().join("exit")
}
