//! Writing results: one JSON per run or comparison, PNG plots (drawn by
//! `bench/plot.py` with matplotlib, installed on demand), the comparison
//! table printed and placed in docs/perf.md between markers.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::run::RunResult;

/// Projected speed-up of weft at more cores from what one run measured
/// (Amdahl's law with a per-worker overhead):
///
/// * `s` — the serial fraction: the main thread's share of weft's CPU while
///   relaying (work that does not spread over workers);
/// * `δ` — the extra cost of a cell that crosses workers, from CPU-s/GiB
///   with 1 and 2 workers: c₂ = c₁·(1 + δ·f), δ = (c₂/c₁ − 1)/f, where
///   c₂/c₁ is the median weft-2 ÷ weft-1 of the alternating worker pairs
///   (else of the one weft-1 and weft-2 run) and `f` the share of weft-2's
///   cells that crossed workers (weft's own counter; the median over the
///   pairs). All of weft-2's extra cost is charged to crossing cells even
///   when it is not theirs (on one shared core, part of it is the two
///   workers' time-slicing). A load in which few cells cross cannot
///   measure δ (δ = noise/f swung to 2.65 at f = 0.05 in one run), so
///   below f = ¼ the ½ of random placement is used instead and the
///   projection says so; the default load spreads circuits so that about
///   half cross at 2 workers.
/// * with N workers, conservatively, (N−1)/N of the cells cross, so
///   cₙ = c₁·(1 + δ·(N−1)/N), and the speed-up over one worker is
///   S(N) = 1 / (s + (1 − s) · (cₙ/c₁) / N).
#[derive(Debug, Clone, Serialize)]
pub struct Projection {
    /// Serial fraction used.
    pub serial_fraction: f64,
    /// Cross-worker overhead per cell used (fraction of a cell's cost).
    pub cross_worker_overhead: f64,
    /// The share of weft-2's cells that crossed workers, as weft counted
    /// them (None if the relay did not say).
    pub measured_cross_share: Option<f64>,
    /// The share `f` used for δ (the measured one, or ½ below ¼).
    pub share_used: f64,
    /// weft-2 ÷ weft-1 CPU-s/GiB used for δ.
    pub cost_ratio: f64,
    /// Where `cost_ratio` comes from ("median of N alternating pairs" or
    /// "one run each").
    pub cost_ratio_from: String,
    /// (cores, projected speed-up over one worker).
    pub speedup: Vec<(usize, f64)>,
}

/// weft-1 and weft-2 measured in alternating pairs with the same load:
/// CPU-seconds per GiB, weft-2 ÷ weft-1 per pair, and the share of
/// weft-2's cells that crossed workers in each pair.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerPairs {
    /// weft-1's CPU-s/GiB in each pair.
    pub weft1_cpu_s_per_gib: Vec<f64>,
    /// weft-2's CPU-s/GiB in each pair.
    pub weft2_cpu_s_per_gib: Vec<f64>,
    /// Share of weft-2's cells that crossed workers, per pair (None when
    /// weft's MetricsPort could not be read after the run).
    pub cross_share: Vec<Option<f64>>,
    /// weft-2 ÷ weft-1 per pair.
    pub ratios: Vec<f64>,
    /// Median of `ratios`.
    pub median: f64,
    /// Largest of `ratios`.
    pub max: f64,
    /// Median of the known `cross_share` values.
    pub median_cross_share: f64,
}

/// The median of `v` (0 if empty).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => s[n / 2],
        _ => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// The share of a weft run's cells that crossed workers (weft's count).
pub fn cross_share(r: &RunResult) -> Option<f64> {
    r.relay_metrics
        .as_ref()
        .filter(|m| m.cells > 0.0)
        .map(|m| (m.cross_cells / m.cells).clamp(0.0, 1.0))
}

/// The worker pairs from `(weft-1, weft-2)` runs; None without a usable
/// pair.
pub fn worker_pairs(pairs: &[(&RunResult, &RunResult)]) -> Option<WorkerPairs> {
    let pairs: Vec<_> = pairs
        .iter()
        .filter(|(a, b)| a.cpu_s_per_gib > 0.0 && b.cpu_s_per_gib > 0.0)
        .collect();
    if pairs.is_empty() {
        return None;
    }
    let ratios: Vec<f64> = pairs
        .iter()
        .map(|(a, b)| b.cpu_s_per_gib / a.cpu_s_per_gib)
        .collect();
    let shares: Vec<Option<f64>> = pairs.iter().map(|(_, b)| cross_share(b)).collect();
    let known: Vec<f64> = shares.iter().flatten().copied().collect();
    Some(WorkerPairs {
        weft1_cpu_s_per_gib: pairs.iter().map(|p| p.0.cpu_s_per_gib).collect(),
        weft2_cpu_s_per_gib: pairs.iter().map(|p| p.1.cpu_s_per_gib).collect(),
        median: median(&ratios),
        max: ratios.iter().copied().fold(f64::MIN, f64::max),
        median_cross_share: median(&known),
        cross_share: shares,
        ratios,
    })
}

