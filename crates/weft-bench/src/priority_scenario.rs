//! The `priority` command: Tang & Goldberg's circuit-priority scenario
//! (bulk circuits keep the client-side links saturated while web circuits
//! fetch small objects after random think times), run against weft with
//! EWMA on and off and KIST off and stock tor with EWMA on and off, under
//! the same load; the JSON, the plots and docs/perf.md's "priority"
//! section.

use anyhow::Result;
use clap::Args;

use weft_bench::output::{command_line, repo_root};
use weft_bench::report;
use weft_bench::run;
use weft_bench::target::TargetKind;

use crate::{relative_to_docs, Opts};

/// The scenario's own options (beside the common [`Opts`]).
#[derive(Args, Debug, Clone)]
pub(crate) struct PriorityArgs {
    /// Web circuits per connection (the rest of --circuits are bulk).
    #[arg(long, default_value_t = 6)]
    web: usize,
    /// KB per web fetch.
    #[arg(long, default_value_t = 87)]
    fetch_kb: u64,
    /// Mean think time between fetches, ms.
    #[arg(long, default_value_t = 500)]
    think_ms: u64,
    /// Read rate of each generator connection, KiB/s: the slow
    /// client-side link that makes cells queue inside the target.
    #[arg(long, default_value_t = 8192)]
    read_kib_s: u64,
    /// The target's BandwidthRate (= BandwidthBurst), KiB/s (0: the
    /// usual generous limit).
    #[arg(long, default_value_t = 0)]
    rate_kib_s: u64,
    /// Make the target's CPU the bottleneck instead of a link: a cgroup
    /// cap of this many CPUs, bulk circuits both ways, no read-rate limit,
    /// and weft with 2 and with 1 workers (EWMA on and off) beside stock
    /// tor (issue 51: EWMA across the workers' hand-off). Its own
    /// docs/perf.md section.
    #[arg(long)]
    cpu_bound: Option<f64>,
    /// Do not touch docs/perf.md.
    #[arg(long)]
    no_perf_md: bool,
    /// Run only the targets whose label contains this text (e.g.
    /// `weft-1`); docs/perf.md is then left alone.
    #[arg(long)]
    only: Option<String>,
    /// Extra torrc line for every weft target (repeatable): with
    /// "TestingTorNetwork 1" and "TestingCrossWorkerExtends 1" every cell
    /// crosses workers in weft-2, so EWMA on and off are placed alike.
    #[arg(long)]
    weft_option: Vec<String>,
}

