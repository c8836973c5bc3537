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

/// One thread's CPU and context switches over a window.
#[derive(Debug, Clone)]
struct ThreadTally {
    name: String,
    start_ns: u64,
    start_cs: u64,
    last_ns: u64,
    last_cs: u64,
}

/// A process's threads over a window, sampled every [`SAMPLE_EVERY`]:
/// summing /proc/<pid>/task at the two ends alone loses the CPU of a
/// thread that ends within the window (a directory cache's compression
/// thread, say, which tokio's blocking pool ends 10 s after its last job),
/// and subtracts what it had used before the window if it was there at
/// the start: a run with weft as a directory cache read 0.027% of a core
/// so. A thread born in the window counts from 0; one that ends counts
/// up to its last sample.
struct Window {
    at: Instant,
    threads: Vec<(u32, ThreadTally)>,
}

/// How often a window samples its process's threads.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);

impl Window {
    fn start(pid: u32) -> Window {
        let mut w = Window {
            at: Instant::now(),
            threads: Vec::new(),
        };
        w.add(tasks(pid), true);
        w
    }

    fn update(&mut self, pid: u32) {
        self.add(tasks(pid), false);
    }

    /// `at_start`: the threads there when the window opens count from
    /// where they are; later, a thread not seen yet counts from 0.
    fn add(&mut self, now: Vec<(u32, String, u64, u64)>, at_start: bool) {
        for (tid, name, ns, cs) in now {
            match self.threads.iter_mut().find(|t| t.0 == tid) {
                Some((_, t)) => {
                    t.last_ns = t.last_ns.max(ns);
                    t.last_cs = t.last_cs.max(cs);
                }
                None => {
                    let (start_ns, start_cs) = if at_start { (ns, cs) } else { (0, 0) };
                    self.threads.push((
                        tid,
                        ThreadTally {
                            name,
                            start_ns,
                            start_cs,
                            last_ns: ns,
                            last_cs: cs,
                        },
                    ));
                }
            }
        }
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

/// The window up to `end`: CPU share and context switches, in all and by
/// thread name (threads of one name summed, busiest waker first).
fn sample(target: &str, pid: u32, w: &Window, end: Instant) -> IdleSample {
    let secs = end.duration_since(w.at).as_secs_f64().max(1e-9);
    let (mut ns, mut cs) = (0u64, 0u64);
    let mut by: Vec<(String, f64, f64)> = Vec::new();
    for (_, t) in &w.threads {
        let (dn, dc) = (t.last_ns - t.start_ns, t.last_cs - t.start_cs);
        ns += dn;
        cs += dc;
        let (cpu, rate) = (100.0 * dn as f64 / 1e9 / secs, dc as f64 / secs);
        match by.iter_mut().find(|s| s.0 == t.name) {
            Some(s) => {
                s.1 += cpu;
                s.2 += rate;
            }
            None => by.push((t.name.clone(), cpu, rate)),
        }
    }
    by.sort_by(|a, b| b.2.total_cmp(&a.2));
    IdleSample {
        target: target.to_string(),
        threads: std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count()),
        cpu_pct: 100.0 * ns as f64 / 1e9 / secs,
        ctx_switches_per_s: cs as f64 / secs,
        by_thread: by,
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
        let (mut tw, mut ww) = (Window::start(tor_pid), Window::start(weft_pid));
        let end = tw.at + Duration::from_secs(p.seconds);
        while Instant::now() < end {
            std::thread::sleep(SAMPLE_EVERY.min(end.saturating_duration_since(Instant::now())));
            tw.update(tor_pid);
            ww.update(weft_pid);
        }
        let end = Instant::now();
        let tor = sample("tor", tor_pid, &tw, end);
        let weft = sample(&format!("weft-{threads}"), weft_pid, &ww, end);
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
    fn a_window_counts_threads_that_come_and_go() {
        let t0 = Instant::now();
        let mut w = Window {
            at: t0,
            threads: Vec::new(),
        };
        // At the start: two workers and a blocking-pool thread that has
        // used 5 s of CPU.
        w.add(
            vec![
                (7, "worker".into(), 0, 10),
                (8, "worker".into(), 0, 10),
                (9, "blocking".into(), 5_000_000_000, 500),
            ],
            true,
        );
        // Mid-window: the blocking thread used 30 ms more, then ended; a
        // new one was born.
        w.add(
            vec![
                (7, "worker".into(), 300_000_000, 40),
                (9, "blocking".into(), 5_030_000_000, 530),
                (10, "blocking".into(), 20_000_000, 40),
            ],
            false,
        );
        w.add(
            vec![
                (7, "worker".into(), 600_000_000, 70),
                (8, "worker".into(), 0, 130),
                (10, "blocking".into(), 30_000_000, 50),
            ],
            false,
        );
        let s = sample(
            "weft-2",
            std::process::id(),
            &w,
            t0 + Duration::from_secs(60),
        );
        // 600 + 30 + 30 ms of CPU in 60 s; 60 + 120 + 30 + 50 switches.
        assert!((s.cpu_pct - 1.1).abs() < 1e-9, "{}", s.cpu_pct);
        assert!((s.ctx_switches_per_s - 260.0 / 60.0).abs() < 1e-9);
        assert!(s.threads >= 1);
        let by: Vec<(&str, f64, f64)> = s
            .by_thread
            .iter()
            .map(|(n, c, r)| (n.as_str(), *c, *r))
            .collect();
        assert_eq!(by.len(), 2, "{by:?}");
        assert_eq!((by[0].0, by[1].0), ("worker", "blocking"));
        assert!((by[0].1 - 1.0).abs() < 1e-9 && (by[0].2 - 3.0).abs() < 1e-9);
        assert!((by[1].1 - 0.1).abs() < 1e-9 && (by[1].2 - 80.0 / 60.0).abs() < 1e-9);
        let md = markdown(&[IdleWindow {
            tor: s.clone(),
            weft: s.clone(),
            cpu_ratio: Some(1.0),
        }]);
        assert!(
            md.contains("| weft-2 | 1.100 | 4.3 | 1.100 | 4.3 | 1.00 |"),
            "{md}"
        );
    }
}