/// The worker pairs as Markdown.
pub fn worker_pairs_markdown(p: &WorkerPairs) -> String {
    let mut md = String::from(
        "weft-1 and weft-2 in alternating pairs (CPU-s/GiB; weft-2 ÷ weft-1; share of weft-2's cells that crossed workers):\n\n| pair | weft-1 | weft-2 | weft-2 ÷ weft-1 | crossed |\n|---|---|---|---|---|\n",
    );
    for (i, r) in p.ratios.iter().enumerate() {
        md.push_str(&format!(
            "| {} | {:.2} | {:.2} | {:.3} | {} |\n",
            i + 1,
            p.weft1_cpu_s_per_gib[i],
            p.weft2_cpu_s_per_gib[i],
            r,
            p.cross_share
                .get(i)
                .copied()
                .flatten()
                .map_or("–".to_string(), |f| format!("{:.1}%", f * 100.0))
        ));
    }
    md.push_str(&format!(
        "\nweft-2 costs {:.3}× weft-1 per GiB (median of {} pairs; largest {:.3}×) with {:.1}% of its cells crossing workers (median).\n",
        p.median,
        p.ratios.len(),
        p.max,
        p.median_cross_share * 100.0
    ));
    md
}

/// S(N) for serial fraction `s` and cross-worker overhead `delta`.
pub fn amdahl(n: usize, s: f64, delta: f64) -> f64 {
    let nf = n.max(1) as f64;
    let cn = 1.0 + delta * (nf - 1.0) / nf;
    1.0 / (s + (1.0 - s) * cn / nf)
}

/// Below this measured share of crossing cells, δ is computed with ½.
const MIN_SHARE_FOR_DELTA: f64 = 0.25;

/// (f, δ) from weft-2 ÷ weft-1 and the measured crossing share: f is the
/// share if at least ¼, else ½; δ = (ratio − 1)/f, not below 0.
pub fn delta_from(ratio: f64, measured: Option<f64>) -> (f64, f64) {
    let f = measured
        .filter(|f| *f >= MIN_SHARE_FOR_DELTA)
        .unwrap_or(0.5);
    (f, ((ratio - 1.0) / f).max(0.0))
}

/// The projection from the weft-1 and weft-2 runs (None without both),
/// with the cost ratio and crossing share of the worker pairs if any.
pub fn project(runs: &[RunResult], pairs: Option<&WorkerPairs>) -> Option<Projection> {
    let one = runs.iter().find(|r| r.label == "weft-1")?;
    let two = runs.iter().find(|r| r.label == "weft-2")?;
    let s = one
        .main_thread_share
        .max(two.main_thread_share)
        .clamp(0.0, 1.0);
    let (ratio, measured, from) = match pairs {
        Some(p) => (
            p.median,
            Some(p.median_cross_share),
            format!("median of {} alternating pairs", p.ratios.len()),
        ),
        None => (
            two.cpu_s_per_gib / one.cpu_s_per_gib,
            cross_share(two),
            "one run each".to_string(),
        ),
    };
    let (f, delta) = delta_from(ratio, measured);
    let speedup = [1usize, 2, 4, 8, 16]
        .iter()
        .map(|&n| (n, amdahl(n, s, delta)))
        .collect();
    Some(Projection {
        serial_fraction: s,
        cross_worker_overhead: delta,
        measured_cross_share: measured,
        share_used: f,
        cost_ratio: ratio,
        cost_ratio_from: from,
        speedup,
    })
}

