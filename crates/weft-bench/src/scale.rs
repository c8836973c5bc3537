//! `weft-bench scale`: how stock tor and weft grow with connections and
//! circuits (issue 37). One run measures both targets by the same
//! procedure at steps of growing size (N connections carrying M circuits):
//!
//! 1. start the target (fresh), read its RSS;
//! 2. open N generator connections, each from its own 127.x.y.z address
//!    (the load of [`crate::load::many`]), and read the RSS with
//!    connections only;
//! 3. with the target capped at `create_cap` CPUs (a cgroup), build the M
//!    circuits (CREATE2 + EXTEND2 each, spread unevenly over the
//!    connections, a window of builds in flight): the creation rate; in
//!    two halves, with the RSS read between them, so the second half's
//!    RSS per circuit shows what one more circuit costs apart from what
//!    the first ones pay once;
//! 4. lift the cap; the circuits are idle but for one cell every
//!    `ping_s` seconds each: RSS with idle circuits, CPU share and context
//!    switches over `idle_s`;
//! 5. `active` of the circuits carry bulk traffic both ways: RSS under
//!    load, CPU-seconds per GiB relayed and the node delay of the marked
//!    cells over `active_s`.
//!
//! Every phase is bounded in time. The pure arithmetic, the step parsing
//! and the table are in [`plan`]. The CLI (`run_cli`) writes
//! `<results>/<date>-scale.json` and the plots next to it.

mod measure;
pub mod plan;

pub use measure::{process_cpu_s, Figures};

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;

use crate::output::{command_line, repo_root};
use crate::report;
use crate::run;
use crate::target::TargetKind;
use measure::{identities, measure, Clock};
use plan::{Row, Step};

