//! Load balancing on a running weft (2 workers) under traffic from
//! weft-bench's generators and sinks:
//!
//! * **migration under traffic**: with `TestingMigrateEvery 1` the
//!   controller moves a random connection to the other worker every second
//!   while every cell on every circuit is a marked cell whose index and
//!   position in the AES-CTR keystream the far end checks. One lost,
//!   duplicated or reordered cell breaks every later cell of that circuit,
//!   so zero corrupt cells with many migrations means none happened.
//! * **skew**: every connection starts on worker 0 (`TestingPlaceOnWorker
//!   0`); two heavy connections (8 circuits each) and six light ones (one
//!   circuit each). The balancer must move connections until the two
//!   workers' CPU (from the MetricsPort, i.e. /proc per thread) is within
//!   20% of each other.

mod common;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use common::{free_port, WeftProcess};
use weft_bench::load::{PHASE_RUN, PHASE_STOP};
use weft_bench::run::{BenchEnv, LoadRun, Procedure};

fn scrape(port: u16, token: &str) -> Result<prometheus_parse::Scrape> {
    let (status, body) = common::scrape_metrics(port, Some(token))?;
    ensure!(status == 200, "MetricsPort answered {status}");
    common::parse_metrics(&body)
}

/// A per-worker family as a vector indexed by worker.
fn per_worker(s: &prometheus_parse::Scrape, name: &str) -> Vec<f64> {
    let mut v = vec![0.0; 2];
    for x in s.samples.iter().filter(|x| x.metric == name) {
        let w: usize = x
            .labels
            .get("worker")
            .and_then(|w| w.parse().ok())
            .unwrap_or(99);
        if let (
            Some(slot),
            prometheus_parse::Value::Counter(c) | prometheus_parse::Value::Gauge(c),
        ) = (v.get_mut(w), &x.value)
        {
            *slot = *c;
        }
    }
    v
}

struct Relay {
    weft: WeftProcess,
    metrics_port: u16,
    token: String,
    hop: weft_proto::origin::HopTarget,
}

fn start_relay(extra: &str) -> Result<Relay> {
    let metrics_port = free_port();
    let weft = WeftProcess::start(
        2,
        &format!(
            "TestingTorNetwork 1\nMetricsPort 127.0.0.1:{metrics_port}\nExtendAllowPrivateAddresses 1\n{extra}"
        ),
    );
    let token = common::metrics_token(&weft.data_dir())?;
    let hop = weft.hop_target()?;
    Ok(Relay {
        weft,
        metrics_port,
        token,
        hop,
    })
}

fn env(dir: &tempfile::TempDir) -> BenchEnv {
    BenchEnv {
        dir: dir.path().to_path_buf(),
        weft_bin: PathBuf::new(),
        tor_bin: PathBuf::new(),
    }
}