/// The projection as Markdown.
pub fn projection_markdown(p: &Projection) -> String {
    let cols: Vec<String> = p
        .speedup
        .iter()
        .map(|(n, _)| format!("{n} cores"))
        .collect();
    let vals: Vec<String> = p.speedup.iter().map(|(_, v)| format!("{v:.2}×")).collect();
    format!(
        "Projected speed-up of weft over one worker (serial fraction s = {:.4} from the main thread's CPU share, cross-worker overhead δ = {:.3} of a cell's cost = (c₂/c₁ − 1)/f with c₂/c₁ = {:.3} (weft-2 ÷ weft-1 CPU-s/GiB, {}) and f = {:.3} (share of weft-2's cells that crossed workers, measured {}; ½ is used below ¼); at N workers (N−1)/N of the cells are assumed to cross; S(N) = 1 / (s + (1 − s)·(1 + δ·(N−1)/N)/N)):\n\n| {} |\n|{}|\n| {} |\n",
        p.serial_fraction,
        p.cross_worker_overhead,
        p.cost_ratio,
        p.cost_ratio_from,
        p.share_used,
        p.measured_cross_share
            .map_or("not reported".to_string(), |f| format!("{f:.3}")),
        cols.join(" | "),
        vec!["---"; cols.len()].join("|"),
        vals.join(" | ")
    )
}

/// Stock tor and weft-1 measured in alternating pairs: CPU-seconds per GiB
/// of each and tor's ÷ weft's per pair. Run-to-run noise on a shared VM is
/// ±20% and moves both targets alike when they run back to back, so the
/// per-pair ratio and its median are the figure to read, not one run.
#[derive(Debug, Clone, Serialize)]
pub struct PairedRatio {
    /// tor's CPU-s/GiB in each pair.
    pub tor_cpu_s_per_gib: Vec<f64>,
    /// weft-1's CPU-s/GiB in each pair.
    pub weft1_cpu_s_per_gib: Vec<f64>,
    /// tor ÷ weft-1 per pair.
    pub ratios: Vec<f64>,
    /// Median of `ratios`.
    pub median: f64,
    /// Smallest of `ratios`.
    pub min: f64,
}

/// The paired ratio of `(tor, weft-1)` CPU-s/GiB pairs; None without a
/// usable pair.
pub fn paired_ratio(pairs: &[(f64, f64)]) -> Option<PairedRatio> {
    let pairs: Vec<(f64, f64)> = pairs
        .iter()
        .copied()
        .filter(|(t, w)| *t > 0.0 && *w > 0.0)
        .collect();
    if pairs.is_empty() {
        return None;
    }
    let ratios: Vec<f64> = pairs.iter().map(|(t, w)| t / w).collect();
    let mut sorted = ratios.clone();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    Some(PairedRatio {
        tor_cpu_s_per_gib: pairs.iter().map(|p| p.0).collect(),
        weft1_cpu_s_per_gib: pairs.iter().map(|p| p.1).collect(),
        min: sorted[0],
        median,
        ratios,
    })
}

/// The paired ratio as Markdown.
pub fn paired_markdown(p: &PairedRatio) -> String {
    let mut md = String::from(
        "Stock tor and weft-1 in alternating pairs (CPU-s/GiB; tor ÷ weft-1):\n\n| pair | tor | weft-1 | tor ÷ weft-1 |\n|---|---|---|---|\n",
    );
    for (i, r) in p.ratios.iter().enumerate() {
        md.push_str(&format!(
            "| {} | {:.2} | {:.2} | {:.2}× |\n",
            i + 1,
            p.tor_cpu_s_per_gib[i],
            p.weft1_cpu_s_per_gib[i],
            r
        ));
    }
    md.push_str(&format!(
        "\nweft-1 costs {:.2}× less CPU per GiB than stock tor (median of {} pairs; smallest {:.2}×).\n",
        p.median,
        p.ratios.len(),
        p.min
    ));
    md
}

/// A comparison: every run with the same procedure, plus ratios.
#[derive(Debug, Serialize)]
pub struct Comparison {
    /// When (UTC).
    pub date: String,
    /// The exact command.
    pub command: String,
    /// Machine facts.
    pub machine: Machine,
    /// Tor version string.
    pub tor_version: String,
    /// The loopback floor of node delay (ms percentiles).
    pub floor_ms: Option<crate::run::Percentiles>,
    /// The runs, tor first.
    pub runs: Vec<RunResult>,
    /// Rows of the table.
    pub table: Vec<Row>,
    /// Projected speed-up at more cores (from weft-1 and weft-2).
    pub projection: Option<Projection>,
    /// Repeated tor / weft-1 pairs (compare's `--pairs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paired: Option<PairedRatio>,
    /// Repeated weft-1 / weft-2 pairs (compare's `--worker-pairs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_pairs: Option<WorkerPairs>,
}