/// The options of `weft-bench scale`.
#[derive(Args, Debug, Clone)]
pub struct ScaleArgs {
    /// Steps as N:M (connections:circuits), comma-separated (default
    /// 100:1000,1000:10000,4000:100000,16000:24000; with --quick
    /// 50:500,200:5000).
    #[arg(long)]
    pub steps: Option<String>,
    /// A smoke test: small steps, short windows (about 3 minutes).
    #[arg(long)]
    pub quick: bool,
    /// Circuits that carry bulk traffic (the rest are idle).
    #[arg(long, default_value_t = 64)]
    pub active: usize,
    /// The target's CPU cap (CPUs, cgroup) while circuits are built.
    #[arg(long, default_value_t = 0.5)]
    pub create_cap: f64,
    /// weft binary.
    #[arg(long, default_value = "target/release/weft")]
    pub weft: PathBuf,
    /// weft's ConnectionThreads.
    #[arg(long, default_value_t = 2)]
    pub weft_threads: usize,
    /// Extra torrc line for weft (repeatable).
    #[arg(long)]
    pub weft_option: Vec<String>,
    /// Measure weft only (a diagnostic: the table has no tor column and
    /// no ratios).
    #[arg(long)]
    pub skip_tor: bool,
    /// tor binary (default: from PATH).
    #[arg(long)]
    pub tor: Option<PathBuf>,
    /// Results directory.
    #[arg(long, default_value = "bench/results")]
    pub results: PathBuf,
    /// Tag added to the result file name (`<date>-scale-<tag>.json`).
    #[arg(long)]
    pub tag: Option<String>,
    /// Skip the plots.
    #[arg(long)]
    pub no_plots: bool,
    /// Relay identities for the generator connections (default: one per
    /// connection of the largest step; fewer are shared in turn, but C Tor
    /// closes all but one circuitless connection per relay).
    #[arg(long)]
    pub identities: Option<usize>,
    /// Sink relays (the target's outbound connections).
    #[arg(long, default_value_t = 8)]
    pub sinks: usize,
    /// Load threads.
    #[arg(long, default_value_t = 2)]
    pub load_threads: usize,
    /// Circuit builds in flight per load thread.
    #[arg(long, default_value_t = 128)]
    pub in_flight: usize,
    /// Cells in flight per bulk circuit and direction.
    #[arg(long, default_value_t = 500)]
    pub window: u64,
    /// Seconds between two cells of one idle circuit.
    #[arg(long, default_value_t = 30.0)]
    pub ping_s: f64,
    /// Seconds of the idle window (default 20; --quick 8).
    #[arg(long)]
    pub idle_s: Option<f64>,
    /// Seconds of the active window (default 15; --quick 8).
    #[arg(long)]
    pub active_s: Option<f64>,
    /// Longest time for building one step's circuits, s (default 150;
    /// --quick 60).
    #[arg(long)]
    pub build_timeout_s: Option<f64>,
    /// Zipf exponent of circuits over connections (0: even).
    #[arg(long, default_value_t = 0.8)]
    pub skew: f64,
    /// Working directory (kept afterwards, with the targets' logs; the
    /// default one is removed).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// The procedure, resolved from the options (recorded in the JSON).
#[derive(Debug, Clone, Serialize)]
pub struct ScaleProcedure {
    /// The steps.
    pub steps: Vec<Step>,
    /// Bulk circuits per step.
    pub active: usize,
    /// CPU cap while circuits are built.
    pub create_cap: f64,
    /// weft's ConnectionThreads.
    pub weft_threads: usize,
    /// torrc lines given to both targets.
    pub common_options: Vec<String>,
    /// Extra torrc lines for weft.
    pub weft_options: Vec<String>,
    /// Stock tor was not measured.
    pub skip_tor: bool,
    /// Generator identities.
    pub identities: usize,
    /// Sinks.
    pub sinks: usize,
    /// Load threads.
    pub load_threads: usize,
    /// Builds in flight per load thread.
    pub in_flight: usize,
    /// Connection handshakes in flight per load thread.
    pub connecting: usize,
    /// Bulk window, cells per direction.
    pub window: u64,
    /// Every n-th bulk cell is stamped.
    pub mark_every: u64,
    /// Seconds between an idle circuit's cells.
    pub ping_s: f64,
    /// Settle time after each phase change, s: the same for every target,
    /// long enough that a relay which gives idle buffers back after a
    /// second or two without traffic (weft; tor frees them at once) is
    /// measured settled, not in passing.
    pub settle_s: f64,
    /// Idle window, s.
    pub idle_s: f64,
    /// Bulk warm-up, s.
    pub warmup_s: f64,
    /// Active window, s.
    pub active_s: f64,
    /// Bound on opening the connections, s.
    pub connect_timeout_s: f64,
    /// Bound on building the circuits, s.
    pub build_timeout_s: f64,
    /// Zipf exponent of circuits over connections.
    pub skew: f64,
}

/// DoS defences off for both targets (tor has them off anyway without a
/// consensus; weft's "auto" reads the same consensus parameters).
const COMMON_OPTIONS: &[&str] = &["DoSCircuitCreationEnabled 0", "DoSConnectionEnabled 0"];

impl ScaleArgs {
    /// Resolve `--quick` and the defaults.
    pub fn procedure(&self) -> Result<ScaleProcedure> {
        let q = self.quick;
        let steps = plan::parse_steps(self.steps.as_deref().unwrap_or(if q {
            plan::QUICK_STEPS
        } else {
            plan::DEFAULT_STEPS
        }))
        .map_err(anyhow::Error::msg)?;
        Ok(ScaleProcedure {
            steps: steps.clone(),
            active: self.active,
            create_cap: self.create_cap,
            weft_threads: self.weft_threads,
            common_options: COMMON_OPTIONS.iter().map(|s| s.to_string()).collect(),
            weft_options: self.weft_option.clone(),
            skip_tor: self.skip_tor,
            identities: self
                .identities
                .unwrap_or_else(|| steps.iter().map(|s| s.connections).max().unwrap_or(1))
                .max(1),
            sinks: self.sinks.max(self.load_threads.max(1)),
            load_threads: self.load_threads.max(1),
            in_flight: self.in_flight.max(1),
            connecting: 64,
            window: self.window.clamp(1, 2500),
            mark_every: 32,
            ping_s: self.ping_s.max(0.1),
            settle_s: if q { 3.0 } else { 5.0 },
            idle_s: self.idle_s.unwrap_or(if q { 8.0 } else { 20.0 }),
            warmup_s: if q { 2.0 } else { 3.0 },
            active_s: self.active_s.unwrap_or(if q { 8.0 } else { 15.0 }),
            connect_timeout_s: if q { 45.0 } else { 90.0 },
            build_timeout_s: self.build_timeout_s.unwrap_or(if q { 60.0 } else { 150.0 }),
            skew: self.skew.max(0.0),
        })
    }
}

/// RLIMIT_NOFILE before and after raising it.
#[derive(Debug, Clone, Serialize)]
pub struct NoFile {
    /// Soft limit found.
    pub soft_before: u64,
    /// Hard limit found.
    pub hard_before: u64,
    /// Both limits now (the targets inherit them).
    pub limit: u64,
    /// Why the hard limit could not be raised to what was wanted, if so.
    pub hard_not_raised: Option<String>,
}

/// Raise RLIMIT_NOFILE to the hard limit, and the hard limit to `want`
/// first if it is lower (as root; capped by fs.nr_open).
pub fn raise_nofile(want: u64) -> Result<NoFile> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the rlimit we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        bail!("getrlimit: {}", std::io::Error::last_os_error());
    }
    let (soft_before, hard_before) = (rl.rlim_cur, rl.rlim_max);
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(1 << 20);
    let hard = hard_before.max(want.min(nr_open));
    let new = libc::rlimit {
        rlim_cur: hard,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads the rlimit we own.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &new) } != 0 {
        let why = format!(
            "raising the hard limit to {hard}: {} (no CAP_SYS_RESOURCE?)",
            std::io::Error::last_os_error()
        );
        // The soft limit up to the hard one at least.
        let soft = libc::rlimit {
            rlim_cur: hard_before,
            rlim_max: hard_before,
        };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &soft) } != 0 {
            bail!("setrlimit: {}", std::io::Error::last_os_error());
        }
        return Ok(NoFile {
            soft_before,
            hard_before,
            limit: hard_before,
            hard_not_raised: Some(why),
        });
    }
    Ok(NoFile {
        soft_before,
        hard_before,
        limit: hard,
        hard_not_raised: None,
    })
}

