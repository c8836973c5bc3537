//! Restart and faults (issue 15): kill -9 in the middle of traffic and a
//! restart keep the identity and keys, and the relay carries circuits
//! again; a damaged state file, a full disk when the state is written, an
//! unreadable or corrupt key file and a peer that resets the connection in
//! the middle of the handshake each give one clear log line and the
//! smallest correct reaction (start fresh, keep going, refuse to start,
//! drop that connection).

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use common::{free_port, LinkClient};
use weft_bench::load::{PHASE_RUN, PHASE_STOP};
use weft_bench::run::{BenchEnv, LoadRun, Procedure};

/// A weft process on a fixed directory and port, so it can be restarted.
struct Relay {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl Relay {
    fn new(dir: &Path) -> Relay {
        Relay {
            dir: dir.to_path_buf(),
            port: free_port(),
            child: None,
        }
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("info.log")).unwrap_or_default()
    }

    fn spawn(&mut self) -> Result<()> {
        let torrc = self.dir.join("torrc");
        std::fs::write(
            &torrc,
            format!(
                "ORPort 127.0.0.1:{}\nAddress 127.0.0.1\nNickname weftFaults\nDataDirectory {}\nLog info file {}\nConnectionThreads 2\nExtendAllowPrivateAddresses 1\n",
                self.port,
                self.data().display(),
                self.dir.join("info.log").display()
            ),
        )?;
        self.child = Some(
            Command::new(common::weft_bin())
                .arg("-f")
                .arg(&torrc)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()?,
        );
        Ok(())
    }

