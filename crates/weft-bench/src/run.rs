//! One measured run: make the load identities, start the target, start the
//! load threads, walk through the phases (build circuits → warm-up →
//! measure → stop), sample throughput every 500 ms and the target's CPU per
//! thread, and reduce everything to a [`RunResult`].

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Result};
use hdrhistogram::Histogram;
use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode, SslVersion};
use serde::Serialize;
use weft_crypto::keys::{LinkKeys, RelayKeys};
use weft_proto::circuit::HandshakeKeys;
use weft_proto::link::LinkIdentity;
use weft_proto::origin::HopTarget;

use crate::load::{self, Counters, Identity, LoadConfig, Shared, SinkSpec, ThreadReport};
use crate::target::{cpu_delta, Target, TargetKind, TargetSpec, ThreadCpu};

/// Bytes of one cell on the wire (link protocol ≥ 4), the unit of "bytes
/// relayed" (TLS framing excluded).
pub const CELL_BYTES: u64 = 514;
/// Throughput sampling period.
pub const SAMPLE: Duration = Duration::from_millis(500);

/// The load and the measurement procedure, identical for every target.
#[derive(Debug, Clone, Serialize)]
pub struct Procedure {
    /// Generator connections (M).
    pub connections: usize,
    /// Circuits per connection (C).
    pub circuits: usize,
    /// Sink identities (the target opens one connection to each).
    pub sinks: usize,
    /// Load threads.
    pub load_threads: usize,
    /// Cells in flight per circuit and direction.
    pub window: u64,
    /// Cells per transfer (TTFB/TTLB unit).
    pub transfer_cells: u64,
    /// "up", "down" or "both".
    pub direction: String,
    /// Every n-th cell is stamped (node-based delay).
    pub mark_every: u64,
    /// Warm-up discarded, seconds.
    pub warmup_s: f64,
    /// Measured time, seconds.
    pub duration_s: f64,
    /// Moving-average window for max sustained throughput, seconds.
    pub window_s: f64,
    /// Target CPUs (taskset -c).
    pub target_cpus: String,
    /// Load CPUs.
    pub load_cpus: String,
    /// Target CPU quota in CPUs (cgroup), if any.
    pub cpu_quota: Option<f64>,
    /// Web (interactive) circuits per connection (priority scenario).
    #[serde(default)]
    pub web_circuits: usize,
    /// Cells per web fetch.
    #[serde(default)]
    pub web_cells: u64,
    /// Mean think time between fetches, ms.
    #[serde(default)]
    pub web_think_ms: u64,
    /// Read rate limit per generator connection, bytes/s.
    #[serde(default)]
    pub read_rate: Option<u64>,
    /// Report a bulk circuit into which nothing arrived (in a direction
    /// that sends) for this many seconds before the load stopped, as an
    /// error (the soak: a circuit that stalls loses no stamp).
    #[serde(default)]
    pub stall_after_s: Option<f64>,
    /// Spread each connection's circuits over all sinks (see
    /// `LoadConfig::spread`): with N workers about (N − 1)/N of the cells
    /// cross workers, as on a real relay.
    #[serde(default)]
    pub spread: bool,
    /// Circuits run CGO at the target (see `LoadConfig::cgo`).
    #[serde(default)]
    pub cgo: bool,
}

impl Procedure {
    /// The standard saturation procedure with these sizes (each
    /// connection's circuits to its own sink; the CLI spreads them).
    #[allow(clippy::too_many_arguments)]
    pub fn saturation(
        connections: usize,
        circuits: usize,
        window: u64,
        transfer_cells: u64,
        warmup_s: f64,
        duration_s: f64,
        window_s: f64,
    ) -> Self {
        Procedure {
            connections,
            circuits,
            sinks: connections,
            load_threads: 1,
            window,
            transfer_cells,
            direction: "both".into(),
            mark_every: 32,
            warmup_s,
            duration_s,
            window_s,
            target_cpus: String::new(),
            load_cpus: String::new(),
            cpu_quota: None,
            web_circuits: 0,
            web_cells: 0,
            web_think_ms: 0,
            read_rate: None,
            stall_after_s: None,
            spread: false,
            cgo: false,
        }
    }
}

