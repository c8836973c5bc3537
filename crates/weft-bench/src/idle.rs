//! Idle mode (`weft-bench idle`, issue 37): what a relay with nothing to
//! relay costs. A weft-testnet network of stock tor (authorities, relays,
//! an exit, no clients) with weft beside them; once every node is listed
//! and the network settled, stock `relay1` and weft (a middle each, in the
//! same votes, fetching the same consensuses) are sampled over the same
//! window: CPU from /proc/<pid>/task/*/schedstat (nanoseconds: an idle
//! window's CPU is a few 10 ms ticks) and context switches (each a
//! thread that woke). weft is measured with each `--threads` count in
//! turn (restarted between, the network kept).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;
use weft_testnet::{TestnetConfig, WeftNode};

use crate::e2e::{pid_of, start_network};
use crate::target::{context_switches, tasks_runtime_s};

/// What an idle run does.
#[derive(Debug, Clone, Serialize, clap::Args)]
pub struct IdleProcedure {
    /// weft's ConnectionThreads, one window each.
    #[arg(long, value_delimiter = ',', default_value = "2,8")]
    pub threads: Vec<u32>,
    /// Seconds each window lasts.
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// Seconds to wait before a window (after the network is listed, or
    /// after weft restarted).
    #[arg(long, default_value_t = 30)]
    pub settle_s: u64,
    /// `DirCache` of both relay1 and weft: 1 (tor's default: both are
    /// directory caches, and fetch and serve every new consensus) or 0.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub dir_cache: u8,
}

/// One relay over one window.
#[derive(Debug, Clone, Serialize)]
pub struct IdleSample {
    /// `tor` or `weft-<threads>`.
    pub target: String,
    /// Its threads at the end of the window.
    pub threads: usize,
    /// CPU as a share of one core, %.
    pub cpu_pct: f64,
    /// Context switches per second (voluntary + involuntary).
    pub ctx_switches_per_s: f64,
    /// The same by thread name (threads of one name summed; those alive
    /// at both ends of the window): name, CPU %, context switches/s.
    pub by_thread: Vec<(String, f64, f64)>,
}

/// One window: stock tor and weft side by side.
#[derive(Debug, Clone, Serialize)]
pub struct IdleWindow {
    /// Stock relay1.
    pub tor: IdleSample,
    /// weft.
    pub weft: IdleSample,
    /// weft's CPU ÷ tor's (None if tor's was 0).
    pub cpu_ratio: Option<f64>,
}

struct Snapshot {
    cpu_s: f64,
    switches: u64,
    at: Instant,
    /// Per thread id: name, CPU ns, context switches.
    tasks: Vec<(u32, String, u64, u64)>,
}

fn snapshot(pid: u32) -> Snapshot {
    let (v, n) = context_switches(pid);
    Snapshot {
        cpu_s: tasks_runtime_s(pid).unwrap_or(0.0),
        switches: v + n,
        at: Instant::now(),
        tasks: tasks(pid),
    }
}

/// Every thread of `pid`: id, name, CPU ns (schedstat), context switches.
fn tasks(pid: u32) -> Vec<(u32, String, u64, u64)> {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|t| t.parse::<u32>().ok()) else {
            continue;
        };
        let read = |f: &str| std::fs::read_to_string(e.path().join(f)).unwrap_or_default();
        let name = read("comm").trim().to_string();
        let ns = read("schedstat")
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let switches = read("status")
            .lines()
            .filter_map(|l| {
                l.strip_prefix("voluntary_ctxt_switches:")
                    .or_else(|| l.strip_prefix("nonvoluntary_ctxt_switches:"))
            })
            .filter_map(|v| v.trim().parse::<u64>().ok())
            .sum();
        out.push((tid, name, ns, switches));
    }
    out
}

/// Per thread name over the window: CPU % and context switches/s, busiest
/// waker first.
fn by_thread(before: &Snapshot, after: &Snapshot, secs: f64) -> Vec<(String, f64, f64)> {
    let mut sums: Vec<(String, f64, f64)> = Vec::new();
    for (tid, name, ns, cs) in &after.tasks {
        let Some((_, _, ns0, cs0)) = before.tasks.iter().find(|t| t.0 == *tid) else {
            continue;
        };
        let cpu = 100.0 * ns.saturating_sub(*ns0) as f64 / 1e9 / secs;
        let rate = cs.saturating_sub(*cs0) as f64 / secs;
        match sums.iter_mut().find(|s| s.0 == *name) {
            Some(s) => {
                s.1 += cpu;
                s.2 += rate;
            }
            None => sums.push((name.clone(), cpu, rate)),
        }
    }
    sums.sort_by(|a, b| b.2.total_cmp(&a.2));
    sums
}

fn sample(target: &str, pid: u32, before: &Snapshot, after: &Snapshot) -> IdleSample {
    let secs = after.at.duration_since(before.at).as_secs_f64().max(1e-9);
    IdleSample {
        target: target.to_string(),
        threads: std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count()),
        cpu_pct: 100.0 * (after.cpu_s - before.cpu_s).max(0.0) / secs,
        ctx_switches_per_s: after.switches.saturating_sub(before.switches) as f64 / secs,
        by_thread: by_thread(before, after, secs),
    }
}