/// One step, both targets.
#[derive(Debug, Clone, Serialize)]
pub struct StepResult {
    /// The step.
    pub step: Step,
    /// Connections actually used (N capped by the descriptor limit).
    pub connections_used: usize,
    /// Stock tor.
    pub tor: Option<Figures>,
    /// weft.
    pub weft: Option<Figures>,
    /// Measurements that failed outright.
    pub failures: Vec<String>,
}

/// Where the run works and what it runs.
#[derive(Debug, Clone)]
pub struct ScaleEnv {
    /// Working directory.
    pub dir: PathBuf,
    /// weft binary.
    pub weft_bin: PathBuf,
    /// tor binary.
    pub tor_bin: PathBuf,
}

/// Run every step against tor, then weft.
pub fn run(env: &ScaleEnv, p: &ScaleProcedure, nofile: &NoFile) -> Result<Vec<StepResult>> {
    let clock = Clock(Instant::now());
    let ids = identities(&env.dir.join("keys"), p.identities, p.sinks)?;
    clock.say(
        "",
        &format!(
            "{} generator and {} sink identities ready",
            ids.gens.len(),
            ids.sinks.len()
        ),
    );
    let mut common = p.common_options.clone();
    let mut weft_opts = common.clone();
    weft_opts.extend(p.weft_options.iter().cloned());
    let kinds = [
        TargetKind::Tor {
            options: std::mem::take(&mut common),
            label: None,
        },
        TargetKind::Weft {
            threads: p.weft_threads,
            allocator: "system".into(),
            options: weft_opts,
            label: None,
        },
    ];
    // Each side holds N sockets plus a few hundred for everything else.
    let max_conns = (nofile.limit as usize).saturating_sub(512).max(1);
    let mut out = Vec::new();
    for &step in &p.steps {
        let used = Step {
            connections: step.connections.min(max_conns),
            ..step
        };
        if used.connections < step.connections {
            clock.say(
                "",
                &format!(
                    "step {}:{}: {} connections (RLIMIT_NOFILE {})",
                    step.connections, step.circuits, used.connections, nofile.limit
                ),
            );
        }
        let mut r = StepResult {
            step,
            connections_used: used.connections,
            tor: None,
            weft: None,
            failures: Vec::new(),
        };
        for kind in &kinds {
            if p.skip_tor && matches!(kind, TargetKind::Tor { .. }) {
                continue;
            }
            match measure(env, p, used, kind.clone(), &ids, &clock) {
                Ok(f) if matches!(kind, TargetKind::Tor { .. }) => r.tor = Some(f),
                Ok(f) => r.weft = Some(f),
                Err(e) => {
                    clock.say(&kind.label(), &format!("FAILED: {e:#}"));
                    r.failures.push(format!("{}: {e:#}", kind.label()));
                }
            }
        }
        out.push(r);
    }
    Ok(out)
}