/// Percentiles of a sample set, in milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th.
    pub p90: f64,
    /// 99th.
    pub p99: f64,
    /// 99.9th.
    pub p999: f64,
    /// Maximum.
    pub max: f64,
}

impl Percentiles {
    /// From a nanosecond histogram.
    pub fn from_hist(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        let ms = |v: u64| v as f64 / 1e6;
        Percentiles {
            count: h.len(),
            mean: h.mean() / 1e6,
            p50: ms(h.value_at_quantile(0.5)),
            p90: ms(h.value_at_quantile(0.9)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
        }
    }

    /// From millisecond samples.
    pub fn from_ms(v: &[f64]) -> Self {
        let mut h = Histogram::<u64>::new_with_bounds(1_000, 1_000_000_000_000, 3).expect("bounds");
        for &x in v {
            let _ = h.record(((x * 1e6) as u64).max(1_000));
        }
        Self::from_hist(&h)
    }
}

/// CDF points (value in ms, cumulative fraction), at most ~200.
pub fn cdf_hist(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    (0..=200)
        .map(|i| {
            let q = i as f64 / 200.0;
            (h.value_at_quantile(q) as f64 / 1e6, q)
        })
        .collect()
}

/// CDF points of millisecond samples.
pub fn cdf_ms(v: &[f64]) -> Vec<(f64, f64)> {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    if s.is_empty() {
        return Vec::new();
    }
    let n = s.len();
    let step = (n / 200).max(1);
    let mut out: Vec<(f64, f64)> = (0..n)
        .step_by(step)
        .map(|i| (s[i], (i + 1) as f64 / n as f64))
        .collect();
    out.push((s[n - 1], 1.0));
    out
}

/// One throughput sample.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Seconds since data started.
    pub t_s: f64,
    /// Upstream bytes/s (at the sinks).
    pub up: f64,
    /// Downstream bytes/s (at the generators).
    pub down: f64,
    /// Both.
    pub total: f64,
    /// Target CPU utilisation in this interval (CPUs).
    pub target_cpu: f64,
}

/// Everything measured in one run.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// `tor`, `weft-1`, ...
    pub label: String,
    /// The target.
    pub target: TargetKind,
    /// How it was started.
    pub target_command: String,
    /// The procedure.
    pub procedure: Procedure,
    /// Samples every 500 ms from the start of data.
    pub samples: Vec<Sample>,
    /// Max of the moving average (window_s) over the measured samples, B/s.
    pub max_sustained_bytes_per_s: f64,
    /// Mean over the measured time, B/s.
    pub mean_bytes_per_s: f64,
    /// Cells relayed in the measured time (both directions).
    pub cells_relayed: u64,
    /// `cells_relayed` × 514.
    pub bytes_relayed: u64,
    /// Target CPU seconds in the measured time.
    pub target_cpu_s: f64,
    /// CPU-seconds per GiB relayed.
    pub cpu_s_per_gib: f64,
    /// Share of the target's CPU used by its main thread.
    pub main_thread_share: f64,
    /// Per-thread CPU in the measured time.
    pub target_threads: Vec<ThreadCpu>,
    /// Busiest load thread's CPU fraction in the measured time.
    pub load_busy: f64,
    /// The load side was the bottleneck (busy ≥ 0.9 while the target was
    /// below its cap): throughput is a lower bound for the target.
    pub load_saturated: bool,
    /// Time to first byte per transfer.
    pub ttfb_ms: Percentiles,
    /// Time to last byte per transfer.
    pub ttlb_ms: Percentiles,
    /// Node-based delay (stamp to arrival, loopback floor included), up.
    pub delay_up_ms: Percentiles,
    /// Same, down.
    pub delay_down_ms: Percentiles,
    /// Loopback floor (same measurement without the target), if measured.
    pub floor_ms: Option<Percentiles>,
    /// Delay inside the target: delay minus floor, p50 and p99 (both
    /// directions pooled).
    pub in_target_p50_ms: Option<f64>,
    /// See `in_target_p50_ms`.
    pub in_target_p99_ms: Option<f64>,
    /// CDFs (ms, fraction).
    pub cdf_ttfb: Vec<(f64, f64)>,
    /// CDF of TTLB.
    pub cdf_ttlb: Vec<(f64, f64)>,
    /// CDF of node delay (both directions).
    pub cdf_delay: Vec<(f64, f64)>,
    /// CDF of the floor.
    pub cdf_floor: Vec<(f64, f64)>,
    /// Circuit build times.
    pub build_ms: Percentiles,
    /// Web fetches (priority scenario): request to last cell.
    pub web_ttlb_ms: Percentiles,
    /// CDF of web TTLB.
    pub cdf_web_ttlb: Vec<(f64, f64)>,
    /// Bulk circuits' downstream throughput in the measured time, B/s.
    pub bulk_bytes_per_s: f64,
    /// What weft itself reported on its MetricsPort over the measured time
    /// (weft targets only).
    pub relay_metrics: Option<crate::metrics::RelayMetrics>,
    /// Circuits requested / ready / failed.
    pub circuits: (usize, u64, u64),
    /// Marked cells that arrived damaged or out of order.
    pub corrupt_cells: u64,
    /// Whole-run cell totals (warm-up included), for checking against the
    /// target's own counters.
    pub totals: Totals,
    /// RSS before any load, after the circuits were built, at the end.
    pub rss_bytes: (u64, u64, u64),
    /// (RSS after circuits − RSS before) / circuits.
    pub rss_per_circuit_bytes: f64,
    /// First errors.
    pub errors: Vec<String>,
}

