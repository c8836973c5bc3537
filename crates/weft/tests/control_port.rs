//! The ControlPort against the real tools: weft with a ControlPort (TCP
//! and a unix socket), cookie authentication and a HashedControlPassword
//! made by stock tor's `tor --hash-password`, and weft-bench's load
//! through it.
//!
//! * the protocol's refusals as C Tor's: 514 before authentication, 515
//!   for a wrong cookie or password (and the connection closed), 500 for
//!   a line over 1 MiB, 510 for an unknown command;
//! * stem 1.8 (SAFECOOKIE, its own parsing) reads `traffic/read` and
//!   `traffic/written` and BW events that agree with the MetricsPort and
//!   with each other within one second's traffic;
//! * nyx 2.1 in a tmux terminal shows weft's nickname, fingerprint,
//!   bandwidth graph with traffic, and a notice from weft's log;
//! * reload (SIGHUP and SIGNAL RELOAD) under load: a lower BandwidthRate
//!   applies (the BW events fall to it), no circuit is dropped, an option
//!   that needs a restart is named, and a bad torrc is refused with its
//!   error while the old configuration stays.
//!
//! Needs python3 with stem 1.8.2 and nyx 2.1.0, and tmux
//! (scripts/install-deps.sh installs them).

mod common;

use std::io::{BufRead, Write};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use common::{free_port, load_through, metrics_token, scrape_metrics, Ctl, WeftProcess};
use weft_bench::load::{PHASE_RUN, PHASE_STOP};
use weft_bench::run::Procedure;

