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
    let token = std::fs::read_to_string(weft.data_dir().join("metrics_auth_cookie"))
        .expect("metrics token");
    (weft, mport, token.trim().to_string())
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

#[test]
fn a_sniper_attack_meets_the_memory_limit() -> Result<()> {
    let (mut weft, mport, token) = start(2, "MaxMemInQueues 64 MB\n");
    ensure!(
        sample(mport, &token, "weft_relay_max_mem_in_queues_bytes", None)? == (64u64 << 20) as f64
    );
    // 2 connections × 40 circuits; the sinks send 2400 cells per circuit
    // (under the 2500-cell circuit cap) and the clients read 1 byte/s:
    // ~104 MB would pile up at weft.
    let mut p = Procedure::saturation(2, 40, 2400, 1_000_000, 0.0, 0.0, 1.0);
    p.direction = "down".into();
    p.read_rate = Some(1);
    let (_dir, run) = load(&weft, &p)?;
    wait_ready(&run, 80)?;
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
    // Let the round finish, then the queues are back under the limit.
    std::thread::sleep(Duration::from_secs(2));
    peak_rss = peak_rss.max(rss_bytes(weft.child.id()));
    let queued = sample(mport, &token, "weft_relay_queued_bytes", None)?;
    let failed = run.sum(|c| c.circuits_failed.load(Ordering::Relaxed));
    run.set_phase(PHASE_STOP);
    let _ = run.finish();
    eprintln!(
        "OOM closed {oom} circuits ({} bytes); {failed} of 80 circuits failed at the clients; queued now {queued} B; peak RSS {} MiB",
        sample(mport, &token, "weft_relay_load_oom_bytes_total", None)?,
        peak_rss >> 20
    );
    ensure!(queued <= (64u64 << 20) as f64, "still over the limit");
    ensure!(failed >= 1, "the clients saw no circuit closed");
    ensure!(
        peak_rss < 400 << 20,
        "weft's RSS reached {} MiB",
        peak_rss >> 20
    );
    let log = weft.log_text();
    ensure!(log.contains("we're low on memory"), "no warning in the log");
    ensure!(weft.alive(), "weft died");

    // A bystander that reads: its circuits work.
    let p = Procedure::saturation(1, 2, 200, 1000, 0.0, 0.0, 1.0);
    let (_dir2, run) = load(&weft, &p)?;
    wait_ready(&run, 2)?;
    run.set_phase(PHASE_RUN);
    std::thread::sleep(Duration::from_secs(2));
    let down = run.sum(|c| c.down_cells.load(Ordering::Relaxed));
    let up = run.sum(|c| c.up_cells.load(Ordering::Relaxed));
    run.set_phase(PHASE_STOP);
    let reports = run.finish()?;
    let errors: Vec<String> = reports.into_iter().flat_map(|r| r.errors).collect();
    ensure!(errors.is_empty(), "bystander errors: {errors:?}");
    ensure!(
        down > 1000 && up > 1000,
        "bystander moved {up} up / {down} down"
    );
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
    let flooder: IpAddr = "127.0.0.1".parse()?;
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
    // the mark), another address is served.
    ensure!(!create_fast(&mut conns[1], 0x8000_0100)?);
    let mut other = LinkClient::try_connect_from(addr, "127.0.0.2".parse()?).context("connect")?;
    ensure!(
        create_fast(&mut other, 0x8000_0001)?,
        "another address refused"
    );
    ensure!(weft.alive());
    let rejected = sample(
        mport,
        &token,
        "weft_relay_dos_total",
        Some(("type", "circuit_rejected")),
    );
    let marked = sample(
        mport,
        &token,
        "weft_relay_dos_total",
        Some(("type", "marked_address")),
    )?;
    // Worker counters reach the controller once a second.
    let t0 = Instant::now();
    let mut rejected = rejected?;
    while rejected < f64::from(refused) && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(200));
        rejected = sample(
            mport,
            &token,
            "weft_relay_dos_total",
            Some(("type", "circuit_rejected")),
        )?;
    }
    ensure!(
        rejected >= f64::from(refused),
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
        "weft_relay_dos_total",
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