/// Cells sent and received over the whole run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    /// Sent by generators.
    pub up_sent: u64,
    /// Received by sinks.
    pub up_received: u64,
    /// Sent by sinks.
    pub down_sent: u64,
    /// Received by generators.
    pub down_received: u64,
}

/// Bench-wide settings.
#[derive(Debug, Clone)]
pub struct BenchEnv {
    /// Working directory (targets, keys).
    pub dir: PathBuf,
    /// weft binary.
    pub weft_bin: PathBuf,
    /// tor binary.
    pub tor_bin: PathBuf,
}

/// A free TCP port on 127.0.0.1, outside the kernel's ephemeral range
/// ([`weft_testnet::free_port`]: a sink picked from that range was once
/// taken by an outgoing connection before the load bound it).
pub fn free_port() -> Result<u16> {
    weft_testnet::free_port()
}

fn parse_cpus(s: &str) -> Vec<usize> {
    let mut v = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        if let Some((a, b)) = part.split_once('-') {
            if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
                v.extend(a..=b);
            }
        } else if let Ok(c) = part.parse() {
            v.push(c);
        }
    }
    v
}

/// Make (or reuse) a relay identity for the load side under `dir`.
pub fn identity(dir: &Path, nickname: &str) -> Result<Identity> {
    let now = SystemTime::now();
    let keys = RelayKeys::load_or_create(dir, nickname, Duration::from_secs(28 * 86400), now)?;
    let link = LinkKeys::generate(&keys, now)?;
    let (acceptor, _) = weft_relay::tls::contexts(&link)?;
    let mut c = SslConnector::builder(SslMethod::tls_client())?;
    c.set_min_proto_version(Some(SslVersion::TLS1_2))?;
    c.set_verify(SslVerifyMode::NONE);
    // AES-128-GCM: the cheapest suite both targets accept, so the load side
    // spends as little as possible per byte.
    c.set_ciphersuites("TLS_AES_128_GCM_SHA256")?;
    Ok(Identity {
        link: Arc::new(LinkIdentity::from_keys(&keys, &link)),
        handshake: HandshakeKeys {
            rsa_fp: keys.fingerprint,
            ed_id: keys.ed_id,
            ntor: keys.ntor_keys(),
        },
        acceptor,
        connector: c.build(),
    })
}

fn sink_spec(dir: &Path, i: usize) -> Result<SinkSpec> {
    let ident = identity(&dir.join(format!("sink{i}")), &format!("benchSink{i}"))?;
    let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, free_port()?);
    let hop = HopTarget {
        rsa_id: ident.handshake.rsa_fp,
        ed_id: Some(ident.handshake.ed_id),
        ntor_key: ident.handshake.ntor[0].public.to_bytes(),
        addr: addr.into(),
    };
    Ok(SinkSpec { ident, addr, hop })
}

/// What one load thread runs: generators (with their local sink index) and
/// sinks.
type ThreadLoad = (Vec<(Identity, usize)>, Vec<SinkSpec>);