/// One table row.
#[derive(Debug, Serialize)]
pub struct Row {
    /// Target label.
    pub target: String,
    /// MiB/s, max sustained.
    pub mib_s: f64,
    /// mib_s / tor's.
    pub throughput_ratio: f64,
    /// CPU-seconds per GiB.
    pub cpu_s_per_gib: f64,
    /// cpu_s_per_gib / tor's (lower is better).
    pub cpu_ratio: f64,
    /// Main thread's share of CPU.
    pub main_share: f64,
    /// In-target node delay p50 / p99, ms.
    pub delay_p50_ms: Option<f64>,
    /// See `delay_p50_ms`.
    pub delay_p99_ms: Option<f64>,
    /// TTLB median, ms.
    pub ttlb_p50_ms: f64,
    /// RSS per circuit, KiB.
    pub rss_per_circuit_kib: f64,
    /// Load thread busy fraction.
    pub load_busy: f64,
    /// Load saturated: lower bound.
    pub lower_bound: bool,
    /// Share of the relayed cells that crossed workers (weft's own count).
    pub cross_share: Option<f64>,
}

/// Facts about the machine.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// Online CPUs.
    pub cpus: usize,
    /// CPU model.
    pub model: String,
    /// Kernel.
    pub kernel: String,
}

impl Machine {
    /// Read from /proc.
    pub fn read() -> Machine {
        let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        Machine {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            model: info
                .lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
                .unwrap_or_default(),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_string(),
        }
    }
}

/// UTC date and time now, `YYYY-MM-DD` and `YYYY-MM-DDTHH:MM:SSZ`.
pub fn today() -> (String, String) {
    let now = time::OffsetDateTime::now_utc();
    let d = format!(
        "{:04}-{:02}-{:02}",
        now.year(),
        u8::from(now.month()),
        now.day()
    );
    let t = format!(
        "{d}T{:02}:{:02}:{:02}Z",
        now.hour(),
        now.minute(),
        now.second()
    );
    (d, t)
}

/// Build the table from runs (the first run labelled `tor` is the
/// reference; without one, ratios are against the first run).
pub fn table(runs: &[RunResult]) -> Vec<Row> {
    let reference = runs.iter().find(|r| r.label == "tor").or(runs.first());
    let (ref_mib, ref_cpu) = reference.map_or((1.0, 1.0), |r| {
        (r.max_sustained_bytes_per_s, r.cpu_s_per_gib)
    });
    runs.iter()
        .map(|r| Row {
            target: r.label.clone(),
            mib_s: r.max_sustained_bytes_per_s / (1 << 20) as f64,
            throughput_ratio: r.max_sustained_bytes_per_s / ref_mib,
            cpu_s_per_gib: r.cpu_s_per_gib,
            cpu_ratio: r.cpu_s_per_gib / ref_cpu,
            main_share: r.main_thread_share,
            delay_p50_ms: r.in_target_p50_ms,
            delay_p99_ms: r.in_target_p99_ms,
            ttlb_p50_ms: r.ttlb_ms.p50,
            rss_per_circuit_kib: r.rss_per_circuit_bytes / 1024.0,
            load_busy: r.load_busy,
            lower_bound: r.load_saturated,
            cross_share: r
                .relay_metrics
                .as_ref()
                .filter(|m| m.cells > 0.0)
                .map(|m| (m.cross_cells / m.cells).clamp(0.0, 1.0)),
        })
        .collect()
}

/// The table as Markdown.
pub fn markdown(rows: &[Row]) -> String {
    let mut s = String::from(
        "| target | max sustained MiB/s | × tor | CPU-s/GiB | × tor | main-thread CPU | in-relay delay p50 / p99 ms | TTLB p50 ms | RSS/circuit KiB | load busy | cells crossing workers |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let opt = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.2}"));
    for r in rows {
        let _ =
            writeln!(
            s,
            "| {} | {:.1}{} | {:.2} | {:.2} | {:.2} | {:.1}% | {} / {} | {:.1} | {:.1} | {:.0}% | {} |",
            r.target,
            r.mib_s,
            if r.lower_bound { " (≥, load-bound)" } else { "" },
            r.throughput_ratio,
            r.cpu_s_per_gib,
            r.cpu_ratio,
            r.main_share * 100.0,
            opt(r.delay_p50_ms),
            opt(r.delay_p99_ms),
            r.ttlb_p50_ms,
            r.rss_per_circuit_kib,
            r.load_busy * 100.0,
            r.cross_share
                .map_or("–".to_string(), |f| format!("{:.1}%", f * 100.0))
        );
    }
    s
}