fn wait_ready(loads: &[&LoadRun], want: u64) -> Result<()> {
    let t0 = Instant::now();
    loop {
        let ready: u64 = loads
            .iter()
            .map(|l| l.sum(|c| c.circuits_ready.load(Ordering::Relaxed)))
            .sum();
        let failed: u64 = loads
            .iter()
            .map(|l| l.sum(|c| c.circuits_failed.load(Ordering::Relaxed)))
            .sum();
        ensure!(failed == 0, "{failed} circuits failed while building");
        if ready >= want {
            return Ok(());
        }
        ensure!(
            t0.elapsed() < Duration::from_secs(60),
            "only {ready}/{want} circuits built"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Stop a load and check it saw no failure and no corrupt cell; returns
/// (cells received upstream, downstream).
fn finish_clean(load: LoadRun, what: &str) -> Result<(u64, u64)> {
    let failed = load.sum(|c| c.circuits_failed.load(Ordering::Relaxed));
    let corrupt = load.sum(|c| c.corrupt.load(Ordering::Relaxed));
    let up = load.sum(|c| c.up_cells.load(Ordering::Relaxed));
    let down = load.sum(|c| c.down_cells.load(Ordering::Relaxed));
    load.set_phase(PHASE_STOP);
    let reports = load.finish()?;
    let errors: Vec<String> = reports.into_iter().flat_map(|r| r.errors).collect();
    ensure!(errors.is_empty(), "{what}: load errors: {errors:?}");
    ensure!(failed == 0, "{what}: {failed} circuits failed");
    ensure!(
        corrupt == 0,
        "{what}: {corrupt} cells lost, duplicated or reordered"
    );
    Ok((up, down))
}

#[test]
fn migration_under_traffic_verifies_every_cell() -> Result<()> {
    let relay = start_relay("TestingMigrateEvery 1\n")?;
    let dir = tempfile::tempdir()?;
    // 4 generator connections × 4 circuits, to 4 sinks: 8 connections on
    // weft to move around. Every cell is marked and checked.
    let mut p = Procedure::saturation(4, 4, 200, 1000, 0.0, 0.0, 1.0);
    p.mark_every = 1;
    let load = LoadRun::start(&env(&dir), &p, Some(relay.hop.clone()), None)?;
    wait_ready(&[&load], 16)?;
    load.set_phase(PHASE_RUN);

    let t0 = Instant::now();
    let mut migrations = 0.0;
    let mut last_up = 0;
    let mut stalled = false;
    while t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_secs(1));
        let m = scrape(relay.metrics_port, &relay.token)?;
        migrations = per_worker(&m, "weft_worker_migrations_total").iter().sum();
        let corrupt = load.sum(|c| c.corrupt.load(Ordering::Relaxed));
        let up = load.sum(|c| c.up_cells.load(Ordering::Relaxed));
        stalled = up <= last_up;
        if corrupt > 0 || stalled {
            eprintln!("after {migrations} migrations: {corrupt} corrupt cells, {up} cells up");
            break;
        }
        last_up = up;
        if migrations >= 12.0 && t0.elapsed() > Duration::from_secs(15) {
            break;
        }
    }
    let (up, down) = match finish_clean(load, "migration") {
        Ok(x) => x,
        Err(e) => {
            let log = relay.weft.log_text();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!("---- weft log (last lines) ----");
            for l in tail.into_iter().rev() {
                eprintln!("{l}");
            }
            return Err(e);
        }
    };
    ensure!(!stalled, "traffic stalled after {migrations} migrations");
    eprintln!("{migrations} migrations; {up} cells up and {down} down, each one verified");
    ensure!(migrations >= 12.0, "only {migrations} migrations in 60 s");
    ensure!(
        up > 10_000 && down > 10_000,
        "too little traffic ({up}/{down})"
    );
    let log = relay.weft.log_text();
    ensure!(!log.contains("panicked"), "weft panicked:\n{log}");
    drop(relay);
    Ok(())
}

#[test]
fn skewed_connections_are_balanced() -> Result<()> {
    let relay = start_relay("TestingPlaceOnWorker 0\n")?;
    let (heavy_dir, light_dir) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let heavy_p = Procedure::saturation(2, 8, 200, 1000, 0.0, 0.0, 1.0);
    let light_p = Procedure::saturation(6, 1, 200, 1000, 0.0, 0.0, 1.0);
    let heavy = LoadRun::start(&env(&heavy_dir), &heavy_p, Some(relay.hop.clone()), None)?;
    let light = LoadRun::start(&env(&light_dir), &light_p, Some(relay.hop.clone()), None)?;
    wait_ready(&[&heavy, &light], 22)?;
    // The gauges come with the workers' once-a-second reports.
    std::thread::sleep(Duration::from_millis(2500));
    let m0 = scrape(relay.metrics_port, &relay.token)?;
    let conns = per_worker(&m0, "weft_worker_connections");
    ensure!(
        conns[1] == 0.0 && conns[0] >= 16.0,
        "TestingPlaceOnWorker 0 put connections on {conns:?}"
    );
    heavy.set_phase(PHASE_RUN);
    light.set_phase(PHASE_RUN);

    // Give the balancer time (it acts after 3 s of imbalance, one
    // connection at a time), then compare the workers' CPU over a window.
    let t0 = Instant::now();
    let mut spread = f64::INFINITY;
    let mut last = (vec![0.0; 2], vec![0.0; 2]);
    while t0.elapsed() < Duration::from_secs(45) {
        let a = scrape(relay.metrics_port, &relay.token)?;
        std::thread::sleep(Duration::from_secs(4));
        let b = scrape(relay.metrics_port, &relay.token)?;
        let (ca, cb) = (
            per_worker(&a, "weft_worker_cpu_seconds_total"),
            per_worker(&b, "weft_worker_cpu_seconds_total"),
        );
        let d: Vec<f64> = cb.iter().zip(&ca).map(|(b, a)| b - a).collect();
        let (hi, lo) = (d[0].max(d[1]), d[0].min(d[1]));
        spread = (hi - lo) / hi.max(1e-9);
        eprintln!(
            "{:>4.0}s: worker CPU over 4 s {:.2} / {:.2} s ({:.0}% apart), connections {:?}",
            t0.elapsed().as_secs_f64(),
            d[0],
            d[1],
            spread * 100.0,
            per_worker(&b, "weft_worker_connections")
        );
        last = (d, per_worker(&b, "weft_worker_migrations_total"));
        if t0.elapsed() > Duration::from_secs(12) && spread <= 0.20 {
            break;
        }
    }
    finish_clean(heavy, "heavy")?;
    finish_clean(light, "light")?;
    ensure!(
        last.1.iter().sum::<f64>() >= 1.0,
        "the balancer moved nothing"
    );
    ensure!(
        spread <= 0.20,
        "worker CPU {:?} is {:.0}% apart after balancing",
        last.0,
        spread * 100.0
    );
    drop(relay);
    Ok(())
}