/// The load threads of one run and their live counters.
pub struct LoadRun {
    shared: Arc<Shared>,
    /// Live counters, one per load thread.
    pub counters: Vec<Arc<Counters>>,
    threads: Vec<std::thread::JoinHandle<Result<ThreadReport>>>,
}

impl LoadRun {
    /// Start the load against `target` (None: generators talk to the sinks
    /// directly). `cfg_over` replaces (connections, circuits, window) with
    /// one sink and one thread (the floor measurement).
    pub fn start(
        env: &BenchEnv,
        p: &Procedure,
        target: Option<HopTarget>,
        cfg_over: Option<(usize, usize, u64)>,
    ) -> Result<LoadRun> {
        let (m, c, window) = cfg_over.unwrap_or((p.connections, p.circuits, p.window));
        let s = if cfg_over.is_some() { 1 } else { p.sinks };
        let k = if cfg_over.is_some() {
            1
        } else {
            p.load_threads.max(1)
        };
        if s == 0 || m % s != 0 || s % k != 0 {
            bail!("need connections ({m}) a multiple of sinks ({s}), and sinks a multiple of load threads ({k})");
        }
        let keys = env.dir.join("keys");
        let cfg = LoadConfig {
            target,
            circuits: c,
            window,
            transfer_cells: p.transfer_cells.max(1),
            up: p.direction != "down",
            down: p.direction != "up",
            mark_every: p.mark_every.max(1),
            cpus: parse_cpus(&p.load_cpus),
            web_circuits: if cfg_over.is_some() {
                0
            } else {
                p.web_circuits
            },
            web_cells: p.web_cells.max(1),
            web_think_ms: p.web_think_ms,
            read_rate: if cfg_over.is_some() {
                None
            } else {
                p.read_rate
            },
            stall_after: p.stall_after_s.map(Duration::from_secs_f64),
            spread: p.spread && cfg_over.is_none(),
            cgo: p.cgo,
        };
        let shared = Arc::new(Shared::default());
        let epoch = Instant::now();
        let mut per_thread: Vec<ThreadLoad> = (0..k).map(|_| (Vec::new(), Vec::new())).collect();
        let mut local_sink = Vec::with_capacity(s);
        for i in 0..s {
            let t = i % k;
            local_sink.push(per_thread[t].1.len());
            per_thread[t].1.push(sink_spec(&keys, i)?);
        }
        for i in 0..m {
            let ident = identity(&keys.join(format!("gen{i}")), &format!("benchGen{i}"))?;
            per_thread[i % k].0.push((ident, local_sink[i % s]));
        }
        let mut counters = Vec::new();
        let mut threads = Vec::new();
        for (i, (gens, sinks)) in per_thread.into_iter().enumerate() {
            let cnt = Arc::new(Counters::default());
            counters.push(cnt.clone());
            let sh = shared.clone();
            let cfg = cfg.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("bench-load-{i}"))
                    .spawn(move || load::run_thread(&cfg, &sh, &cnt, gens, sinks, epoch))?,
            );
        }
        Ok(LoadRun {
            shared,
            counters,
            threads,
        })
    }

    /// True if a load thread has ended (before the stop phase that is
    /// only on an error, such as a sink port it could not bind).
    pub fn a_thread_ended(&self) -> bool {
        self.threads.iter().any(|t| t.is_finished())
    }

    /// Sum a counter over the load threads.
    pub fn sum(&self, f: impl Fn(&Counters) -> u64) -> u64 {
        self.counters.iter().map(|c| f(c)).sum()
    }

    /// Move every load thread to phase `p` (load::PHASE_*).
    pub fn set_phase(&self, p: u8) {
        self.shared.phase.store(p, Ordering::Relaxed);
    }

    /// Stop the load threads and collect their reports.
    pub fn finish(self) -> Result<Vec<ThreadReport>> {
        self.set_phase(load::PHASE_STOP);
        let mut out = Vec::new();
        for t in self.threads {
            out.push(
                t.join()
                    .map_err(|_| anyhow::anyhow!("load thread panicked"))??,
            );
        }
        Ok(out)
    }
}