/// The priority scenario's table: web fetch TTLB and bulk throughput per
/// target, with what weft itself measured (node delay, kernel send queue).
pub fn priority_markdown(runs: &[RunResult]) -> String {
    let mut s = String::from(
        "| target | web fetch TTLB p50 / p90 ms | fetches | bulk MiB/s | bulk node delay p50 / p99 ms (bench) | node delay p50 / p99 ms (weft's own) | kernel send queue p50 / p99 KiB (weft) |\n|---|---|---|---|---|---|---|\n",
    );
    for r in runs {
        let own = r.relay_metrics.as_ref().map_or("–".to_string(), |m| {
            format!("{:.2} / {:.2}", m.node_delay_p50_ms, m.node_delay_p99_ms)
        });
        let outq = r
            .relay_metrics
            .as_ref()
            .filter(|m| m.outq_samples > 0.0)
            .map_or("–".to_string(), |m| {
                format!(
                    "{:.1} / {:.1}",
                    m.outq_p50_bytes / 1024.0,
                    m.outq_p99_bytes / 1024.0
                )
            });
        let _ = writeln!(
            s,
            "| {} | {:.0} / {:.0} | {} | {:.1} | {:.1} / {:.1} | {own} | {outq} |",
            r.label,
            r.web_ttlb_ms.p50,
            r.web_ttlb_ms.p90,
            r.web_ttlb_ms.count,
            r.bulk_bytes_per_s / (1 << 20) as f64,
            r.delay_down_ms.p50,
            r.delay_down_ms.p99
        );
    }
    s
}

/// Write `value` as JSON to `path`, on one line: results are mostly long
/// arrays of samples, which indentation doubled in size (the committed
/// ones were compacted alike; `python3 -m json.tool` shows one indented).
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    let mut v = serde_json::to_vec(value)?;
    v.push(b'\n');
    std::fs::write(path, v).with_context(|| format!("writing {}", path.display()))
}

/// Save a comparison as `<results>/<date>-<kind>[-<tag>].json`, print its
/// Markdown and the path, and plot it unless `no_plots`; returns the JSON
/// path and the plots (for the perf.md section).
pub fn save_comparison(
    results: &Path,
    date: &str,
    kind: &str,
    tag: Option<&str>,
    cmp: &Comparison,
    md: &str,
    no_plots: bool,
) -> Result<(PathBuf, Vec<PathBuf>)> {
    let tag = tag.map(|t| format!("-{t}")).unwrap_or_default();
    let path = results.join(format!("{date}-{kind}{tag}.json"));
    write_json(&path, cmp)?;
    print!("{md}");
    println!("results: {}", path.display());
    let mut pngs = Vec::new();
    if !no_plots {
        pngs = plot(&crate::output::repo_root(), &path, &path.with_extension(""))?;
        for f in &pngs {
            println!("plot: {}", f.display());
        }
    }
    Ok((path, pngs))
}