/// Run the scenario on every target, write the results and (unless told
/// not to) docs/perf.md's section.
pub(crate) fn run_scenario(
    mut opts: Opts,
    args: PriorityArgs,
    date: &str,
    stamp: &str,
) -> Result<()> {
    let PriorityArgs {
        web,
        fetch_kb,
        think_ms,
        read_kib_s,
        rate_kib_s,
        cpu_bound,
        no_perf_md,
        only,
        weft_option,
    } = args;
    let no_perf_md = no_perf_md || only.is_some() || !weft_option.is_empty();
    let env = opts.env()?;
    opts.direction = if cpu_bound.is_some() { "both" } else { "down" }.into();
    if let Some(cap) = cpu_bound {
        opts.cpu_quota = Some(cap);
    }
    let mut p = opts.procedure();
    // Bulk circuits keep more in flight than the kernel's send
    // buffers hold, so the backlog reaches the relay's queues.
    if opts.window == 500 {
        p.window = 2000;
    }
    p.web_circuits = web.min(p.circuits);
    p.web_cells = (fetch_kb * 1024).div_ceil(498);
    p.web_think_ms = think_ms;
    p.read_rate = (read_kib_s > 0 && cpu_bound.is_none()).then_some(read_kib_s * 1024);
    let rate_lines: Vec<String> = if rate_kib_s > 0 {
        vec![
            format!("BandwidthRate {rate_kib_s} KBytes"),
            format!("BandwidthBurst {rate_kib_s} KBytes"),
        ]
    } else {
        Vec::new()
    };
    let floor = (opts.floor_secs > 0.0)
        .then(|| run::measure_floor(&env, &p, opts.floor_secs))
        .transpose()?;
    let with_rate = |options: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = rate_lines.clone();
        v.extend(options.iter().map(|s| s.to_string()));
        v
    };
    let weft_n = |threads: usize, label: &str, options: &[&str]| TargetKind::Weft {
        threads,
        allocator: "system".into(),
        options: {
            let mut v = with_rate(options);
            v.extend(weft_option.iter().cloned());
            v
        },
        label: Some(label.into()),
    };
    let weft = |label: &str, options: &[&str]| weft_n(1, label, options);
    let tor = |label: &str, options: &[&str]| TargetKind::Tor {
        options: with_rate(options),
        label: Some(label.into()),
    };
    let on = ["CircuitPriorityHalflife 30"];
    let off = ["CircuitPriorityHalflife 0"];
    let kinds = if cpu_bound.is_some() {
        vec![
            weft_n(2, "weft-2 EWMA on", &on),
            weft_n(2, "weft-2 EWMA off", &off),
            weft_n(1, "weft-1 EWMA on", &on),
            weft_n(1, "weft-1 EWMA off", &off),
            tor("tor EWMA on", &on),
            tor("tor EWMA off", &off),
        ]
    } else {
        vec![
            weft("weft EWMA on", &["CircuitPriorityHalflife 30"]),
            weft("weft EWMA off", &["CircuitPriorityHalflife 0"]),
            weft(
                "weft EWMA on, KIST off",
                &["CircuitPriorityHalflife 30", "Schedulers Vanilla"],
            ),
            tor("tor EWMA on", &["CircuitPriorityHalflife 30"]),
            tor("tor EWMA off", &["CircuitPriorityHalflife 0"]),
        ]
    };
    let labels: Vec<String> = kinds.iter().map(TargetKind::label).collect();
    let kinds: Vec<TargetKind> = kinds
        .into_iter()
        .filter(|k| only.as_ref().is_none_or(|o| k.label().contains(o.as_str())))
        .collect();
    if kinds.is_empty() {
        anyhow::bail!(
            "--only {:?}: no target's label contains it (labels: {})",
            only.unwrap_or_default(),
            labels.join(", ")
        );
    }
    let mut runs = Vec::new();
    for k in kinds {
        runs.push(run::run(&env, &p, k, floor.as_ref())?);
    }
    let md = report::priority_markdown(&runs);
    let cmp = report::Comparison {
        date: stamp.to_string(),
        command: command_line(),
        machine: report::Machine::read(),
        tor_version: report::tor_version(&env),
        floor_ms: floor.as_ref().map(run::Percentiles::from_hist),
        table: report::table(&runs),
        runs,
        projection: None,
        paired: None,
        worker_pairs: None,
    };
    let (path, pngs) = report::save_comparison(
        &opts.results,
        date,
        if cpu_bound.is_some() {
            "priority-cpu"
        } else {
            "priority"
        },
        opts.tag.as_deref(),
        &cmp,
        &md,
        opts.no_plots,
    )?;
    // The section's first line and the procedure's start, both modes.
    let head = format!(
        "Measured {stamp} on {} CPUs ({}), {}; command:\n\n    {}\n\nProcedure: {} connections × {} circuits ({} web, {} bulk per connection), ",
        cmp.machine.cpus,
        cmp.machine.model,
        cmp.tor_version,
        cmp.command,
        p.connections,
        p.circuits,
        p.web_circuits,
        p.circuits - p.web_circuits,
    );
    if let (false, Some(cap)) = (no_perf_md, cpu_bound) {
        let mut section = format!(
            "{head}bulk both ways; the target capped at {cap} CPU (cgroup `cpu.max`: its CPU, not a link, is the bottleneck), no read-rate limit; bulk circuits keep {} cells in flight; web circuits fetch {} KB after exponential think times (mean {} ms); warm-up {} s, measured {} s; target on CPUs {}, load on CPUs {}.\n\n",
            p.window,
            fetch_kb,
            think_ms,
            p.warmup_s,
            p.duration_s,
            p.target_cpus,
            p.load_cpus,
        );
        section.push_str(&md);
        section.push_str(&format!("\nRaw data: `{}`.\n", path.display()));
        report::update_perf_md(&repo_root().join("docs/perf.md"), "priority-cpu", &section)?;
        println!("updated docs/perf.md");
    } else if !no_perf_md {
        let mut section = format!(
            "{head}downstream only; {}; bulk circuits keep {} cells in flight; web circuits fetch {} KB after exponential think times (mean {} ms); warm-up {} s, measured {} s; target on CPUs {}, no CPU cap.\n\n",
            if rate_kib_s > 0 {
                format!("the target's BandwidthRate = BandwidthBurst = {rate_kib_s} KiB/s (the bottleneck, so cells queue inside the target between token refills), generator read rate {read_kib_s} KiB/s (0: unlimited)")
            } else {
                format!("no BandwidthRate on the target; each generator connection reads at most {read_kib_s} KiB/s (the slow client-side link that is the bottleneck, so cells queue inside the target)")
            },
            p.window,
            fetch_kb,
            think_ms,
            p.warmup_s,
            p.duration_s,
            p.target_cpus
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
        report::update_perf_md(&repo_root().join("docs/perf.md"), "priority", &section)?;
        println!("updated docs/perf.md");
    }
    Ok(())
}
