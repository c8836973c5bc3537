//! `weft-bench demo`, the README's first command (`bash scripts/demo.sh`):
//! what weft is for, shown in a few minutes on loopback beside stock tor.
//!
//! 1. [`roles`]: weft in each of its roles in a network of stock tor, a
//!    line per role saying what was checked.
//! 2. Speed: the same bulk load (weft-bench's own generators and sinks,
//!    4 connections × 8 circuits both ways, cells checked) through stock
//!    tor, weft with 1 worker and weft with 2, each capped to the same CPU
//!    (cgroup `cpu.max`) so the relay, not the load, is the bottleneck on
//!    a 2-core machine: MiB/s and CPU-s/GiB side by side.
//! 3. weft's node-delay histogram from its MetricsPort, in the roles
//!    network and under the bulk load.
//!
//! Everything goes into `demo.json`; `bench/demo_report.py` draws the
//! plots and writes one self-contained `report.html` (the PNGs inline),
//! whose path is printed last.

pub mod roles;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;

use crate::report;
use crate::run::{self, BenchEnv, Procedure};
use crate::target::TargetKind;

/// The demo's options.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// weft binary.
    #[arg(long, default_value = "target/release/weft")]
    pub weft: PathBuf,
    /// tor binary (default: from PATH, installed if missing).
    #[arg(long)]
    pub tor: Option<PathBuf>,
    /// Where the demo's networks, results and report go (a folder per run).
    #[arg(long, default_value = "target/demo")]
    pub out: PathBuf,
    /// The CPU cap of each relay in the speed part, in CPUs.
    #[arg(long, default_value_t = 0.5)]
    pub cpu_quota: f64,
    /// Measured seconds per relay in the speed part.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Warm-up seconds per relay (not measured).
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Skip the roles (the speed part only).
    #[arg(long)]
    pub no_roles: bool,
}

/// One relay's row of the speed table.
#[derive(Debug, Clone, Serialize)]
pub struct SpeedRow {
    /// `tor`, `weft-1`, `weft-2`.
    pub label: String,
    /// Mean MiB/s relayed (both directions) over the measured time.
    pub mib_s: f64,
    /// CPU-seconds per GiB relayed (from /proc).
    pub cpu_s_per_gib: f64,
    /// Node delay p50 and p99 measured by the load, up and down (ms;
    /// the loopback floor included).
    pub delay_up_ms: (f64, f64),
    /// See `delay_up_ms`.
    pub delay_down_ms: (f64, f64),
    /// Cells damaged or out of order (must be 0).
    pub corrupt_cells: u64,
    /// Throughput samples (s, MiB/s) for the plot.
    pub samples: Vec<(f64, f64)>,
    /// weft's own node-delay histogram over the measured time (upper
    /// bound ms, cumulative cells); empty for tor.
    pub node_delay_buckets_ms: Vec<(f64, f64)>,
}

/// Everything the demo measured (`demo.json`).
#[derive(Debug, Clone, Serialize)]
pub struct DemoResult {
    /// When.
    pub date: String,
    /// The machine.
    pub machine: report::Machine,
    /// Stock tor's version (and OpenSSL's).
    pub tor_version: String,
    /// The roles part (None with `--no-roles`).
    pub roles: Option<roles::RolesReport>,
    /// The CPU cap of the speed part.
    pub cpu_quota: f64,
    /// The speed part, tor first.
    pub speed: Vec<SpeedRow>,
}

impl DemoResult {
    /// Every role held, every relay of the speed part relayed cells (a
    /// table of zeros is no comparison) and no cell was damaged.
    pub fn ok(&self) -> bool {
        self.roles
            .as_ref()
            .is_none_or(|r| r.checks.iter().all(|c| c.ok))
            && !self.speed.is_empty()
            && self
                .speed
                .iter()
                .all(|s| s.corrupt_cells == 0 && s.mib_s > 0.0 && s.cpu_s_per_gib.is_finite())
    }
}

/// The speed table as text.
pub fn speed_table(rows: &[SpeedRow], cpu_quota: f64) -> String {
    let tor = rows.iter().find(|r| r.label == "tor");
    let mut s = format!(
        "same bulk load, each relay capped at {cpu_quota} CPU:\n  {:<8} {:>8} {:>9} {:>11} {:>10} {:>16} {:>16}\n",
        "relay", "MiB/s", "x tor", "CPU-s/GiB", "÷ tor", "delay p50/p99 up", "p50/p99 down"
    );
    for r in rows {
        let (x, c) = match tor {
            Some(t) if t.mib_s > 0.0 && t.cpu_s_per_gib > 0.0 => (
                format!("{:.2}x", r.mib_s / t.mib_s),
                format!("{:.2}", r.cpu_s_per_gib / t.cpu_s_per_gib),
            ),
            _ => ("-".into(), "-".into()),
        };
        s.push_str(&format!(
            "  {:<8} {:>8.1} {:>9} {:>11.2} {:>10} {:>16} {:>16}\n",
            r.label,
            r.mib_s,
            x,
            r.cpu_s_per_gib,
            c,
            format!("{:.1}/{:.1} ms", r.delay_up_ms.0, r.delay_up_ms.1),
            format!("{:.1}/{:.1} ms", r.delay_down_ms.0, r.delay_down_ms.1),
        ));
    }
    s
}

fn speed_row(r: &run::RunResult) -> SpeedRow {
    SpeedRow {
        label: r.label.clone(),
        mib_s: r.mean_bytes_per_s / (1 << 20) as f64,
        cpu_s_per_gib: r.cpu_s_per_gib,
        delay_up_ms: (r.delay_up_ms.p50, r.delay_up_ms.p99),
        delay_down_ms: (r.delay_down_ms.p50, r.delay_down_ms.p99),
        corrupt_cells: r.corrupt_cells,
        samples: r
            .samples
            .iter()
            .map(|s| (s.t_s, s.total / (1 << 20) as f64))
            .collect(),
        node_delay_buckets_ms: r
            .relay_metrics
            .as_ref()
            .map(|m| m.node_delay_buckets_ms.clone())
            .unwrap_or_default(),
    }
}

