//! Resource limits of the real process (issue 15): a Sniper-style attack
//! (clients that never read while their circuits' data piles up at weft)
//! meets `MaxMemInQueues`; a circuit-creation flood from one address is
//! refused (`DoSCircuitCreation*`) while another address is served; too
//! many connections from one address are refused (`DoSConnection*`); a
//! `ConnLimit` the file descriptors cannot honour stops the start with a
//! clear line. Each also checks the MetricsPort families.

mod common;

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use common::{free_port, parse_metrics, scrape_metrics, LinkClient, WeftProcess};
use weft_bench::load::{PHASE_RUN, PHASE_STOP};
use weft_bench::run::{BenchEnv, LoadRun, Procedure};

const DESTROY: u8 = 4;
const CREATE_FAST: u8 = 5;
const CREATED_FAST: u8 = 6;
const RESOURCELIMIT: u8 = 5;

/// weft with a MetricsPort and `extra` torrc lines; the port and token.
fn start(threads: u32, extra: &str) -> (WeftProcess, u16, String) {
    let mport = free_port();
    let weft = WeftProcess::start(
        threads,
        &format!("MetricsPort 127.0.0.1:{mport}\nExtendAllowPrivateAddresses 1\n{extra}"),
    );
    let token = common::metrics_token(&weft.data_dir()).expect("metrics token");
    (weft, mport, token)
}

/// The value of one sample (`name` with label `key`=`value`, or any).
fn sample(mport: u16, token: &str, name: &str, label: Option<(&str, &str)>) -> Result<f64> {
    let (st, body) = scrape_metrics(mport, Some(token))?;
    ensure!(st == 200, "MetricsPort status {st}");
    let s = parse_metrics(&body)?;
    let v = s
        .samples
        .iter()
        .filter(|x| x.metric == name)
        .filter(|x| label.is_none_or(|(k, v)| x.labels.get(k) == Some(v)))
        .map(|x| match x.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => 0.0,
        })
        .sum();
    Ok(v)
}

fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}

fn load(weft: &WeftProcess, p: &Procedure) -> Result<(tempfile::TempDir, LoadRun)> {
    let hop = weft.hop_target()?;
    let dir = tempfile::tempdir()?;
    let env = BenchEnv {
        dir: dir.path().to_path_buf(),
        weft_bin: PathBuf::new(),
        tor_bin: PathBuf::new(),
    };
    let run = LoadRun::start(&env, p, Some(hop), None)?;
    Ok((dir, run))
}