fn have_matplotlib() -> bool {
    Command::new("python3")
        .args(["-c", "import matplotlib"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Make sure python3 has matplotlib, installing it from PyPI if missing.
pub fn ensure_matplotlib() -> Result<()> {
    if !have_matplotlib() {
        eprintln!("installing matplotlib (pip) for the plots");
        let pip = |extra: &[&str]| {
            Command::new("python3")
                .args(["-m", "pip", "install", "--quiet"])
                .args(extra)
                .arg("matplotlib")
                .status()
                .is_ok_and(|s| s.success())
        };
        // Debian marks its Python externally managed (PEP 668).
        if !pip(&[]) {
            pip(&["--break-system-packages"]);
        }
        if !have_matplotlib() {
            bail!(
                "matplotlib is not available; install it with `python3 -m pip install matplotlib`"
            );
        }
    }
    Ok(())
}

/// Draw the PNGs for a results JSON into `out_dir` with bench/plot.py,
/// installing matplotlib from PyPI if it is missing. Returns the files.
pub fn plot(repo: &Path, json: &Path, out_dir: &Path) -> Result<Vec<PathBuf>> {
    plot_with(repo, "bench/plot.py", json, out_dir)
}

/// Run the matplotlib script `script` (relative to `repo`) on `json` into
/// `out_dir`, installing matplotlib if it is missing; returns the files it
/// printed, one a line.
pub fn plot_with(repo: &Path, script: &str, json: &Path, out_dir: &Path) -> Result<Vec<PathBuf>> {
    ensure_matplotlib()?;
    std::fs::create_dir_all(out_dir)?;
    let o = Command::new("python3")
        .arg(repo.join(script))
        .arg(json)
        .arg(out_dir)
        .output()
        .with_context(|| format!("running {script}"))?;
    if !o.status.success() {
        bail!("{script} failed: {}", String::from_utf8_lossy(&o.stderr));
    }
    Ok(String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(PathBuf::from)
        .collect())
}

/// `tor --version`'s first line with the OpenSSL tor runs on, and the
/// OpenSSL this workspace (so weft built alongside) links.
pub fn tor_version(env: &crate::run::BenchEnv) -> String {
    let out = std::process::Command::new(&env.tor_bin)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let first = out.lines().next().unwrap_or("").trim_end_matches('.');
    let tor_ssl = out
        .split([',', ' '])
        .collect::<Vec<_>>()
        .windows(2)
        .find(|w| w[0] == "OpenSSL")
        .map(|w| format!("OpenSSL {}", w[1]))
        .unwrap_or_else(|| "OpenSSL unknown".into());
    format!(
        "{first} on {tor_ssl}; weft on {}",
        openssl::version::version()
    )
}

/// Put `section` between the markers `<!-- weft-bench {name}: begin
/// (generated) -->` and `<!-- weft-bench {name}: end -->` of `perf_md`
/// (appending them if they are missing).
pub fn update_perf_md(perf_md: &Path, name: &str, section: &str) -> Result<()> {
    let begin = format!("<!-- weft-bench {name}: begin (generated) -->");
    let end = format!("<!-- weft-bench {name}: end -->");
    let old =
        std::fs::read_to_string(perf_md).unwrap_or_else(|_| "# weft performance\n".to_string());
    let block = format!("{begin}\n{section}{end}");
    let new = match (old.find(&begin), old.find(&end)) {
        (Some(a), Some(b)) if b > a => format!("{}{}{}", &old[..a], block, &old[b + end.len()..]),
        _ => format!("{}\n{}\n", old.trim_end(), block),
    };
    std::fs::write(perf_md, new).with_context(|| format!("writing {}", perf_md.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amdahl_projection_by_hand() {
        // s = 0.01, δ = 0.1: S(4) = 1 / (0.01 + 0.99 · (1 + 0.1·3/4) / 4)
        // = 1 / (0.01 + 0.2660625) = 3.62237...
        assert!((amdahl(4, 0.01, 0.1) - 3.622_368_123_160_516).abs() < 1e-9);
        assert!(
            (amdahl(1, 0.3, 0.5) - 1.0).abs() < 1e-12,
            "one worker is the baseline"
        );
        // No serial part, no overhead: linear.
        assert!((amdahl(16, 0.0, 0.0) - 16.0).abs() < 1e-12);
    }
}

#[cfg(test)]
mod paired_tests {
    use super::*;

    #[test]
    fn paired_ratio_takes_the_median_per_pair() {
        let p = paired_ratio(&[(5.0, 2.5), (6.0, 2.0), (4.0, 2.5), (0.0, 1.0)]).unwrap();
        assert_eq!(p.ratios, vec![2.0, 3.0, 1.6]);
        assert_eq!(p.median, 2.0);
        assert_eq!(p.min, 1.6);
        let even = paired_ratio(&[(4.0, 2.0), (6.0, 2.0)]).unwrap();
        assert_eq!(even.median, 2.5);
        assert!(paired_ratio(&[]).is_none());
        assert!(paired_markdown(&p).contains("median of 3 pairs"));
    }

    #[test]
    fn delta_uses_the_measured_share_unless_too_few_cells_crossed() {
        // 6% dearer with 48% of the cells crossing: δ = 0.06 / 0.48.
        let (f, d) = delta_from(1.06, Some(0.48));
        assert_eq!(f, 0.48);
        assert!((d - 0.125).abs() < 1e-12);
        // All crossed (TestingCrossWorkerExtends): δ = the whole difference.
        assert!((delta_from(1.06, Some(1.0)).1 - 0.06).abs() < 1e-12);
        // Almost nothing crossed: ½ instead of dividing noise by 0.05.
        let (f, d) = delta_from(1.10, Some(0.05));
        assert_eq!(f, 0.5);
        assert!((d - 0.2).abs() < 1e-9);
        assert_eq!(delta_from(1.10, None).0, 0.5);
        // Cheaper with two workers: no negative overhead.
        assert_eq!(delta_from(0.97, Some(0.5)).1, 0.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
