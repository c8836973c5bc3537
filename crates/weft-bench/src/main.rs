//! weft-bench: saturate one relay (stock tor or weft, by the same procedure)
//! with real Tor traffic and report the figures of Engler's thesis (§6.2–6.3)
//! plus cost figures: throughput every 500 ms and max sustained (moving
//! average), CPU-seconds per GiB, per-thread CPU and the main thread's share,
//! TTFB/TTLB, node-based delay, memory per circuit.
//!
//! * `run`: one target.
//! * `compare`: stock tor, then weft with 0, 1, 2 workers (and the
//!   allocators), back to back with the same load, then more tor / weft-1
//!   pairs for the median cost ratio (`--pairs`); writes
//!   `bench/results/<date>-compare.json`, PNGs, and the table in docs/perf.md.
//! * `scale`: stock tor and weft as connections and circuits grow.
//!
//! The work is done by the `weft_bench` library (load, target, run, report).

mod priority_scenario;

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};

use weft_bench::output::{command_line, repo_root, NetworkOutput};
use weft_bench::report;
use weft_bench::run::{self, BenchEnv, Procedure};
use weft_bench::target::TargetKind;

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Measure a Tor relay (stock tor or weft) side by side"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// The README's demo: weft in each of its roles among stock tor (a line
    /// per role saying what was checked), the same bulk load through stock
    /// tor, weft-1 and weft-2 under the same CPU cap, weft's node-delay
    /// histogram; one self-contained HTML report
    Demo(weft_bench::demo::DemoArgs),
    /// Measure one target.
    Run {
        /// tor or weft.
        #[arg(long)]
        target: String,
        /// weft's ConnectionThreads.
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// weft's allocator: system, mimalloc, jemalloc.
        #[arg(long, default_value = "system")]
        allocator: String,
        /// Extra torrc line for the target (repeatable), e.g.
        /// "CircuitPriorityHalflife 0" or "Schedulers Vanilla".
        #[arg(long)]
        option: Vec<String>,
        /// Label for the run in tables and file names.
        #[arg(long)]
        label: Option<String>,
        #[command(flatten)]
        opts: Opts,
        /// Where to write the JSON (default bench/results/<date>-<target>.json).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// tor, weft 0/1/2 workers and allocators with the same load; table of ratios.
    Compare {
        #[command(flatten)]
        opts: Opts,
        /// Also measure weft-1 with mimalloc and jemalloc.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        allocators: bool,
        /// tor / weft-1 pairs for the paired cost ratio (the first pair is
        /// the main table's; each further pair runs tor, then weft-1).
        #[arg(long, default_value_t = 3)]
        pairs: usize,
        /// weft-1 / weft-2 pairs for the paired cost of a second worker and
        /// the projection's δ (the first pair is the main table's; each
        /// further pair runs weft-1, then weft-2).
        #[arg(long, default_value_t = 6)]
        worker_pairs: usize,
        /// Extra torrc line for every weft run (repeatable), e.g. with
        /// "TestingTorNetwork 1" and "TestingCrossWorkerExtends 1" every
        /// cell crosses workers, the (N − 1)/N of many workers at its limit.
        #[arg(long)]
        weft_option: Vec<String>,
        /// Do not touch docs/perf.md.
        #[arg(long)]
        no_perf_md: bool,
    },
    /// Tang & Goldberg's scenario: bulk circuits keep the target's outbound
    /// links saturated while web circuits fetch 87 KB objects after random
    /// think times; weft with EWMA on and off and KIST off, stock tor with
    /// EWMA on and off, same load. Reports web TTLB and bulk throughput.
    Priority {
        #[command(flatten)]
        opts: Opts,
        #[command(flatten)]
        scenario: priority_scenario::PriorityArgs,
    },
    /// weft under bulk load plus churn (new connections and circuits torn
    /// down every --churn-s, migrations) for --minutes; every cell checked;
    /// RSS and descriptors sampled and plotted. Fails on a lost cell, RSS
    /// at the end over 105% of minute 5, or descriptors that grow.
    Soak {
        /// Minutes.
        #[arg(long, default_value_t = 30.0)]
        minutes: f64,
        /// weft's ConnectionThreads.
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// Seconds each churn load lives.
        #[arg(long, default_value_t = 10.0)]
        churn_s: f64,
        /// weft moves a connection between workers this often
        /// (TestingMigrateEvery; 0: never).
        #[arg(long, default_value_t = 5)]
        migrate_every_s: u64,
        /// weft binary.
        #[arg(long, default_value = "target/release/weft")]
        weft: PathBuf,
        /// Results directory.
        #[arg(long, default_value = "bench/results")]
        results: PathBuf,
        /// Skip the plot.
        #[arg(long)]
        no_plots: bool,
    },
    /// End to end on a weft-testnet network: stock client streams through
    /// relay0 → (stock relay1 | weft) → exit, same figures for both.
    E2e {
        /// Circuits (one stream each) per target.
        #[arg(long, default_value_t = 10)]
        circuits: usize,
        /// MiB per stream and direction.
        #[arg(long, default_value_t = 10)]
        mib: u64,
        /// up, down or both.
        #[arg(long, default_value = "up")]
        direction: String,
        /// weft's ConnectionThreads.
        #[arg(long, default_value_t = 2)]
        threads: u32,
        /// Entry relays the circuits take in turn.
        #[arg(long, default_value_t = 2)]
        entries: usize,
        /// Exit relays the circuits take in turn.
        #[arg(long, default_value_t = 2)]
        exits: usize,
        /// Stock clients the circuits are spread over.
        #[arg(long, default_value_t = 1)]
        clients: usize,
        /// Then restart weft with 1 and 2 workers in alternation, this many
        /// pairs, in the same network (weft-2 ÷ weft-1 per pair).
        #[arg(long, default_value_t = 0)]
        worker_pairs: usize,
        /// Extra torrc line for weft (repeatable).
        #[arg(long)]
        option: Vec<String>,
        /// CPU cap (CPUs, cgroup cpu.max) on the measured middle, stock and
        /// weft alike, during its transfers; 0: none.
        #[arg(long, default_value_t = 0.0)]
        cpu_cap: f64,
        /// A baseline weft binary (A): then restart weft with it and with
        /// `--weft` (B) in alternation, in the same network and cap, with
        /// `--threads` workers (weft-B ÷ weft-A per pair).
        #[arg(long)]
        ab_weft: Option<PathBuf>,
        /// A/B pairs (with `--ab-weft`).
        #[arg(long, default_value_t = 4)]
        ab_pairs: usize,
        #[command(flatten)]
        out: NetworkOutput,
    },
    /// The target as the exit on a weft-testnet network: stock client
    /// streams through entry → relay1 → (stock exit0 | weft-1 | weft-2) to a
    /// local sink, in alternating triples, optionally under a CPU cap.
    Exit {
        #[command(flatten)]
        p: weft_bench::exit::ExitProcedure,
        #[command(flatten)]
        out: NetworkOutput,
    },
    /// What a relay with nothing to relay costs: stock relay1 and weft
    /// (each `--threads` count in turn) side by side in a quiet network,
    /// CPU share and context switches over the same window.
    Idle {
        #[command(flatten)]
        p: weft_bench::idle::IdleProcedure,
        #[command(flatten)]
        out: NetworkOutput,
    },
    /// Stock tor and weft side by side as connections and circuits grow
    /// (steps of N connections : M circuits, most idle, a few bulk): RSS
    /// per connection and per circuit, circuit-creation rate at a CPU cap,
    /// idle CPU and context switches, CPU-s/GiB and node delay of the bulk
    /// circuits; `<date>-scale.json` and plots.
    Scale(weft_bench::scale::ScaleArgs),
    /// Karaoglu et al.'s multipath experiment with conflux: weft-bench's
    /// own client links 1–4 circuits through bandwidth-limited stock
    /// relays into one set at weft (the exit) and downloads 300 KB and
    /// 1.5 MB; speed-up over one leg and the reorder buffer, beside the
    /// paper's Table I.
    Multipath {
        #[command(flatten)]
        p: weft_bench::multipath::MultipathProcedure,
        #[command(flatten)]
        out: NetworkOutput,
    },
}