/// Start the network, measure tor and weft idle for each thread count,
/// stop everything.
pub fn run(base_dir: &Path, weft_bin: &Path, p: &IdleProcedure) -> Result<Vec<IdleWindow>> {
    let mut cfg = TestnetConfig::new(base_dir, 0);
    cfg.relays = 2;
    cfg.exits = 1;
    cfg.clients = 0;
    // The same role for both relays measured (relay0 and exit0 keep tor's
    // default).
    let dir_cache = format!("DirCache {}", p.dir_cache);
    cfg.relay_torrc = vec![vec![], vec![dir_cache.clone()]];
    let mut w = WeftNode::new(weft_bin);
    let first = p.threads.first().copied().unwrap_or(2);
    w.connection_threads = Some(first);
    let (mut net, _metrics, options) = start_network(base_dir, cfg, w, &[dir_cache])?;
    let mut out = Vec::new();
    for (i, &threads) in p.threads.iter().enumerate() {
        if i > 0 {
            net.restart_weft(Some(threads), options.clone())?;
        }
        eprintln!(
            "[idle] weft-{threads}: settling {} s, then {} s side by side with relay1 (both DirCache {})",
            p.settle_s, p.seconds, p.dir_cache
        );
        std::thread::sleep(Duration::from_secs(p.settle_s));
        let (tor_pid, weft_pid) = (pid_of(&net, "relay1")?, pid_of(&net, "weft")?);
        let (t0, w0) = (snapshot(tor_pid), snapshot(weft_pid));
        std::thread::sleep(Duration::from_secs(p.seconds));
        let (t1, w1) = (snapshot(tor_pid), snapshot(weft_pid));
        let tor = sample("tor", tor_pid, &t0, &t1);
        let weft = sample(&format!("weft-{threads}"), weft_pid, &w0, &w1);
        let cpu_ratio = (tor.cpu_pct > 0.0).then(|| weft.cpu_pct / tor.cpu_pct);
        eprintln!(
            "[idle] tor {:.3}% {:.1} cs/s; weft-{threads} {:.3}% {:.1} cs/s",
            tor.cpu_pct, tor.ctx_switches_per_s, weft.cpu_pct, weft.ctx_switches_per_s
        );
        for s in [&tor, &weft] {
            let parts: Vec<String> = s
                .by_thread
                .iter()
                .map(|(n, c, r)| format!("{n} {c:.3}% {r:.1}/s"))
                .collect();
            eprintln!("[idle]   {} by thread: {}", s.target, parts.join(", "));
        }
        out.push(IdleWindow {
            tor,
            weft,
            cpu_ratio,
        });
    }
    net.stop()?;
    Ok(out)
}

/// The table: per window, tor and weft's CPU share and wake-ups.
pub fn markdown(windows: &[IdleWindow]) -> String {
    let mut s = String::from(
        "| weft | tor CPU % | tor cs/s | weft CPU % | weft cs/s | weft ÷ tor CPU |\n|---|---:|---:|---:|---:|---:|\n",
    );
    for w in windows {
        s.push_str(&format!(
            "| {} | {:.3} | {:.1} | {:.3} | {:.1} | {} |\n",
            w.weft.target,
            w.tor.cpu_pct,
            w.tor.ctx_switches_per_s,
            w.weft.cpu_pct,
            w.weft.ctx_switches_per_s,
            w.cpu_ratio.map_or("–".into(), |r| format!("{r:.2}"))
        ));
    }
    s
}

/// Where `weft-bench idle` keeps its network.
pub fn default_dir() -> PathBuf {
    crate::run::default_dir().join("idle")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_cpu_share_and_switches_per_second() {
        let t0 = Instant::now();
        let before = Snapshot {
            cpu_s: 1.0,
            switches: 100,
            at: t0,
            tasks: vec![(7, "worker".into(), 0, 10), (8, "worker".into(), 0, 10)],
        };
        let after = Snapshot {
            cpu_s: 1.06,
            switches: 400,
            at: t0 + Duration::from_secs(60),
            tasks: vec![
                (7, "worker".into(), 600_000_000, 70),
                (8, "worker".into(), 0, 130),
                (9, "new".into(), 0, 1000),
            ],
        };
        let s = sample("tor", std::process::id(), &before, &after);
        assert!((s.cpu_pct - 0.1).abs() < 1e-9);
        assert!((s.ctx_switches_per_s - 5.0).abs() < 1e-9);
        assert!(s.threads >= 1);
        // Threads of one name summed; one born in the window left out.
        assert_eq!(s.by_thread, vec![("worker".to_string(), 1.0, 3.0)]);
        let md = markdown(&[IdleWindow {
            tor: s.clone(),
            weft: IdleSample {
                target: "weft-2".into(),
                ..s
            },
            cpu_ratio: Some(1.0),
        }]);
        assert!(
            md.contains("| weft-2 | 0.100 | 5.0 | 0.100 | 5.0 | 1.00 |"),
            "{md}"
        );
    }
}