    /// Start and wait for the ORPort.
    fn start(&mut self) -> Result<()> {
        self.spawn()?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            ensure!(Instant::now() < deadline, "weft did not open its ORPort");
            ensure!(
                self.child
                    .as_mut()
                    .and_then(|c| c.try_wait().ok())
                    .flatten()
                    .is_none(),
                "weft exited: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// Start and expect it to exit on its own: (success, stderr).
    fn start_expecting_exit(&mut self) -> Result<(bool, String)> {
        self.spawn()?;
        let child = self.child.take().context("no child")?;
        let out = child.wait_with_output()?;
        Ok((
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }

    fn signal(&mut self, sig: &str) -> Result<std::process::ExitStatus> {
        let mut c = self.child.take().context("not running")?;
        Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(c.id().to_string())
            .status()?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(st) = c.try_wait()? {
                return Ok(st);
            }
            ensure!(Instant::now() < deadline, "weft did not stop on {sig}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Send `sig` and leave the process running.
    fn send(&self, sig: &str) -> Result<()> {
        let c = self.child.as_ref().context("not running")?;
        let st = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(c.id().to_string())
            .status()?;
        ensure!(st.success(), "kill -{sig} failed");
        Ok(())
    }

    fn hop(&self) -> Result<weft_proto::origin::HopTarget> {
        let fp = std::fs::read_to_string(self.data().join("fingerprint"))?;
        let mut rsa_id = [0u8; 20];
        hex::decode_to_slice(
            fp.split_whitespace().nth(1).context("fingerprint")?,
            &mut rsa_id,
        )?;
        Ok(weft_proto::origin::HopTarget {
            rsa_id,
            ed_id: None,
            ntor_key: weft_crypto::keys::read_ntor_public(&self.data())?,
            addr: (std::net::Ipv4Addr::LOCALHOST, self.port).into(),
        })
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Load through `relay`: circuits built, data flowing.
fn load(relay: &Relay, work: &Path) -> Result<LoadRun> {
    let env = BenchEnv {
        dir: work.to_path_buf(),
        weft_bin: PathBuf::new(),
        tor_bin: PathBuf::new(),
    };
    let mut p = Procedure::saturation(2, 4, 200, 1000, 0.0, 0.0, 1.0);
    p.mark_every = 8;
    let run = LoadRun::start(&env, &p, Some(relay.hop()?), None)?;
    let t0 = Instant::now();
    while run.sum(|c| c.circuits_ready.load(Ordering::Relaxed)) < 8 {
        ensure!(t0.elapsed() < Duration::from_secs(60), "circuits not built");
        std::thread::sleep(Duration::from_millis(50));
    }
    run.set_phase(PHASE_RUN);
    Ok(run)
}

fn key_files(data: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(data.join("keys"))? {
        let e = e?;
        v.push((
            e.file_name().to_string_lossy().into_owned(),
            std::fs::read(e.path())?,
        ));
    }
    v.sort();
    Ok(v)
}

#[test]
fn kill_9_during_traffic_keeps_identity_and_keys() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let mut relay = Relay::new(tmp.path());
    relay.start()?;
    let fp = std::fs::read_to_string(relay.data().join("fingerprint"))?;
    let keys = key_files(&relay.data())?;
    let run = load(&relay, &tmp.path().join("load1"))?;
    std::thread::sleep(Duration::from_secs(2));
    let moved = run.sum(|c| c.down_cells.load(Ordering::Relaxed));
    ensure!(moved > 1000, "no traffic before the kill");
    relay.signal("KILL")?;
    run.set_phase(PHASE_STOP);
    let _ = run.finish(); // its connections died with weft
                          // A damaged state file (as a crash in the middle of a write by another
                          // program might leave) is reported and replaced, not fatal.
    std::fs::write(relay.data().join("state"), b"\0\0garbage")?;

    relay.start()?;
    ensure!(
        std::fs::read_to_string(relay.data().join("fingerprint"))? == fp,
        "fingerprint changed"
    );
    ensure!(key_files(&relay.data())? == keys, "key files changed");
    // The controller reads the state file after the ORPort opens: wait
    // (bounded) for its line.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !relay.log().contains("starting a new bandwidth history") {
        ensure!(
            Instant::now() < deadline,
            "no line about the damaged state file:\n{}",
            relay.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let run = load(&relay, &tmp.path().join("load2"))?;
    std::thread::sleep(Duration::from_secs(2));
    let down = run.sum(|c| c.down_cells.load(Ordering::Relaxed));
    let corrupt = run.sum(|c| c.corrupt.load(Ordering::Relaxed));
    run.set_phase(PHASE_STOP);
    let errors: Vec<String> = run.finish()?.into_iter().flat_map(|r| r.errors).collect();
    ensure!(
        errors.is_empty() && corrupt == 0 && down > 1000,
        "after restart: {errors:?}, {corrupt} corrupt, {down} cells"
    );
    Ok(())
}

#[test]
fn a_full_disk_at_state_write_is_a_clear_line() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let mut relay = Relay::new(tmp.path());
    relay.start()?;
    // The state is written through `state.tmp` then renamed: make that
    // write hit a full device.
    std::os::unix::fs::symlink("/dev/full", relay.data().join("state.tmp"))?;
    let st = relay.signal("TERM")?;
    ensure!(st.success(), "weft exited with {st} on SIGTERM");
    let log = relay.log();
    let line = log
        .lines()
        .find(|l| l.contains("cannot save the bandwidth history"))
        .context("no line about the failed state write")?;
    ensure!(line.contains("No space left on device"), "unclear: {line}");
    ensure!(!log.contains("panicked"));
    Ok(())
}

#[test]
fn an_unreadable_or_corrupt_key_stops_the_start_with_a_clear_line() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let mut relay = Relay::new(tmp.path());
    relay.start()?;
    relay.signal("TERM")?;
    let key = relay.data().join("keys").join("secret_id_key");
    let good = std::fs::read(&key)?;

    std::fs::remove_file(&key)?;
    std::fs::create_dir(&key)?;
    let (ok, err) = relay.start_expecting_exit()?;
    ensure!(!ok, "weft started with an unreadable identity key");
    ensure!(
        err.contains("secret_id_key") && !err.contains("panicked"),
        "unclear: {err}"
    );

    std::fs::remove_dir(&key)?;
    std::fs::write(&key, b"not a key\n")?;
    let (ok, err) = relay.start_expecting_exit()?;
    ensure!(!ok, "weft started with a corrupt identity key");
    ensure!(
        err.contains("secret_id_key") && !err.contains("panicked"),
        "unclear: {err}"
    );

    // Restored, it starts with its old identity.
    std::fs::write(&key, &good)?;
    relay.start()?;
    Ok(())
}

/// Close `s` with a TCP reset (SO_LINGER 0).
/// Stopped and continued (SIGSTOP then SIGCONT: a debugger, job control,
/// a cgroup freezer), weft relays on: every worker's `epoll_wait` returns
/// EINTR on the continue, which once ended the workers' threads.
#[test]
fn a_stop_and_continue_during_traffic_leaves_the_relay_relaying() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let mut relay = Relay::new(tmp.path());
    relay.start()?;
    let run = load(&relay, &tmp.path().join("load"))?;
    std::thread::sleep(Duration::from_secs(1));
    for _ in 0..3 {
        relay.send("STOP")?;
        std::thread::sleep(Duration::from_millis(300));
        relay.send("CONT")?;
        std::thread::sleep(Duration::from_millis(300));
    }
    let before = run.sum(|c| c.down_cells.load(Ordering::Relaxed));
    std::thread::sleep(Duration::from_secs(2));
    let after = run.sum(|c| c.down_cells.load(Ordering::Relaxed));
    let corrupt = run.sum(|c| c.corrupt.load(Ordering::Relaxed));
    run.set_phase(PHASE_STOP);
    let errors: Vec<String> = run.finish()?.into_iter().flat_map(|r| r.errors).collect();
    let log = relay.log();
    ensure!(
        !log.contains("event loop failed"),
        "a worker's event loop ended:\n{log}"
    );
    ensure!(
        after > before + 1000 && corrupt == 0 && errors.is_empty(),
        "after stop and continue: {} cells in 2 s, {corrupt} corrupt, {errors:?}",
        after - before
    );
    Ok(())
}

fn reset(s: TcpStream) {
    let s = socket2::Socket::from(s);
    let _ = s.set_linger(Some(Duration::ZERO));
    drop(s);
}

#[test]
fn a_peer_that_resets_mid_handshake_costs_only_its_connection() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let mut relay = Relay::new(tmp.path());
    relay.start()?;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], relay.port));
    // A client in the middle of its link handshake (TLS done, VERSIONS
    // half sent) while another works.
    let mut good = LinkClient::connect(addr);
    // Reset during TLS: half a ClientHello.
    let mut s = TcpStream::connect(addr)?;
    s.write_all(&[
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
    ])?;
    std::thread::sleep(Duration::from_millis(200));
    reset(s);
    // Reset during the Tor handshake: TLS done, VERSIONS half sent.
    let mut half = LinkClient::connect_tls(addr);
    half.send(&[0, 0, 7, 0, 6]);
    std::thread::sleep(Duration::from_millis(200));
    reset(half.tls.get_ref().try_clone()?);
    drop(half);
    std::thread::sleep(Duration::from_millis(500));
    // The working client is untouched; weft lives and accepts new ones.
    good.send_fixed(0x8000_0001, 5, &weft_crypto::random_array::<20>());
    let (_, cmd, _) = good.read_fixed().context("CREATED_FAST")?;
    ensure!(cmd == 6, "answer {cmd}");
    let _again = LinkClient::connect(addr);
    let log = relay.log();
    let resets: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("reset by peer") || l.contains("handshake"))
        .collect();
    ensure!(!resets.is_empty(), "no line about the reset connections");
    ensure!(!log.contains("panicked"));
    eprintln!("log lines: {resets:#?}");
    Ok(())
}