/// The speed part's load: the compare load, shorter.
fn procedure(a: &DemoArgs) -> Procedure {
    Procedure {
        connections: 4,
        circuits: 8,
        sinks: 4,
        load_threads: 1,
        window: 500,
        transfer_cells: (500 * 1024u64).div_ceil(498),
        direction: "both".into(),
        mark_every: 32,
        warmup_s: a.warmup,
        duration_s: a.duration,
        window_s: a.duration.min(5.0),
        target_cpus: "0".into(),
        load_cpus: "1".into(),
        cpu_quota: (a.cpu_quota > 0.0).then_some(a.cpu_quota),
        web_circuits: 0,
        web_cells: 0,
        web_think_ms: 0,
        read_rate: None,
        stall_after_s: None,
        spread: true,
        cgo: false,
    }
}

/// Run the demo; returns the report's path. An error if a role failed or
/// a cell was damaged (after the report is written).
pub fn run(a: &DemoArgs) -> Result<PathBuf> {
    let (date, stamp) = report::today();
    let dir = std::path::absolute(a.out.join(stamp.replace([':', ' '], "-")))?;
    std::fs::create_dir_all(&dir)?;
    let weft = std::fs::canonicalize(&a.weft)
        .with_context(|| format!("no weft binary at {}", a.weft.display()))?;
    let tor = match &a.tor {
        Some(t) => t.clone(),
        None => weft_testnet::TorBinaries::locate_or_install()?.tor,
    };
    let roles = if a.no_roles {
        None
    } else {
        println!("== weft in each of its roles, stock tor all around ==");
        Some(roles::run(&dir.join("net"), &weft)?)
    };
    println!("== the same bulk load through stock tor, weft-1 and weft-2 ==");
    let env = BenchEnv {
        dir: dir.join("bench"),
        weft_bin: weft,
        tor_bin: tor,
    };
    std::fs::create_dir_all(&env.dir)?;
    let p = procedure(a);
    let mut speed = Vec::new();
    for kind in [TargetKind::tor(), TargetKind::weft(1), TargetKind::weft(2)] {
        let r = run::run(&env, &p, kind, None)?;
        speed.push(speed_row(&r));
    }
    let result = DemoResult {
        date,
        machine: report::Machine::read(),
        tor_version: report::tor_version(&env),
        roles,
        cpu_quota: a.cpu_quota,
        speed,
    };
    let json = dir.join("demo.json");
    report::write_json(&json, &result)?;
    let html = write_report(&crate::output::repo_root(), &json, &dir)?;
    println!();
    println!("== summary ==");
    println!("{}", result.tor_version);
    if let Some(r) = &result.roles {
        for c in &r.checks {
            println!(
                "  {} {:<18} {}",
                if c.ok { "ok  " } else { "FAIL" },
                c.role,
                c.checked
            );
        }
    }
    print!("{}", speed_table(&result.speed, result.cpu_quota));
    println!("results: {}", json.display());
    println!("report:  {}", html.display());
    if !result.ok() {
        bail!("a role failed or a cell was damaged (see above)");
    }
    Ok(html)
}

/// Draw the plots and write `report.html` for `json` into `dir` with
/// bench/demo_report.py (matplotlib, installed if missing).
pub fn write_report(repo: &Path, json: &Path, dir: &Path) -> Result<PathBuf> {
    report::plot_with(repo, "bench/demo_report.py", json, dir)?;
    let html = dir.join("report.html");
    if !html.is_file() {
        bail!("bench/demo_report.py wrote no {}", html.display());
    }
    Ok(html)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(label: &str, mib_s: f64, corrupt_cells: u64) -> SpeedRow {
        SpeedRow {
            label: label.into(),
            mib_s,
            cpu_s_per_gib: 1.5,
            delay_up_ms: (1.0, 2.0),
            delay_down_ms: (1.0, 2.0),
            corrupt_cells,
            samples: Vec::new(),
            node_delay_buckets_ms: Vec::new(),
        }
    }

    fn result(roles_ok: bool, speed: Vec<SpeedRow>) -> DemoResult {
        DemoResult {
            date: String::new(),
            machine: report::Machine::read(),
            tor_version: String::new(),
            roles: Some(roles::RolesReport {
                tor_version: String::new(),
                checks: vec![roles::RoleCheck {
                    role: "middle".into(),
                    ok: roles_ok,
                    checked: String::new(),
                }],
                node_delay_buckets_ms: Vec::new(),
                ready_s: 0.0,
                total_s: 0.0,
            }),
            cpu_quota: 0.5,
            speed,
        }
    }

    #[test]
    fn the_demo_fails_on_a_failed_role_a_damaged_cell_or_an_empty_run() {
        let good = || vec![row("tor", 100.0, 0), row("weft-1", 300.0, 0)];
        assert!(result(true, good()).ok());
        assert!(!result(false, good()).ok(), "a role failed");
        assert!(
            !result(true, vec![row("tor", 100.0, 1)]).ok(),
            "a damaged cell"
        );
        assert!(
            !result(true, vec![row("tor", 0.0, 0)]).ok(),
            "nothing relayed"
        );
        assert!(!result(true, Vec::new()).ok(), "no speed part");
        let table = speed_table(&good(), 0.5);
        assert!(
            table.contains("weft-1") && table.contains("3.00x"),
            "{table}"
        );
    }
}
