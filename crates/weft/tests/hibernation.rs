//! AccountingMax as C Tor's: with traffic flowing, weft reaches the soft
//! limit (no new connections), then the hard limit (every relay connection
//! closed), says so in C Tor's words, answers GETINFO accounting/* as C,
//! publishes `hibernating 1` with no bandwidth, and after a restart in the
//! same interval remembers what it counted and stays dormant. (Waking at
//! the next interval or at the wake-up time is `weft-relay`'s
//! `accounting::tests`: the test cannot wait for tomorrow.)

mod common;

use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use common::{free_port, load_through, Ctl, WeftProcess};
use weft_bench::load::{PHASE_RUN, PHASE_STOP};
use weft_bench::run::Procedure;

const MAX: u64 = 10 << 20;

/// `GETINFO key`'s value.
fn getinfo(c: &mut Ctl, key: &str) -> Result<String> {
    let r = c.cmd(&format!("GETINFO {key}"))?;
    let prefix = format!("250-{key}=");
    if let Some(l) = r.lines().find(|l| l.starts_with(&prefix)) {
        return Ok(l[prefix.len()..].to_string());
    }
    // A multi-line value: 250+key=\r\n…\r\n.\r\n
    let start = r
        .find(&format!("250+{key}=\r\n"))
        .with_context(|| format!("GETINFO {key}: {r}"))?;
    Ok(r[start..]
        .lines()
        .skip(1)
        .take_while(|l| *l != ".")
        .collect::<Vec<_>>()
        .join("\n"))
}

fn connect(cport: u16, weft: &WeftProcess) -> Result<Ctl> {
    let t0 = Instant::now();
    loop {
        if let Ok(mut c) = Ctl::tcp(cport) {
            c.authenticate(&weft.data_dir().join("control_auth_cookie"))?;
            return Ok(c);
        }
        ensure!(t0.elapsed() < Duration::from_secs(30), "no ControlPort");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Poll (bounded) until `GETINFO key` is `want`.
fn wait_info(c: &mut Ctl, key: &str, want: &str, limit: Duration) -> Result<()> {
    let t0 = Instant::now();
    loop {
        let v = getinfo(c, key)?;
        if v == want {
            return Ok(());
        }
        ensure!(t0.elapsed() < limit, "{key} is {v:?}, not {want:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn accounting_hibernates_and_remembers_across_a_restart() -> Result<()> {
    let cport = free_port();
    let mut weft = WeftProcess::start(
        2,
        &format!(
            "ControlPort {cport}\nCookieAuthentication 1\nExtendAllowPrivateAddresses 1\nAccountingMax 10 MB\nAccountingStart day 0:00\nBandwidthRate 2 MB\nBandwidthBurst 2 MB\n"
        ),
    );
    let mut c = connect(cport, &weft)?;
    ensure!(getinfo(&mut c, "accounting/enabled")? == "1");
    ensure!(getinfo(&mut c, "accounting/hibernating")? == "awake");
    ensure!(getinfo(&mut c, "accounting/bytes-left")? == format!("{MAX} {MAX}"));
    let start = getinfo(&mut c, "accounting/interval-start")?;
    ensure!(start.ends_with(" 00:00:00"), "{start}");
    ensure!(getinfo(&mut c, "accounting/interval-wake")? == start);
    let end = getinfo(&mut c, "accounting/interval-end")?;
    ensure!(end.ends_with(" 00:00:00") && end > start, "{end}");
    let fp = std::fs::read_to_string(weft.data_dir().join("fingerprint"))?;
    let fp = fp
        .split_whitespace()
        .nth(1)
        .context("fingerprint")?
        .to_string();
    let r = c.cmd("SETEVENTS NOTICE")?;
    ensure!(r.ends_with("250 OK\r\n"), "{r}");

    // Traffic until the limits.
    let p = Procedure::saturation(2, 4, 200, 1000, 0.0, 0.0, 1.0);
    let (_dir, load) = load_through(&weft, &p)?;
    let t0 = Instant::now();
    while load.sum(|c| c.circuits_ready.load(Ordering::Relaxed)) < 8 {
        ensure!(t0.elapsed() < Duration::from_secs(60), "circuits not built");
        std::thread::sleep(Duration::from_millis(50));
    }
    load.set_phase(PHASE_RUN);
    let mut soft = false;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut l = String::new();
        use std::io::BufRead;
        ensure!(c.r.read_line(&mut l)? > 0, "control connection closed");
        if l.contains("Bandwidth soft limit reached; commencing hibernation") {
            soft = true;
        }
        if l.contains("Going dormant. Blowing away remaining connections.") {
            ensure!(soft, "dormant before the soft limit");
            break;
        }
        ensure!(Instant::now() < deadline, "no hibernation within 60 s");
    }
    load.set_phase(PHASE_STOP);
    let _ = load.finish();
    ensure!(getinfo(&mut c, "accounting/hibernating")? == "hard");
    let bytes = getinfo(&mut c, "accounting/bytes")?;
    let (r, w) = bytes.split_once(' ').context("accounting/bytes")?;
    let (r, w): (u64, u64) = (r.parse()?, w.parse()?);
    ensure!(r.max(w) >= MAX, "dormant at {bytes}");
    ensure!(getinfo(&mut c, "accounting/bytes-left")?.starts_with('0') || w >= MAX);
    ensure!(getinfo(&mut c, "net/listeners/or")?.is_empty());
    ensure!(
        TcpStream::connect(weft.addr()).is_err(),
        "the ORPort accepts while dormant"
    );
    // The descriptor says so (republished within C's 10 s of a change).
    let t0 = Instant::now();
    loop {
        let d = getinfo(&mut c, &format!("desc/id/{fp}"))?;
        if d.contains("\nhibernating 1") {
            let bw = d
                .lines()
                .find(|l| l.starts_with("bandwidth "))
                .unwrap_or("");
            ensure!(
                bw.ends_with(" 0"),
                "observed bandwidth while hibernating: {bw}"
            );
            break;
        }
        ensure!(
            t0.elapsed() < Duration::from_secs(30),
            "no hibernating line:\n{d}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    // A restart in the same interval: the bytes are remembered and weft
    // goes dormant again at once.
    drop(c);
    weft.restart();
    let mut c = connect(cport, &weft)?;
    wait_info(
        &mut c,
        "accounting/hibernating",
        "hard",
        Duration::from_secs(10),
    )?;
    let again = getinfo(&mut c, "accounting/bytes")?;
    let (r2, w2) = again.split_once(' ').context("accounting/bytes")?;
    ensure!(
        r2.parse::<u64>()? >= r && w2.parse::<u64>()? >= w,
        "after the restart {again}, before {bytes}"
    );
    ensure!(weft.log_text().contains("Going dormant"));
    Ok(())
}