#[derive(Args, Debug, Clone)]
struct Opts {
    /// up, down or both (the priority scenario is always down).
    #[arg(long, default_value = "both")]
    direction: String,
    /// Generator connections (M).
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Circuits per connection (C).
    #[arg(long, default_value_t = 8)]
    circuits: usize,
    /// Sink identities (default: one per connection).
    #[arg(long)]
    sinks: Option<usize>,
    /// Load threads.
    #[arg(long, default_value_t = 1)]
    load_threads: usize,
    /// Cells in flight per circuit and direction (≤ 2500, C Tor's queue cap).
    #[arg(long, default_value_t = 500)]
    window: u64,
    /// KiB per transfer (the TTFB/TTLB unit), in whole cells of 498 bytes.
    #[arg(long, default_value_t = 500)]
    transfer_kib: u64,

    /// Stamp every n-th cell.
    #[arg(long, default_value_t = 32)]
    mark_every: u64,
    /// Warm-up seconds (discarded).
    #[arg(long, default_value_t = 5.0)]
    warmup: f64,
    /// Measured seconds.
    #[arg(long, default_value_t = 40.0)]
    duration: f64,
    /// Moving-average window of the max sustained throughput (the thesis: 30 s).
    #[arg(long, default_value_t = 30.0)]
    window_s: f64,
    /// Target CPUs (taskset -c list).
    #[arg(long, default_value = "0")]
    target_cpus: String,
    /// Load CPUs.
    #[arg(long, default_value = "1")]
    load_cpus: String,
    /// Target CPU cap in CPUs via a cgroup (e.g. 0.5); 0 = none. Default:
    /// none for `run`, 0.5 for `compare` (so the target, not the load, is
    /// the bottleneck on a 2-core machine).
    #[arg(long)]
    cpu_quota: Option<f64>,
    /// weft binary.
    #[arg(long, default_value = "target/release/weft")]
    weft: PathBuf,
    /// tor binary (default: from PATH, installed if missing).
    #[arg(long)]
    tor: Option<PathBuf>,
    /// Working directory.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Results directory.
    #[arg(long, default_value = "bench/results")]
    results: PathBuf,
    /// Skip the plots.
    #[arg(long)]
    no_plots: bool,
    /// Tag added to result file names (`<date>-compare-<tag>.json`).
    #[arg(long)]
    tag: Option<String>,
    /// Spread each generator connection's circuits over all sinks (true, the
    /// default: inbound and outbound connections share circuits
    /// many-to-many as on a real relay, so with N workers about (N − 1)/N
    /// of the cells cross workers); false: each connection's circuits all
    /// go to one sink (the load of the runs before 2026-11-25, in which
    /// weft kept both halves of almost every circuit on one worker).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    spread: bool,
    /// Seconds of loopback-floor measurement (0 = skip).
    #[arg(long, default_value_t = 5.0)]
    floor_secs: f64,
    /// Circuits run CGO relay crypto (Relay=6, relay cell format V1) at
    /// the target, tor or weft alike: the load asks for it in ntor-v3.
    #[arg(long)]
    cgo: bool,
}