/// The table's rows.
pub fn rows(results: &[StepResult]) -> Vec<Row> {
    let mut rows = Vec::new();
    for r in results {
        let s = Step {
            connections: r.connections_used,
            ..r.step
        };
        let (t, w) = (r.tor.as_ref(), r.weft.as_ref());
        let mut add = |name: &str, get: &dyn Fn(&Figures) -> Option<f64>, d: usize| {
            rows.push(Row::new(&s, name, t.and_then(get), w.and_then(get), d));
        };
        let mib = |b: u64| Some(b as f64 / (1u64 << 20) as f64);
        add("connections open", &|f| Some(f.connections_open as f64), 0);
        add("circuits built", &|f| Some(f.circuits_built as f64), 0);
        add(
            "RSS, connections only (MiB)",
            &|f| mib(f.rss_connections),
            1,
        );
        add("RSS, idle circuits (MiB)", &|f| mib(f.rss_idle), 1);
        add("RSS, active load (MiB)", &|f| mib(f.rss_active), 1);
        add(
            "RSS per connection (KiB)",
            &|f| f.rss_per_connection.map(|b| b / 1024.0),
            1,
        );
        add(
            "RSS per idle circuit (bytes)",
            &|f| f.rss_per_idle_circuit,
            0,
        );
        add(
            "… each of the second half (bytes)",
            &|f| f.rss_per_idle_circuit_second_half,
            0,
        );
        add(
            "RSS per active circuit (KiB)",
            &|f| f.rss_per_active_circuit.map(|b| b / 1024.0),
            1,
        );
        add("circuits/s at the CPU cap", &|f| f.create_rate, 0);
        add(
            "idle CPU % per 1,000 circuits",
            &|f| f.idle_cpu_share_per_1k.map(|s| s * 100.0),
            3,
        );
        add(
            "idle context switches/s",
            &|f| Some(f.idle_ctx_switches_per_s),
            0,
        );
        add("active MiB/s", &|f| Some(f.active_mib_per_s), 1);
        let dir = |f: &Figures, cells: u64| {
            Some(cells as f64 * run::CELL_BYTES as f64 / f.active_s.max(1e-6) / (1u64 << 20) as f64)
        };
        add(
            "… of it up, toward the sinks",
            &|f| dir(f, f.active_cells.0),
            1,
        );
        add(
            "… down, toward the generators",
            &|f| dir(f, f.active_cells.1),
            1,
        );
        add("CPU-s/GiB (active)", &|f| f.cpu_s_per_gib, 2);
        add(
            "… less the idle circuits' CPU rate",
            &|f| f.cpu_s_per_gib_less_idle,
            2,
        );
        add(
            "node delay p50 (ms)",
            &|f| Some(f.delay_ms.p50).filter(|_| f.delay_ms.count > 0),
            2,
        );
        add(
            "node delay p99 (ms)",
            &|f| Some(f.delay_ms.p99).filter(|_| f.delay_ms.count > 0),
            2,
        );
        add(
            "… p99 up, toward the sinks (ms)",
            &|f| Some(f.delay_up_ms.p99).filter(|_| f.delay_up_ms.count > 0),
            2,
        );
        add(
            "… p99 down, toward the generators (ms)",
            &|f| Some(f.delay_down_ms.p99).filter(|_| f.delay_down_ms.count > 0),
            2,
        );
        add(
            "up:down cells",
            &|f| Some(f.active_cells.0 as f64 / f.active_cells.1.max(1) as f64),
            2,
        );
        add(
            "circuit shares up, least ÷ mean",
            &|f| f.fairness_up.map(|x| x.min_over_mean),
            2,
        );
        add(
            "circuit shares down, least ÷ mean",
            &|f| f.fairness_down.map(|x| x.min_over_mean),
            2,
        );
        add(
            "circuit shares, Jain's index (lower of up, down)",
            &|f| Some(f.fairness_up?.jain.min(f.fairness_down?.jain)),
            3,
        );
    }
    rows
}