fn hash_password(pw: &str) -> Result<String> {
    let out = Command::new("tor")
        .args(["--hash-password", pw, "--quiet"])
        .output()
        .context("stock tor (scripts/install-deps.sh installs it)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let h = text
        .lines()
        .find(|l| l.starts_with("16:"))
        .context("tor --hash-password printed no hash")?;
    Ok(h.trim().to_string())
}

fn start(extra: &str) -> Result<(WeftProcess, u16, u16, String)> {
    let cport = free_port();
    let mport = free_port();
    let weft = WeftProcess::start(
        2,
        &format!(
            "ControlPort {cport}\nCookieAuthentication 1\nMetricsPort 127.0.0.1:{mport}\nExtendAllowPrivateAddresses 1\n{extra}"
        ),
    );
    let token = metrics_token(&weft.data_dir())?;
    Ok((weft, cport, mport, token.trim().to_string()))
}

/// Start weft-bench's load (2 connections × 4 circuits) and wait until
/// its circuits are built and traffic runs.
fn run_load(weft: &WeftProcess) -> Result<(tempfile::TempDir, weft_bench::run::LoadRun)> {
    let p = Procedure::saturation(2, 4, 200, 1000, 0.0, 0.0, 1.0);
    let (dir, load) = load_through(weft, &p)?;
    let t0 = Instant::now();
    while load.sum(|c| c.circuits_ready.load(Ordering::Relaxed)) < 8 {
        ensure!(t0.elapsed() < Duration::from_secs(60), "circuits not built");
        ensure!(
            load.sum(|c| c.circuits_failed.load(Ordering::Relaxed)) == 0,
            "a circuit failed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    load.set_phase(PHASE_RUN);
    Ok((dir, load))
}

fn python_has(module: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `c.cmd(command)`'s reply without the asynchronous events that came
/// before it (weft logs at NOTICE while the test runs, e.g. the descriptor
/// it publishes once a CREATE proved its ORPort).
fn reply_only(c: &mut Ctl, command: &str) -> Result<String> {
    Ok(c.cmd(command)?
        .split_inclusive("\r\n")
        .filter(|l| !l.starts_with("650 "))
        .collect())
}

#[test]
fn protocol_refusals_and_authentication() -> Result<()> {
    let hashed = hash_password("weft test password")?;
    let sock = tempfile::tempdir()?;
    let sock_path = sock.path().join("control");
    let (weft, cport, _, _) = start(&format!(
        "HashedControlPassword {hashed}\nControlPort unix:{}\n",
        sock_path.display()
    ))?;
    let cookie_file = weft.data_dir().join("control_auth_cookie");
    let mode = std::fs::metadata(&cookie_file)?.permissions();
    ensure!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o077 == 0,
        "cookie readable by others"
    );

    let mut c = Ctl::tcp(cport)?;
    let r = c.cmd("PROTOCOLINFO 1")?;
    ensure!(
        r.contains("250-AUTH METHODS=COOKIE,SAFECOOKIE,HASHEDPASSWORD COOKIEFILE=\""),
        "{r}"
    );
    ensure!(r.contains("250-VERSION Tor=\"0.4.9.11 (weft-"), "{r}");
    ensure!(c.cmd("GETINFO version")? == "514 Authentication required.\r\n");
    ensure!(c.closed(), "514 must close the connection");

    let mut c = Ctl::tcp(cport)?;
    let r = c.cmd(&format!("AUTHENTICATE {}", hex::encode([0u8; 32])))?;
    ensure!(r.starts_with("515 Authentication failed: "), "{r}");
    ensure!(c.closed(), "515 must close the connection");
    let mut c = Ctl::tcp(cport)?;
    let r = c.cmd("AUTHENTICATE \"not the password\"")?;
    ensure!(r.starts_with("515 Authentication failed: "), "{r}");
    ensure!(c.closed());

    // The password stock tor hashed, and the cookie on the unix socket.
    let mut c = Ctl::tcp(cport)?;
    ensure!(c.cmd("AUTHENTICATE \"weft test password\"")? == "250 OK\r\n");
    let r = c.cmd("GETINFO version fingerprint address traffic/read uptime process/pid config-file net/listeners/or net/listeners/control")?;
    ensure!(
        r.contains(&format!("250-process/pid={}\r\n", weft.child.id())),
        "{r}"
    );
    ensure!(r.contains("250-address=127.0.0.1\r\n"), "{r}");
    ensure!(
        r.contains(&format!(
            "250-net/listeners/or=\"127.0.0.1:{}\"\r\n",
            weft.or_port
        )),
        "{r}"
    );
    ensure!(
        r.contains(&format!(
            "\"127.0.0.1:{cport}\" \"unix:{}\"",
            sock_path.display()
        )),
        "{r}"
    );
    ensure!(r.ends_with("250 OK\r\n"), "{r}");
    let fp = std::fs::read_to_string(weft.data_dir().join("fingerprint"))?;
    ensure!(
        r.contains(&format!(
            "250-fingerprint={}\r\n",
            fp.split_whitespace().nth(1).unwrap_or("?")
        )),
        "{r}"
    );
    ensure!(c.cmd("GETCONF nickname BandwidthRate exitpolicy")? == "250-Nickname=weftTest\r\n250-BandwidthRate=1073741824\r\n250 ExitPolicy=reject *:*\r\n");
    ensure!(
        c.cmd("GETCONF NoSuchOption")? == "552 Unrecognized configuration key \"NoSuchOption\"\r\n"
    );
    ensure!(c.cmd("GETINFO no/such/key")? == "552 Unrecognized key \"no/such/key\"\r\n");
    let r = c.cmd("GETINFO config-text")?;
    ensure!(
        r.starts_with("250+config-text=\r\n") && r.contains("Nickname weftTest\r\n"),
        "{r}"
    );
    ensure!(c.cmd("SETCONF Nickname=x")? == "510 Unrecognized command \"SETCONF\"\r\n");
    ensure!(c.cmd("SETEVENTS BW BOGUS")? == "552 Unrecognized event \"BOGUS\"\r\n");
    let mut u = Ctl::unix(&sock_path)?;
    u.authenticate(&cookie_file)?;
    ensure!(u.cmd("GETINFO uptime")?.starts_with("250-uptime="));
    // A line without end is refused at 1 MiB, and only that connection.
    let mut big = Ctl::tcp(cport)?;
    big.w.write_all(&vec![b'A'; (1 << 20) + 10])?;
    let r = big.reply()?;
    ensure!(r == "500 Line too long.\r\n", "{r}");
    ensure!(big.closed());
    ensure!(c.cmd("QUIT")? == "250 closing connection\r\n");
    ensure!(u.cmd("GETINFO uptime")?.starts_with("250-uptime="));
    Ok(())
}

/// stem's view of weft: `traffic/*` and BW events against the MetricsPort.
const STEM_SCRIPT: &str = r#"
import json, sys, time, urllib.request
from stem.control import Controller, EventType
port, mport, token = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def metrics():
    req = urllib.request.Request("http://127.0.0.1:%d/metrics" % mport, headers={"Authorization": "Bearer " + token})
    body = urllib.request.urlopen(req, timeout=10).read().decode()
    tot = lambda name: sum(float(l.split()[-1]) for l in body.splitlines() if l.startswith(name + "{"))
    return tot("weft_worker_read_bytes_total"), tot("weft_worker_written_bytes_total")
with Controller.from_port(port=port) as c:
    c.authenticate()
    events = []
    c.add_event_listener(lambda e: events.append((e.read, e.written)), EventType.BW)
    time.sleep(1.5)
    r0, w0 = int(c.get_info("traffic/read")), int(c.get_info("traffic/written"))
    n0 = len(events)
    time.sleep(5)
    r1, w1 = int(c.get_info("traffic/read")), int(c.get_info("traffic/written"))
    mr, mw = metrics()
    during = events[n0:]
    print(json.dumps({"version": str(c.get_version()), "r0": r0, "r1": r1, "w0": w0, "w1": w1,
                      "bw": during, "metrics_read": mr, "metrics_written": mw}))
"#;

#[test]
fn stem_and_nyx_see_what_the_metrics_port_sees() -> Result<()> {
    ensure!(
        python_has("stem") && python_has("nyx"),
        "python3 needs stem and nyx (scripts/install-deps.sh installs them)"
    );
    let (weft, cport, mport, token) = start("")?;
    let (_dir, load) = run_load(&weft)?;

    let out = Command::new("python3")
        .args([
            "-c",
            STEM_SCRIPT,
            &cport.to_string(),
            &mport.to_string(),
            &token,
        ])
        .output()?;
    ensure!(
        out.status.success(),
        "stem script: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    eprintln!("stem: {v}");
    let n = |k: &str| v[k].as_f64().unwrap_or(-1.0);
    let bw: Vec<(f64, f64)> = v["bw"]
        .as_array()
        .context("bw")?
        .iter()
        .map(|e| (e[0].as_f64().unwrap_or(0.0), e[1].as_f64().unwrap_or(0.0)))
        .collect();
    ensure!(bw.len() >= 3, "too few BW events: {}", bw.len());
    let max_r = bw.iter().map(|e| e.0).fold(0.0, f64::max);
    let max_w = bw.iter().map(|e| e.1).fold(0.0, f64::max);
    ensure!(max_r > 100_000.0, "no traffic in the BW events: {bw:?}");
    let sum_r: f64 = bw.iter().map(|e| e.0).sum();
    let sum_w: f64 = bw.iter().map(|e| e.1).sum();
    // Both count the same bytes; they differ by at most a second at
    // either end of the window.
    ensure!(
        ((n("r1") - n("r0")) - sum_r).abs() <= 2.0 * max_r,
        "traffic/read grew {} while BW events summed {sum_r}",
        n("r1") - n("r0")
    );
    ensure!(((n("w1") - n("w0")) - sum_w).abs() <= 2.0 * max_w);
    ensure!(
        n("metrics_read") >= n("r1") && n("metrics_read") - n("r1") <= max_r,
        "MetricsPort read {} vs traffic/read {}",
        n("metrics_read"),
        n("r1")
    );
    ensure!(n("metrics_written") >= n("w1") && n("metrics_written") - n("w1") <= max_w);
    ensure!(
        v["version"].as_str().unwrap_or("").starts_with("0.4.9.11"),
        "{v}"
    );

    // nyx in a terminal.
    let cookie = weft.data_dir().join("control_auth_cookie");
    // Bounded at 60 s: nyx redraws slowly on a busy 2-core machine.
    let screen = common::nyx_screen(
        cport,
        Duration::from_secs(60),
        || {
            let mut c = Ctl::tcp(cport)?;
            c.authenticate(&cookie)?;
            ensure!(c.cmd("SIGNAL HEARTBEAT")? == "250 OK\r\n");
            Ok(())
        },
        |screen| {
            let download = screen
                .lines()
                .find(|l| l.contains("Download ("))
                .unwrap_or("");
            // (Not the version in nyx's header: a notice line can be drawn
            // over it and stay until nyx redraws that line, which it may
            // not do for a minute; stem read the version above.)
            screen.contains("heartbeat: uptime")
                && screen.contains("weftTest")
                && !download.is_empty()
                && !download.contains("total: 0.0 B")
        },
    )?;
    eprintln!("nyx:\n{screen}");
    let fp = std::fs::read_to_string(weft.data_dir().join("fingerprint"))?;
    ensure!(
        screen.contains(fp.split_whitespace().nth(1).unwrap_or("?")),
        "no fingerprint"
    );
    ensure!(screen.contains("Bandwidth"), "no graph");

    load.set_phase(PHASE_STOP);
    let errors: Vec<String> = load.finish()?.into_iter().flat_map(|r| r.errors).collect();
    ensure!(errors.is_empty(), "load errors: {errors:?}");
    Ok(())
}

/// BW events of the next `secs` seconds on an authenticated connection
/// subscribed to BW.
fn bw_events(c: &mut Ctl, secs: usize) -> Result<Vec<u64>> {
    let mut v = Vec::new();
    while v.len() < secs {
        let mut l = String::new();
        ensure!(c.r.read_line(&mut l)? > 0, "control connection closed");
        if let Some(rest) = l.strip_prefix("650 BW ") {
            v.push(rest.split_whitespace().next().unwrap_or("0").parse()?);
        }
    }
    Ok(v)
}

#[test]
fn reload_under_load() -> Result<()> {
    let (mut weft, cport, mport, token) = start("")?;
    let torrc = weft.dir.path().join("torrc");
    let original = std::fs::read_to_string(&torrc)?;
    let (_dir, load) = run_load(&weft)?;
    let mut c = Ctl::tcp(cport)?;
    c.authenticate(&weft.data_dir().join("control_auth_cookie"))?;
    ensure!(c.cmd("SETEVENTS BW NOTICE WARN")? == "250 OK\r\n");
    let before = bw_events(&mut c, 3)?;
    let fast = *before.iter().max().unwrap_or(&0);
    ensure!(
        fast > 2_000_000,
        "the load should run faster than 2 MB/s first: {before:?}"
    );
    let series = |body: &str, name: &str| -> f64 {
        body.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
            .sum()
    };
    let circuits = |body: &str| {
        (
            series(body, "weft_worker_circuit_halves"),
            series(body, "weft_worker_circuits_created_total"),
        )
    };
    let (_, m0) = scrape_metrics(mport, Some(&token))?;

    // A lower BandwidthRate and a changed ORPort (needs a restart), by
    // SIGHUP, while the load runs.
    let rate: u64 = 500 * 1024;
    let changed = original.replace(
        &format!("ORPort 127.0.0.1:{}", weft.or_port),
        &format!("ORPort 127.0.0.1:{}", free_port()),
    ) + &format!("BandwidthRate {rate}\nBandwidthBurst {rate}\n");
    std::fs::write(&torrc, changed)?;
    let st = Command::new("kill")
        .args(["-HUP", &weft.child.id().to_string()])
        .status()?;
    ensure!(st.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut l = String::new();
        ensure!(c.r.read_line(&mut l)? > 0);
        if l.contains("reloaded the torrc") {
            ensure!(
                l.contains("BandwidthRate/Burst")
                    && l.contains("need a restart")
                    && l.contains("ORPort"),
                "{l}"
            );
            break;
        }
        ensure!(Instant::now() < deadline, "no reload notice");
    }
    let after = bw_events(&mut c, 6)?;
    let settled = &after[3..];
    ensure!(
        settled.iter().all(|r| *r < rate * 2),
        "BandwidthRate {rate} did not apply: {before:?} then {after:?}"
    );
    let got = reply_only(&mut c, "GETCONF BandwidthRate")?;
    ensure!(
        got == format!("250 BandwidthRate={rate}\r\n"),
        "GETCONF BandwidthRate: {got:?}"
    );
    ensure!(
        c.cmd("GETINFO net/listeners/or")?
            .contains(&format!(":{}\"", weft.or_port)),
        "the ORPort must not move"
    );

    // A bad torrc is refused with its error; the old configuration stays.
    std::fs::write(
        &torrc,
        format!("{original}BandwidthRate {rate}\nNoSuchOption 1\n"),
    )?;
    ensure!(reply_only(&mut c, "SIGNAL RELOAD")? == "250 OK\r\n");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut l = String::new();
        ensure!(c.r.read_line(&mut l)? > 0);
        if l.contains("reload refused") {
            ensure!(l.contains("unknown option 'NoSuchOption'"), "{l}");
            break;
        }
        ensure!(Instant::now() < deadline, "no refusal notice");
    }
    let got = reply_only(&mut c, "GETCONF BandwidthRate")?;
    ensure!(
        got == format!("250 BandwidthRate={rate}\r\n"),
        "GETCONF BandwidthRate: {got:?}"
    );
    ensure!(weft.alive(), "weft stopped");

    // No circuit was dropped.
    let (_, m1) = scrape_metrics(mport, Some(&token))?;
    ensure!(
        load.sum(|c| c.circuits_failed.load(Ordering::Relaxed)) == 0,
        "a circuit failed"
    );
    ensure!(
        circuits(&m1) == circuits(&m0) && circuits(&m0).0 >= 16.0,
        "circuit halves and circuits created {:?} then {:?}",
        circuits(&m0),
        circuits(&m1)
    );
    load.set_phase(PHASE_STOP);
    let errors: Vec<String> = load.finish()?.into_iter().flat_map(|r| r.errors).collect();
    ensure!(errors.is_empty(), "load errors: {errors:?}");
    Ok(())
}

/// Send a command that answers `250 OK`; returns the event lines that
/// came with the reply.
fn ok(c: &mut Ctl, cmd: &str) -> Result<String> {
    let r = c.cmd(cmd)?;
    ensure!(r.ends_with("250 OK\r\n"), "{cmd}: {r}");
    Ok(r)
}

/// Wait (bounded) for a control event line containing `what`, in `seen`
/// (events that came with a reply) or read next.
fn wait_event(c: &mut Ctl, seen: &str, what: &str) -> Result<String> {
    if let Some(l) = seen.lines().find(|l| l.contains(what)) {
        return Ok(l.to_string());
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut l = String::new();
        ensure!(c.r.read_line(&mut l)? > 0, "control connection closed");
        if l.contains(what) {
            return Ok(l);
        }
        ensure!(Instant::now() < deadline, "no event with {what:?}");
    }
}

/// Wait (bounded) until `path` holds a line containing `what`.
fn wait_log(path: &Path, what: &str) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(what) {
            return Ok(text);
        }
        ensure!(
            Instant::now() < deadline,
            "{} never got {what:?}:\n{text}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `Log` lines with tor's domains, changed by a reload: lines go where
/// their domain and severity say, in tor's format, and a reload reopens
/// the files (logrotate moves the file away and sends HUP).
#[test]
fn log_domains_apply_on_reload() -> Result<()> {
    let (weft, cport, _mport, _token) = start("")?;
    let torrc = weft.dir.path().join("torrc");
    let original = std::fs::read_to_string(&torrc)?;
    let log_line = format!("Log info file {}", weft.log.display());
    ensure!(original.contains(&log_line));
    let mut c = Ctl::tcp(cport)?;
    c.authenticate(&weft.data_dir().join("control_auth_cookie"))?;
    ok(&mut c, "SETEVENTS NOTICE WARN")?;

    // logrotate: the file is moved away, then HUP.
    let rotated = weft.dir.path().join("info.log.1");
    std::fs::rename(&weft.log, &rotated)?;
    let (beat, rest) = (
        weft.dir.path().join("heartbeat.log"),
        weft.dir.path().join("rest.log"),
    );
    std::fs::write(
        &torrc,
        original.replace(
            &log_line,
            &format!(
                "Log [heartbeat]notice file {}\nLog [~heartbeat]notice-warn file {}",
                beat.display(),
                rest.display()
            ),
        ),
    )?;
    let seen = ok(&mut c, "SIGNAL RELOAD")?;
    wait_event(&mut c, &seen, "reloaded the torrc")?;
    ok(&mut c, "SIGNAL HEARTBEAT")?;
    let beats = wait_log(&beat, "memory: cell queues")?;
    let others = wait_log(&rest, "reloaded the torrc")?;
    let tor_format = |l: &str| {
        let b = l.as_bytes();
        l.len() > 28
            && b[3] == b' '
            && b[6] == b' '
            && b[9] == b':'
            && b[15] == b'.'
            && l[19..].starts_with(" [notice] ")
    };
    ensure!(beats.lines().all(tor_format), "{beats}");
    ensure!(others.lines().all(tor_format), "{others}");
    ensure!(
        beats.lines().all(|l| l.contains("heartbeat:")
            || l.contains("DoS mitigation")
            || l.contains("memory:")),
        "only heartbeat lines in {}:\n{beats}",
        beat.display()
    );
    ensure!(
        !others.contains("heartbeat:"),
        "a heartbeat line in {}:\n{others}",
        rest.display()
    );
    ensure!(
        !weft.log.exists(),
        "the old Log file was written after the reload"
    );

    // Back to the original Log line: the moved-away file's name is opened
    // anew, and the rotated one is left alone.
    let rotated_len = std::fs::metadata(&rotated)?.len();
    std::fs::write(&torrc, &original)?;
    let seen = ok(&mut c, "SIGNAL RELOAD")?;
    wait_event(&mut c, &seen, "reloaded the torrc")?;
    wait_log(&weft.log, "reloaded the torrc")?;
    ensure!(std::fs::metadata(&rotated)?.len() == rotated_len);

    // A Log line that cannot open keeps the old sinks; the rest applies.
    std::fs::write(
        &torrc,
        original.replace(&log_line, "Log notice file /nonexistent-dir/weft.log"),
    )?;
    let seen = ok(&mut c, "SIGNAL RELOAD")?;
    let l = wait_event(&mut c, &seen, "old Log lines are kept")?;
    ensure!(l.contains("cannot open log file"), "{l}");
    ok(&mut c, "SIGNAL HEARTBEAT")?;
    wait_log(&weft.log, "heartbeat:")?;
    Ok(())
}