impl Opts {
    fn procedure(&self) -> Procedure {
        Procedure {
            connections: self.connections,
            circuits: self.circuits,
            sinks: self.sinks.unwrap_or(self.connections),
            load_threads: self.load_threads,
            window: self.window.clamp(1, 2500),
            transfer_cells: (self.transfer_kib * 1024).div_ceil(498).max(1),
            direction: self.direction.clone(),
            mark_every: self.mark_every.max(1),
            warmup_s: self.warmup,
            duration_s: self.duration,
            window_s: self.window_s,
            target_cpus: self.target_cpus.clone(),
            load_cpus: self.load_cpus.clone(),
            cpu_quota: self.cpu_quota.filter(|q| *q > 0.0),
            web_circuits: 0,
            web_cells: 0,
            web_think_ms: 0,
            read_rate: None,
            stall_after_s: None,
            spread: self.spread,
            cgo: self.cgo,
        }
    }

    fn env(&self) -> Result<BenchEnv> {
        let tor = match &self.tor {
            Some(t) => t.clone(),
            None => weft_testnet::TorBinaries::locate_or_install()?.tor,
        };
        let dir = self.dir.clone().unwrap_or_else(run::default_dir);
        std::fs::create_dir_all(&dir)?;
        // Checked when a weft target starts (tor-only runs need no weft).
        let weft = std::fs::canonicalize(&self.weft).unwrap_or_else(|_| self.weft.clone());
        Ok(BenchEnv {
            dir,
            weft_bin: weft,
            tor_bin: tor,
        })
    }
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let (date, stamp) = report::today();
    match cli.cmd {
        Cmd::Priority { opts, scenario } => {
            priority_scenario::run_scenario(opts, scenario, &date, &stamp)?
        }
        Cmd::Soak {
            minutes,
            threads,
            churn_s,
            migrate_every_s,
            weft,
            results,
            no_plots,
        } => {
            let p = weft_bench::soak::SoakProcedure {
                minutes,
                threads,
                churn_s,
                sample_s: 5.0,
                migrate_every_s,
                bulk: (2, 4),
                churn: (2, 4),
            };
            let dir = run::default_dir().join("soak");
            std::fs::create_dir_all(&dir)?;
            let env = BenchEnv {
                dir: dir.clone(),
                weft_bin: std::fs::canonicalize(&weft).unwrap_or(weft),
                tor_bin: PathBuf::new(),
            };
            let r = weft_bench::soak::run(&env, &p)?;
            let _ = std::fs::remove_dir_all(&dir);
            // A second soak the same day gets a directory of its own.
            let mut out = results.join(format!("{date}-soak"));
            let mut n = 2;
            while out.join("soak.json").exists() {
                out = results.join(format!("{date}-soak-{n}"));
                n += 1;
            }
            std::fs::create_dir_all(&out)?;
            let path = out.join("soak.json");
            report::write_json(
                &path,
                &serde_json::json!({
                    "kind": "soak",
                    "date": stamp,
                    "command": command_line(),
                    "machine": report::Machine::read(),
                    "procedure": p,
                    "result": r,
                }),
            )?;
            println!(
                "soak: {minutes} min, {} churn loads, {} migrations, {} cells, {} lost; RSS {} MiB at minute 5, {} MiB at most in the first half, {} MiB at the end; fds {} at minute 5, {} at the end, {} max",
                r.churn_runs,
                r.migrations,
                r.cells,
                r.lost,
                r.rss_at_5min >> 20,
                r.rss_first_half_max >> 20,
                r.rss_end >> 20,
                r.fds.0,
                r.fds.1,
                r.fds.2
            );
            println!("wrote {}", path.display());
            if !no_plots {
                match report::plot(&repo_root(), &path, &out) {
                    Ok(files) => files.iter().for_each(|f| println!("wrote {}", f.display())),
                    Err(e) => eprintln!("no plot: {e:#}"),
                }
            }
            let failures = r.failures();
            if !failures.is_empty() {
                anyhow::bail!("soak failed: {}", failures.join("; "));
            }
        }
        Cmd::E2e {
            circuits,
            mib,
            direction,
            threads,
            entries,
            exits,
            clients,
            worker_pairs,
            option,
            cpu_cap,
            ab_weft,
            ab_pairs,
            out,
        } => {
            let p = weft_bench::e2e::E2eProcedure {
                ab_weft: ab_weft.map(|a| std::fs::canonicalize(&a).unwrap_or(a)),
                ab_pairs,
                cpu_cap: (cpu_cap > 0.0).then_some(cpu_cap),
                circuits,
                bytes_per_stream: mib << 20,
                direction,
                weft_threads: threads,
                entries,
                exits,
                clients,
                worker_pairs,
                weft_options: option,
            };
            let rs = weft_bench::e2e::run(&run::default_dir().join("e2e"), &out.weft, &p)?;
            let ratios = weft_bench::e2e::worker_pair_ratios(&rs);
            let md = weft_bench::e2e::markdown(&rs, &ratios);
            let extra = serde_json::json!({
                "worker_pair_ratios": ratios,
                "worker_thread_pair_ratios": weft_bench::e2e::worker_thread_pair_ratios(&rs),
                "ab_pair_ratios": weft_bench::e2e::ab_pair_ratios(&rs),
            });
            out.save("e2e", &date, &stamp, &p, &rs, extra, &md)?;
        }
        Cmd::Scale(args) => weft_bench::scale::run_cli(&args, &date, &stamp)?,
        Cmd::Multipath { p, out } => {
            let (transfers, rows) =
                weft_bench::multipath::run(&weft_bench::multipath::default_dir(), &out.weft, &p)?;
            let md = weft_bench::multipath::markdown(&rows);
            let body = serde_json::json!({
                "procedure": p,
                "transfers": transfers,
                "rows": rows,
            });
            let path = out.write("multipath", &date, &stamp, body, &md)?;
            if !out.no_plots {
                for f in report::plot(&repo_root(), &path, &path.with_extension(""))? {
                    println!("plot: {}", f.display());
                }
            }
        }
        Cmd::Demo(a) => {
            weft_bench::demo::run(&a)?;
        }
        Cmd::Idle { p, out } => {
            let ws = weft_bench::idle::run(&weft_bench::idle::default_dir(), &out.weft, &p)?;
            let md = weft_bench::idle::markdown(&ws);
            let body = serde_json::json!({ "procedure": p, "windows": ws });
            out.write("idle", &date, &stamp, body, &md)?;
        }
        Cmd::Exit { p, out } => {
            let rs = weft_bench::exit::run(&weft_bench::exit::default_dir(), &out.weft, &p)?;
            let ratios = weft_bench::exit::ratios(&rs);
            let md = weft_bench::exit::markdown(&rs, &ratios);
            let extra = serde_json::json!({ "ratios_vs_tor": ratios });
            out.save("exit", &date, &stamp, &p, &rs, extra, &md)?;
        }
        Cmd::Run {
            target,
            threads,
            allocator,
            option,
            label,
            opts,
            out,
        } => {
            let env = opts.env()?;
            let p = opts.procedure();
            let kind = match target.as_str() {
                "tor" => TargetKind::Tor {
                    options: option,
                    label,
                },
                "weft" => TargetKind::Weft {
                    threads,
                    allocator,
                    options: option,
                    label,
                },
                t => anyhow::bail!("unknown target {t:?} (tor or weft)"),
            };
            let floor = (opts.floor_secs > 0.0)
                .then(|| run::measure_floor(&env, &p, opts.floor_secs))
                .transpose()?;
            let r = run::run(&env, &p, kind, floor.as_ref())?;
            let path = out.unwrap_or_else(|| {
                opts.results.join(format!(
                    "{date}-{}{}.json",
                    r.label,
                    opts.tag
                        .as_ref()
                        .map(|t| format!("-{t}"))
                        .unwrap_or_default()
                ))
            });
            let cmp = report::Comparison {
                date: stamp,
                command: command_line(),
                machine: report::Machine::read(),
                tor_version: report::tor_version(&env),
                floor_ms: floor.as_ref().map(run::Percentiles::from_hist),
                table: report::table(std::slice::from_ref(&r)),
                runs: vec![r],
                projection: None,
                paired: None,
                worker_pairs: None,
            };
            report::write_json(&path, &cmp)?;
            print!("{}", report::markdown(&cmp.table));
            println!("results: {}", path.display());
            if !opts.no_plots {
                let dir = path.with_extension("");
                for f in report::plot(&repo_root(), &path, &dir)? {
                    println!("plot: {}", f.display());
                }
            }
        }
        Cmd::Compare {
            mut opts,
            allocators,
            pairs,
            worker_pairs,
            weft_option,
            no_perf_md,
        } => {
            opts.cpu_quota.get_or_insert(0.5);
            let weft = |t: usize| TargetKind::weft(t).with_weft_options(&weft_option);
            let env = opts.env()?;
            let p = opts.procedure();
            let floor = (opts.floor_secs > 0.0)
                .then(|| run::measure_floor(&env, &p, opts.floor_secs))
                .transpose()?;
            let mut kinds = vec![TargetKind::tor()];
            for t in [0, 1, 2] {
                kinds.push(weft(t));
            }
            if allocators {
                for a in ["mimalloc", "jemalloc"] {
                    kinds.push(TargetKind::Weft {
                        threads: 1,
                        allocator: a.into(),
                        options: weft_option.clone(),
                        label: None,
                    });
                }
            }
            let mut runs = Vec::new();
            for k in kinds {
                runs.push(run::run(&env, &p, k, floor.as_ref())?);
            }
            let cost = |label: &str, runs: &[run::RunResult]| {
                runs.iter()
                    .find(|r| r.label == label)
                    .map_or(0.0, |r| r.cpu_s_per_gib)
            };
            let mut pair_costs = vec![(cost("tor", &runs), cost("weft-1", &runs))];
            for i in 1..pairs {
                println!("[pairs] tor / weft-1 pair {} of {pairs}", i + 1);
                let t = run::run(&env, &p, TargetKind::tor(), None)?;
                let w = run::run(&env, &p, weft(1), None)?;
                pair_costs.push((t.cpu_s_per_gib, w.cpu_s_per_gib));
            }
            let paired = report::paired_ratio(&pair_costs);
            let mut extra = Vec::new();
            for i in 1..worker_pairs {
                println!("[pairs] weft-1 / weft-2 pair {} of {worker_pairs}", i + 1);
                let one = run::run(&env, &p, weft(1), None)?;
                let two = run::run(&env, &p, weft(2), None)?;
                extra.push((one, two));
            }
            let by_label = |l: &str| runs.iter().find(|r| r.label == l);
            let mut wp: Vec<(&run::RunResult, &run::RunResult)> = Vec::new();
            if let (Some(a), Some(b)) = (by_label("weft-1"), by_label("weft-2")) {
                wp.push((a, b));
            }
            wp.extend(extra.iter().map(|(a, b)| (a, b)));
            let worker_pairs = (worker_pairs > 0)
                .then(|| report::worker_pairs(&wp))
                .flatten();
            let table = report::table(&runs);
            let projection = report::project(&runs, worker_pairs.as_ref());
            let mut md = report::markdown(&table);
            if let Some(p) = &projection {
                md.push('\n');
                md.push_str(&report::projection_markdown(p));
            }
            if let Some(p) = &paired {
                md.push('\n');
                md.push_str(&report::paired_markdown(p));
            }
            if let Some(p) = &worker_pairs {
                md.push('\n');
                md.push_str(&report::worker_pairs_markdown(p));
            }
            let cmp = report::Comparison {
                date: stamp.clone(),
                command: command_line(),
                machine: report::Machine::read(),
                tor_version: report::tor_version(&env),
                floor_ms: floor.as_ref().map(run::Percentiles::from_hist),
                runs,
                table,
                projection,
                paired,
                worker_pairs,
            };
            let (path, pngs) = report::save_comparison(
                &opts.results,
                &date,
                "compare",
                opts.tag.as_deref(),
                &cmp,
                &md,
                opts.no_plots,
            )?;
            if !no_perf_md {
                let mut section = format!(
                    "Measured {stamp} on {} CPUs ({}), {}; command:\n\n    {}\n\nProcedure: {} connections × {} circuits, {} sinks{}, window {} cells, {} direction(s), warm-up {} s, measured {} s, max sustained = max {} s moving average of 500 ms samples; target on CPUs {} {}, load on CPUs {}. Loopback floor of node delay (p50): {}.\n\n",
                    cmp.machine.cpus,
                    cmp.machine.model,
                    cmp.tor_version,
                    cmp.command,
                    p.connections,
                    p.circuits,
                    p.sinks,
                    if p.spread {
                        " (each connection's circuits spread over all of them)"
                    } else {
                        " (each connection's circuits to one)"
                    },
                    p.window,
                    p.direction,
                    p.warmup_s,
                    p.duration_s,
                    p.window_s,
                    p.target_cpus,
                    p.cpu_quota.map_or("(no CPU cap)".to_string(), |q| format!("capped at {q} CPU (cgroup)")),
                    p.load_cpus,
                    cmp.floor_ms.as_ref().map_or("not measured".to_string(), |f| format!("{:.3} ms", f.p50))
                );
                section.push_str(&md);
                section.push_str(&format!("\nRaw data: `{}`.", path.display()));
                for f in &pngs {
                    section.push_str(&format!(
                        " ![{}]({})",
                        f.file_stem()
                            .map(|s| s.to_string_lossy().into_owned())
                            .unwrap_or_default(),
                        relative_to_docs(f)
                    ));
                }
                section.push('\n');
                report::update_perf_md(&repo_root().join("docs/perf.md"), "compare", &section)?;
                println!("updated docs/perf.md");
            }
        }
    }
    Ok(())
}

fn relative_to_docs(p: &std::path::Path) -> String {
    let s = p.display().to_string();
    match s.find("bench/results/") {
        Some(i) => format!("../{}", &s[i..]),
        None => s,
    }
}