/// The commit the weft sources were last changed in (the relay crates),
/// "+dirty" if they have uncommitted changes.
fn weft_commit(repo: &Path) -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    const CRATES: [&str; 4] = [
        "crates/weft",
        "crates/weft-relay",
        "crates/weft-proto",
        "crates/weft-crypto",
    ];
    let mut log = vec!["log", "-1", "--format=%h", "--abbrev=12", "--"];
    log.extend(CRATES);
    let mut status = vec!["status", "--porcelain", "--"];
    status.extend(CRATES);
    let (last, dirty) = (git(&log), git(&status));
    if dirty.is_empty() {
        last
    } else {
        format!("{last}+dirty")
    }
}

/// `weft-bench scale`: raise the descriptor limit, run, write the JSON,
/// print the table, draw the plots.
pub fn run_cli(args: &ScaleArgs, date: &str, stamp: &str) -> Result<()> {
    let p = args.procedure()?;
    let biggest = p.steps.iter().map(|s| s.connections).max().unwrap_or(0) as u64;
    let nofile = raise_nofile((2 * biggest + 4096).max(65536))?;
    eprintln!(
        "[scale] RLIMIT_NOFILE {} (was soft {}, hard {}){}; steps {:?}; settle {} s after each phase (both targets)",
        nofile.limit,
        nofile.soft_before,
        nofile.hard_before,
        nofile
            .hard_not_raised
            .as_ref()
            .map(|w| format!("; {w}"))
            .unwrap_or_default(),
        p.steps,
        p.settle_s
    );
    let tor_bin = match &args.tor {
        Some(t) => t.clone(),
        None => weft_testnet::TorBinaries::locate_or_install()?.tor,
    };
    let weft_bin = std::fs::canonicalize(&args.weft).with_context(|| {
        format!(
            "{} (build it: cargo build --release -p weft)",
            args.weft.display()
        )
    })?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| run::default_dir().join("scale"));
    std::fs::create_dir_all(&dir)?;
    let env = ScaleEnv {
        dir: dir.clone(),
        weft_bin: weft_bin.clone(),
        tor_bin,
    };
    let started = Instant::now();
    let results = run(&env, &p, &nofile)?;
    if args.dir.is_none() {
        // A directory given with --dir stays, with the targets' logs.
        let _ = std::fs::remove_dir_all(&dir);
        // The default dir's parent is this process's own; gone if empty.
        if let Some(parent) = dir.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
    let rows = rows(&results);
    let md = plan::markdown(&rows);
    let path = args.results.join(format!(
        "{date}-scale{}.json",
        args.tag
            .as_ref()
            .map(|t| format!("-{t}"))
            .unwrap_or_default()
    ));
    let benv = run::BenchEnv {
        dir: dir.clone(),
        weft_bin: weft_bin.clone(),
        tor_bin: env.tor_bin.clone(),
    };
    let doc = serde_json::json!({
        "kind": "scale",
        "date": stamp,
        "command": command_line(),
        "machine": report::Machine::read(),
        "tor_version": report::tor_version(&benv),
        "weft_binary": weft_bin.display().to_string(),
        "weft_commit": weft_commit(&repo_root()),
        "rlimit_nofile": nofile,
        "minutes": started.elapsed().as_secs_f64() / 60.0,
        "procedure": p,
        "steps": results,
        "table": rows,
    });
    report::write_json(&path, &doc)?;
    println!(
        "\nscale: {:.1} min, RLIMIT_NOFILE {}, weft sources at {} ({}), ConnectionThreads {}, creation cap {} CPU, {} bulk circuits; both targets measured {} s after each phase settles\n",
        started.elapsed().as_secs_f64() / 60.0,
        nofile.limit,
        weft_commit(&repo_root()),
        weft_bin.display(),
        p.weft_threads,
        p.create_cap,
        p.active,
        p.settle_s
    );
    print!("{md}");
    for r in &results {
        for e in &r.failures {
            println!("FAILED at {}:{}: {e}", r.step.connections, r.step.circuits);
        }
    }
    println!("results: {}", path.display());
    if !args.no_plots {
        match report::plot(&repo_root(), &path, &path.with_extension("")) {
            Ok(files) => files.iter().for_each(|f| println!("plot: {}", f.display())),
            Err(e) => eprintln!("no plots: {e:#}"),
        }
    }
    Ok(())
}