fn wait_ready(run: &LoadRun, n: u64) -> Result<()> {
    let t0 = Instant::now();
    while run.sum(|c| c.circuits_ready.load(Ordering::Relaxed)) < n {
        ensure!(t0.elapsed() < Duration::from_secs(60), "circuits not built");
        ensure!(
            run.sum(|c| c.circuits_failed.load(Ordering::Relaxed)) == 0,
            "a circuit failed while building"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// An honest load: 1 connection × 2 circuits, both directions, every 16th
/// cell stamped and checked (order, loss, corruption).
fn honest(weft: &WeftProcess) -> Result<(tempfile::TempDir, LoadRun)> {
    let mut p = Procedure::saturation(1, 2, 200, 1000, 0.0, 0.0, 1.0);
    p.mark_every = 16;
    let (dir, run) = load(weft, &p)?;
    wait_ready(&run, 2)?;
    run.set_phase(PHASE_RUN);
    Ok((dir, run))
}

/// Stop an honest load: it moved data both ways after `(up, down)`, lost
/// no circuit, and every stamped cell arrived intact and in order.
fn honest_finish(run: LoadRun, since: (u64, u64), what: &str) -> Result<()> {
    let up = run.sum(|c| c.up_cells.load(Ordering::Relaxed)) - since.0;
    let down = run.sum(|c| c.down_cells.load(Ordering::Relaxed)) - since.1;
    let failed = run.sum(|c| c.circuits_failed.load(Ordering::Relaxed));
    let corrupt = run.sum(|c| c.corrupt.load(Ordering::Relaxed));
    run.set_phase(PHASE_STOP);
    let reports = run.finish()?;
    let errors: Vec<String> = reports.into_iter().flat_map(|r| r.errors).collect();
    eprintln!("{what}: {up} cells up, {down} down, {failed} circuits failed, {corrupt} corrupt");
    ensure!(errors.is_empty(), "{what}: errors {errors:?}");
    ensure!(
        failed == 0 && corrupt == 0,
        "{what}: {failed} failed, {corrupt} corrupt"
    );
    ensure!(
        up > 1000 && down > 1000,
        "{what}: moved {up} up / {down} down"
    );
    Ok(())
}

fn moved(run: &LoadRun) -> (u64, u64) {
    (
        run.sum(|c| c.up_cells.load(Ordering::Relaxed)),
        run.sum(|c| c.down_cells.load(Ordering::Relaxed)),
    )
}

#[test]
fn a_sniper_attack_meets_the_memory_limit() -> Result<()> {
    const LIMIT: u64 = 64 << 20;
    let (mut weft, mport, token) = start(2, "MaxMemInQueues 64 MB\n");
    ensure!(sample(mport, &token, "weft_relay_max_mem_in_queues_bytes", None)? == LIMIT as f64);
    let (_hdir, honest_run) = honest(&weft)?;
    std::thread::sleep(Duration::from_secs(1));
    let base_rss = rss_bytes(weft.child.id());

    // The attack: 3 connections × 40 circuits; the sinks send 2400 cells
    // per circuit (under the 2500-cell circuit cap) and the clients read
    // 1 byte/s: ~157 MB would pile up at weft (socket buffers hold some).
    let mut p = Procedure::saturation(3, 40, 2400, 1_000_000, 0.0, 0.0, 1.0);
    p.direction = "down".into();
    p.read_rate = Some(1);
    let (_dir, run) = load(&weft, &p)?;
    wait_ready(&run, 120)?;
    let honest_before = moved(&honest_run);
    run.set_phase(PHASE_RUN);
    let t0 = Instant::now();
    let mut peak_rss = 0;
    let oom = loop {
        peak_rss = peak_rss.max(rss_bytes(weft.child.id()));
        let closed = sample(mport, &token, "weft_relay_load_oom_circuits_total", None)?;
        if closed > 0.0 {
            break closed;
        }
        ensure!(
            t0.elapsed() < Duration::from_secs(60),
            "the memory limit never acted: queued {} bytes, {} cells sent by the sinks",
            sample(mport, &token, "weft_relay_queued_bytes", None)?,
            run.sum(|c| c.down_sent.load(Ordering::Relaxed))
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // The attack goes on for a while; the honest circuits keep moving.
    for _ in 0..15 {
        peak_rss = peak_rss.max(rss_bytes(weft.child.id()));
        std::thread::sleep(Duration::from_millis(200));
    }
    let queued = sample(mport, &token, "weft_relay_queued_bytes", None)?;
    let failed = run.sum(|c| c.circuits_failed.load(Ordering::Relaxed));
    run.set_phase(PHASE_STOP);
    let _ = run.finish();
    eprintln!(
        "sniper: OOM closed {oom} circuits ({} bytes); {failed} of 120 attacking circuits closed; queued now {queued} B; RSS {} MiB before the attack, peak {} MiB",
        sample(mport, &token, "tor_relay_load_oom_bytes_total", None)?,
        base_rss >> 20,
        peak_rss >> 20
    );
    honest_finish(
        honest_run,
        honest_before,
        "honest circuits during the attack",
    )?;
    ensure!(queued <= LIMIT as f64, "still over the limit");
    ensure!(failed >= 1, "the attacker saw no circuit closed");
    // Fixed overhead: socket buffers, TLS, the pools' growth steps.
    ensure!(
        peak_rss < base_rss + LIMIT + (64 << 20),
        "weft's RSS reached {} MiB (from {} MiB, limit 64 MiB)",
        peak_rss >> 20,
        base_rss >> 20
    );
    ensure!(
        weft.log_text().contains("we're low on memory"),
        "no warning in the log"
    );
    ensure!(weft.alive(), "weft died");
    Ok(())
}

/// A one-hop CREATE_FAST on `c`: true if created, false if refused with
/// RESOURCELIMIT.
fn create_fast(c: &mut LinkClient, circ: u32) -> Result<bool> {
    c.send_fixed(circ, CREATE_FAST, &weft_crypto::random_array::<20>());
    let (rc, cmd, body) = c.read_fixed().context("no answer to CREATE_FAST")?;
    ensure!(rc == circ, "answer for circuit {rc}, not {circ}");
    match cmd {
        CREATED_FAST => Ok(true),
        DESTROY if body[0] == RESOURCELIMIT => Ok(false),
        _ => anyhow::bail!("unexpected answer {cmd} reason {}", body[0]),
    }
}

#[test]
fn a_circuit_creation_flood_is_refused_per_address() -> Result<()> {
    let (mut weft, mport, token) = start(
        2,
        "DoSCircuitCreationEnabled 1\nDoSCircuitCreationBurst 10\nDoSCircuitCreationRate 1\nDoSCircuitCreationMinConnections 3\n",
    );
    // An honest client (the load's generator, from 127.0.0.1) moves data
    // before, during and after the flood.
    let (_hdir, honest_run) = honest(&weft)?;
    let honest_before = moved(&honest_run);
    let flooder: IpAddr = "127.0.0.5".parse()?;
    let addr = weft.addr();
    let mut conns: Vec<LinkClient> = (0..3)
        .map(|_| LinkClient::try_connect_from(addr, flooder).context("connect"))
        .collect::<Result<_>>()?;
    let (mut created, mut refused) = (0, 0);
    for i in 0..40u32 {
        if create_fast(&mut conns[0], 0x8000_0000 + i)? {
            created += 1;
        } else {
            refused += 1;
        }
    }
    eprintln!("flood: {created} created, {refused} refused");
    ensure!(created >= 10, "the burst must be served: {created}");
    ensure!(refused >= 25, "the flood must be refused: {refused}");
    // The other connections of the address are refused too (workers hold
    // the mark); another client builds new circuits and moves data.
    ensure!(!create_fast(&mut conns[1], 0x8000_0100)?);
    let mut other = LinkClient::try_connect_from(addr, "127.0.0.6".parse()?).context("connect")?;
    ensure!(
        create_fast(&mut other, 0x8000_0001)?,
        "another address refused"
    );
    let (_h2dir, new_run) = honest(&weft)?;
    std::thread::sleep(Duration::from_secs(2));
    honest_finish(new_run, (0, 0), "circuits built after the mark")?;
    honest_finish(honest_run, honest_before, "circuits open during the flood")?;
    ensure!(weft.alive());
    let marked = sample(
        mport,
        &token,
        "tor_relay_dos_total",
        Some(("type", "marked_address")),
    )?;
    // Worker counters reach the controller once a second.
    let t0 = Instant::now();
    let rejected = loop {
        let r = sample(
            mport,
            &token,
            "tor_relay_dos_total",
            Some(("type", "circuit_rejected")),
        )?;
        if r >= f64::from(refused + 1) || t0.elapsed() > Duration::from_secs(5) {
            break r;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    ensure!(
        rejected >= f64::from(refused + 1),
        "metrics: {rejected} rejected"
    );
    ensure!(marked == 1.0, "metrics: {marked} marked addresses");
    Ok(())
}

#[test]
fn connections_beyond_the_per_address_limit_are_refused() -> Result<()> {
    let (mut weft, mport, token) = start(
        1,
        "DoSConnectionEnabled 1\nDoSConnectionMaxConcurrentCount 3\n",
    );
    let addr = weft.addr();
    let from: IpAddr = "127.0.0.3".parse()?;
    // C Tor refuses once an address has more than the maximum open.
    let mut open: Vec<LinkClient> = (0..4)
        .map(|_| LinkClient::try_connect_from(addr, from).context("connect within the limit"))
        .collect::<Result<_>>()?;
    ensure!(
        LinkClient::try_connect_from(addr, from).is_none(),
        "the fifth connection must be refused"
    );
    // Another address is not affected.
    ensure!(LinkClient::try_connect_from(addr, "127.0.0.4".parse()?).is_some());
    // Once one closes, the address may connect again.
    drop(open.pop());
    let t0 = Instant::now();
    loop {
        if LinkClient::try_connect_from(addr, from).is_some() {
            break;
        }
        ensure!(
            t0.elapsed() < Duration::from_secs(10),
            "never admitted again"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let rejected = sample(
        mport,
        &token,
        "tor_relay_dos_total",
        Some(("type", "concurrent_conn_rejected")),
    )?;
    ensure!(rejected >= 1.0, "metrics: {rejected}");
    ensure!(weft.alive());
    Ok(())
}

#[test]
fn a_conn_limit_above_the_descriptor_limit_stops_the_start() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let torrc = dir.path().join("torrc");
    std::fs::write(
        &torrc,
        format!(
            "ORPort 127.0.0.1:{}\nAddress 127.0.0.1\nDataDirectory {}\nConnLimit 2000000000\n",
            free_port(),
            dir.path().join("data").display()
        ),
    )?;
    let out = std::process::Command::new(common::weft_bin())
        .arg("-f")
        .arg(&torrc)
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success(), "weft started anyway");
    ensure!(
        err.contains("ConnLimit") && err.contains("ulimit -n"),
        "unclear message: {err}"
    );
    Ok(())
}