/// Measure the loopback floor: generator → sink directly, one circuit, a
/// small window, both directions, for `secs`.
pub fn measure_floor(env: &BenchEnv, p: &Procedure, secs: f64) -> Result<Histogram<u64>> {
    let mut fp = p.clone();
    fp.direction = "both".into();
    let run = LoadRun::start(env, &fp, None, Some((1, 1, 4)))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while run.sum(|c| c.circuits_ready.load(Ordering::Relaxed)) < 1 {
        if Instant::now() > deadline || run.sum(|c| c.circuits_failed.load(Ordering::Relaxed)) > 0 {
            let r = run.finish()?;
            bail!(
                "floor circuit did not build: {:?}",
                r.iter().flat_map(|r| r.errors.clone()).collect::<Vec<_>>()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    run.set_phase(load::PHASE_RUN);
    std::thread::sleep(Duration::from_millis(500));
    run.set_phase(load::PHASE_MEASURE);
    std::thread::sleep(Duration::from_secs_f64(secs));
    let reports = run.finish()?;
    let mut h = Histogram::<u64>::new_with_bounds(1_000, 100_000_000_000, 3)?;
    for r in &reports {
        h.add(&r.delay_up)?;
        h.add(&r.delay_down)?;
    }
    Ok(h)
}

/// One run against one target.
pub fn run(
    env: &BenchEnv,
    p: &Procedure,
    kind: TargetKind,
    floor: Option<&Histogram<u64>>,
) -> Result<RunResult> {
    let label = kind.label();
    eprintln!("[{label}] starting target");
    let mut target = Target::start(TargetSpec {
        kind: kind.clone(),
        weft_bin: env.weft_bin.clone(),
        tor_bin: env.tor_bin.clone(),
        dir: env.dir.join(format!("target-{label}")),
        port: free_port()?,
        cpus: p.target_cpus.clone(),
        cpu_quota: p.cpu_quota,
        metrics_port: free_port()?,
    })?;
    std::thread::sleep(Duration::from_millis(500));
    let rss0 = target.rss_bytes();
    let load = LoadRun::start(env, p, Some(target.hop.clone()), None)?;
    let want = (p.connections * p.circuits) as u64;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let ready = load.sum(|c| c.circuits_ready.load(Ordering::Relaxed));
        let failed = load.sum(|c| c.circuits_failed.load(Ordering::Relaxed));
        if ready + failed >= want {
            break;
        }
        if load.a_thread_ended() {
            // Its error is what finish() returns below.
            eprintln!("[{label}] a load thread stopped with {ready} of {want} circuits built");
            break;
        }
        if Instant::now() > deadline {
            eprintln!("[{label}] only {ready} of {want} circuits built after 120 s; going on");
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let built = load.sum(|c| c.circuits_ready.load(Ordering::Relaxed));
    if built == 0 {
        let reports = load.finish()?;
        let errors: Vec<String> = reports.into_iter().flat_map(|r| r.errors).collect();
        bail!(
            "[{label}] no circuit could be built: {errors:?}\n--- target log ---\n{}",
            std::fs::read_to_string(target.log_path()).unwrap_or_default()
        );
    }
    std::thread::sleep(Duration::from_millis(500));
    let rss1 = target.rss_bytes();
    eprintln!(
        "[{label}] {built}/{want} circuits built; warm-up {:.0} s, measuring {:.0} s",
        p.warmup_s, p.duration_s
    );

    let t0 = Instant::now();
    load.set_phase(load::PHASE_RUN);
    let mut samples = Vec::new();
    let mut last = (0u64, 0u64, t0, total_cpu(&target.thread_cpu()));
    let mut measure_start: Option<(Instant, u64, Vec<ThreadCpu>, Vec<u64>)> = None;
    let mut metrics_start: Option<crate::metrics::Scrape> = None;
    let end = t0 + Duration::from_secs_f64(p.warmup_s + p.duration_s);
    while Instant::now() < end {
        std::thread::sleep(
            SAMPLE
                .saturating_sub(last.2.elapsed())
                .max(Duration::from_millis(1)),
        );
        if measure_start.is_none() && t0.elapsed().as_secs_f64() >= p.warmup_s {
            load.set_phase(load::PHASE_MEASURE);
            let cells = load
                .sum(|c| c.up_cells.load(Ordering::Relaxed) + c.down_cells.load(Ordering::Relaxed));
            let lcpu = load
                .counters
                .iter()
                .map(|c| c.cpu_ns.load(Ordering::Relaxed))
                .collect();
            measure_start = Some((Instant::now(), cells, target.thread_cpu(), lcpu));
            metrics_start = target
                .metrics_port
                .and_then(|port| crate::metrics::scrape(port, &target.metrics_token).ok());
        }
        let up = load.sum(|c| c.up_cells.load(Ordering::Relaxed));
        let down = load.sum(|c| c.down_cells.load(Ordering::Relaxed));
        let now = Instant::now();
        let cpu = total_cpu(&target.thread_cpu());
        let dt = (now - last.2).as_secs_f64().max(1e-6);
        let (u, d) = (
            (up - last.0) as f64 * CELL_BYTES as f64 / dt,
            (down - last.1) as f64 * CELL_BYTES as f64 / dt,
        );
        samples.push(Sample {
            t_s: (now - t0).as_secs_f64(),
            up: u,
            down: d,
            total: u + d,
            target_cpu: (cpu - last.3) / dt,
        });
        last = (up, down, now, cpu);
    }
    let (ms_t, ms_cells, ms_cpu, ms_lcpu) =
        measure_start.unwrap_or((t0, 0, target.thread_cpu(), vec![0; load.counters.len()]));
    let cells_end =
        load.sum(|c| c.up_cells.load(Ordering::Relaxed) + c.down_cells.load(Ordering::Relaxed));
    let cpu_end = target.thread_cpu();
    let wall = ms_t.elapsed().as_secs_f64().max(1e-6);
    let lcpu_end: Vec<u64> = load
        .counters
        .iter()
        .map(|c| c.cpu_ns.load(Ordering::Relaxed))
        .collect();
    let corrupt = load.sum(|c| c.corrupt.load(Ordering::Relaxed));
    let counters = load.counters.clone();
    let failed = load.sum(|c| c.circuits_failed.load(Ordering::Relaxed));
    let rss2 = target.rss_bytes();
    let metrics_end = target
        .metrics_port
        .and_then(|port| crate::metrics::scrape(port, &target.metrics_token).ok());
    let reports = load.finish()?;
    // Threads have stopped: the counters are final and consistent.
    let sum = |f: &dyn Fn(&Counters) -> u64| counters.iter().map(|c| f(c)).sum::<u64>();
    let totals = Totals {
        up_sent: sum(&|c| c.up_sent.load(Ordering::Relaxed)),
        up_received: sum(&|c| c.up_cells.load(Ordering::Relaxed)),
        down_sent: sum(&|c| c.down_sent.load(Ordering::Relaxed)),
        down_received: sum(&|c| c.down_cells.load(Ordering::Relaxed)),
    };
    target.stop()?;

    let threads = cpu_delta(&ms_cpu, &cpu_end);
    let target_cpu_s: f64 = threads.iter().map(|t| t.cpu_s).sum();
    let main_cpu: f64 = threads.iter().filter(|t| t.main).map(|t| t.cpu_s).sum();
    let cells = cells_end - ms_cells;
    let bytes = cells * CELL_BYTES;
    let load_busy = ms_lcpu
        .iter()
        .zip(&lcpu_end)
        .map(|(a, b)| (b - a) as f64 / 1e9 / wall)
        .fold(0.0, f64::max);
    let target_util = target_cpu_s / wall;
    let cap = p
        .cpu_quota
        .unwrap_or(f64::INFINITY)
        .min(parse_cpus(&p.target_cpus).len().max(1) as f64);
    let mut h_up = Histogram::<u64>::new_with_bounds(1_000, 100_000_000_000, 3)?;
    let mut h_down = h_up.clone();
    let (mut ttfb, mut ttlb, mut build, mut errors) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut web, mut bulk_cells) = (Vec::new(), 0u64);
    for r in reports {
        web.extend(r.web_ttlb_ms);
        bulk_cells += r.bulk_cells_measured;
        h_up.add(&r.delay_up)?;
        h_down.add(&r.delay_down)?;
        ttfb.extend(r.ttfb_ms);
        ttlb.extend(r.ttlb_ms);
        build.extend(r.build_ms);
        errors.extend(r.errors);
    }
    let mut h_all = h_up.clone();
    h_all.add(&h_down)?;
    let measured: Vec<&Sample> = samples.iter().filter(|s| s.t_s > p.warmup_s).collect();
    let per_window = ((p.window_s / SAMPLE.as_secs_f64()).round() as usize).max(1);
    let max_sustained = if measured.len() >= per_window {
        measured
            .windows(per_window)
            .map(|w| w.iter().map(|s| s.total).sum::<f64>() / per_window as f64)
            .fold(0.0, f64::max)
    } else {
        measured.iter().map(|s| s.total).sum::<f64>() / measured.len().max(1) as f64
    };
    let floor_p = floor.map(Percentiles::from_hist);
    let res = RunResult {
        label: label.clone(),
        target: kind,
        target_command: target.command.clone(),
        procedure: p.clone(),
        max_sustained_bytes_per_s: max_sustained,
        mean_bytes_per_s: bytes as f64 / wall,
        cells_relayed: cells,
        bytes_relayed: bytes,
        target_cpu_s,
        cpu_s_per_gib: if bytes > 0 {
            target_cpu_s / (bytes as f64 / (1u64 << 30) as f64)
        } else {
            f64::NAN
        },
        main_thread_share: if target_cpu_s > 0.0 {
            main_cpu / target_cpu_s
        } else {
            0.0
        },
        target_threads: threads,
        load_busy,
        load_saturated: load_busy >= 0.9 && target_util < 0.9 * cap,
        ttfb_ms: Percentiles::from_ms(&ttfb),
        ttlb_ms: Percentiles::from_ms(&ttlb),
        delay_up_ms: Percentiles::from_hist(&h_up),
        delay_down_ms: Percentiles::from_hist(&h_down),
        in_target_p50_ms: floor_p
            .as_ref()
            .map(|f| (Percentiles::from_hist(&h_all).p50 - f.p50).max(0.0)),
        in_target_p99_ms: floor_p
            .as_ref()
            .map(|f| (Percentiles::from_hist(&h_all).p99 - f.p50).max(0.0)),
        floor_ms: floor_p,
        cdf_ttfb: cdf_ms(&ttfb),
        cdf_ttlb: cdf_ms(&ttlb),
        cdf_delay: cdf_hist(&h_all),
        cdf_floor: floor.map(cdf_hist).unwrap_or_default(),
        build_ms: Percentiles::from_ms(&build),
        web_ttlb_ms: Percentiles::from_ms(&web),
        cdf_web_ttlb: cdf_ms(&web),
        bulk_bytes_per_s: bulk_cells as f64 * CELL_BYTES as f64 / wall,
        relay_metrics: match (&metrics_start, &metrics_end) {
            (Some(a), Some(b)) => Some(crate::metrics::RelayMetrics::between(a, b)),
            _ => None,
        },
        circuits: (p.connections * p.circuits, built, failed),
        corrupt_cells: corrupt,
        totals,
        rss_bytes: (rss0, rss1, rss2),
        rss_per_circuit_bytes: rss1.saturating_sub(rss0) as f64 / built.max(1) as f64,
        samples,
        errors,
    };
    eprintln!(
        "[{label}] {:.1} MiB/s max sustained, {:.1} CPU-s/GiB, main thread {:.1}% of CPU, load busy {:.0}%{}",
        res.max_sustained_bytes_per_s / (1 << 20) as f64,
        res.cpu_s_per_gib,
        res.main_thread_share * 100.0,
        res.load_busy * 100.0,
        if res.load_saturated { " (LOAD SATURATED: lower bound)" } else { "" }
    );
    if let Some(m) = res.relay_metrics.as_ref().filter(|m| m.cells > 0.0) {
        eprintln!(
            "[{label}] weft: {:.1}% of {:.0} cells crossed workers; {:.1} cells per round, {:.2} wake-ups per 1000 cells",
            m.cross_cells / m.cells * 100.0,
            m.cells,
            m.cells / m.rounds.max(1.0),
            m.wakeups / m.cells * 1000.0
        );
    }
    Ok(res)
}

fn total_cpu(t: &[ThreadCpu]) -> f64 {
    t.iter().map(|t| t.cpu_s).sum()
}

/// The default bench working directory.
pub fn default_dir() -> PathBuf {
    std::env::temp_dir().join(format!("weft-bench-{}", std::process::id()))
}
