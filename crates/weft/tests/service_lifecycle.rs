//! weft's life under a service manager, as systemd drives tor: the
//! readiness protocol (`Type=notify`: READY=1 once the ORPort answers,
//! RELOADING=1 then READY=1 around a SIGHUP, STOPPING=1 with
//! EXTEND_TIMEOUT_USEC on SIGINT), and C Tor's shutdown wait (SIGINT stops
//! accepting connections and new circuits — CREATE gets DESTROY reason
//! HIBERNATING — for ShutdownWaitLength, then exits; a second SIGINT exits
//! at once).

mod common;

use std::net::TcpStream;
use std::os::unix::net::UnixDatagram;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use common::{LinkClient, WeftProcess};

const CREATE_FAST: u8 = 5;
const CREATED_FAST: u8 = 6;
const DESTROY: u8 = 4;
const REASON_HIBERNATING: u8 = 4;

fn kill(p: &WeftProcess, sig: &str) -> Result<()> {
    let st = Command::new("kill")
        .args([sig, &p.child.id().to_string()])
        .status()?;
    ensure!(st.success(), "kill {sig}");
    Ok(())
}

/// The next datagram from weft (bounded by the socket's timeout).
fn next(sock: &UnixDatagram) -> Result<String> {
    let mut buf = [0u8; 1024];
    let n = sock.recv(&mut buf).context("no notification from weft")?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// Wait (bounded) for the process to exit; its exit status.
fn wait_exit(p: &mut WeftProcess, limit: Duration) -> Result<std::process::ExitStatus> {
    let t0 = Instant::now();
    loop {
        if let Some(st) = p.child.try_wait()? {
            return Ok(st);
        }
        ensure!(t0.elapsed() < limit, "weft still runs after {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn readiness_reload_and_shutdown_wait() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("notify");
    let sock = UnixDatagram::bind(&path)?;
    sock.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut weft = WeftProcess::start_env(
        2,
        "ShutdownWaitLength 3 seconds\n",
        &[("NOTIFY_SOCKET", path.to_str().context("path")?)],
    );
    let ready = next(&sock)?;
    ensure!(ready.starts_with("READY=1\nSTATUS=relaying on"), "{ready}");
    ensure!(TcpStream::connect(weft.addr()).is_ok());

    // A client with a circuit before the shutdown begins.
    let mut link = LinkClient::connect(weft.addr());
    link.send_fixed(0x8000_0001, CREATE_FAST, &weft_crypto::random_array::<20>());
    let (_, cmd, _) = link.read_fixed().context("no CREATED_FAST")?;
    ensure!(
        cmd == CREATED_FAST,
        "CREATE_FAST answered with command {cmd}"
    );

    kill(&weft, "-HUP")?;
    let reloading = next(&sock)?;
    ensure!(
        reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="),
        "{reloading}"
    );
    ensure!(next(&sock)?.starts_with("READY=1\n"));

    kill(&weft, "-INT")?;
    let t_int = Instant::now();
    let stopping = next(&sock)?;
    ensure!(
        stopping.starts_with("STOPPING=1\nEXTEND_TIMEOUT_USEC=33000000\n"),
        "{stopping}"
    );
    ensure!(common::wait_for_log(
        &weft,
        "will shut down in 3 seconds. Interrupt again to exit now."
    ));
    // No new connection, no new circuit; the open connection stays.
    ensure!(
        TcpStream::connect(weft.addr()).is_err(),
        "the ORPort still accepts during the shutdown wait"
    );
    link.send_fixed(0x8000_0002, CREATE_FAST, &weft_crypto::random_array::<20>());
    let (circ, cmd, body) = link.read_fixed().context("no answer to CREATE_FAST")?;
    ensure!(
        (circ, cmd, body[0]) == (0x8000_0002, DESTROY, REASON_HIBERNATING),
        "CREATE_FAST while shutting down: circuit {circ:#x} command {cmd} reason {}",
        body[0]
    );
    ensure!(weft.alive(), "weft exited before ShutdownWaitLength");
    let st = wait_exit(&mut weft, Duration::from_secs(15))?;
    ensure!(st.success(), "{st}");
    let waited = t_int.elapsed();
    ensure!(
        waited >= Duration::from_millis(2900),
        "exited after {waited:?}, before ShutdownWaitLength"
    );
    ensure!(next(&sock)?.starts_with("STOPPING=1\nSTATUS=stopping"));
    ensure!(common::wait_for_log(&weft, "ShutdownWaitLength has passed"));
    Ok(())
}

#[test]
fn a_second_interrupt_exits_at_once() -> Result<()> {
    // C Tor's default ShutdownWaitLength, 30 seconds.
    let mut weft = WeftProcess::start(1, "");
    kill(&weft, "-INT")?;
    ensure!(common::wait_for_log(&weft, "will shut down in 30 seconds"));
    ensure!(weft.alive());
    let t0 = Instant::now();
    kill(&weft, "-INT")?;
    let st = wait_exit(&mut weft, Duration::from_secs(10))?;
    ensure!(st.success(), "{st}");
    ensure!(t0.elapsed() < Duration::from_secs(10));
    ensure!(common::wait_for_log(&weft, "SIGINT received a second time"));
    // ShutdownWaitLength 0: at once, with no notification socket.
    let mut weft = WeftProcess::start(1, "ShutdownWaitLength 0\n");
    kill(&weft, "-INT")?;
    let st = wait_exit(&mut weft, Duration::from_secs(10))?;
    ensure!(st.success(), "{st}");
    Ok(())
}

/// `WatchdogSec=` (sd_watchdog_enabled(3)): with `WATCHDOG_USEC` for this
/// process, weft sends `WATCHDOG=1` every half of it after `READY=1`.
#[test]
fn the_watchdog_is_pinged_at_half_its_timeout() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("notify");
    let sock = UnixDatagram::bind(&path)?;
    sock.set_read_timeout(Some(Duration::from_secs(30)))?;
    let weft = WeftProcess::start_env(
        1,
        "",
        &[
            ("NOTIFY_SOCKET", path.to_str().context("path")?),
            ("WATCHDOG_USEC", "1000000"),
        ],
    );
    let mut ready = false;
    let mut pings = Vec::new();
    let t0 = Instant::now();
    while pings.len() < 4 && t0.elapsed() < Duration::from_secs(30) {
        let m = next(&sock)?;
        if m.starts_with("READY=1") {
            ready = true;
        } else if m == "WATCHDOG=1\n" {
            pings.push(Instant::now());
        }
    }
    ensure!(ready, "no READY=1");
    ensure!(pings.len() == 4, "{} pings in 30 s", pings.len());
    let gap = pings[3].duration_since(pings[1]) / 2;
    ensure!(
        gap >= Duration::from_millis(350) && gap <= Duration::from_millis(800),
        "pings {gap:?} apart, not every 0.5 s"
    );
    drop(weft);
    Ok(())
}
